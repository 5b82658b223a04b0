package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestGangAllOrNothing: two 1-CPU hosts, one holding a 0.6 CPU task. A gang
// of three 0.45 CPU members fits the cluster's free total (1.4) but not its
// hosts (0.4 + 1.0 hold two): no member may start. Once room appears, all
// start together.
func TestGangAllOrNothing(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 1, hostMem: 1024})
	ctx := ctxT(t)
	blocker, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sleeper("blocker", "/default", 1, 0.6)})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(blocker.JobId, pelotonv1.JobState_JOB_RUNNING, 30*time.Second)
	gang := sleeper("gang", "/default", 3, 0.45)
	gang.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 3}
	g, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: gang})
	if err != nil {
		t.Fatal(err)
	}
	// No member may be launched, and they say why they wait: a member
	// says so once the gang was tried and found not to fit, which (not a
	// while of nothing) shows that starting none was the decision.
	testutil.Eventually(t, 30*time.Second, "the gang's members say why they wait", func() error {
		ts, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: g.JobId})
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, tk := range ts.Tasks {
			switch tk.Status.State {
			case pelotonv1.TaskState_LAUNCHED, pelotonv1.TaskState_RUNNING:
				t.Fatalf("gang member %d started while the gang cannot fit", tk.InstanceId)
			}
			reasons = append(reasons, tk.Status.PendingReason)
		}
		if !strings.Contains(strings.Join(reasons, "\n"), "waiting") {
			return fmt.Errorf("pending reasons %q", reasons)
		}
		return nil
	})
	// Free the room: the whole gang starts.
	if _, err := s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: blocker.JobId}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the whole gang runs", func() error {
		j, _ := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: g.JobId})
		if n := j.GetJob().GetStatus().GetTaskCounts()["RUNNING"]; n != 3 {
			return fmt.Errorf("task counts %v", j.GetJob().GetStatus().GetTaskCounts())
		}
		return nil
	})
}
