package e2e

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"google.golang.org/protobuf/proto"
)

// faultyEvaluator is the local evaluator as if it ran in another process
// behind a poor network: every call first takes delay (giving up when the
// caller's deadline passes, as a remote call would), and while broken is
// set every call fails without reaching the evaluator.
type faultyEvaluator struct {
	inner  *sla.Local
	delay  time.Duration
	broken atomic.Bool
	calls  atomic.Int64
}

var _ sla.Evaluator = (*faultyEvaluator)(nil)

var errUnreachable = errors.New("evaluator unreachable: connection refused")

func (f *faultyEvaluator) enter(ctx context.Context) error {
	f.calls.Add(1)
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.broken.Load() {
		return errUnreachable
	}
	return nil
}

func (f *faultyEvaluator) Request(ctx context.Context, req sla.Request) (sla.Grant, error) {
	if err := f.enter(ctx); err != nil {
		return sla.Grant{}, err
	}
	return f.inner.Request(ctx, req)
}

func (f *faultyEvaluator) Release(ctx context.Context, id string) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.inner.Release(ctx, id)
}

func (f *faultyEvaluator) Renew(ctx context.Context, id string, ttl time.Duration) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.inner.Renew(ctx, id, ttl)
}

func (f *faultyEvaluator) SetJob(ctx context.Context, j sla.JobSLA) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.inner.SetJob(ctx, j)
}

func (f *faultyEvaluator) RemoveJob(ctx context.Context, id string) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.inner.RemoveJob(ctx, id)
}

func (f *faultyEvaluator) ReportAvailability(ctx context.Context, id string, down []uint32) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.inner.ReportAvailability(ctx, id, down)
}

func (f *faultyEvaluator) Status(ctx context.Context, id string) (sla.JobStatus, error) {
	if err := f.enter(ctx); err != nil {
		return sla.JobStatus{}, err
	}
	return f.inner.Status(ctx, id)
}

// budgetWatch counts, on every poll, the instances of a job that do not
// serve, and fails the test if more than budget are down at once.
type budgetWatch struct {
	t      *testing.T
	budget int
	// broken, if set, is a spec version whose runs count as down unless
	// HEALTHY (its runs crash or fail their health check).
	broken uint64
	// worst is the most instances seen down at once; reported the most
	// reported as an error (each new height once, not every poll).
	worst, reported int
}

func (w *budgetWatch) check(ts []*pelotonv1.Task) {
	w.t.Helper()
	down := 0
	var which []string
	for _, tk := range ts {
		st := tk.Status
		if st.State != pelotonv1.TaskState_RUNNING || st.Health == pelotonv1.HealthState_UNHEALTHY ||
			(w.broken != 0 && st.SpecVersion == w.broken && st.Health != pelotonv1.HealthState_HEALTHY) {
			down++
			which = append(which, st.State.String())
		}
	}
	w.worst = max(w.worst, down)
	if down > w.budget && down > w.reported {
		w.reported = down
		w.t.Errorf("%d instances down at once (%s), over sla.maximumUnavailableInstances %d", down, strings.Join(which, ", "), w.budget)
	}
}

// listTasks is one poll of a job's tasks.
func (s *stack) listTasks(id string) []*pelotonv1.Task {
	s.t.Helper()
	ts, err := s.tasks.ListTasks(ctxT(s.t), &pelotonv1.ListTasksRequest{JobId: id})
	if err != nil {
		s.t.Fatalf("ListTasks: %v", err)
	}
	return ts.Tasks
}

func (s *stack) getUpdate(id string) *pelotonv1.Update {
	s.t.Helper()
	resp, err := s.updates.GetUpdate(ctxT(s.t), &pelotonv1.GetUpdateRequest{UpdateId: id})
	if err != nil {
		s.t.Fatalf("GetUpdate: %v", err)
	}
	return resp.Update
}

