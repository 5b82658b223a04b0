package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// service is a SERVICE job of n instances running command, allowed to have
// budget instances down for voluntary disruptions.
func service(name string, n, budget uint32, command ...string) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: n,
		Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: budget},
		DefaultSpec: &pelotonv1.TaskSpec{Command: command, KillGracePeriodSeconds: 1,
			Resources:     &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16},
			RestartPolicy: &pelotonv1.RestartPolicy{BackoffSeconds: 1, MaxBackoffSeconds: 2}}}
}

func allRunning(n int) func([]*pelotonv1.Task) bool {
	return func(ts []*pelotonv1.Task) bool {
		if len(ts) != n {
			return false
		}
		for _, tk := range ts {
			if tk.Status.State != pelotonv1.TaskState_RUNNING {
				return false
			}
		}
		return true
	}
}

// waitUpdate waits until an update reaches want, failing at once on
// another terminal state. While it waits, check (if set) sees every poll of
// the job's tasks.
func (s *stack) waitUpdate(id string, want pelotonv1.UpdateState, within time.Duration, check func([]*pelotonv1.Task)) *pelotonv1.Update {
	s.t.Helper()
	var last *pelotonv1.Update
	testutil.Eventually(s.t, within, fmt.Sprintf("update %s %s", id, want), func() error {
		resp, err := s.updates.GetUpdate(context.Background(), &pelotonv1.GetUpdateRequest{UpdateId: id})
		if err != nil {
			s.t.Fatalf("GetUpdate: %v", err)
		}
		last = resp.Update
		ts, err := s.tasks.ListTasks(context.Background(), &pelotonv1.ListTasksRequest{JobId: last.JobId})
		if err != nil {
			s.t.Fatal(err)
		}
		if check != nil {
			check(ts.Tasks)
		}
		st := last.Status.State
		if st == want {
			return nil
		}
		switch st {
		case pelotonv1.UpdateState_UPDATE_SUCCEEDED, pelotonv1.UpdateState_UPDATE_FAILED, pelotonv1.UpdateState_UPDATE_ROLLED_BACK, pelotonv1.UpdateState_UPDATE_ABORTED:
			s.t.Fatalf("update %s is %s, want %s: %v", id, st, want, last.Status)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%v", last.Status)
		for _, tk := range ts.Tasks {
			fmt.Fprintf(&b, "\ninstance %d: %s v%d run %d on %s: %s %s", tk.InstanceId, tk.Status.State, tk.Status.SpecVersion, tk.Status.RunId, tk.Status.Host, tk.Status.Reason, tk.Status.Message)
		}
		return errors.New(b.String())
	})
	return last
}

func (s *stack) startUpdate(jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec) *pelotonv1.Update {
	s.t.Helper()
	resp, err := s.updates.CreateUpdate(ctxT(s.t), &pelotonv1.CreateUpdateRequest{JobId: jobID, Spec: spec, UpdateSpec: us})
	if err != nil {
		s.t.Fatalf("CreateUpdate: %v", err)
	}
	return resp.Update
}

func (s *stack) createJob(spec *pelotonv1.JobSpec) string {
	s.t.Helper()
	resp, err := s.jobs.CreateJob(ctxT(s.t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		s.t.Fatalf("CreateJob: %v", err)
	}
	return resp.JobId
}

func TestServiceRollingUpdateKeepsSLA(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	spec := service("web", 10, 2, "sleep", "300")
	id := s.createJob(spec)
	s.waitTasks(id, "10 instances running", 60*time.Second, allRunning(10))
	if j := s.waitJob(id, pelotonv1.JobState_JOB_RUNNING, 10*time.Second); j.Status.GoalState != pelotonv1.JobState_JOB_RUNNING {
		t.Fatalf("a service's goal is RUNNING, got %s", j.Status.GoalState)
	}

	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "301"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 2})
	if u.Status.InstancesTotal != 10 || u.ToVersion != 2 {
		t.Fatalf("update: %v", u)
	}
	worst := 0
	done := s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 120*time.Second, func(ts []*pelotonv1.Task) {
		down := 0
		for _, tk := range ts {
			if tk.Status.State != pelotonv1.TaskState_RUNNING {
				down++
			}
		}
		worst = max(worst, down)
		if down > 2 {
			t.Errorf("%d instances unavailable during an update with batch size 2 and sla.maximumUnavailableInstances 2", down)
		}
	})
	if done.Status.InstancesDone != 10 {
		t.Errorf("update finished with %d of 10 done", done.Status.InstancesDone)
	}
	t.Logf("at most %d instances were unavailable at once", worst)
	ts := s.waitTasks(id, "all running again", 30*time.Second, allRunning(10))
	if n := maxOverlap(downWindows(ts)); n > 2 {
		t.Errorf("task histories show %d instances stopped at once", n)
	}
	for _, tk := range ts {
		if tk.Status.SpecVersion != 2 {
			t.Errorf("instance %d runs spec version %d after the update", tk.InstanceId, tk.Status.SpecVersion)
		}
		got, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: id, InstanceId: tk.InstanceId})
		if err != nil {
			t.Fatal(err)
		}
		if c := strings.Join(got.Task.Spec.Command, " "); c != "sleep 301" {
			t.Errorf("instance %d runs %q", tk.InstanceId, c)
		}
	}
	vs, err := s.jobs.ListJobVersions(ctxT(t), &pelotonv1.ListJobVersionsRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Versions) != 2 || vs.Versions[1].Cause != "update "+u.Id {
		t.Errorf("spec history: %v", vs.Versions)
	}
}

