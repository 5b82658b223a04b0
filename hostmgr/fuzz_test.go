package hostmgr

import (
	"errors"
	"slices"
	"testing"

	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/fsm/fsmtest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// checkGolden asserts that tb's Check agrees with the golden rendering for
// from and to, states outside the enum included.
func checkGolden[S fsm.State](t *testing.T, tb *fsm.Table[S], edges map[string][]string, from, to S) {
	t.Helper()
	want := from == to || slices.Contains(edges[from.String()], to.String())
	err := tb.Check(from, to)
	if (err == nil) != want || err != nil && !errors.Is(err, fsm.ErrIllegal) {
		t.Fatalf("%s: Check(%s, %s) = %v, the golden file says allowed=%v", tb.Name(), from, to, err, want)
	}
}

// FuzzTransitionTables: for any pair of values the host maintenance and
// partition move tables' Check never panics and agrees with their golden
// files; canChangeMaintenance is Check without staying put.
func FuzzTransitionTables(f *testing.F) {
	maint := fsmtest.GoldenEdges(f, "testdata/maintenance.golden", maintenanceTransitions.Name())
	part := fsmtest.GoldenEdges(f, "testdata/partition_move.golden", partitionTransitions.Name())
	for from := int32(-1); from < 6; from++ {
		for to := int32(-1); to < 6; to++ {
			f.Add(from, to)
		}
	}
	f.Fuzz(func(t *testing.T, from, to int32) {
		checkGolden(t, maintenanceTransitions, maint, hostState(from), hostState(to))
		checkGolden(t, partitionTransitions, part, pelotonv1.PartitionMoveState(from), pelotonv1.PartitionMoveState(to))
		if canChangeMaintenance(hostState(from), hostState(to)) != (from != to && maintenanceTransitions.Allowed(hostState(from), hostState(to))) {
			t.Fatalf("canChangeMaintenance(%s, %s) disagrees with the table", hostState(from), hostState(to))
		}
	})
}
