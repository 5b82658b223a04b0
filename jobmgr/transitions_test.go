package jobmgr

import (
	"flag"
	"fmt"
	"github.com/peloton-sched/peloton/internal/testutil"
	"sort"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files")

// state is any of the enums whose transitions are tabled here.
type state interface {
	~int32
	String() string
}

// renderRows prints one transition table, one state per line in enum order.
func renderRows[S state](b *strings.Builder, title string, table map[S][]S) {
	fmt.Fprintf(b, "# %s transitions\n", title)
	froms := make([]S, 0, len(table))
	for f := range table {
		froms = append(froms, f)
	}
	sort.Slice(froms, func(i, j int) bool { return froms[i] < froms[j] })
	for _, f := range froms {
		tos := make([]string, 0, len(table[f]))
		for _, t := range table[f] {
			tos = append(tos, t.String())
		}
		fmt.Fprintf(b, "%s -> %s\n", f, strings.Join(tos, " "))
	}
}

// renderTable prints the task, job and update transition tables one edge
// list per line, so a change to any shows up as a reviewed diff of the
// golden file.
func renderTable() string {
	var b strings.Builder
	renderRows(&b, "task", taskTransitions)
	renderRows(&b, "job", jobTransitions)
	renderRows(&b, "update", updateTransitions)
	return b.String()
}

func TestTransitionTablesGolden(t *testing.T) {
	got := renderTable()
	testutil.Golden(t, "testdata/transitions.golden", got, *updateGolden, "transition tables")
}

func TestEveryTaskStateHasARow(t *testing.T) {
	for v := range pelotonv1.TaskState_name {
		s := ts(v)
		if s == pelotonv1.TaskState_TASK_STATE_UNSPECIFIED {
			continue
		}
		if _, ok := taskTransitions[s]; !ok {
			t.Errorf("task state %s has no row in the transition table", s)
		}
	}
	for v := range pelotonv1.UpdateState_name {
		if s := us(v); s != pelotonv1.UpdateState_UPDATE_STATE_UNSPECIFIED {
			if _, ok := updateTransitions[s]; !ok {
				t.Errorf("update state %s has no row in the transition table", s)
			}
		}
	}
	for v := range pelotonv1.JobState_name {
		s := js(v)
		if s == pelotonv1.JobState_JOB_STATE_UNSPECIFIED {
			continue
		}
		if _, ok := jobTransitions[s]; !ok {
			t.Errorf("job state %s has no row in the transition table", s)
		}
	}
}

func TestCheckTransition(t *testing.T) {
	for _, tc := range []struct {
		from, to ts
		ok       bool
	}{
		{stInitialized, stPending, true},
		{stPending, stLaunched, true},
		{stLaunched, stRunning, true},
		{stRunning, stSucceeded, true},
		{stRunning, stRunning, true}, // same state: field update
		{stSucceeded, stInitialized, true},
		{stSucceeded, stRunning, false},
		{stInitialized, stRunning, false},
		{stKilled, stPending, false},
		{stFailed, stSucceeded, false},
	} {
		err := checkTransition(tc.from, tc.to)
		if (err == nil) != tc.ok {
			t.Errorf("%s -> %s: err=%v, want ok=%v", tc.from, tc.to, err, tc.ok)
		}
	}
	if err := checkJobTransition(pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_KILLING); err == nil {
		t.Error("JOB_SUCCEEDED -> JOB_KILLING must be illegal")
	}
}

func TestParseTaskID(t *testing.T) {
	id := "0b9c2f1e-5c8a-4d7e-9f00-1234567890ab"
	j, i, r, ok := parseTaskID(id + "-12-3")
	if !ok || j != id || i != 12 || r != 3 {
		t.Fatalf("got %q %d %d %v", j, i, r, ok)
	}
	for _, bad := range []string{"", "x", "x-1", "x-a-1", "x-1-b"} {
		if _, _, _, ok := parseTaskID(bad); ok {
			t.Errorf("parseTaskID(%q) accepted", bad)
		}
	}
}