func TestServiceInPlaceUpdateKeepsHosts(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 3})
	spec := service("inplace", 6, 2, "sleep", "300")
	spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD}
	id := s.createJob(spec)
	before := map[uint32]string{}
	for _, tk := range s.waitTasks(id, "6 running", 60*time.Second, allRunning(6)) {
		before[tk.InstanceId] = tk.Status.Host
	}
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Env = map[string]string{"VERSION": "2"}
	inPlaceBefore := promtest.ToFloat64(metrics.Restarts.WithLabelValues("in-place"))
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 2, InPlace: true})
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 120*time.Second, func(ts []*pelotonv1.Task) {
		for _, tk := range ts {
			if h := tk.Status.Host; h != "" && h != before[tk.InstanceId] {
				t.Errorf("instance %d moved from %s to %s during an in-place update", tk.InstanceId, before[tk.InstanceId], h)
			}
		}
	})
	for _, tk := range s.waitTasks(id, "6 running", 30*time.Second, allRunning(6)) {
		if tk.Status.Host != before[tk.InstanceId] || tk.Status.RunId < 2 {
			t.Errorf("instance %d: run %d on %s, was on %s", tk.InstanceId, tk.Status.RunId, tk.Status.Host, before[tk.InstanceId])
		}
	}
	// Every new run kept its old run's room and skipped placement.
	if n := promtest.ToFloat64(metrics.Restarts.WithLabelValues("in-place")) - inPlaceBefore; n != 6 {
		t.Errorf("%v of 6 instances restarted in place", n)
	}
}

func TestBadUpdateRollsBack(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	spec := service("rollback", 4, 1, "sleep", "300")
	id := s.createJob(spec)
	s.waitTasks(id, "4 running", 60*time.Second, allRunning(4))
	bad := proto.Clone(spec).(*pelotonv1.JobSpec)
	bad.DefaultSpec.Command = []string{"sh", "-c", "exit 1"}
	u := s.startUpdate(id, bad, &pelotonv1.UpdateSpec{BatchSize: 1, RollbackOnFailure: true})
	done := s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_ROLLED_BACK, 120*time.Second, nil)
	mustContain(t, done.Status.GetMessage()+" ", "", "message")
	if done.RollbackVersion != 3 || done.Status.GetRollbackCause() != "failure" {
		t.Errorf("rollback version %d, cause %q; want 3, failure", done.RollbackVersion, done.Status.GetRollbackCause())
	}
	ts := s.waitTasks(id, "4 running the old command", 60*time.Second, allRunning(4))
	for _, tk := range ts {
		got, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: id, InstanceId: tk.InstanceId})
		if err != nil {
			t.Fatal(err)
		}
		if c := strings.Join(got.Task.Spec.Command, " "); c != "sleep 300" {
			t.Errorf("instance %d runs %q after the rollback", tk.InstanceId, c)
		}
	}
	j, _ := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
	if j.Job.Status.SpecVersion != 3 || strings.Join(j.Job.Spec.DefaultSpec.Command, " ") != "sleep 300" {
		t.Errorf("job after rollback: version %d, spec %v", j.Job.Status.SpecVersion, j.Job.Spec.DefaultSpec.Command)
	}
}

func TestUpdateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{hosts: 2})
	spec := service("resume", 4, 1, "sleep", "300")
	id := s.createJob(spec)
	s.waitTasks(id, "4 running", 60*time.Second, allRunning(4))
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "302"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 1, MinReadySeconds: 1})
	testutil.Eventually(t, 60*time.Second, "the update's first instance done", func() error {
		g, err := s.updates.GetUpdate(ctxT(t), &pelotonv1.GetUpdateRequest{UpdateId: u.Id})
		if err != nil {
			t.Fatal(err)
		}
		if g.Update.Status.InstancesDone < 1 {
			return fmt.Errorf("no progress: %v", g.Update.Status)
		}
		return nil
	})
	s.stop()
	s2 := startStack(t, dir, stackOpts{hosts: 2})
	done := s2.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 120*time.Second, nil)
	if done.Status.InstancesDone != 4 {
		t.Errorf("update after restart: %v", done.Status)
	}
	for _, tk := range s2.waitTasks(id, "4 running", 60*time.Second, allRunning(4)) {
		if tk.Status.SpecVersion != 2 {
			t.Errorf("instance %d at version %d", tk.InstanceId, tk.Status.SpecVersion)
		}
	}
}

func TestServiceScaleAndRestart(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	id := s.createJob(service("scale", 2, 1, "sleep", "300"))
	s.waitTasks(id, "2 running", 60*time.Second, allRunning(2))
	if _, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 5}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "5 running", 60*time.Second, allRunning(5))
	if _, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "3 running", 60*time.Second, allRunning(3))
	// Instances removed by a scale-down come back as new runs: the backend
	// still remembers the runs they had, so their run ids must not repeat,
	// and nothing may count as a failure.
	if _, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 5}); err != nil {
		t.Fatal(err)
	}
	for _, tk := range s.waitTasks(id, "5 running again", 60*time.Second, allRunning(5)) {
		if tk.InstanceId >= 3 && tk.Status.RunId < 2 {
			t.Errorf("instance %d came back with run %d, an id its removed run had", tk.InstanceId, tk.Status.RunId)
		}
		if tk.Status.FailureCount != 0 {
			t.Errorf("instance %d: %d failures: %v", tk.InstanceId, tk.Status.FailureCount, tk.Status)
		}
	}
	if _, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "3 running", 60*time.Second, allRunning(3))

	// A kill beyond the budget is refused with the SLA's reason.
	if _, err := s.tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: id, InstanceId: 0}); err != nil {
		t.Fatal(err)
	}
	_, err := s.tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: id, InstanceId: 1})
	expectStatus(t, err, codes.FailedPrecondition, "SLA: job "+id)

	// An instance that exits is started again.
	j, _ := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
	if j.Job.Status.State != pelotonv1.JobState_JOB_RUNNING {
		t.Fatalf("job %s", j.Job.Status.State)
	}
	// A restart starts the killed instance again at once and restarts the
	// others one by one (the killed one held the budget until it ran again).
	s.waitTasks(id, "instance 0 stopped", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return ts[0].Status.State == pelotonv1.TaskState_KILLED
	})
	if _, err := s.jobs.RestartJob(ctxT(t), &pelotonv1.RestartJobRequest{JobId: id, Instances: []uint32{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "instances 0, 1 and 2 on run 2", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if tk.Status.RunId < 2 || tk.Status.State != pelotonv1.TaskState_RUNNING {
				return false
			}
		}
		return true
	})
}

func TestServiceInstanceRestartsAfterExit(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1})
	marker := filepath.Join(t.TempDir(), "runs")
	id := s.createJob(service("flappy", 1, 1, "sh", "-c", fmt.Sprintf("echo x >> %s; sleep 0.2", marker)))
	s.waitTasks(id, "run 3", 60*time.Second, func(ts []*pelotonv1.Task) bool { return len(ts) == 1 && ts[0].Status.RunId >= 3 })
	b, _ := os.ReadFile(marker)
	if n := strings.Count(string(b), "x"); n < 2 {
		t.Errorf("%d runs wrote the marker", n)
	}
	j := s.waitJob(id, pelotonv1.JobState_JOB_RUNNING, 5*time.Second)
	if j.Status.State != pelotonv1.JobState_JOB_RUNNING {
		t.Fatal(j.Status)
	}
}

