package replica_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/replica"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(g string) bool {
		return strings.Contains(g, "peloton/internal/replica.") || strings.Contains(g, "peloton/internal/election.")
	})
}

// testLease is short so that a lost lease shows within a test's patience.
const testLease = 2 * time.Second

const testKey = "/peloton/test/leader"

// daemon is a replica.Run in this process whose daemon, while it leads,
// answers "<name>\n" on both addresses: a line on the gRPC one (raw TCP,
// as the follower forwards it) and GET /who on the HTTP one.
type daemon struct {
	name       string
	grpc, http string
	leading    atomic.Bool
	leads      atomic.Int32

	mu    sync.Mutex
	fence store.Fence

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startDaemon(t *testing.T, name string, endpoints []string) *daemon {
	t.Helper()
	d := &daemon{name: name, grpc: freeAddr(t), http: freeAddr(t), done: make(chan error, 1)}
	cfg := replica.Config{EtcdEndpoints: endpoints, Key: testKey, Lease: testLease, Listen: d.grpc, HTTPListen: d.http,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", name)}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- replica.Run(ctx, cfg, d.lead) }()
	t.Cleanup(func() { _ = d.stop() })
	return d
}

// lead is the daemon: it takes the addresses over, says where it serves,
// and serves until the term ends.
func (d *daemon) lead(ctx context.Context, t *replica.Term, handOver func()) error {
	d.mu.Lock()
	d.fence = t.Fence
	d.mu.Unlock()
	d.leading.Store(true)
	d.leads.Add(1)
	defer d.leading.Store(false)

	handOver()
	gl, err := net.Listen("tcp", d.grpc)
	if err != nil {
		return err
	}
	defer gl.Close()
	hl, err := net.Listen("tcp", d.http)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/who", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, d.name+"\n") })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = hs.Serve(hl) }()
	go func() {
		defer wg.Done()
		for {
			c, err := gl.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, d.name+"\n")
			c.Close()
		}
	}()
	t.Serving(gl.Addr().String(), hl.Addr().String())
	<-ctx.Done()
	_ = hs.Close()
	gl.Close()
	wg.Wait()
	return nil
}

// stop cancels Run and waits for it, at most 30s.
func (d *daemon) stop() error {
	d.once.Do(func() {
		d.cancel()
		select {
		case err := <-d.done:
			if err != nil {
				d.err = fmt.Errorf("replica %s: Run: %w", d.name, err)
			}
		case <-time.After(30 * time.Second):
			d.err = fmt.Errorf("replica %s: Run did not return within 30s of its context ending", d.name)
		}
	})
	return d.err
}

func freeAddr(t *testing.T) string { return testutil.FreeAddr(t) }

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

// line reads the first line the gRPC address answers.
func line(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

// waitLeader waits, for at most within, until exactly one daemon other
// than old (nil: any) leads and serves; at no poll may two lead.
func waitLeader(t *testing.T, within time.Duration, old *daemon, ds ...*daemon) *daemon {
	t.Helper()
	var leader *daemon
	testutil.Eventually(t, within, fmt.Sprintf("one of %d daemons leads and serves", len(ds)), func() error {
		var ls []*daemon
		for _, d := range ds {
			if d.leading.Load() {
				ls = append(ls, d)
			}
		}
		if len(ls) > 1 {
			t.Fatalf("%s and %s lead at once", ls[0].name, ls[1].name)
		}
		if len(ls) == 1 && ls[0] != old {
			code, body := get(ls[0].http, "/healthz")
			if code == http.StatusOK && body == "ok\n" {
				leader = ls[0]
				return nil
			}
			return fmt.Errorf("%s leads, /healthz %d %q", ls[0].name, code, body)
		}
		return fmt.Errorf("%d lead", len(ls))
	})
	return leader
}

// reaches says whether both addresses of via answer with to's name.
func reaches(via, to *daemon) func() error {
	return func() error {
		if code, body := get(via.http, "/who"); code != http.StatusOK || body != to.name+"\n" {
			return fmt.Errorf("GET /who at %s: %d %q, want %s", via.name, code, body, to.name)
		}
		if l, err := line(via.grpc); err != nil || l != to.name+"\n" {
			return fmt.Errorf("TCP at %s: %q, %v, want %s", via.name, l, err, to.name)
		}
		return nil
	}
}

// TestOneLeadsTheOtherForwards: of two replicas one leads, fenced to its
// own key; the other holds its addresses, answers /healthz itself and
// forwards both to the leader. When the leader stops, the other takes over
// within a few leases and serves on its own addresses.
func TestOneLeadsTheOtherForwards(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	a := startDaemon(t, "a", e.Endpoints())
	b := startDaemon(t, "b", e.Endpoints())

	leader := waitLeader(t, 30*time.Second, nil, a, b)
	follower := a
	if leader == a {
		follower = b
	}
	leader.mu.Lock()
	fence := leader.fence
	leader.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Client().Get(ctx, testKey+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v, %v", resp, err)
	}
	if string(resp.Kvs[0].Key) != fence.Key || resp.Kvs[0].CreateRevision != fence.Revision {
		t.Fatalf("leader's fence %+v, but the oldest key is %s at revision %d", fence, resp.Kvs[0].Key, resp.Kvs[0].CreateRevision)
	}

	// The follower answers /healthz itself, naming the leader once its
	// watch has shown it.
	testutil.Eventually(t, 5*time.Second, "the follower names the leader", func() error {
		if code, body := get(follower.http, "/healthz"); code != http.StatusOK || !strings.HasPrefix(body, "ok (following ") {
			return fmt.Errorf("follower /healthz: %d %q", code, body)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "the follower forwards to the leader", reaches(follower, leader))
	testutil.Eventually(t, 5*time.Second, "the leader serves", reaches(leader, leader))

	// The leader stops: it resigns once its daemon has, so the follower
	// leads at once, never both, and takes its addresses back.
	stopped := make(chan error, 1)
	go func() { stopped <- leader.stop() }()
	if next := waitLeader(t, 4*testLease, leader, a, b); next != follower {
		t.Fatalf("after %s stopped, %s leads", leader.name, next.name)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the new leader serves its addresses", reaches(follower, follower))
	if follower.leads.Load() != 1 || leader.leads.Load() != 1 {
		t.Fatalf("terms: %s %d, %s %d; want one each", leader.name, leader.leads.Load(), follower.name, follower.leads.Load())
	}
}

// TestLeadEnds: a daemon that fails ends Run with its error; one that
// returns on its own while it leads ends it with ErrStoppedWhileLeading.
// Either way the addresses are free afterwards.
func TestLeadEnds(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	boom := errors.New("boom")
	for _, tc := range []struct {
		ret  error
		want error
	}{{boom, boom}, {nil, replica.ErrStoppedWhileLeading}} {
		cfg := replica.Config{EtcdEndpoints: e.Endpoints(), Key: testKey, Lease: testLease, Listen: freeAddr(t), HTTPListen: freeAddr(t)}
		done := make(chan error, 1)
		go func() {
			done <- replica.Run(context.Background(), cfg, func(ctx context.Context, _ *replica.Term, handOver func()) error {
				handOver()
				return tc.ret
			})
		}()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) {
				t.Errorf("Run = %v, want %v", err, tc.want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return within 30s of its daemon")
		}
		for _, a := range []string{cfg.Listen, cfg.HTTPListen} {
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("address %s not freed: %v", a, err)
			}
			l.Close()
		}
	}
}

func TestCheck(t *testing.T) {
	ep := []string{"http://127.0.0.1:1"}
	fed := replica.Flags{Listen: "--federation-listen", HTTPListen: "--federation-http-listen"}
	for _, tc := range []struct {
		cfg  replica.Config
		want string
	}{
		{replica.Config{Key: testKey, Listen: "127.0.0.1:1"}, "leader election needs an external etcd (--etcd-endpoints)"},
		{replica.Config{EtcdEndpoints: ep, Listen: "127.0.0.1:1"}, "election key"},
		{replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: "127.0.0.1:1", Lease: 500 * time.Millisecond}, "at least 1s"},
		{replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: "nope"}, `listen "nope"`},
		{replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: ":5391"}, "--listen :5391 binds every address"},
		{replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: "[::]:5392", Flags: fed}, "--federation-listen [::]:5392 binds every address, so the other replicas cannot tell where to reach this one; set --advertise-host"},
		{replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: "0.0.0.0:5391", AdvertiseHost: "peloton-0"}, ""},
	} {
		err := replica.Check(tc.cfg)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%+v) = %v, want nil", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	// Run checks before it dials: nothing listens at ep.
	if err := replica.Run(context.Background(), replica.Config{EtcdEndpoints: ep, Key: testKey, Listen: "0.0.0.0:1"}, nil); err == nil || !strings.Contains(err.Error(), "--advertise-host") {
		t.Errorf("Run with a wildcard listen: %v", err)
	}
}

