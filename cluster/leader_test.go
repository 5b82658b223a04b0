package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestMain(m *testing.M) {
	// The isolation tests run this binary as another user, to dial.
	testutil.DialHelperMain()
	testutil.LeakCheckMain(m, func(g string) bool {
		return strings.Contains(g, "peloton/cluster.") || strings.Contains(g, "peloton/internal/election.")
	})
}

// testLease is short so that a lost lease shows within a test's patience;
// the bounds below are a few leases.
const testLease = 2 * time.Second

// replica is one `peloton serve cluster --leader-elect` running in this
// process on the sim backend.
type replica struct {
	name       string
	grpc, http string
	leading    atomic.Bool
	leads      atomic.Int32
	cancel     context.CancelFunc
	done       chan error
	stopOnce   sync.Once
	stopErr    error
}

func startReplica(t *testing.T, name string, endpoints []string) *replica {
	t.Helper()
	return startReplicaOf(t, "", name, 2, endpoints)
}

// startReplicaOf starts a replica of the named cluster ("": the default)
// with hosts simulated hosts.
func startReplicaOf(t *testing.T, clusterName, name string, hosts int, endpoints []string) *replica {
	t.Helper()
	r := &replica{name: name, grpc: freeAddr(t), http: freeAddr(t), done: make(chan error, 1)}
	cfg := cluster.Config{
		ClusterName: clusterName,
		DataDir:     t.TempDir(), Listen: r.grpc, HTTPListen: r.http, EtcdEndpoints: endpoints,
		Backend: "sim", Hosts: hosts, ShutdownGrace: 2 * time.Second,
		LeaderElect: true, LeaderLease: testLease,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", name),
		OnLeading: func(leading bool) {
			r.leading.Store(leading)
			if leading {
				r.leads.Add(1)
			}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- cluster.Run(ctx, cfg) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the replica as SIGTERM would and waits (bounded) for Run.
func (r *replica) stop(t *testing.T) error {
	t.Helper()
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			// Stopped while its stack was starting, Run reports that.
			if err != nil && !errors.Is(err, context.Canceled) {
				r.stopErr = fmt.Errorf("replica %s: Run: %w", r.name, err)
			}
		case <-time.After(30 * time.Second):
			r.stopErr = fmt.Errorf("replica %s: Run did not return within 30s of its context ending", r.name)
		}
	})
	if r.stopErr != nil {
		t.Error(r.stopErr)
	}
	return r.stopErr
}

func freeAddr(t *testing.T) string { return testutil.FreeAddr(t) }

// healthz is the body of a replica's /healthz, or "" if it does not answer.
func healthz(r *replica) string {
	code, body := get(r.http, "/healthz")
	if code != http.StatusOK {
		return ""
	}
	return body
}

func get(addr, path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leaders returns the replicas leading now.
func leaders(rs ...*replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if r.leading.Load() {
			out = append(out, r)
		}
	}
	return out
}

// waitLeader waits, for at most within, until exactly one replica other
// than old (nil: any) leads and its stack serves; at no poll may two lead.
func waitLeader(t *testing.T, within time.Duration, old *replica, rs ...*replica) *replica {
	t.Helper()
	var leader *replica
	testutil.Eventually(t, within, fmt.Sprintf("one of %d replicas leads and serves", len(rs)), func() error {
		ls := leaders(rs...)
		if len(ls) > 1 {
			t.Fatalf("%s and %s lead at once", ls[0].name, ls[1].name)
		}
		if len(ls) == 1 && ls[0] != old && healthz(ls[0]) == "ok\n" {
			leader = ls[0]
			return nil
		}
		return fmt.Errorf("leading: %v", names(ls))
	})
	return leader
}

// listHosts asks for the hosts over gRPC at addr and expects n.
func listHosts(addr string, n int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pelotonv1.NewHostServiceClient(conn).ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	if err != nil {
		return fmt.Errorf("ListHosts at %s: %w", addr, err)
	}
	if len(resp.GetHosts()) != n {
		return fmt.Errorf("ListHosts at %s: %d hosts, want %d", addr, len(resp.GetHosts()), n)
	}
	return nil
}

