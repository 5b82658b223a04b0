package federation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// availabilityWatch polls every cluster every 100 ms and keeps the fewest
// instances of a service it saw running over all of them. It reads the
// clusters in the order given, the shrinking ones first: a part shrinks
// only once the growing ones run, so a sweep that saw a part shrunk sees
// the growth that came before.
type availabilityWatch struct {
	fed    atomic.Pointer[federation.Federation]
	mu     sync.Mutex
	order  []*stack
	fewest uint32
	polls  int
	stop   chan struct{}
	done   chan struct{}
}

func watchAvailability(t *testing.T, f *federation.Federation, id string, order []*stack) *availabilityWatch {
	w := &availabilityWatch{order: order, fewest: ^uint32(0), stop: make(chan struct{}), done: make(chan struct{})}
	w.fed.Store(f)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(10 * time.Minute)
		for {
			select {
			case <-w.stop:
				return
			case <-deadline:
				return
			case <-tick.C:
			}
			w.poll(id)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *availabilityWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *availabilityWatch) poll(id string) {
	f := w.fed.Load()
	if f == nil {
		return // the federation restarts; the clusters are read again after
	}
	svc, err := f.Services().GetService(id)
	if err != nil {
		return
	}
	w.mu.Lock()
	order := w.order
	w.mu.Unlock()
	var running uint32
	for _, s := range order {
		for _, p := range svc.Clusters {
			if p.Cluster != s.name || p.ClusterJobId == "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := s.cli.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: p.ClusterJobId})
			cancel()
			if err != nil {
				return // a cluster restarting: this sweep counts nothing
			}
			running += resp.Job.Status.TaskCounts["RUNNING"]
		}
	}
	w.mu.Lock()
	w.fewest = min(w.fewest, running)
	w.polls++
	w.mu.Unlock()
}

// check ends the watch and fails the test if fewer than least ran.
func (w *availabilityWatch) check(t *testing.T, least uint32) {
	t.Helper()
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls == 0 {
		t.Fatal("the availability watch never polled")
	}
	if w.fewest < least {
		t.Errorf("at some poll (of %d) only %d instances ran over all clusters; the budget allows no fewer than %d", w.polls, w.fewest, least)
	}
}

// parts is each part's count that is not retiring.
func rebalanceParts(s *pelotonv1.FederatedService) map[string]uint32 {
	out := map[string]uint32{}
	for _, p := range s.Clusters {
		if !p.Retiring {
			out[p.Cluster] = p.Desired
		}
	}
	return out
}

// waitRebalanced waits until the service's rebalance is done, its parts
// are want and they all run.
func waitRebalanced(t *testing.T, f *federation.Federation, id string, want map[string]uint32) *pelotonv1.FederatedService {
	t.Helper()
	var got *pelotonv1.FederatedService
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("the rebalance to %v", want), func() error {
		s, err := f.Services().GetService(id)
		if err != nil {
			return err
		}
		got = s
		if rb := s.Rebalance; rb.GetState() != pelotonv1.RebalanceState_REBALANCE_DONE || fmt.Sprint(rebalanceParts(s)) != fmt.Sprint(want) ||
			len(s.Clusters) != len(want) || s.Running != s.Desired {
			return fmt.Errorf("rebalance %v; parts %v, %d of %d running", rb, rebalanceParts(s), s.Running, s.Desired)
		}
		return nil
	})
	return got
}

