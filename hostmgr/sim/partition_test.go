package sim

import (
	"context"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
)

// TestMoveHostSetsThePartitionAttribute: hostmgr moving an empty sim host
// to another partition sets the host's partition and its LabelPartition
// label in what the backend reports.
func TestMoveHostSetsThePartitionAttribute(t *testing.T) {
	b, err := New(Config{Hosts: 2, Labels: []string{"peloton.io/partition=batch"}})
	if err != nil {
		t.Fatal(err)
	}
	m := hostmgr.NewManager(b, hostmgr.Options{})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Recovered()
	name := b.Hosts()[1].Name
	h, err := m.MoveHost(ctx, name, "stateless")
	if err != nil {
		t.Fatal(err)
	}
	if h.Partition != "stateless" {
		t.Fatalf("host after the move: %+v", h)
	}
	hs := b.Hosts()
	if hs[1].Partition != "stateless" || hs[1].Labels[LabelPartition] != "stateless" || hs[0].Partition != "batch" {
		t.Fatalf("backend reports %+v", hs)
	}
	if err := b.ApplyPartition(ctx, "nope", "x"); err == nil {
		t.Fatal("ApplyPartition of an unknown host succeeded")
	}
}
