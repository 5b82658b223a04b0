package resmgr

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newTestManager is a manager on a store in memory: these tests are about
// scheduling, not about what etcd does with the writes (the pool tree's
// tests keep a real etcd).
func newTestManager(t *testing.T) *Manager {
	t.Helper()
	st := memstore.New(memstore.Options{})
	m, err := New(context.Background(), st, Options{Logger: quiet, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func cpu(milli int64) resources.Resources { return resources.Resources{MilliCPU: milli, MemoryMB: 1} }

// capCPU is a cluster capacity bounded by CPU only.
func capCPU(milli int64) resources.Resources {
	return resources.Resources{MilliCPU: milli, MemoryMB: 1 << 40}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func mkTask(job string, inst uint32, prio uint32, r resources.Resources) *Task {
	return &Task{JobID: job, Instance: inst, RunID: 1, Pool: DefaultPoolPath, Priority: prio, Preemptible: true, Resources: r}
}

// dequeueAll drains the ready queue without waiting.
func dequeueAll(m *Manager) []*Gang {
	return m.DequeueGangs(context.Background(), 1<<20, 0)
}

func keys(gs []*Gang) []string {
	var out []string
	for _, g := range gs {
		for _, t := range g.Tasks {
			out = append(out, t.Key())
		}
	}
	return out
}

func TestAdmissionOrderAndCapacity(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(capCPU(3000))
	// Priority 1 goes before priority 0; FIFO within a priority.
	if err := m.Enqueue(NewGang(mkTask("a", 0, 0, cpu(1000))), NewGang(mkTask("b", 0, 1, cpu(1000))), NewGang(mkTask("a", 1, 0, cpu(1000))), NewGang(mkTask("a", 2, 0, cpu(1000)))); err != nil {
		t.Fatal(err)
	}
	if n := m.admitOnce(); n != 3 {
		t.Fatalf("admitted %d gangs, want 3 (capacity 3 CPU)", n)
	}
	got := keys(dequeueAll(m))
	want := []string{"b-0", "a-0", "a-1"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("admission order %v, want %v", got, want)
	}
	st, reason, _ := m.TaskState("a", 2)
	if st != pelotonv1.TaskState_PENDING || reason == "" {
		t.Fatalf("a-2 should wait with a reason, is %s %q", st, reason)
	}
	// Freeing capacity admits the waiting task.
	m.Release("a", 0)
	if n := m.admitOnce(); n != 1 {
		t.Fatalf("after release admitted %d, want 1", n)
	}
	p, _ := m.GetPool(DefaultPoolPath)
	if p.Status.Allocation.Cpu != 3 || p.Status.PendingTasks != 0 || p.Status.RunningTasks != 3 {
		t.Fatalf("pool status %v", p.Status)
	}
}

// TestBigGangDoesNotBlockSmallWork: small work passes a gang that does
// not fit, and the gang is admitted whole or not at all. Small work would
// pass it for ever but for its host reservation, which it gets once it has
// waited ReservationAfter; small work is still admitted then (the
// reservation keeps it off the gang's hosts, not out of the cluster). The
// gang starting within the bound behind a stream of small work is shown
// by placement's TestEngineBigGangStartsBehindSmallWork and, with real
// processes, test/e2e's TestBigGangStartsBehindStreamOfSmallWork.
func TestBigGangDoesNotBlockSmallWork(t *testing.T) {
	c := newClock()
	m := newClockedManager(t, c, 10*time.Second)
	m.SetCapacity(capCPU(2000))
	if err := m.Enqueue(NewGang(mkTask("r", 0, 5, cpu(1000)))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	big := NewGang(mkTask("g", 0, 5, cpu(1000)), mkTask("g", 1, 5, cpu(1000)))
	if err := m.Enqueue(big, NewGang(mkTask("s", 0, 0, cpu(500)))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	got := keys(dequeueAll(m))
	if len(got) != 2 || got[1] != "s-0" {
		t.Fatalf("want only the small task admitted past the gang that cannot fit, got %v", got)
	}
	// The gang is admitted whole or not at all.
	for i := uint32(0); i < 2; i++ {
		if st, _, _ := m.TaskState("g", i); st != pelotonv1.TaskState_PENDING {
			t.Fatalf("gang member %d is %s; no partial gang may be admitted", i, st)
		}
	}
	if m.HostReservations() != nil {
		t.Fatal("a reservation before the gang waited ReservationAfter")
	}
	c.add(10 * time.Second)
	if err := m.Enqueue(NewGang(mkTask("s", 1, 0, cpu(500)))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if rs := m.HostReservations(); len(rs) != 1 || !rs[0].Owns(big) {
		t.Fatalf("the gang that waited gets the pool's reservation, got %+v", rs)
	}
	if got := keys(dequeueAll(m)); len(got) != 1 || got[0] != "s-1" {
		t.Fatalf("small work is still admitted while the gang's hosts are set aside, got %v", got)
	}
}

func TestPoolLimitAndReturnBackoff(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(capCPU(10000))
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, "/capped", &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 1, MemoryMb: 100}}); err != nil {
		t.Fatal(err)
	}
	t1, t2 := mkTask("c", 0, 0, cpu(800)), mkTask("c", 1, 0, cpu(800))
	t1.Pool, t2.Pool = "/capped", "/capped"
	if err := m.Enqueue(NewGang(t1), NewGang(t2)); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	gs := dequeueAll(m)
	if len(gs) != 1 {
		t.Fatalf("limit 1 CPU admits one 0.8 CPU task, admitted %d", len(gs))
	}
	// A returned gang comes back after its backoff, not before.
	m.ReturnGang(gs[0], "no host")
	if st, reason, _ := m.TaskState("c", 0); st != pelotonv1.TaskState_READY || reason != "no host" {
		t.Fatalf("returned task: %s %q", st, reason)
	}
	again := m.DequeueGangs(ctx, 10, time.Second)
	if len(again) != 1 || again[0].Attempts() != 1 {
		t.Fatalf("returned gang not offered again: %v", again)
	}
}

func TestPlacementsFlowAndDropRemoved(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(capCPU(10000))
	a, b := mkTask("p", 0, 0, cpu(100)), mkTask("p", 1, 0, cpu(100))
	if err := m.Enqueue(NewGang(a), NewGang(b)); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	dequeueAll(m)
	m.Release("p", 1) // killed while placing
	dropped := m.SetPlacements([]Placement{{Task: a, Host: "h1"}, {Task: b, Host: "h2"}})
	if len(dropped) != 1 || dropped[0].Task != b {
		t.Fatalf("the placement of a removed task must be dropped, dropped %v", dropped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := m.GetPlacements(ctx, 10)
	if len(ps) != 1 || ps[0].Host != "h1" {
		t.Fatalf("placements %v", ps)
	}
}

func TestPoolTreePersistsAndValidates(t *testing.T) {
	emb, st := storetest.StartEtcd(t)
	_ = emb
	ctx := context.Background()
	m, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, "org", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 4}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, "/org/a/", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 3}, Share: &pelotonv1.Resources{Cpu: 2}}); err != nil {
		t.Fatal(err)
	}
	_, err = m.CreatePool(ctx, "/org/b", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("over-reserving children: %v", err)
	}
	_, err = m.UpdatePool(ctx, "/org", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2}}, 0)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("shrinking a parent below its children's reservations: %v", err)
	}
	if _, err := m.CheckLeafPool("/org", "spec.pool"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("non-leaf: %v", err)
	}
	// A second manager on the same store sees the same tree.
	m2, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range m2.ListPools() {
		paths = append(paths, p.Path)
	}
	if len(paths) != 4 || paths[2] != "/org" || paths[3] != "/org/a" {
		t.Fatalf("reloaded tree %v", paths)
	}
	p, _ := m2.GetPool("/org/a")
	if p.Spec.Share.Cpu != 2 || p.Spec.Reservation.Cpu != 3 {
		t.Fatalf("reloaded spec %v", p.Spec)
	}
	if err := m2.DeletePool(ctx, "/org/a"); err != nil {
		t.Fatal(err)
	}
	if err := m2.DeletePool(ctx, "/org"); err != nil {
		t.Fatal(err)
	}
}

