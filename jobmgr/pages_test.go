package jobmgr

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestJobFilterLabelsAndCreation: labels must all hold with their values;
// creation is at or after CreatedSince and before CreatedUntil.
func TestJobFilterLabelsAndCreation(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	job := &pelotonv1.Job{Spec: &pelotonv1.JobSpec{Labels: map[string]string{"team": "data", "tier": "1"}},
		Status: &pelotonv1.JobStatus{CreateTime: timestamppb.New(t0)}}
	for _, c := range []struct {
		name string
		f    JobFilter
		want bool
	}{
		{"none", JobFilter{}, true},
		{"one label", JobFilter{Labels: map[string]string{"team": "data"}}, true},
		{"both labels", JobFilter{Labels: map[string]string{"team": "data", "tier": "1"}}, true},
		{"other value", JobFilter{Labels: map[string]string{"team": "web"}}, false},
		{"empty value is a value", JobFilter{Labels: map[string]string{"team": ""}}, false},
		{"missing label", JobFilter{Labels: map[string]string{"owner": "x"}}, false},
		{"since is inclusive", JobFilter{CreatedSince: t0}, true},
		{"since after", JobFilter{CreatedSince: t0.Add(time.Nanosecond)}, false},
		{"until is exclusive", JobFilter{CreatedUntil: t0}, false},
		{"until after", JobFilter{CreatedUntil: t0.Add(time.Nanosecond)}, true},
		{"between", JobFilter{CreatedSince: t0.Add(-time.Hour), CreatedUntil: t0.Add(time.Hour)}, true},
		{"before the range", JobFilter{CreatedSince: t0.Add(time.Hour), CreatedUntil: t0.Add(2 * time.Hour)}, false},
	} {
		if got := c.f.matches(job); got != c.want {
			t.Errorf("%s: matches = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTasksPage: pages in instance order with the state filter, tokens
// that carry the next instance and are refused for another job.
func TestTasksPage(t *testing.T) {
	states := []pelotonv1.TaskState{pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_SUCCEEDED,
		pelotonv1.TaskState_KILLED, pelotonv1.TaskState_SUCCEEDED}
	task := func(i uint32) *pelotonv1.Task {
		return &pelotonv1.Task{JobId: "j", InstanceId: i, Status: &pelotonv1.TaskStatus{State: states[i]}}
	}
	var got []uint32
	token := ""
	for pages := 0; ; pages++ {
		ts, next, err := TasksPage("j", len(states), task, []pelotonv1.TaskState{pelotonv1.TaskState_SUCCEEDED}, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			got = append(got, tk.InstanceId)
		}
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		token = next
	}
	if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 4 {
		t.Errorf("succeeded instances paged two at a time: %v, want [0 2 4]", got)
	}
	_, next, err := TasksPage("j", len(states), task, nil, 2, "")
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	if _, _, err := TasksPage("other", len(states), task, nil, 2, next); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another job's token: %v, want InvalidArgument", err)
	}
	if _, _, err := TasksPage("j", len(states), task, nil, MaxPageSize+1, ""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("too big a page: %v, want InvalidArgument", err)
	}
}