func TestTwoReplicasOneLeaderAndHandover(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startReplica(t, "a", e.Endpoints())
	b := startReplica(t, "b", e.Endpoints())

	leader := waitLeader(t, 30*time.Second, nil, a, b)
	follower := a
	if leader == a {
		follower = b
	}
	// The follower answers its own /healthz and forwards the rest.
	// The follower learns who leads from the election a moment after
	// the leader does.
	testutil.Eventually(t, 5*time.Second, "the follower names the leader", func() error {
		if h := healthz(follower); !strings.HasPrefix(h, "ok (following ") || strings.Contains(h, "no leader known") {
			return fmt.Errorf("follower /healthz = %q", h)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "the follower forwards REST", func() error {
		if code, body := get(follower.http, "/v1/hosts"); code != http.StatusOK || strings.Count(body, `"name":"sim-`) != 2 {
			return fmt.Errorf("GET /v1/hosts through the follower: %d %s", code, body)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "the follower forwards gRPC", func() error { return listHosts(follower.grpc, 2) })
	// Steady state: through all of the above the same one led, and led
	// once (its OnLeading counts every term, so a flap shows here
	// however short it was).
	if leader.leads.Load() != 1 || !leader.leading.Load() || follower.leads.Load() != 0 {
		t.Fatalf("%s led %d times (leads now: %v), %s led %d times; want one term of %s", leader.name, leader.leads.Load(),
			leader.leading.Load(), follower.name, follower.leads.Load(), leader.name)
	}

	// The leader stops (SIGTERM): it resigns once its stack has stopped,
	// so the follower leads at once, never both.
	stopped := make(chan error, 1)
	go func() { stopped <- leader.stop(t) }()
	start := time.Now()
	if next := waitLeader(t, 4*testLease, leader, a, b); next != follower {
		t.Fatalf("after %s stopped, %s leads", leader.name, next.name)
	}
	t.Logf("handover after a clean stop: %s", time.Since(start))
	if err := <-stopped; err != nil {
		t.Fatalf("the old leader's Run: %v", err)
	}
	if err := listHosts(follower.grpc, 2); err != nil {
		t.Fatalf("the new leader: %v", err)
	}
}

func TestLeaderThatLosesItsLeaseStopsItsStack(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	a := startReplica(t, "a", e.Endpoints())
	b := startReplica(t, "b", e.Endpoints())
	leader := waitLeader(t, 30*time.Second, nil, a, b)
	other := a
	if leader == a {
		other = b
	}

	// The leader's session ends behind its back: its lease is revoked, as
	// etcd would expire it after a partition.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Client().Get(ctx, cluster.ClusterPrefix(cluster.DefaultClusterName)+cluster.LeaderKey+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v, %v", resp, err)
	}
	if _, err := s.Client().Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}

	// It notices within a lease and stops its stack; the other one leads.
	testutil.Eventually(t, 3*testLease, leader.name+" stops its stack after its lease was revoked", func() bool {
		return !leader.leading.Load()
	})
	if next := waitLeader(t, 3*testLease, leader, a, b); next != other {
		t.Fatalf("after %s lost its lease, %s leads", leader.name, next.name)
	}
	// It is still running, and campaigns again: a follower of the other.
	testutil.Eventually(t, 3*testLease, leader.name+" follows after losing its lease", func() error {
		if h := healthz(leader); !strings.HasPrefix(h, "ok (following "+hostnameOf(t)+"/") {
			return fmt.Errorf("/healthz %q", h)
		}
		return nil
	})
	select {
	case err := <-leader.done:
		t.Fatalf("%s stopped after losing its lease: %v", leader.name, err)
	default:
	}
	testutil.Eventually(t, 5*time.Second, "the demoted leader forwards gRPC", func() error { return listHosts(leader.grpc, 2) })
	if leader.leads.Load() != 1 || leader.leading.Load() {
		t.Fatalf("%s led %d times and leads now: %v", leader.name, leader.leads.Load(), leader.leading.Load())
	}
}

func hostnameOf(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func names(rs []*replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

func TestLeaderElectConfig(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  cluster.Config
		want string
	}{
		{cluster.Config{LeaderElect: true}, "external etcd"},
		{cluster.Config{ClusterName: "Team_A"}, `clusterName "Team_A": must be 1 to 63 lower-case letters`},
		{cluster.Config{ClusterName: "-a", LeaderElect: true}, `clusterName "-a"`},
		{cluster.Config{LeaderElect: true, EtcdEndpoints: []string{"http://127.0.0.1:1"}, LeaderLease: 500 * time.Millisecond}, "at least 1s"},
		{cluster.Config{LeaderElect: true, EtcdEndpoints: []string{"http://127.0.0.1:1"}, Listen: "0.0.0.0:5391"}, "--advertise-host"},
		{cluster.Config{LeaderElect: true, EtcdEndpoints: []string{"http://127.0.0.1:1"}, Listen: ":5391"}, "--advertise-host"},
	} {
		if err := cluster.Run(ctx, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}