func TestMovePool(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	m, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m.SetJobChecker(func(pool string) bool { return pool == "/busy" })
	for _, p := range []struct {
		path string
		cpu  float64
	}{{"/a", 10}, {"/a/x", 4}, {"/a/x/y", 1}, {"/b", 3}, {"/busy", 0}} {
		if _, err := m.CreatePool(ctx, p.path, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: p.cpu}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path, to string
		code     codes.Code
	}{
		{"/a", "/a/x", codes.InvalidArgument},         // inside itself: a cycle
		{"/a", "/a", codes.InvalidArgument},           // itself
		{"/a/x", "/nope", codes.NotFound},             // no such parent
		{"/a/x", "/b", codes.InvalidArgument},         // /b reserves 3, /a/x needs 4
		{"/busy", "/b", codes.FailedPrecondition},     // has jobs
		{"/a/x/y", "/busy", codes.FailedPrecondition}, // the new parent has jobs
		{"/", "/b", codes.InvalidArgument},
	} {
		if _, err := m.MovePool(ctx, tc.path, tc.to); status.Code(err) != tc.code {
			t.Errorf("move %s to %s: %v, want %s", tc.path, tc.to, err, tc.code)
		}
	}
	p, err := m.MovePool(ctx, "/a/x", "/")
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != "/x" || len(p.Children) != 1 || p.Children[0] != "/x/y" {
		t.Fatalf("moved pool %v", p)
	}
	// A fresh manager on the same store sees the new tree, and the old paths are gone.
	m2, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range m2.ListPools() {
		paths = append(paths, p.Path)
	}
	if got := fmt.Sprint(paths); got != "[/ /a /b /busy /default /x /x/y]" {
		t.Fatalf("tree after move and reload: %s", got)
	}
	if _, err := m2.CheckLeafPool("/x/y", "spec.pool"); err != nil {
		t.Fatalf("moved leaf should take jobs: %v", err)
	}
}
