package resmgr

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// sim drives a Manager the way the rest of the stack would, without hosts:
// admitted tasks start running at once, and preempted ones end and queue
// again as a new run. It counts preemptions per pool.
type sim struct {
	t         *testing.T
	m         *Manager
	clock     time.Time
	preempted map[string]int
	nextInst  map[string]uint32
}

func newSim(t *testing.T, capacity resources.Resources) *sim {
	m := newTestManager(t)
	s := &sim{t: t, m: m, clock: time.Unix(1000, 0), preempted: map[string]int{}, nextInst: map[string]uint32{}}
	m.now = func() time.Time { return s.clock }
	m.gate.delay = time.Second
	m.SetCapacity(capacity)
	return s
}

func (s *sim) pool(path string, reservationCPU float64) {
	if _, err := s.m.CreatePool(context.Background(), path, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: reservationCPU, MemoryMb: 1000}}); err != nil {
		s.t.Fatal(err)
	}
}

// submit queues n tasks of cpuEach milli-CPU in pool (job = pool name).
func (s *sim) submit(pool string, n int, cpuEach int64, prio uint32, preemptible bool) {
	var gs []*Gang
	for i := 0; i < n; i++ {
		inst := s.nextInst[pool]
		s.nextInst[pool]++
		gs = append(gs, NewGang(&Task{JobID: pool, Instance: inst, RunID: 1, Pool: pool, Priority: prio, Preemptible: preemptible, Resources: resources.Resources{MilliCPU: cpuEach, MemoryMB: 1}}))
	}
	if err := s.m.Enqueue(gs...); err != nil {
		s.t.Fatal(err)
	}
}

// step advances the clock, runs one admission pass, starts what was
// admitted, and carries out preemptions (the victim ends and queues again).
func (s *sim) step(d time.Duration) {
	s.clock = s.clock.Add(d)
	s.m.admitOnce()
	for _, g := range s.m.DequeueGangs(context.Background(), 1<<20, 0) {
		for _, t := range g.Tasks {
			s.m.MarkRunning(t.JobID, t.Instance)
		}
	}
	s.m.mu.Lock()
	vs := s.m.victims
	s.m.victims = nil
	s.m.mu.Unlock()
	for _, v := range vs {
		s.preempted[v.Task.Pool]++
		s.m.Release(v.Task.JobID, v.Task.Instance)
		next := *v.Task
		next.RunID++
		if err := s.m.Enqueue(NewGang(&next)); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *sim) alloc(path string) int64 {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.m.pools[path].Allocation.MilliCPU
}

func (s *sim) entitlement(path string) int64 {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.m.pools[path].Entitlement.MilliCPU
}

// TestTalkExampleReclaim plays the example end to end through admission and
// reclaim: 100 CPU, three pools reserving 30 each. Demands 10/100/100 settle
// at 10/45/45; when pool 1 wants 50 the others are preempted down to ~33.3.
func TestTalkExampleReclaim(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 100000, MemoryMB: 1 << 30})
	for _, p := range []string{"/p1", "/p2", "/p3"} {
		s.pool(p, 30)
	}
	s.submit("/p1", 10, 1000, 0, true)
	s.submit("/p2", 100, 1000, 0, true)
	s.submit("/p3", 100, 1000, 0, true)
	for i := 0; i < 5; i++ {
		s.step(100 * time.Millisecond)
	}
	if a1, a2, a3 := s.alloc("/p1"), s.alloc("/p2"), s.alloc("/p3"); a1 != 10000 || a2 != 45000 || a3 != 45000 {
		t.Fatalf("allocations %d/%d/%d, want 10000/45000/45000", a1, a2, a3)
	}
	if total := len(s.preempted); total != 0 {
		t.Fatalf("nobody should be preempted while everyone fits: %v", s.preempted)
	}
	// Pool 1's demand rises to 50. Within the hysteresis nothing happens.
	s.submit("/p1", 40, 1000, 0, true)
	s.step(100 * time.Millisecond)
	if len(s.preempted) != 0 {
		t.Fatalf("reclaim before the hysteresis expired: %v", s.preempted)
	}
	for i := 0; i < 20; i++ {
		s.step(200 * time.Millisecond)
	}
	a1, a2, a3 := s.alloc("/p1"), s.alloc("/p2"), s.alloc("/p3")
	e1, e2, e3 := s.entitlement("/p1"), s.entitlement("/p2"), s.entitlement("/p3")
	if e1+e2+e3 != 100000 || e1 < 33000 || e2 < 33000 || e3 < 33000 {
		t.Fatalf("entitlements %d/%d/%d, want about 33333 each", e1, e2, e3)
	}
	// Whole 1-CPU tasks: each pool lands on 33 or 34 CPUs and never above its entitlement.
	for _, c := range []struct{ a, e int64 }{{a1, e1}, {a2, e2}, {a3, e3}} {
		if c.a > c.e || c.a < 33000 {
			t.Fatalf("allocations %d/%d/%d with entitlements %d/%d/%d", a1, a2, a3, e1, e2, e3)
		}
	}
	if s.preempted["/p1"] != 0 || s.preempted["/p2"] < 11 || s.preempted["/p3"] < 11 {
		t.Fatalf("preemptions %v: /p2 and /p3 should each lose about 12 tasks, /p1 none", s.preempted)
	}
	// Settled: more steps preempt nobody. Two pools never keep preempting each other.
	before := fmt.Sprint(s.preempted)
	for i := 0; i < 50; i++ {
		s.step(500 * time.Millisecond)
	}
	if after := fmt.Sprint(s.preempted); after != before {
		t.Fatalf("preemption oscillates: %s then %s", before, after)
	}
}