// waitFor waits until cond holds, checking the job's budget on every poll
// that finds it does not.
func (s *stack) waitFor(what string, within time.Duration, w *budgetWatch, jobID string, cond func() bool) {
	s.t.Helper()
	testutil.Eventually(s.t, within, what, func() bool {
		if cond() {
			return true
		}
		if w != nil {
			w.check(s.listTasks(jobID))
		}
		return false
	})
}

// waitNoActiveUpdate waits until no update of the job is in progress (a
// rolling restart is one).
func (s *stack) waitNoActiveUpdate(jobID string, within time.Duration) {
	s.t.Helper()
	s.waitFor("no update in progress", within, nil, "", func() bool {
		l, err := s.updates.ListUpdates(ctxT(s.t), &pelotonv1.ListUpdatesRequest{JobId: jobID})
		if err != nil {
			s.t.Fatalf("ListUpdates: %v", err)
		}
		for _, u := range l.Updates {
			switch u.Status.State {
			case pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD, pelotonv1.UpdateState_UPDATE_ROLLING_BACK, pelotonv1.UpdateState_UPDATE_PAUSED:
				return false
			}
		}
		return true
	})
}

func (s *stack) servicePool(t *testing.T, path string) {
	t.Helper()
	if _, err := s.pools.CreatePool(ctxT(t), &pelotonv1.CreatePoolRequest{Path: path, Spec: &pelotonv1.PoolSpec{
		Reservation: &pelotonv1.Resources{Cpu: 2, MemoryMb: 1024, DiskMb: 500}}}); err != nil {
		t.Fatal(err)
	}
}

func batchJob(name string, n uint32) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", "exit 0"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}
}

// TestSlowSLAEvaluator runs the whole stack with an evaluator that takes
// 2 s to answer every call: a rolling update and a host drain still finish,
// never over the job's budget, and a batch job placed meanwhile runs as
// usual.
func TestSlowSLAEvaluator(t *testing.T) {
	// One of the few long tests that mostly wait (on real processes, health
	// checks, outages): they run beside each other, after the rest (suite time).
	t.Parallel()
	ev := &faultyEvaluator{inner: sla.NewLocal(nil), delay: 2 * time.Second}
	s := startStack(t, t.TempDir(), stackOpts{hosts: 3, hostCPU: 2, sla: ev})
	spec := service("slow-sla", 6, 2, "sleep", "300")
	spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 3}
	id := s.createJob(spec)
	s.waitTasks(id, "6 running", 60*time.Second, allRunning(6))
	w := &budgetWatch{t: t, budget: 2}

	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "301"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 2})
	batch := s.createJob(batchJob("while-slow", 4))
	s.waitJob(batch, pelotonv1.JobState_JOB_SUCCEEDED, 60*time.Second)
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 5*time.Minute, w.check)
	s.waitTasks(id, "6 running", 60*time.Second, allRunning(6))

	if _, err := s.hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}
	s.waitFor("local-0 drained", 5*time.Minute, w, id, func() bool {
		return s.host("local-0").State == pelotonv1.HostState_HOST_DRAINED
	})
	ts := s.waitTasks(id, "6 running off local-0", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return allRunning(6)(ts) && runningOn(ts)["local-0"] == 0
	})
	w.check(ts)
	if ev.calls.Load() == 0 {
		t.Fatal("the stack never asked the evaluator it was given")
	}
	t.Logf("%d calls to the evaluator; at most %d instances were down at once", ev.calls.Load(), w.worst)
}