// TestLostLeaseFollowsAgain: a leader whose lease is revoked behind its
// back (as etcd expires it after a partition) sees its term end, stops its
// daemon, holds its addresses again as a follower and forwards them to the
// new leader, without Run returning.
func TestLostLeaseFollowsAgain(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	a := startDaemon(t, "a", e.Endpoints())
	b := startDaemon(t, "b", e.Endpoints())
	leader := waitLeader(t, 30*time.Second, nil, a, b)
	other := a
	if leader == a {
		other = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Client().Get(ctx, testKey+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v, %v", resp, err)
	}
	if _, err := s.Client().Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	// etcd hands the key over at once; the old leader learns it from its
	// keep-alive, within a lease (the fence covers the overlap).
	testutil.Eventually(t, 3*testLease, leader.name+" stops its daemon after its lease was revoked", func() bool {
		return !leader.leading.Load()
	})
	if next := waitLeader(t, 3*testLease, leader, a, b); next != other {
		t.Fatalf("after %s lost its lease, %s leads", leader.name, next.name)
	}
	testutil.Eventually(t, 3*testLease, "the old leader forwards to the new", reaches(leader, other))
	select {
	case err := <-leader.done:
		t.Fatalf("%s stopped after losing its lease: %v", leader.name, err)
	default:
	}
	if leader.leads.Load() != 1 || leader.leading.Load() {
		t.Fatalf("%s led %d times and leads now: %v", leader.name, leader.leads.Load(), leader.leading.Load())
	}
}
