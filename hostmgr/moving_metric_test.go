package hostmgr

import (
	"context"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHostsMovingGauge: peloton_hosts_moving counts a host from the start
// of its move until it settles in the new partition, which is what the
// PelotonPartitionMovesStuck alert watches.
func TestHostsMovingGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := partManager(t, newPartHosts(), nil)
	if got := testutil.ToFloat64(metrics.HostsMoving); got != 0 {
		t.Fatalf("hosts moving before any move: %v", got)
	}
	if _, err := m.MoveHost(ctx, "a", "stateless"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(metrics.HostsMoving); got != 1 {
		t.Fatalf("hosts moving while a drains: %v, want 1", got)
	}
	m.ReleaseTask("j-0-1")
	waitPartitions(t, m, "a=stateless b=batch c=batch")
	if got := testutil.ToFloat64(metrics.HostsMoving); got != 0 {
		t.Fatalf("hosts moving after a settled: %v, want 0", got)
	}
}