// TestFederatedServiceRebalance: a fourth cluster joins and an AUTO
// service moves a share there, growing the new part before shrinking the
// old ones, never fewer instances running than its budget allows (polled
// every 100 ms); a restart of the federation in the middle goes on with
// the same rebalance; a global pool is split over the new cluster too; a
// cordoned cluster's instances move out, and a deregistered cluster's
// part is grown elsewhere.
func TestFederatedServiceRebalance(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a, b, c := startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)
	f := startFederation(t, e)
	for _, s := range []*stack{a, b, c} {
		register(t, f, s, nil)
	}
	if _, err := f.Pools().CreatePool(ctxT(t), "/team", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 30}}, ""); err != nil {
		t.Fatal(err)
	}
	svc, err := f.Services().CreateService(ctxT(t), serviceSpec("web", 12, 2), "")
	if err != nil {
		t.Fatal(err)
	}
	id := svc.Id
	if fmt.Sprint(svc.PlacedOn) != "[a b c]" {
		t.Fatalf("placed on %v, want a b c", svc.PlacedOn)
	}
	testutil.Eventually(t, 30*time.Second, "12 instances running", func() error {
		s, _ := f.Services().GetService(id)
		if s.Running != 12 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
	watch := watchAvailability(t, f, id, []*stack{a, b, c})

	// d joins, with hosts too small for an instance: its part grows by
	// the budget (2) and waits for them to run; nothing else moves.
	tiny := startStackWith(t, e.Endpoints(), "d", 1, nil, func(c *cluster.Config) { c.HostCPU = 0.25 })
	register(t, f, tiny, nil)
	var mid *pelotonv1.FederatedService
	testutil.Eventually(t, 60*time.Second, "the rebalance waiting for d", func() error {
		s, _ := f.Services().GetService(id)
		mid = s
		if rb := s.Rebalance; rb.GetState() != pelotonv1.RebalanceState_REBALANCE_MOVING || rb.Waiting != "cluster d to run its 2 instances (0 running)" {
			return fmt.Errorf("rebalance %v", rb)
		}
		return nil
	})
	rb := mid.Rebalance
	if rb.Id != 1 || rb.Reason != "cluster d joins" || rb.Growing != 2 || fmt.Sprint(rb.From) != "map[a:4 b:4 c:4]" ||
		fmt.Sprint(rb.To) != "map[a:3 b:3 c:3 d:3]" || rb.WaitingSince == nil {
		t.Errorf("rebalance %v", rb)
	}
	if got := fmt.Sprint(rebalanceParts(mid)); got != "map[a:4 b:4 c:4 d:2]" {
		t.Errorf("parts while d's instances do not run: %s", got)
	}
	waitPasses(t, "rollout", f.RolloutPasses, 5)
	if s, _ := f.Services().GetService(id); fmt.Sprint(rebalanceParts(s)) != "map[a:4 b:4 c:4 d:2]" {
		t.Errorf("the old parts shrank before the new one ran: %v", rebalanceParts(s))
	}

	// The federation restarts in the middle: the same rebalance goes on
	// from where it was (d's part is not grown again).
	watch.fed.Store(nil)
	f.Close()
	f = startFederation(t, e)
	watch.fed.Store(f)
	s, _ := f.Services().GetService(id)
	if s.Rebalance.GetId() != 1 || s.Rebalance.Growing != 2 || fmt.Sprint(rebalanceParts(s)) != "map[a:4 b:4 c:4 d:2]" {
		t.Fatalf("after the restart: rebalance %v, parts %v", s.Rebalance, rebalanceParts(s))
	}
	// d comes back with room (a new process on the same etcd).
	tiny.stop(t)
	d := startStack(t, e.Endpoints(), "d", 2)
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "d", Endpoint: d.addr, Replace: true}); err != nil {
		t.Fatal(err)
	}
	watch.mu.Lock()
	watch.order = []*stack{a, b, c, d}
	watch.mu.Unlock()
	done := waitRebalanced(t, f, id, map[string]uint32{"a": 3, "b": 3, "c": 3, "d": 3})
	if rb := done.Rebalance; rb.Id != 1 || rb.Moved != 3 || rb.Growing != 0 || rb.EndTime == nil || rb.Waiting != "" {
		t.Errorf("the rebalance when done: %v", rb)
	}
	// The budget split again over four parts: 2 over 3 each, the odd
	// ones to the first by name.
	for _, p := range done.Clusters {
		if want := map[string]uint32{"a": 1, "b": 1, "c": 0, "d": 0}[p.Cluster]; p.MaxUnavailable != want {
			t.Errorf("part %s budget %d, want %d", p.Cluster, p.MaxUnavailable, want)
		}
	}
	watch.check(t, 10)
	// The global pool's part in d, the others smaller.
	testutil.Eventually(t, 20*time.Second, "/team split over four clusters", wantCPU([]*stack{a, b, c, d}, "/team", 7.5, 7.5, 7.5, 7.5))

	// a is cordoned: the service, on every cluster that takes work, moves
	// out of it; its job there is removed.
	aJob, err := partJob(t, a, done)
	if err != nil {
		t.Fatal(err)
	}
	watch = watchAvailability(t, f, id, []*stack{a, b, c, d})
	if _, err := f.Cordon(ctxT(t), "a", true); err != nil {
		t.Fatal(err)
	}
	done = waitRebalanced(t, f, id, map[string]uint32{"b": 4, "c": 4, "d": 4})
	if rb := done.Rebalance; rb.Id != 2 || rb.Reason != "cluster a leaves" || rb.Moved != 3 {
		t.Errorf("the cordon's rebalance: %v", rb)
	}
	watch.check(t, 10)
	testutil.Eventually(t, 30*time.Second, "a's job removed there", func() error {
		if _, err := a.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: aJob.Id}); status.Code(err) != codes.NotFound {
			return fmt.Errorf("a's job: %v", err)
		}
		return nil
	})

	// b is deregistered: its part cannot be reached, so it is dropped and
	// its instances grown in c and d.
	if err := f.Deregister(ctxT(t), "b"); err != nil {
		t.Fatal(err)
	}
	done = waitRebalanced(t, f, id, map[string]uint32{"c": 6, "d": 6})
	if rb := done.Rebalance; rb.Id != 3 || rb.Reason != "cluster b leaves" || rb.Moved != 4 {
		t.Errorf("the deregister's rebalance: %v", rb)
	}
}

