package hostmgr

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHostsMovingGauge: peloton_hosts_moving counts a host from the start
// of its move until it settles in the new partition, which is what the
// PelotonPartitionMovesStuck alert watches; peloton_host_partition has the
// host in its old partition until then and in the new one after, never in
// both.
func TestHostsMovingGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := partManager(t, newPartHosts(), nil)
	if got := testutil.ToFloat64(metrics.HostsMoving); got != 0 {
		t.Fatalf("hosts moving before any move: %v", got)
	}
	partOf := func(host, part string) float64 {
		return testutil.ToFloat64(metrics.HostPartition.WithLabelValues(host, part))
	}
	if partOf("a", "batch") != 1 || partOf("b", "batch") != 1 {
		t.Fatal("hosts not in peloton_host_partition at start")
	}
	if _, err := m.Maintenance().MoveHost(ctx, "a", "stateless", ""); err != nil {
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
	if partOf("a", "stateless") != 1 {
		t.Fatal("a is not in stateless in peloton_host_partition")
	}
	if metrics.HostPartition.DeleteLabelValues("a", "batch") {
		t.Fatal("a's series in batch outlived its move")
	}
}

// TestHostStatesAreFixedLabels: the states recountLocked gauges are the
// values peloton_hosts{state} starts with.
func TestHostStatesAreFixedLabels(t *testing.T) {
	var fixed []string
	for _, f := range metrics.Fixed {
		if f.Vec == metrics.Hosts.MetricVec {
			fixed = f.Values
		}
	}
	for _, st := range []hostState{hostUp, hostDraining, hostDrained, hostDown} {
		if !slices.Contains(fixed, st.String()) {
			t.Errorf("host state %s is not among peloton_hosts' fixed values %v", st, fixed)
		}
	}
}

// TestHostUpGauge: peloton_host_up is 1 for a host in service and 0 once
// its maintenance starts, which is how PelotonHostAgentStale leaves hosts
// in maintenance alone.
func TestHostUpGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := partManager(t, newPartHosts(), nil)
	up := func(h string) float64 { return testutil.ToFloat64(metrics.HostUp.WithLabelValues(h)) }
	if up("b") != 1 || up("c") != 1 {
		t.Fatalf("hosts in service: b %v, c %v, want 1", up("b"), up("c"))
	}
	if _, err := m.Maintenance().StartMaintenance(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if up("b") != 0 || up("c") != 1 {
		t.Fatalf("b in maintenance: b %v, c %v, want 0 and 1", up("b"), up("c"))
	}
}