// TestNoOscillationBetweenEqualPools: two pools with equal shares and demand
// far above capacity, submitted at different times, settle and stay.
func TestNoOscillationBetweenEqualPools(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 10000, MemoryMB: 1 << 30})
	s.pool("/a", 0)
	s.pool("/b", 0)
	s.submit("/a", 40, 1000, 0, true)
	for i := 0; i < 5; i++ {
		s.step(100 * time.Millisecond)
	}
	if s.alloc("/a") != 10000 {
		t.Fatalf("/a alone should take the whole idle cluster (elastic), has %d", s.alloc("/a"))
	}
	s.submit("/b", 40, 1000, 0, true)
	counts := []string{}
	for i := 0; i < 100; i++ {
		s.step(300 * time.Millisecond)
		counts = append(counts, fmt.Sprint(s.preempted))
	}
	if s.alloc("/a") != 5000 || s.alloc("/b") != 5000 {
		t.Fatalf("allocations %d/%d, want 5000/5000", s.alloc("/a"), s.alloc("/b"))
	}
	if s.preempted["/b"] != 0 || s.preempted["/a"] != 5 {
		t.Fatalf("want exactly 5 preemptions of /a and none of /b, got %v", s.preempted)
	}
	if counts[50] != counts[99] {
		t.Fatalf("still preempting after settling: %s -> %s", counts[50], counts[99])
	}
}

// TestPriorityPreemptionInsidePool: a higher-priority task displaces the
// lowest-priority, newest preemptible tasks of its own pool, never equal or
// higher priorities, and never tasks of another pool.
func TestPriorityPreemptionInsidePool(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 4000, MemoryMB: 1 << 30})
	s.pool("/a", 4)
	s.submit("/a", 2, 1000, 1, true) // a-0, a-1 priority 1
	s.step(10 * time.Millisecond)
	s.submit("/a", 2, 1000, 0, true) // a-2, a-3 priority 0, newest
	s.step(10 * time.Millisecond)
	if s.alloc("/a") != 4000 {
		t.Fatalf("alloc %d", s.alloc("/a"))
	}
	s.submit("/a", 1, 2000, 5, true) // needs 2 CPUs at priority 5
	s.step(10 * time.Millisecond)
	var gone []string
	for _, ts := range s.m.tasks {
		if ts.task.RunID == 2 {
			gone = append(gone, ts.task.Key())
		}
	}
	sort.Strings(gone)
	if fmt.Sprint(gone) != "[/a-2 /a-3]" {
		t.Fatalf("victims %v, want the two priority-0 tasks", gone)
	}
	s.step(10 * time.Millisecond)
	if st, _, _ := s.m.TaskState("/a", 4); st != pelotonv1.TaskState_RUNNING {
		t.Fatalf("the priority-5 task should run now, is %s", st)
	}
	// An equal-priority newcomer displaces nobody.
	s.submit("/a", 1, 1000, 0, true)
	before := s.preempted["/a"]
	s.step(10 * time.Millisecond)
	if s.preempted["/a"] != before {
		t.Fatal("a task displaced work of its own priority")
	}
}

