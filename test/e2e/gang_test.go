package e2e

import (
	"fmt"
	"path/filepath"
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

// TestTwoGangsRunAndRestartOnTheirOwn: a job of two gangs of three 0.3 CPU
// members on two 1-CPU hosts, one holding 0.6 CPU: room for one gang, not
// two. One gang runs while the other waits whole; once the blocker is
// cancelled the other runs too. Its member 4 exits 1 on its first run:
// every member of its gang runs again on a new run, counted once, and the
// first gang's runs are untouched.
func TestTwoGangsRunAndRestartOnTheirOwn(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 1, hostMem: 1024})
	ctx := ctxT(t)
	blocker, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sleeper("blocker", "/default", 1, 0.6)})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(blocker.JobId, pelotonv1.JobState_JOB_RUNNING, 30*time.Second)
	marker := filepath.Join(t.TempDir(), "failed-once")
	spec := sleeper("gangs", "/default", 6, 0.3)
	spec.Gang = &pelotonv1.GangSpec{Size: 3}
	spec.DefaultSpec.RestartPolicy = &pelotonv1.RestartPolicy{MaxFailures: 2}
	spec.DefaultSpec.Command = []string{"sh", "-c",
		`if [ "$PELOTON_INSTANCE_ID" = 4 ] && [ ! -e "$0" ]; then touch "$0"; exit 1; fi; exec sleep 300`, marker}
	g, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	started := func(ts []*pelotonv1.Task, first, end uint32) int {
		n := 0
		for _, tk := range ts {
			if tk.InstanceId >= first && tk.InstanceId < end && tk.Status.State == pelotonv1.TaskState_RUNNING {
				n++
			}
		}
		return n
	}
	// One gang runs whole; the other waits whole, none of it started.
	var first []*pelotonv1.Task
	testutil.Eventually(t, 30*time.Second, "one gang runs", func() error {
		first = s.listTasks(g.JobId)
		a, b := started(first, 0, 3), started(first, 3, 6)
		if (a == 3 && b == 0) || (a == 0 && b == 3) {
			return nil
		}
		return fmt.Errorf("running: gang 0 %d, gang 1 %d", a, b)
	})
	if _, err := s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: blocker.JobId}); err != nil {
		t.Fatal(err)
	}
	// Both run; gang 1 ran again as one after its member 4 failed.
	var ts []*pelotonv1.Task
	testutil.Eventually(t, 60*time.Second, "both gangs run, gang 1 on its second runs", func() error {
		ts = s.listTasks(g.JobId)
		var runs []string
		ok := started(ts, 0, 6) == 6
		for _, tk := range ts {
			runs = append(runs, fmt.Sprintf("%d:run %d %s", tk.InstanceId, tk.Status.RunId, tk.Status.State))
			if tk.InstanceId >= 3 && tk.Status.RunId != 2 {
				ok = false
			}
		}
		if !ok {
			return fmt.Errorf("%s", strings.Join(runs, ", "))
		}
		return nil
	})
	for _, tk := range ts {
		switch {
		case tk.InstanceId < 3 && tk.Status.RunId != 1:
			t.Errorf("instance %d of gang 0 is on run %d; its gang never failed", tk.InstanceId, tk.Status.RunId)
		case tk.InstanceId == 4 && tk.Status.FailureCount != 1, tk.InstanceId != 4 && tk.Status.FailureCount != 0:
			t.Errorf("instance %d: failureCount %d", tk.InstanceId, tk.Status.FailureCount)
		}
	}
}
