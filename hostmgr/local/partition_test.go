package local

import (
	"context"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
)

// TestMoveHostSetsTheVirtualPartition: a local host's partition is a
// virtual attribute that hostmgr's move sets.
func TestMoveHostSetsTheVirtualPartition(t *testing.T) {
	b := mustNew(t, Config{Dir: t.TempDir(), Hosts: 2, HostCapacity: resources.Resources{MilliCPU: 1000, MemoryMB: 512}})
	m := hostmgr.NewManager(b, hostmgr.Options{})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Recovered()
	if _, err := m.MoveHost(ctx, "local-1", "batch"); err != nil {
		t.Fatal(err)
	}
	hs := b.Hosts()
	if hs[0].Partition != Partition || hs[1].Partition != "batch" {
		t.Fatalf("backend reports %+v", hs)
	}
	caps := m.CapacityByPartition()
	if len(caps) != 2 || caps["batch"].MilliCPU != 1000 || caps[Partition].MilliCPU != 1000 {
		t.Fatalf("capacity by partition %v", caps)
	}
	if err := b.ApplyPartition(ctx, "local-9", "x"); err == nil {
		t.Fatal("ApplyPartition of an unknown host succeeded")
	}
}
