package resmgr

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testClock is a clock tests move by hand.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time      { return c.t }
func (c *testClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *testClock               { return &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func gangOf(job string, n int, prio uint32, milli int64) *Gang {
	var ts []*Task
	for i := range n {
		ts = append(ts, mkTask(job, uint32(i), prio, cpu(milli)))
	}
	return NewGang(ts...)
}

func newClockedManager(t *testing.T, c *testClock, after time.Duration) *Manager {
	t.Helper()
	m, err := New(context.Background(), memstore.New(memstore.Options{}), Options{Logger: quiet, BackoffBase: time.Millisecond,
		BackoffMax: 10 * time.Millisecond, ReservationAfter: after, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// place takes every ready gang and places its tasks on host.
func place(t *testing.T, m *Manager, host string) []*Gang {
	t.Helper()
	gs := dequeueAll(m)
	var ps []Placement
	for _, g := range gs {
		for _, task := range g.Tasks {
			ps = append(ps, Placement{Task: task, Host: host})
		}
	}
	if dropped := m.SetPlacements(ps); len(dropped) > 0 {
		t.Fatalf("dropped %v", dropped)
	}
	return gs
}

// TestHostReservationLifecycle follows one reservation: none before the
// gang has waited ReservationAfter; then one for it, whose hosts take
// backfill; complete, it preempts the backfill on its hosts, lets the
// others go and admits the gang although the cluster looks full; placed,
// the gang ends it.
func TestHostReservationLifecycle(t *testing.T) {
	c := newClock()
	m := newClockedManager(t, c, 10*time.Second)
	m.SetCapacity(capCPU(4000))
	for i := range 4 {
		if err := m.Enqueue(NewGang(mkTask(fmt.Sprint("s", i), 0, 0, cpu(1000)))); err != nil {
			t.Fatal(err)
		}
	}
	m.admitOnce()
	place(t, m, "h1")
	big := gangOf("g", 2, 0, 2000)
	if err := m.Enqueue(big); err != nil {
		t.Fatal(err)
	}
	c.add(9 * time.Second)
	m.admitOnce()
	if rs := m.HostReservations(); rs != nil {
		t.Fatalf("reserved before the gang waited ReservationAfter: %+v", rs)
	}
	c.add(2 * time.Second)
	m.admitOnce()
	start := c.t
	c.add(time.Second)
	rs := m.HostReservations()
	if len(rs) != 1 || !rs[0].Owns(big) || rs[0].Pool != DefaultPoolPath || rs[0].Complete {
		t.Fatalf("want one reservation for g in /default, got %+v", rs)
	}
	// The engine sets aside h2 and h3; a preemptible task then lands on h2.
	m.UpdateHostReservation(HostReservationUpdate{Pool: DefaultPoolPath, Owner: rs[0].Gang, Add: []string{"h2", "h3"},
		Seen: map[string]HostRoom{"h2": {Free: cpu(1000), Held: cpu(1000)}, "h3": {Free: cpu(1000), Held: cpu(1000)}}})
	m.Release("s0", 0)
	if err := m.Enqueue(NewGang(mkTask("b", 0, 0, cpu(1000)))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	place(t, m, "h2")
	rs = m.HostReservations()
	if got := fmt.Sprint(rs[0].Hosts, rs[0].Backfill["h2"].MilliCPU); got != "[h2 h3] 1000" {
		t.Fatalf("hosts and backfill: %s", got)
	}
	jr := m.JobHostReservation("g")
	if jr == nil || jr.Members != 2 || jr.Complete || len(jr.Hosts) != 2 || jr.Hosts[0].Name != "h2" || jr.Hosts[0].Held.Cpu != 1 ||
		!jr.Since.AsTime().Equal(start) || !jr.Hosts[0].Since.AsTime().Equal(c.t) {
		t.Fatalf("job get's reservation: %v", jr)
	}
	if m.JobHostReservation("s1") != nil {
		t.Fatal("a job without a reservation shows one")
	}
	// Admission still refuses the gang: the cluster is full.
	m.admitOnce()
	if st, _, _ := m.TaskState("g", 0); st != pelotonv1.TaskState_PENDING {
		t.Fatalf("gang admitted before its reservation is complete: %s", st)
	}
	// The engine finds that h2 alone (its backfill and free room) holds
	// the gang: h2's backfill is preempted and h3 let go.
	m.UpdateHostReservation(HostReservationUpdate{Pool: DefaultPoolPath, Owner: rs[0].Gang, Complete: []string{"h2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vs := m.GetPreemptions(ctx)
	if len(vs) != 1 || vs[0].Task.JobID != "b" || vs[0].Reason != ReasonReservation {
		t.Fatalf("victims %+v, want b-0 for the reservation", vs)
	}
	if rs := m.HostReservations(); len(rs) != 1 || !rs[0].Complete || fmt.Sprint(rs[0].Hosts) != "[h2]" {
		t.Fatalf("complete reservation keeps h2 only: %+v", rs)
	}
	m.admitOnce()
	if st, _, _ := m.TaskState("g", 0); st != pelotonv1.TaskState_READY {
		t.Fatalf("a complete reservation's gang is admitted whatever the capacity says, is %s", st)
	}
	place(t, m, "h2")
	if rs := m.HostReservations(); rs != nil {
		t.Fatalf("a placed gang ends its reservation: %+v", rs)
	}
}

// TestHostReservationChoice: one reservation per pool, for the highest
// priority, then the longest wait; a killed member ends it and the next
// gang gets one.
func TestHostReservationChoice(t *testing.T) {
	c := newClock()
	m := newClockedManager(t, c, time.Second)
	m.SetCapacity(capCPU(1000))
	old, newer, urgent := gangOf("old", 2, 1, 1000), gangOf("newer", 2, 1, 1000), gangOf("urgent", 2, 5, 1000)
	if err := m.Enqueue(old); err != nil {
		t.Fatal(err)
	}
	c.add(time.Second)
	if err := m.Enqueue(newer); err != nil {
		t.Fatal(err)
	}
	c.add(time.Second)
	m.admitOnce()
	if rs := m.HostReservations(); len(rs) != 1 || !rs[0].Owns(old) {
		t.Fatalf("same priority: the longest wait first, got %+v", rs)
	}
	// A more important gang arrives: the reservation stays (one per pool,
	// and hosts already set aside are not thrown away).
	if err := m.Enqueue(urgent); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Second)
	m.admitOnce()
	if rs := m.HostReservations(); len(rs) != 1 || !rs[0].Owns(old) {
		t.Fatalf("a live reservation is kept, got %+v", rs)
	}
	m.UpdateHostReservation(HostReservationUpdate{Pool: DefaultPoolPath, Owner: old, Add: []string{"h1"}})
	// Killing a member ends it and frees its hosts; the urgent gang is next.
	m.Release("old", 1)
	if rs := m.HostReservations(); rs != nil {
		t.Fatalf("a killed gang keeps its reservation: %+v", rs)
	}
	m.admitOnce()
	rs := m.HostReservations()
	if len(rs) != 1 || !rs[0].Owns(urgent) || len(rs[0].Hosts) != 0 {
		t.Fatalf("priority before age, with none of the old hosts: %+v", rs)
	}
	// The old reservation's host is free for the new one.
	m.UpdateHostReservation(HostReservationUpdate{Pool: DefaultPoolPath, Owner: urgent, Add: []string{"h1"}})
	if rs := m.HostReservations(); fmt.Sprint(rs[0].Hosts) != "[h1]" {
		t.Fatalf("h1 not reserved again: %+v", rs)
	}
	// An update for a gang no longer reserved is ignored.
	m.UpdateHostReservation(HostReservationUpdate{Pool: DefaultPoolPath, Owner: old, Complete: []string{"h1"}})
	if rs := m.HostReservations(); rs[0].Complete {
		t.Fatal("a stale update completed the reservation")
	}
}

// TestHostReservationNotForPoolLimits: a gang held back by its pool's limit
// gets no reservation (hosts would not help), nor does anything when the
// feature is off.
func TestHostReservationNotForPoolLimits(t *testing.T) {
	c := newClock()
	m := newClockedManager(t, c, time.Second)
	m.SetCapacity(capCPU(10000))
	if _, err := m.CreatePool(context.Background(), "/capped", &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 1, MemoryMb: 100}}); err != nil {
		t.Fatal(err)
	}
	g := gangOf("c", 2, 0, 1000)
	for _, task := range g.Tasks {
		task.Pool = "/capped"
	}
	g.Pool = "/capped"
	if err := m.Enqueue(g); err != nil {
		t.Fatal(err)
	}
	c.add(time.Hour)
	m.admitOnce()
	if rs := m.HostReservations(); rs != nil {
		t.Fatalf("reserved hosts for a gang its pool's limit holds back: %+v", rs)
	}

	off := newClockedManager(t, c, -1)
	off.SetCapacity(capCPU(1000))
	if err := off.Enqueue(gangOf("g", 2, 0, 1000)); err != nil {
		t.Fatal(err)
	}
	c.add(time.Hour)
	off.admitOnce()
	if rs := off.HostReservations(); rs != nil {
		t.Fatalf("ReservationAfter < 0 reserves nothing: %+v", rs)
	}
}

// TestHostReservationIdleMetric: the reserved hosts' free CPU is counted in
// core-seconds, per pool, until the reservation ends.
func TestHostReservationIdleMetric(t *testing.T) {
	c := newClock()
	m := newClockedManager(t, c, time.Second)
	m.SetCapacity(capCPU(1000))
	if _, err := m.CreatePool(context.Background(), "/idle", &pelotonv1.PoolSpec{}); err != nil {
		t.Fatal(err)
	}
	g := gangOf("i", 2, 0, 1000)
	for _, task := range g.Tasks {
		task.Pool = "/idle"
	}
	g.Pool = "/idle"
	if err := m.Enqueue(g); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Second)
	m.admitOnce()
	before := testutil.ToFloat64(metrics.ReservationIdle.WithLabelValues("/idle"))
	m.UpdateHostReservation(HostReservationUpdate{Pool: "/idle", Owner: g, Add: []string{"h1"}, Seen: map[string]HostRoom{"h1": {Free: cpu(2000), Held: cpu(2000)}}})
	c.add(10 * time.Second)
	m.UpdateHostReservation(HostReservationUpdate{Pool: "/idle", Owner: g, Seen: map[string]HostRoom{"h1": {Free: cpu(500), Held: cpu(2000)}}})
	c.add(4 * time.Second)
	m.Release("i", 0) // ends it: the last 4 s at 0.5 cores count too
	if got := testutil.ToFloat64(metrics.ReservationIdle.WithLabelValues("/idle")) - before; got != 22 {
		t.Fatalf("idle core-seconds %g, want 2 cores × 10 s + 0.5 × 4 s = 22", got)
	}
}

// TestHostReservationRebuiltAfterRestart: a reservation lives in memory; a
// new manager (a restart) given the same waiting gangs, with the time
// their records say they began to wait (Gang.WaitingSince, from jobmgr),
// picks the same gang at once, whatever order they are queued in.
func TestHostReservationRebuiltAfterRestart(t *testing.T) {
	c := newClock()
	began := c.t
	gangs := func() (*Gang, *Gang) {
		old, newer := gangOf("old", 2, 1, 1000), gangOf("newer", 2, 1, 1000)
		old.WaitingSince, newer.WaitingSince = began, began.Add(time.Second)
		return old, newer
	}
	c.add(2 * time.Second) // jobmgr queues them a moment after their records changed
	m := newClockedManager(t, c, 10*time.Second)
	m.SetCapacity(capCPU(1000))
	old, newer := gangs()
	if err := m.Enqueue(old, newer); err != nil {
		t.Fatal(err)
	}
	c.add(9 * time.Second)
	m.admitOnce()
	if rs := m.HostReservations(); len(rs) != 1 || !rs[0].Owns(old) {
		t.Fatalf("before the restart: %+v", rs)
	}
	// The restart: a new manager, the gangs queued again (newer first).
	c.add(time.Second)
	m2 := newClockedManager(t, c, 10*time.Second)
	m2.SetCapacity(capCPU(1000))
	old, newer = gangs()
	if err := m2.Enqueue(newer, old); err != nil {
		t.Fatal(err)
	}
	m2.admitOnce()
	if rs := m2.HostReservations(); len(rs) != 1 || !rs[0].Owns(old) {
		t.Fatalf("after the restart the same gang is reserved at once, got %+v", rs)
	}
	// Without the records' time the wait starts again.
	m3 := newClockedManager(t, c, 10*time.Second)
	m3.SetCapacity(capCPU(1000))
	if err := m3.Enqueue(gangOf("old", 2, 1, 1000)); err != nil {
		t.Fatal(err)
	}
	m3.admitOnce()
	if rs := m3.HostReservations(); rs != nil {
		t.Fatalf("a gang queued now waits ReservationAfter first: %+v", rs)
	}
}
