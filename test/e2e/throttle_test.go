package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestMaximumRunningInstances: a job of 6 instances with
// sla.maximumRunningInstances 2 never has more than 2 queued or running at
// any poll, says why the others wait, and still finishes.
func TestMaximumRunningInstances(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{})
	ctx := ctxT(t)
	resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "throttled", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 6,
		Sla: &pelotonv1.SlaSpec{MaximumRunningInstances: 2},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0.3"},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Every poll is also a sample of how many instances are active.
	sawReason := false
	testutil.Eventually(t, 60*time.Second, "the job's six instances done", func() error {
		ts, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: resp.JobId})
		if err != nil {
			t.Fatal(err)
		}
		active, done := 0, 0
		for _, tk := range ts.Tasks {
			switch tk.Status.State {
			case pelotonv1.TaskState_SUCCEEDED:
				done++
			case pelotonv1.TaskState_INITIALIZED:
				if strings.Contains(tk.Status.PendingReason, "maximumRunningInstances") {
					sawReason = true
				}
			default:
				active++
			}
		}
		if active > 2 {
			t.Fatalf("%d instances active at once, sla.maximumRunningInstances is 2: %v", active, ts.Tasks)
		}
		if done != 6 {
			return fmt.Errorf("%d done", done)
		}
		return nil
	})
	if !sawReason {
		t.Error("throttled instances never said why they wait")
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_SUCCEEDED, 10*time.Second)
}
