package hostmgr

import (
	"bufio"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/fsm"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// goldenEdges reads the rendering of table name from a golden file: each
// from-state's name to its targets.
func goldenEdges(t testing.TB, file, name string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, in := map[string][]string{}, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			in = line == "# "+name+" transitions"
			continue
		}
		if from, tos, ok := strings.Cut(line, " -> "); in && ok {
			out[from] = nil
			if tos != "(none)" {
				out[from] = strings.Fields(tos)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no %s table", file, name)
	}
	return out
}

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
	maint := goldenEdges(f, "testdata/maintenance.golden", maintenanceTransitions.Name())
	part := goldenEdges(f, "testdata/partition_move.golden", partitionTransitions.Name())
	for from := int32(-1); from < 6; from++ {
		for to := int32(-1); to < 6; to++ {
			f.Add(from, to)
		}
	}
	f.Fuzz(func(t *testing.T, from, to int32) {
		checkGolden(t, maintenanceTransitions, maint, hs(from), hs(to))
		checkGolden(t, partitionTransitions, part, pelotonv1.PartitionMoveState(from), pelotonv1.PartitionMoveState(to))
		if canChangeMaintenance(hs(from), hs(to)) != (from != to && maintenanceTransitions.Allowed(hs(from), hs(to))) {
			t.Fatalf("canChangeMaintenance(%s, %s) disagrees with the table", hs(from), hs(to))
		}
	})
}