func TestUpdatePauseResumeAbortRollback(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	spec := service("controls", 4, 1, "sleep", "300")
	id := s.createJob(spec)
	s.waitTasks(id, "4 running", 60*time.Second, allRunning(4))
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "303"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{StartPaused: true, MinReadySeconds: 2})
	if u.Status.State != pelotonv1.UpdateState_UPDATE_PAUSED {
		t.Fatalf("created paused: %v", u.Status)
	}
	// A second update while one is in progress is refused.
	_, err := s.updates.CreateUpdate(ctxT(t), &pelotonv1.CreateUpdateRequest{JobId: id, Spec: next})
	expectStatus(t, err, codes.FailedPrecondition, "job "+id+" has update "+u.Id+" in progress")
	// A paused update must not touch any instance over this while: jobmgr
	// shows no count of its update passes that could be waited on instead.
	time.Sleep(300 * time.Millisecond)
	for _, tk := range s.waitTasks(id, "4 running", 5*time.Second, allRunning(4)) {
		if tk.Status.RunId != 1 {
			t.Fatalf("instance %d restarted while the update was paused", tk.InstanceId)
		}
	}
	if _, err := s.updates.ResumeUpdate(ctxT(t), &pelotonv1.ResumeUpdateRequest{UpdateId: u.Id}); err != nil {
		t.Fatal(err)
	}
	// Abort once the first instance runs the new spec: the rest stay on the old one.
	s.waitTasks(id, "instance 0 on the new spec", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return ts[0].Status.SpecVersion == 2 && ts[0].Status.State == pelotonv1.TaskState_RUNNING
	})
	ab, err := s.updates.AbortUpdate(ctxT(t), &pelotonv1.AbortUpdateRequest{UpdateId: u.Id})
	if err != nil {
		t.Fatal(err)
	}
	if ab.Update.Status.State != pelotonv1.UpdateState_UPDATE_ABORTED {
		t.Fatalf("abort: %v", ab.Update.Status)
	}
	_, err = s.updates.PauseUpdate(ctxT(t), &pelotonv1.PauseUpdateRequest{UpdateId: u.Id})
	expectStatus(t, err, codes.FailedPrecondition, "update "+u.Id+" is UPDATE_ABORTED")
	// Longer than minReadySeconds, after which a live update would start
	// the next instance: the time is the claim, no event marks it passing.
	time.Sleep(2500 * time.Millisecond)
	ts := s.waitTasks(id, "4 running", 10*time.Second, allRunning(4))
	if ts[3].Status.SpecVersion != 1 {
		t.Errorf("instance 3 was updated after the abort: %v", ts[3].Status)
	}
	// Rolling the aborted update back returns every instance to the old spec.
	if _, err := s.updates.RollbackUpdate(ctxT(t), &pelotonv1.RollbackUpdateRequest{UpdateId: u.Id}); err != nil {
		t.Fatal(err)
	}
	if back := s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_ROLLED_BACK, 60*time.Second, nil); back.Status.GetRollbackCause() != "user" {
		t.Errorf("rollback cause %q; want user", back.Status.GetRollbackCause())
	}
	for _, tk := range s.waitTasks(id, "4 running", 30*time.Second, allRunning(4)) {
		got, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: id, InstanceId: tk.InstanceId})
		if err != nil {
			t.Fatal(err)
		}
		if c := strings.Join(got.Task.Spec.Command, " "); c != "sleep 300" {
			t.Errorf("instance %d runs %q after the rollback", tk.InstanceId, c)
		}
	}
	_, err = s.updates.RollbackUpdate(ctxT(t), &pelotonv1.RollbackUpdateRequest{UpdateId: u.Id})
	expectStatus(t, err, codes.FailedPrecondition, "update "+u.Id+" is already UPDATE_ROLLED_BACK")
	// Cancelling a job aborts its update.
	u2 := s.startUpdate(id, next, &pelotonv1.UpdateSpec{StartPaused: true})
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.updates.GetUpdate(ctxT(t), &pelotonv1.GetUpdateRequest{UpdateId: u2.Id}); g.GetUpdate().GetStatus().GetState() != pelotonv1.UpdateState_UPDATE_ABORTED {
		t.Errorf("update of a cancelled job: %v", g.GetUpdate().GetStatus())
	}
	_, err = s.updates.GetUpdate(ctxT(t), &pelotonv1.GetUpdateRequest{UpdateId: "nope"})
	expectStatus(t, err, codes.NotFound, "update nope does not exist")
	_, err = s.updates.CreateUpdate(ctxT(t), &pelotonv1.CreateUpdateRequest{JobId: id, Spec: service("renamed", 4, 1, "sleep", "1")})
	expectStatus(t, err, codes.InvalidArgument, "spec.name: cannot change")
}

// healthyService is a service whose instances become healthy a moment after
// they start (the check looks for a file the run creates in its sandbox).
func healthyService(name string, n, budget uint32, version string) *pelotonv1.JobSpec {
	spec := service(name, n, budget, "sh", "-c", "sleep 0.5; touch ready; exec sleep 300 # "+version)
	spec.DefaultSpec.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"test", "-f", "ready"}, IntervalSeconds: 1, FailureThreshold: 2}
	return spec
}