// TestPriorityPreemptionAtPoolLimit: in a pool held by its own limit on a
// cluster with room to spare, a higher-priority task still displaces the
// pool's lower priorities (as many as it needs, no more); an ancestor's
// limit, shared with other pools, displaces nobody.
func TestPriorityPreemptionAtPoolLimit(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 10000, MemoryMB: 1 << 30})
	limit := &pelotonv1.Resources{Cpu: 2, MemoryMb: 1000}
	if _, err := s.m.CreatePool(context.Background(), "/lim", &pelotonv1.PoolSpec{Limit: limit}); err != nil {
		t.Fatal(err)
	}
	s.submit("/lim", 2, 1000, 0, true)
	s.step(10 * time.Millisecond)
	if s.alloc("/lim") != 2000 {
		t.Fatalf("alloc %d, want the 2 CPU limit", s.alloc("/lim"))
	}
	s.submit("/lim", 1, 1000, 5, true)
	s.step(10 * time.Millisecond)
	if s.preempted["/lim"] != 1 {
		t.Fatalf("preempted %d, want the one priority-0 task the newcomer needs", s.preempted["/lim"])
	}
	s.step(10 * time.Millisecond)
	if st, _, _ := s.m.TaskState("/lim", 2); st != pelotonv1.TaskState_RUNNING {
		t.Fatalf("the priority-5 task should run now, is %s", st)
	}
	// Equal priority displaces nobody.
	s.submit("/lim", 1, 1000, 0, true)
	for i := 0; i < 5; i++ {
		s.step(100 * time.Millisecond)
	}
	if s.preempted["/lim"] != 1 {
		t.Fatalf("preemptions %v after an equal-priority newcomer", s.preempted)
	}

	// Two leaves under a limited parent: the parent's limit is theirs together.
	if _, err := s.m.CreatePool(context.Background(), "/org", &pelotonv1.PoolSpec{Limit: limit}); err != nil {
		t.Fatal(err)
	}
	for _, leaf := range []string{"/org/x", "/org/y"} {
		if _, err := s.m.CreatePool(context.Background(), leaf, &pelotonv1.PoolSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	s.submit("/org/x", 2, 1000, 0, true)
	s.step(10 * time.Millisecond)
	s.submit("/org/y", 1, 1000, 5, true)
	for i := 0; i < 5; i++ {
		s.step(100 * time.Millisecond)
	}
	if s.preempted["/org/x"] != 0 {
		t.Fatalf("a parent's limit displaced a sibling pool's tasks: %v", s.preempted)
	}
}

// TestNonPreemptibleOnlyInsideReservation: non-preemptible work is admitted
// only within the pool's reservation, however idle the cluster is.
func TestNonPreemptibleOnlyInsideReservation(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 10000, MemoryMB: 1 << 30})
	s.pool("/r", 2)
	s.submit("/r", 3, 1000, 0, false)
	s.step(10 * time.Millisecond)
	if s.alloc("/r") != 2000 {
		t.Fatalf("alloc %d, want exactly the 2 CPU reservation", s.alloc("/r"))
	}
	if _, reason, _ := s.m.TaskState("/r", 2); reason == "" {
		t.Fatal("the third task should say why it waits")
	}
	// Non-preemptible work is never a victim.
	s.pool("/other", 0)
	s.submit("/other", 20, 1000, 9, true)
	for i := 0; i < 20; i++ {
		s.step(200 * time.Millisecond)
	}
	if s.preempted["/r"] != 0 {
		t.Fatalf("non-preemptible tasks were preempted: %v", s.preempted)
	}
}

// TestGangPreemptedWhole: when reclaim picks one member of a running gang,
// the whole gang goes, so no partial gang keeps running.
func TestGangPreemptedWhole(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 4000, MemoryMB: 1 << 30})
	s.pool("/a", 0)
	s.pool("/b", 0)
	var members []*Task
	for i := uint32(0); i < 4; i++ {
		members = append(members, &Task{JobID: "/a", Instance: i, RunID: 1, Pool: "/a", Preemptible: true, Resources: resources.Resources{MilliCPU: 1000, MemoryMB: 1}})
	}
	if err := s.m.Enqueue(NewGang(members...)); err != nil {
		t.Fatal(err)
	}
	s.step(10 * time.Millisecond)
	if s.alloc("/a") != 4000 {
		t.Fatalf("the gang should run on the idle cluster, alloc %d", s.alloc("/a"))
	}
	s.submit("/b", 1, 1000, 0, true) // /b is entitled to 2 CPU but needs only 1
	for i := 0; i < 10; i++ {
		s.step(300 * time.Millisecond)
	}
	if s.preempted["/a"] != 4 {
		t.Fatalf("preempted %d gang members, want all 4", s.preempted["/a"])
	}
}

// TestManyGangsOfAJobPreemptedEachWhole: a job's gangs are preempted each
// as a whole and on its own: reclaim that needs one member's room takes
// that member's gang, not the job's other gang.
func TestManyGangsOfAJobPreemptedEachWhole(t *testing.T) {
	s := newSim(t, resources.Resources{MilliCPU: 4000, MemoryMB: 1 << 30})
	s.pool("/a", 0)
	s.pool("/b", 0)
	var gangs []*Gang
	for g := uint32(0); g < 2; g++ {
		var members []*Task
		for i := 2 * g; i < 2*g+2; i++ {
			members = append(members, &Task{JobID: "/a", Instance: i, RunID: 1, Pool: "/a", Preemptible: true,
				Gang: fmt.Sprintf("/a/gang-%d", g), Resources: resources.Resources{MilliCPU: 1000, MemoryMB: 1}})
		}
		gangs = append(gangs, NewGang(members...))
	}
	if err := s.m.Enqueue(gangs...); err != nil {
		t.Fatal(err)
	}
	s.step(10 * time.Millisecond)
	if s.alloc("/a") != 4000 {
		t.Fatalf("both gangs should run on the idle cluster, alloc %d", s.alloc("/a"))
	}
	s.submit("/b", 1, 1000, 0, true)
	for i := 0; i < 10; i++ {
		s.step(300 * time.Millisecond)
	}
	if s.preempted["/a"] != 2 {
		t.Fatalf("preempted %d members of the job's two gangs of 2, want one whole gang", s.preempted["/a"])
	}
}
