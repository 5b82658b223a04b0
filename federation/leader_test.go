package federation_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fedLease is short so that a handover shows within a test's patience; the
// bounds below are a few leases.
const fedLease = 2 * time.Second

// fedReplica is one `--leader-elect` federation process in this process.
type fedReplica struct {
	name       string
	grpc, http string
	leading    atomic.Bool
	leads      atomic.Int32
	cancel     context.CancelFunc
	done       chan error
	once       sync.Once
	err        error
}

func startFedReplica(t *testing.T, name string, endpoints []string) *fedReplica {
	t.Helper()
	r := &fedReplica{name: name, grpc: freeTCPAddr(t), http: freeTCPAddr(t), done: make(chan error, 1)}
	cfg := federation.Config{EtcdEndpoints: endpoints, Listen: r.grpc, HTTPListen: r.http, ShutdownGrace: 2 * time.Second,
		Options: federation.Options{Logger: logger().With("federation", name),
			CheckEvery: 100 * time.Millisecond, CallTimeout: 500 * time.Millisecond, UnreachableAfter: 1500 * time.Millisecond},
		LeaderElect: true, LeaderLease: fedLease,
		OnLeading: func(leading bool) {
			r.leading.Store(leading)
			if leading {
				r.leads.Add(1)
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- federation.Run(ctx, cfg) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// stop ends the replica as SIGTERM would and waits (bounded) for Run.
func (r *fedReplica) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				r.err = fmt.Errorf("federation %s: Run: %w", r.name, err)
			}
		case <-time.After(30 * time.Second):
			r.err = fmt.Errorf("federation %s: Run did not return within 30s of its context ending", r.name)
		}
	})
	return r.err
}

func freeTCPAddr(t *testing.T) string { return testutil.FreeAddr(t) }

func httpGet(addr, path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFedLeader waits, for at most within, until exactly one replica
// other than old (nil: any) leads and serves its own API; at no poll may
// two lead.
func waitFedLeader(t *testing.T, within time.Duration, old *fedReplica, rs ...*fedReplica) *fedReplica {
	t.Helper()
	var leader *fedReplica
	testutil.Eventually(t, within, fmt.Sprintf("one federation replica of %d leading and serving", len(rs)), func() error {
		var ls []*fedReplica
		for _, r := range rs {
			if r.leading.Load() {
				ls = append(ls, r)
			}
		}
		if len(ls) > 1 {
			t.Fatalf("%s and %s lead at once", ls[0].name, ls[1].name)
		}
		if len(ls) == 0 || ls[0] == old {
			return errors.New("no new leader")
		}
		if code, body := httpGet(ls[0].http, "/healthz"); code != http.StatusOK || body != "ok\n" {
			return fmt.Errorf("%s leads; its /healthz: %d %q", ls[0].name, code, body)
		}
		leader = ls[0]
		return nil
	})
	return leader
}

// clusterService dials a replica's gRPC address.
func clusterService(t *testing.T, addr string) pelotonv1.ClusterServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pelotonv1.NewClusterServiceClient(conn)
}

// knows says whether the federation behind addr lists exactly the named
// clusters, READY.
func knows(cs pelotonv1.ClusterServiceClient, names ...string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cs.ListClusters(ctx, &pelotonv1.ListClustersRequest{})
		if err != nil {
			return fmt.Errorf("ListClusters: %w", err)
		}
		var got []string
		for _, c := range resp.GetClusters() {
			if c.GetState() != pelotonv1.ClusterState_CLUSTER_READY {
				return fmt.Errorf("cluster %s is %s: %s", c.GetName(), c.GetState(), c.GetMessage())
			}
			got = append(got, c.GetName())
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			return fmt.Errorf("clusters %v, want %v", got, names)
		}
		return nil
	}
}