// TestUnreachableSLAEvaluator runs the whole stack with an evaluator that
// fails every call: an update and a drain wait, take nothing down and say
// why, while batch jobs run and the API answers; once the evaluator is
// back, both finish within the budget.
func TestUnreachableSLAEvaluator(t *testing.T) {
	ev := &faultyEvaluator{inner: sla.NewLocal(nil)}
	ev.broken.Store(true)
	s := startStack(t, t.TempDir(), stackOpts{hosts: 3, hostCPU: 2, sla: ev})
	spec := service("no-sla", 6, 2, "sleep", "300")
	spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 3}
	id := s.createJob(spec)
	before := s.waitTasks(id, "6 running (creating a job does not wait for the evaluator)", 60*time.Second, allRunning(6))
	runs := map[uint32]uint32{}
	for _, tk := range before {
		runs[tk.InstanceId] = tk.Status.RunId
	}
	w := &budgetWatch{t: t, budget: 2}

	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "301"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 2})
	s.waitFor("the update says it waits for the evaluator", 60*time.Second, w, id, func() bool {
		return strings.Contains(s.getUpdate(u.Id).Status.Message, "SLA evaluator")
	})
	if _, err := s.hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the drain says it waits for the evaluator", 60*time.Second, w, id, func() bool {
		return strings.Contains(s.host("local-0").MaintenanceMessage, "SLA evaluator")
	})

	// Meanwhile the rest of the stack works: a batch job is placed and
	// runs, and the update can be paused and resumed.
	batch := s.createJob(batchJob("while-unreachable", 4))
	s.waitFor("the batch job succeeds", 60*time.Second, w, id, func() bool {
		j, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: batch})
		return err == nil && j.Job.Status.State == pelotonv1.JobState_JOB_SUCCEEDED
	})
	if _, err := s.updates.PauseUpdate(ctxT(t), &pelotonv1.PauseUpdateRequest{UpdateId: u.Id}); err != nil {
		t.Fatalf("pause while the evaluator is unreachable: %v", err)
	}
	if _, err := s.updates.ResumeUpdate(ctxT(t), &pelotonv1.ResumeUpdateRequest{UpdateId: u.Id}); err != nil {
		t.Fatalf("resume while the evaluator is unreachable: %v", err)
	}
	// An error is never a grant: no instance of the service was stopped.
	for _, tk := range s.listTasks(id) {
		if tk.Status.RunId != runs[tk.InstanceId] || tk.Status.State != pelotonv1.TaskState_RUNNING {
			t.Errorf("instance %d: %s on run %d (was run %d) although the evaluator granted nothing",
				tk.InstanceId, tk.Status.State, tk.Status.RunId, runs[tk.InstanceId])
		}
	}
	if got := s.getUpdate(u.Id).Status; got.State != pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD || got.InstancesDone != 0 {
		t.Errorf("update while the evaluator is unreachable: %v", got)
	}
	if h := s.host("local-0"); h.State != pelotonv1.HostState_HOST_DRAINING {
		t.Errorf("local-0 while the evaluator is unreachable: %v", h)
	}

	// The evaluator comes back: both go ahead, within the budget.
	ev.broken.Store(false)
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 5*time.Minute, w.check)
	s.waitFor("local-0 drained", 5*time.Minute, w, id, func() bool {
		return s.host("local-0").State == pelotonv1.HostState_HOST_DRAINED
	})
	s.waitTasks(id, "6 running off local-0", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return allRunning(6)(ts) && runningOn(ts)["local-0"] == 0
	})
	t.Logf("at most %d instances were down at once", w.worst)
}

