package cli

import (
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestParseJobState(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pelotonv1.JobState
	}{
		{"SUCCEEDED", pelotonv1.JobState_JOB_SUCCEEDED},
		{"JOB_SUCCEEDED", pelotonv1.JobState_JOB_SUCCEEDED},
		{"succeeded", pelotonv1.JobState_JOB_SUCCEEDED},
		{"job_failed", pelotonv1.JobState_JOB_FAILED},
		{" Running ", pelotonv1.JobState_JOB_RUNNING},
		{"killed", pelotonv1.JobState_JOB_KILLED},
	} {
		got, err := parseJobState(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseJobState(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "DONE", "STATE_UNSPECIFIED", "JOB_STATE_UNSPECIFIED", "RUNNING2"} {
		_, err := parseJobState(in)
		if err == nil {
			t.Errorf("parseJobState(%q) succeeded", in)
		} else if !strings.Contains(err.Error(), "SUCCEEDED") {
			t.Errorf("parseJobState(%q) error %q does not list the states", in, err)
		}
	}
}

func TestParseTaskState(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pelotonv1.TaskState
	}{
		{"RUNNING", pelotonv1.TaskState_RUNNING},
		{"running", pelotonv1.TaskState_RUNNING},
		{"TASK_FAILED", pelotonv1.TaskState_FAILED},
	} {
		got, err := parseTaskState(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseTaskState(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if _, err := parseTaskState("TASK_STATE_UNSPECIFIED"); err == nil {
		t.Error("parseTaskState accepted TASK_STATE_UNSPECIFIED")
	}
}

func TestParseStatesFlag(t *testing.T) {
	got, err := parseJobStates("state", []string{"running", "JOB_FAILED"})
	if err != nil || len(got) != 2 || got[0] != pelotonv1.JobState_JOB_RUNNING || got[1] != pelotonv1.JobState_JOB_FAILED {
		t.Errorf("parseJobStates = %v, %v", got, err)
	}
	_, err = parseTaskStates("state", []string{"bogus"})
	if !isUsage(err) || !strings.Contains(err.Error(), "--state") {
		t.Errorf("parseTaskStates(bogus) = %v, want a usage error naming --state", err)
	}
}