// TestFederationLeaderElectAndHandover: of two federation replicas on one
// etcd exactly one leads; the other forwards gRPC and REST to it and
// answers /healthz itself. A cluster registered through the follower is
// the leader's; when the leader stops, the other leads within a few leases
// and knows the cluster from etcd.
func TestFederationLeaderElectAndHandover(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 1)
	fa := startFedReplica(t, "fa", e.Endpoints())
	fb := startFedReplica(t, "fb", e.Endpoints())

	leader := waitFedLeader(t, 30*time.Second, nil, fa, fb)
	follower := fa
	if leader == fa {
		follower = fb
	}
	// Both campaign on the federation's own key, beside its state.
	testutil.Eventually(t, 5*time.Second, "both replicas campaigning", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := s.Client().Get(ctx, federation.Prefix+federation.LeaderKey+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 2 {
			return fmt.Errorf("candidates under %sleader/: %v, %v; want 2", federation.Prefix, resp, err)
		}
		return nil
	})
	// The follower answers /healthz itself, naming the leader once its
	// watch has shown it.
	testutil.Eventually(t, 5*time.Second, "the follower's /healthz naming the leader", func() error {
		if code, body := httpGet(follower.http, "/healthz"); code != http.StatusOK || !strings.HasPrefix(body, "ok (following ") {
			return fmt.Errorf("follower /healthz: %d %q", code, body)
		}
		return nil
	})

	// Register through the follower: it forwards, the leader answers. A
	// follower learns the leader's addresses from a watch, a moment after
	// the leader serves, and refuses until then.
	viaFollower := clusterService(t, follower.grpc)
	testutil.Eventually(t, 10*time.Second, "a register through the follower", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := viaFollower.RegisterCluster(ctx, &pelotonv1.RegisterClusterRequest{Name: "a", Endpoint: a.addr})
		if err != nil {
			return fmt.Errorf("RegisterCluster through the follower: %w", err)
		}
		if resp.GetCluster().GetState() != pelotonv1.ClusterState_CLUSTER_READY {
			return fmt.Errorf("registered %s (%s), want READY", resp.GetCluster().GetState(), resp.GetCluster().GetMessage())
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "the leader knowing cluster a", knows(clusterService(t, leader.grpc), "a"))
	testutil.Eventually(t, 5*time.Second, "the follower's REST answer listing cluster a", func() error {
		if code, body := httpGet(follower.http, "/v1/federation/clusters"); code != http.StatusOK || !strings.Contains(body, `"name":"a"`) {
			return fmt.Errorf("GET /v1/federation/clusters through the follower: %d %s", code, body)
		}
		return nil
	})

	// Steady state all through the calls above, forwarded and answered:
	// the same one leads, in its first and only term. The count of terms
	// sees a flap that happened between two looks, which no poll would.
	if !leader.leading.Load() || follower.leading.Load() || leader.leads.Load() != 1 || follower.leads.Load() != 0 {
		t.Fatalf("not steady: %s leads %v (%d terms), %s leads %v (%d terms)", leader.name, leader.leading.Load(), leader.leads.Load(),
			follower.name, follower.leading.Load(), follower.leads.Load())
	}

	// The leader stops: it resigns once its federation has stopped, so
	// the other leads at once and starts from etcd.
	stopped := make(chan error, 1)
	go func() { stopped <- leader.stop() }()
	start := time.Now()
	if next := waitFedLeader(t, 4*fedLease, leader, fa, fb); next != follower {
		t.Fatalf("after %s stopped, %s leads", leader.name, next.name)
	}
	t.Logf("handover after a clean stop: %s", time.Since(start))
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the new leader knowing cluster a", knows(viaFollower, "a"))
	if follower.leads.Load() != 1 || leader.leads.Load() != 1 {
		t.Fatalf("terms: %s %d, %s %d; want one each", leader.name, leader.leads.Load(), follower.name, follower.leads.Load())
	}

	// Both stopped, nothing of the election or the follower runs on.
	if err := follower.stop(); err != nil {
		t.Fatal(err)
	}
	waitGoroutinesGone(t, 5*time.Second, "peloton/internal/replica.", "peloton/internal/election.")
}

// waitGoroutinesGone waits, at most within, until no goroutine's stack
// names any of pkgs, and fails the test naming the ones left.
func waitGoroutinesGone(t *testing.T, within time.Duration, pkgs ...string) {
	t.Helper()
	testutil.Eventually(t, within, "no goroutine of "+strings.Join(pkgs, ", ")+" left", func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, p := range pkgs {
				if strings.Contains(g, p) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n\n"))
		}
		return nil
	})
}

// TestFederationLeaderElectConfig: leader election's settings are checked
// before anything is dialled, in the words of `peloton serve federation`'s
// flags.
func TestFederationLeaderElectConfig(t *testing.T) {
	ep := []string{"http://127.0.0.1:1"}
	for _, tc := range []struct {
		cfg  federation.Config
		want string
	}{
		{federation.Config{LeaderElect: true}, "--etcd-endpoints"},
		{federation.Config{LeaderElect: true, EtcdEndpoints: ep, LeaderLease: 500 * time.Millisecond}, "at least 1s"},
		{federation.Config{LeaderElect: true, EtcdEndpoints: ep, Listen: "0.0.0.0:5392"}, "--listen 0.0.0.0:5392 binds every address"},
		{federation.Config{LeaderElect: true, EtcdEndpoints: ep, Listen: ":5392"}, "--advertise-host"},
	} {
		if err := federation.Run(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}