// TestFederatedServiceRebalanceManual: a MANUAL service whose cluster's
// labels no longer match its selector shows the rebalance pending and
// moves nothing until the command (here over REST); the command refuses
// what it cannot do, naming why.
func TestFederatedServiceRebalanceManual(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	web := map[string]string{"tier": "web"}
	for _, s := range stacks {
		register(t, f, s, web)
	}
	base := startREST(t, f)
	spec := serviceSpec("web", 6, 1, &pelotonv1.ClusterShare{Selector: web, Weight: 1})
	spec.Placement.Rebalance = pelotonv1.RebalanceMode_MANUAL
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	auto, err := f.Services().CreateService(ctxT(t), serviceSpec("auto", 3, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		id   string
		code codes.Code
		msg  string
	}{
		{"", codes.InvalidArgument, "serviceId: required"},
		{"nope", codes.NotFound, "federated service nope does not exist"},
		{auto.Id, codes.FailedPrecondition, "rebalances by itself (spec.placement.rebalance is AUTO)"},
		{svc.Id, codes.FailedPrecondition, "has no rebalance pending: its clusters are those of its last split (a, b, c)"},
	} {
		if _, err := f.Services().Rebalance(ctxT(t), bad.id); status.Code(err) != bad.code || !contains(err, bad.msg) {
			t.Errorf("rebalance %q: %v, want %s %q", bad.id, err, bad.code, bad.msg)
		}
	}
	testutil.Eventually(t, 30*time.Second, "6 instances running", func() error {
		s, _ := f.Services().GetService(svc.Id)
		if s.Running != 6 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})

	// c's labels change: its part is to leave, but only on the command.
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "c", Endpoint: stacks[2].addr, Labels: map[string]string{"tier": "db"}, Replace: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the rebalance pending", func() error {
		s, _ := f.Services().GetService(svc.Id)
		if rb := s.Rebalance; rb.GetState() != pelotonv1.RebalanceState_REBALANCE_PENDING || rb.Reason != "cluster c leaves" ||
			rb.Waiting != "`peloton fed service rebalance "+svc.Id+"` (placement.rebalance is MANUAL)" || fmt.Sprint(rb.To) != "map[a:3 b:3]" {
			return fmt.Errorf("rebalance %v", rb)
		}
		return nil
	})
	waitPasses(t, "rollout", f.RolloutPasses, 5)
	if s, _ := f.Services().GetService(svc.Id); fmt.Sprint(rebalanceParts(s)) != "map[a:2 b:2 c:2]" {
		t.Fatalf("a pending rebalance moved instances: %v", rebalanceParts(s))
	}
	if code, body := post(t, base+"/v1/federation/services/"+svc.Id+":rebalance"); code != 200 {
		t.Fatalf("POST :rebalance: %d %s", code, body)
	}
	done := waitRebalanced(t, f, svc.Id, map[string]uint32{"a": 3, "b": 3})
	if rb := done.Rebalance; rb.Id != 1 || rb.Moved != 2 {
		t.Errorf("rebalance %v", rb)
	}
	if code, body := post(t, base+"/v1/federation/services/"+svc.Id+":rebalance"); code != 400 || !contains(fmt.Errorf("%s", body), "no rebalance pending") {
		t.Errorf("POST :rebalance with none pending: %d %s", code, body)
	}
}

