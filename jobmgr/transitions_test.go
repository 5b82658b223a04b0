package jobmgr

import (
	"flag"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files")

// renderTable prints the task, job and update transition tables one edge
// list per line, so a change to any shows up as a reviewed diff of the
// golden file.
func renderTable() string {
	return taskTransitions.Render() + jobTransitions.Render() + updateTransitions.Render()
}

func TestTransitionTablesGolden(t *testing.T) {
	got := renderTable()
	testutil.Golden(t, "testdata/transitions.golden", got, *updateGolden, "transition tables")
}

func TestEveryTaskStateHasARow(t *testing.T) {
	for v := range pelotonv1.TaskState_name {
		s := taskState(v)
		if s == pelotonv1.TaskState_TASK_STATE_UNSPECIFIED {
			continue
		}
		if !taskTransitions.Has(s) {
			t.Errorf("task state %s has no row in the transition table", s)
		}
	}
	for v := range pelotonv1.UpdateState_name {
		if s := updateState(v); s != pelotonv1.UpdateState_UPDATE_STATE_UNSPECIFIED {
			if !updateTransitions.Has(s) {
				t.Errorf("update state %s has no row in the transition table", s)
			}
		}
	}
	for v := range pelotonv1.JobState_name {
		s := jobState(v)
		if s == pelotonv1.JobState_JOB_STATE_UNSPECIFIED {
			continue
		}
		if !jobTransitions.Has(s) {
			t.Errorf("job state %s has no row in the transition table", s)
		}
	}
}

func TestCheckTransition(t *testing.T) {
	for _, tc := range []struct {
		from, to taskState
		ok       bool
	}{
		{taskInitialized, taskPending, true},
		{taskPending, taskLaunched, true},
		{taskLaunched, taskRunning, true},
		{taskRunning, taskSucceeded, true},
		{taskRunning, taskRunning, true}, // same state: field update
		{taskSucceeded, taskInitialized, true},
		{taskSucceeded, taskRunning, false},
		{taskInitialized, taskRunning, false},
		{taskKilled, taskPending, false},
		{taskFailed, taskSucceeded, false},
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
