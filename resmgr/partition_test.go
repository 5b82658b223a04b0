package resmgr

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func inPartition(t *Task, part string) *Task {
	t.Placement = &pelotonv1.PlacementSpec{Partition: part}
	return t
}

// TestAdmissionCountsOnlyTheTargetPartition: a job that targets a small
// partition pends once that partition is full, with a reason that names
// it, although the cluster as a whole has room; work for other partitions,
// or for none, is admitted meanwhile, and a refusal in one partition is not
// taken for a refusal of the same shape elsewhere.
func TestAdmissionCountsOnlyTheTargetPartition(t *testing.T) {
	m := newTestManager(t)
	m.SetPartitionCapacity(resources.ByPartition{"stateless": capCPU(1000), "batch": capCPU(9000)})
	if err := m.Enqueue(
		NewGang(inPartition(mkTask("s", 0, 0, cpu(800)), "stateless")),
		NewGang(inPartition(mkTask("s", 1, 0, cpu(800)), "stateless")),
		NewGang(inPartition(mkTask("b", 0, 0, cpu(800)), "batch")),
		NewGang(mkTask("any", 0, 0, cpu(800))),
	); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	got := keys(dequeueAll(m))
	if strings.Join(got, " ") != "s-0 b-0 any-0" {
		t.Fatalf("admitted %v, want s-0 b-0 any-0", got)
	}
	st, reason, _ := m.TaskState("s", 1)
	if st != pelotonv1.TaskState_PENDING || !strings.Contains(reason, "partition stateless is full") {
		t.Fatalf("s-1: %s %q, want PENDING naming partition stateless", st, reason)
	}

	// A host joins the partition: s-1 fits now.
	m.SetPartitionCapacity(resources.ByPartition{"stateless": capCPU(2000), "batch": capCPU(8000)})
	m.admitOnce()
	if got := keys(dequeueAll(m)); strings.Join(got, " ") != "s-1" {
		t.Fatalf("after the partition grew admitted %v, want s-1", got)
	}

	// Releasing frees the partition's share.
	m.Release("s", 0)
	m.Release("s", 1)
	if err := m.Enqueue(NewGang(inPartition(mkTask("s", 2, 0, cpu(1800)), "stateless"))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if got := keys(dequeueAll(m)); strings.Join(got, " ") != "s-2" {
		t.Fatalf("after release admitted %v, want s-2", got)
	}
}

// TestUnknownPartitionIsLeftToPlacement: a partition with no host in
// service is not refused by admission, so that placement can tell the user
// that no host is in it.
func TestUnknownPartitionIsLeftToPlacement(t *testing.T) {
	m := newTestManager(t)
	m.SetPartitionCapacity(resources.ByPartition{"batch": capCPU(9000)})
	if err := m.Enqueue(NewGang(inPartition(mkTask("g", 0, 0, cpu(800)), "gpu"))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if got := keys(dequeueAll(m)); strings.Join(got, " ") != "g-0" {
		t.Fatalf("admitted %v, want g-0", got)
	}
}
