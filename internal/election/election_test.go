package election_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/election"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(g string) bool { return strings.Contains(g, "peloton/internal/election.") })
}

// testLease is short so that a lost lease shows within a test's patience.
const testLease = 2 * time.Second

// candidate is one election.Run in this process; its lead function holds
// the term until the term's context ends.
type candidate struct {
	name    string
	leading atomic.Bool
	terms   atomic.Int32
	// term is the last term it led; seen is the last leader value it saw.
	mu   sync.Mutex
	term *election.Term
	seen string

	cancel context.CancelFunc
	done   chan error
}

func (c *candidate) lastTerm() *election.Term {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

func (c *candidate) lastSeen() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// leadingNow counts, per key, the candidates in their lead function, so a
// test can tell that two never overlap.
type leadingNow struct {
	mu    sync.Mutex
	now   map[string]int
	twice string
}

func (l *leadingNow) enter(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.now[key]++; l.now[key] > 1 {
		l.twice = key
	}
}

func (l *leadingNow) exit(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[key]--
}

func start(t *testing.T, cli *clientv3.Client, key, name string, ln *leadingNow) *candidate {
	t.Helper()
	return startWithLease(t, cli, key, name, testLease, ln)
}

func startWithLease(t *testing.T, cli *clientv3.Client, key, name string, lease time.Duration, ln *leadingNow) *candidate {
	t.Helper()
	c := &candidate{name: name, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	cfg := election.Config{
		Client: cli, Key: key, Lease: lease,
		Value: func(id string) string { return name + " " + id },
		OnLeader: func(v []byte) {
			c.mu.Lock()
			c.seen = string(v)
			c.mu.Unlock()
		},
	}
	go func() {
		c.done <- election.Run(ctx, cfg, func(ctx context.Context, term *election.Term) error {
			ln.enter(key)
			defer ln.exit(key)
			c.mu.Lock()
			c.term = term
			c.mu.Unlock()
			c.terms.Add(1)
			c.leading.Store(true)
			defer c.leading.Store(false)
			if err := term.Proclaim(ctx, name+" serving"); err != nil && ctx.Err() == nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop ends the candidate's Run and waits (bounded) for it.
func (c *candidate) stop(t *testing.T) error {
	t.Helper()
	c.cancel()
	select {
	case err, ok := <-c.done:
		if ok {
			close(c.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Errorf("%s: Run did not return within 30s of its context ending", c.name)
		return nil
	}
}

func leaderOf(cs ...*candidate) *candidate {
	for _, c := range cs {
		if c.leading.Load() {
			return c
		}
	}
	return nil
}

// TestOneLeaderAndHandover: of two candidates on one key one leads and the
// other sees its proclaimed value; when the leader stops, the other leads
// without waiting for the lease to expire (it is revoked); never both.
func TestOneLeaderAndHandover(t *testing.T) {
	_, s := storetest.StartEtcd(t)
	ln := &leadingNow{now: map[string]int{}}
	const key = "/test/leader"
	// A lease far longer than the wait below: a handover within it shows
	// the lease was revoked, not expired.
	const lease = 2 * time.Minute
	a := startWithLease(t, s.Client(), key, "a", lease, ln)
	b := startWithLease(t, s.Client(), key, "b", lease, ln)

	testutil.Eventually(t, 30*time.Second, "one of a, b leads", func() bool { return leaderOf(a, b) != nil })
	leader := leaderOf(a, b)
	other := a
	if leader == a {
		other = b
	}
	testutil.Eventually(t, 10*time.Second, other.name+" sees the leader's proclaimed value", func() bool {
		return other.lastSeen() == leader.name+" serving"
	})
	if other.terms.Load() != 0 {
		t.Fatalf("%s led while %s did", other.name, leader.name)
	}
	term := leader.lastTerm()
	if !strings.HasPrefix(term.Key, key+"/") || term.Revision == 0 || term.Lease.Err() != nil {
		t.Fatalf("term = %+v", term)
	}

	if err := leader.stop(t); err != nil {
		t.Fatalf("%s: Run after its context ended = %v, want nil", leader.name, err)
	}
	testutil.Eventually(t, lease/2, other.name+" leads after "+leader.name+" stopped", other.leading.Load)
	if ln.twice != "" {
		t.Fatalf("two candidates led %s at once", ln.twice)
	}
	// The old term's key is gone, so a write fenced to it would fail.
	resp, err := s.Client().Get(context.Background(), term.Key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the old leader's key after it stopped: %v, %v", resp, err)
	}
}

// TestLostLeaseEndsTheTerm: when a leader's lease ends behind its back (as
// etcd expires it after a partition) the term's context ends and Run
// campaigns again, winning a new term with a new key.
func TestLostLeaseEndsTheTerm(t *testing.T) {
	_, s := storetest.StartEtcd(t)
	ln := &leadingNow{now: map[string]int{}}
	a := start(t, s.Client(), "/test/leader", "a", ln)
	testutil.Eventually(t, 30*time.Second, "a leads", a.leading.Load)
	first := a.lastTerm()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Client().Get(ctx, first.Key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("leader key: %v, %v", resp, err)
	}
	if _, err := s.Client().Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the first term's context ends", func() bool { return first.Lease.Err() != nil })
	testutil.Eventually(t, 30*time.Second, "a leads a second term", func() bool { return a.terms.Load() == 2 && a.leading.Load() })
	second := a.lastTerm()
	if second.Key == first.Key || second.Revision <= first.Revision {
		t.Fatalf("second term %s@%d after first %s@%d", second.Key, second.Revision, first.Key, first.Revision)
	}
	select {
	case err := <-a.done:
		t.Fatalf("Run returned after the lease was lost: %v", err)
	default:
	}
}

// TestKeysAreSeparateElections: candidates on different keys each lead
// their own; one leader does not stop another key's.
func TestKeysAreSeparateElections(t *testing.T) {
	_, s := storetest.StartEtcd(t)
	ln := &leadingNow{now: map[string]int{}}
	a := start(t, s.Client(), "/test/clusters/a/leader", "a", ln)
	b := start(t, s.Client(), "/test/clusters/b/leader", "b", ln)
	testutil.Eventually(t, 30*time.Second, "a and b both lead", func() bool { return a.leading.Load() && b.leading.Load() })
	if a.lastSeen() != "" || b.lastSeen() != "" {
		t.Fatalf("a saw leader %q, b saw %q: elections on different keys observed each other", a.lastSeen(), b.lastSeen())
	}
	a2 := start(t, s.Client(), "/test/clusters/a/leader", "a2", ln)
	testutil.Eventually(t, 10*time.Second, "a2 follows a", func() bool { return strings.HasPrefix(a2.lastSeen(), "a ") })
	if a2.leading.Load() || ln.twice != "" {
		t.Fatalf("a2 leads beside a (twice: %q)", ln.twice)
	}
}

// TestRunEnds: what Run returns when the leader's work ends by itself, or
// a hook or the configuration is wrong.
func TestRunEnds(t *testing.T) {
	_, s := storetest.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := election.Config{Client: s.Client(), Key: "/test/leader", Lease: testLease}
	boom := errors.New("boom")

	if err := election.Run(ctx, cfg, func(context.Context, *election.Term) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("lead failing: Run = %v, want its error", err)
	}
	if err := election.Run(ctx, cfg, func(context.Context, *election.Term) error { return nil }); !errors.Is(err, election.ErrStoppedWhileLeading) {
		t.Errorf("lead returning nil: Run = %v, want ErrStoppedWhileLeading", err)
	}
	hooked := cfg
	hooked.BeforeCampaign = func() error { return boom }
	if err := election.Run(ctx, hooked, func(context.Context, *election.Term) error { t.Error("led"); return nil }); !errors.Is(err, boom) {
		t.Errorf("BeforeCampaign failing: Run = %v, want its error", err)
	}
	// The keys of those terms were revoked, not left to expire.
	resp, err := s.Client().Get(ctx, "/test/leader/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("keys left under the election: %v, %v", resp, err)
	}

	for _, tc := range []struct {
		cfg  election.Config
		want string
	}{
		{election.Config{Key: "/k"}, "Client"},
		{election.Config{Client: s.Client()}, "Key"},
		{election.Config{Client: s.Client(), Key: "/k", Lease: 500 * time.Millisecond}, "at least 1s"},
	} {
		if err := election.Run(ctx, tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

func TestLeaseSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 15, time.Second: 1, 1500 * time.Millisecond: 2, 15 * time.Second: 15, time.Hour: 3600} {
		if got, err := election.LeaseSeconds(d); err != nil || got != want {
			t.Errorf("LeaseSeconds(%s) = %d, %v; want %d", d, got, err, want)
		}
	}
	for _, d := range []time.Duration{999 * time.Millisecond, -time.Second, time.Hour + time.Second} {
		if _, err := election.LeaseSeconds(d); err == nil {
			t.Errorf("LeaseSeconds(%s) accepted", d)
		}
	}
}