// TestFederatedServiceMoveBackAcrossRebalance: a service with moveBack
// loses cluster c past its toleration (its part runs on a and b); d joins
// meanwhile, and the rebalance waits for c; when c is back its part moves
// back with no command, and then the rebalance moves the service onto d.
func TestFederatedServiceMoveBackAcrossRebalance(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, nil)
	}
	spec := serviceSpec("web", 6, 2)
	spec.Placement.Failover = &pelotonv1.FailoverPolicy{TolerationSeconds: 1, MoveBack: true}
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	id := svc.Id
	testutil.Eventually(t, 30*time.Second, "6 instances running", func() error {
		s, _ := f.Services().GetService(id)
		if s.Running != 6 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
	stacks[2].stop(t)
	testutil.Eventually(t, 30*time.Second, "c's part failed over", func() error {
		s, _ := f.Services().GetService(id)
		if !partOf(s, "c").FailedOver {
			return fmt.Errorf("parts %v", s.Clusters)
		}
		return nil
	})
	d := startStack(t, e.Endpoints(), "d", 2)
	register(t, f, d, nil)
	testutil.Eventually(t, 30*time.Second, "the rebalance waiting for c", func() error {
		s, _ := f.Services().GetService(id)
		if rb := s.Rebalance; rb.GetState() != pelotonv1.RebalanceState_REBALANCE_MOVING || rb.Waiting != "cluster c, failed over, to be back" {
			return fmt.Errorf("rebalance %v", rb)
		}
		return nil
	})
	if s, _ := f.Services().GetService(id); partOf(s, "d").Cluster != "" {
		t.Fatalf("d has a part while c is failed over: %v", s.Clusters)
	}

	// c comes back (a new process on the same etcd): no command, its part
	// moves back, then the rebalance gives d its share.
	c := startStack(t, e.Endpoints(), "c", 2)
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "c", Endpoint: c.addr, Replace: true}); err != nil {
		t.Fatal(err)
	}
	done := waitRebalanced(t, f, id, map[string]uint32{"a": 2, "b": 2, "c": 1, "d": 1})
	for _, p := range done.Clusters {
		if p.FailedOver || len(p.Covering) > 0 {
			t.Errorf("part %s after the move back and the rebalance: failed over %v, covering %v", p.Cluster, p.FailedOver, p.Covering)
		}
	}
}