// TestBadRollingUpdateKeepsBudgetAndRollsBack is the scenario of a new user
// rolling out a broken spec: 6 instances, sla.maximumUnavailableInstances
// 2, batch size 2, rollbackOnFailure, maxInstanceRetries 1. The broken
// instances must hold the next batch back (a run that is up for an instant
// is not updated), the budget must hold throughout, and the rollback must
// finish: replacing an instance that is down already takes nothing more
// down, so it never waits for the budget.
func TestBadRollingUpdateKeepsBudgetAndRollsBack(t *testing.T) {
	// One of the few long tests that mostly wait (on real processes, health
	// checks, outages): they run beside each other, after the rest (suite time).
	t.Parallel()
	for _, tc := range []struct {
		name string
		typ  pelotonv1.JobType
		// breakIt turns the good spec into the broken one.
		breakIt func(*pelotonv1.JobSpec)
	}{
		{"SERVICE, the new command exits", pelotonv1.JobType_SERVICE, func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Command = []string{"sh", "-c", "echo broken; exit 1"}
		}},
		// Up for a moment, then down: before the stability window, the
		// moment counted as updated, the next batch went, and six
		// instances ended up on the broken spec.
		{"SERVICE, the new command is up for a second, then exits", pelotonv1.JobType_SERVICE, func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Command = []string{"sh", "-c", "echo broken; sleep 1; exit 1"}
		}},
		// Healthy at its first check, failing from the next one on.
		{"SERVICE, the new health check passes once, then fails", pelotonv1.JobType_SERVICE, func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Command = []string{"sh", "-c", "echo broken; touch ready; sleep 1.5; rm ready; exec sleep 300"}
			s.DefaultSpec.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"test", "-f", "ready"},
				InitialDelaySeconds: 1, IntervalSeconds: 1, FailureThreshold: 1}
		}},
		{"STATEFUL, the new command is up for a second, then exits", pelotonv1.JobType_STATEFUL, func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Command = []string{"sh", "-c", "echo broken; sleep 1; exit 1"}
		}},
		{"DAEMON, the new command is up for a second, then exits", pelotonv1.JobType_DAEMON, func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Command = []string{"sh", "-c", "echo broken; sleep 1; exit 1"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, t.TempDir(), stackOpts{hosts: 6, hostCPU: 1})
			s.servicePool(t, "/svc")
			spec := service("bad-update", 6, 2, "sleep", "300")
			spec.Type, spec.Pool = tc.typ, "/svc"
			switch tc.typ {
			case pelotonv1.JobType_STATEFUL:
				spec.DefaultSpec.Volume = &pelotonv1.VolumeSpec{SizeMb: 10}
			case pelotonv1.JobType_DAEMON:
				spec.InstanceCount = 0 // one per host
			}
			id := s.createJob(spec)
			s.waitTasks(id, "6 running", 90*time.Second, allRunning(6))
			// Spec v2 is what the user runs when the update starts.
			good := proto.Clone(spec).(*pelotonv1.JobSpec)
			good.DefaultSpec.Env = map[string]string{"V": "2"}
			u := s.startUpdate(id, good, &pelotonv1.UpdateSpec{BatchSize: 2})
			s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 2*time.Minute, nil)
			s.waitTasks(id, "6 running on v2", 60*time.Second, allRunning(6))

			bad := proto.Clone(good).(*pelotonv1.JobSpec)
			tc.breakIt(bad)
			w := &budgetWatch{t: t, budget: 2, broken: 3}
			u = s.startUpdate(id, bad, &pelotonv1.UpdateSpec{BatchSize: 2, RollbackOnFailure: true, MaxInstanceRetries: 1})
			if u.ToVersion != 3 {
				t.Fatalf("the broken spec is version %d, want 3", u.ToVersion)
			}
			done := s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_ROLLED_BACK, 3*time.Minute, w.check)
			if done.RollbackVersion != 4 {
				t.Errorf("rolled back to version %d, want 4 (a copy of 2)", done.RollbackVersion)
			}
			ts := s.waitTasks(id, "6 running the spec of before", 90*time.Second, func(ts []*pelotonv1.Task) bool {
				w.check(ts)
				if !allRunning(6)(ts) {
					return false
				}
				for _, tk := range ts {
					if tk.Status.SpecVersion != 2 && tk.Status.SpecVersion != 4 {
						return false
					}
				}
				return true
			})
			touched := 0
			for _, tk := range ts {
				if tk.Status.SpecVersion == 4 {
					touched++
				}
			}
			// Only the first batch ever ran the broken spec.
			if touched > 2 {
				t.Errorf("%d instances were moved onto the broken spec and back; only the first batch of 2 should have been", touched)
			}
			t.Logf("at most %d instances were down at once; %d went through the broken spec", w.worst, touched)
		})
	}
}