func TestUpdateWaitsForHealth(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	spec := healthyService("healthy", 6, 2, "v1")
	id := s.createJob(spec)
	healthy := func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if tk.Status.State != pelotonv1.TaskState_RUNNING || tk.Status.Health != pelotonv1.HealthState_HEALTHY {
				return false
			}
		}
		return len(ts) == 6
	}
	s.waitTasks(id, "6 healthy", 60*time.Second, healthy)
	// The job's status counts what serves, and what serves the spec in
	// force: every instance before the update, every one after it, and
	// never fewer than the budget leaves during it.
	counts := func() (healthyN, updatedN uint32, version uint64) {
		resp, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Job.Status
		return st.Healthy, st.Updated, st.SpecVersion
	}
	if h, up, _ := counts(); h != 6 || up != 6 {
		t.Errorf("before the update: %d healthy, %d updated; want 6 and 6", h, up)
	}
	u := s.startUpdate(id, healthyService("healthy", 6, 2, "v2"), &pelotonv1.UpdateSpec{BatchSize: 2})
	sawUnknown := false
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 120*time.Second, func(ts []*pelotonv1.Task) {
		if h, up, _ := counts(); h < 4 || up > h {
			t.Errorf("during the update: %d healthy (budget 2 of 6), %d updated", h, up)
		}
		down := 0
		for _, tk := range ts {
			if tk.Status.State != pelotonv1.TaskState_RUNNING || tk.Status.Health != pelotonv1.HealthState_HEALTHY {
				down++
			}
			sawUnknown = sawUnknown || (tk.Status.State == pelotonv1.TaskState_RUNNING && tk.Status.Health == pelotonv1.HealthState_HEALTH_UNKNOWN)
		}
		if down > 2 {
			t.Errorf("%d instances not healthy at once; batch size and budget are 2", down)
		}
	})
	if !sawUnknown {
		t.Log("never polled an instance between RUNNING and HEALTHY (fast machine)")
	}
	s.waitTasks(id, "6 healthy", 30*time.Second, healthy)
	if h, up, v := counts(); h != 6 || up != 6 || v != 2 {
		t.Errorf("after the update: %d healthy, %d updated at spec version %d; want 6 and 6 at 2", h, up, v)
	}
}

func TestUnhealthyInstanceIsRestarted(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1})
	// Healthy at the first check (after a second), then the file goes and
	// the next check fails.
	spec := service("sickly", 1, 1, "sh", "-c", "touch ready; sleep 1.5; rm ready; exec sleep 300")
	spec.DefaultSpec.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"test", "-f", "ready"}, InitialDelaySeconds: 1, IntervalSeconds: 1, FailureThreshold: 1}
	id := s.createJob(spec)
	s.waitTasks(id, "healthy first", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 1 && ts[0].Status.Health == pelotonv1.HealthState_HEALTHY && ts[0].Status.RunId == 1
	})
	ts := s.waitTasks(id, "a second run after the first turned unhealthy", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 1 && ts[0].Status.RunId >= 2
	})
	var sawUnhealthy bool
	for _, h := range ts[0].Status.History {
		sawUnhealthy = sawUnhealthy || h.Reason == "unhealthy"
	}
	if !sawUnhealthy || ts[0].Status.FailureCount < 1 {
		t.Errorf("history %v, failures %d", ts[0].Status.History, ts[0].Status.FailureCount)
	}
}

// TestBatchJobGrowsWhileRunning adds instances to a running batch job
// (dynamic allocation) and removes one: the job succeeds with the count it
// ends with.
func TestBatchJobGrowsWhileRunning(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	spec := service("grow", 2, 0, "sleep", "1")
	spec.Type, spec.Sla = pelotonv1.JobType_BATCH, nil
	id := s.createJob(spec)
	s.waitTasks(id, "2 running", 30*time.Second, allRunning(2))
	sc, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 5})
	if err != nil {
		t.Fatal(err)
	}
	if sc.SpecVersion != 2 {
		t.Errorf("spec version %d after a scale, want 2", sc.SpecVersion)
	}
	j := s.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED, 60*time.Second)
	if n := j.Status.TaskCounts["SUCCEEDED"]; n != 5 {
		t.Errorf("%d instances succeeded, want 5: %v", n, j.Status.TaskCounts)
	}
	_, err = s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 6})
	expectStatus(t, err, codes.FailedPrecondition, "job "+id+" is JOB_SUCCEEDED")
}
