package resmgr

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func revocable(t *Task) *Task {
	t.Revocable, t.Preemptible = true, true
	return t
}

// TestRevocableAdmittedAgainstSlack: revocable work is admitted against
// the cluster's slack, whatever the capacity and entitlement; it waits,
// saying so, when the slack is used up, and a pool's revocableLimit caps
// it; regular work is admitted against capacity without counting what
// revocable work holds.
func TestRevocableAdmittedAgainstSlack(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(capCPU(2000))
	if err := m.Enqueue(NewGang(revocable(mkTask("r", 0, 0, cpu(800))))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if got := keys(dequeueAll(m)); len(got) != 0 {
		t.Fatalf("admitted %v with no slack", got)
	}
	if st, reason, _ := m.TaskState("r", 0); st != pelotonv1.TaskState_PENDING || !strings.Contains(reason, "waiting for slack") {
		t.Fatalf("r-0 with no slack: %s %q", st, reason)
	}
	m.SetSlack(resources.Resources{MilliCPU: 1000, MemoryMB: 1 << 30})
	m.admitOnce()
	if got := keys(dequeueAll(m)); strings.Join(got, " ") != "r-0" {
		t.Fatalf("admitted %v with 1 core of slack, want r-0", got)
	}
	// A second does not fit the slack left (0.2 cores).
	if err := m.Enqueue(NewGang(revocable(mkTask("r", 1, 0, cpu(800))))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if got := keys(dequeueAll(m)); len(got) != 0 {
		t.Fatalf("admitted %v over the slack", got)
	}
	// Regular work takes the whole capacity: the revocable hold is apart.
	if err := m.Enqueue(NewGang(mkTask("j", 0, 0, cpu(2000)))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if got := keys(dequeueAll(m)); strings.Join(got, " ") != "j-0" {
		t.Fatalf("admitted %v, want the regular j-0 on the whole capacity", got)
	}

	// A pool capping its revocable use at 1 core.
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, "/capped", &pelotonv1.PoolSpec{RevocableLimit: &pelotonv1.Resources{Cpu: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreatePool(ctx, "/bad", &pelotonv1.PoolSpec{RevocableLimit: &pelotonv1.Resources{Cpu: -1}}); err == nil || !strings.Contains(err.Error(), "spec.revocableLimit") {
		t.Fatalf("a negative revocableLimit: %v", err)
	}
	m.SetSlack(resources.Resources{MilliCPU: 10000, MemoryMB: 1 << 30})
	c0, c1 := revocable(mkTask("c", 0, 0, cpu(600))), revocable(mkTask("c", 1, 0, cpu(600)))
	c0.Pool, c1.Pool = "/capped", "/capped"
	if err := m.Enqueue(NewGang(c0), NewGang(c1)); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	got := keys(dequeueAll(m))
	slices.Sort(got)
	if strings.Join(got, " ") != "c-0 r-1" {
		t.Fatalf("admitted %v, want r-1 (slack grew) and c-0 (the cap leaves room for one)", got)
	}
	if st, reason, _ := m.TaskState("c", 1); st != pelotonv1.TaskState_PENDING || !strings.Contains(reason, "caps its revocable tasks") {
		t.Fatalf("c-1 over its pool's cap: %s %q", st, reason)
	}
}
