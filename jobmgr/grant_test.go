package jobmgr

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
)

// TestGrantOfAnInstanceNotStartedYet: an update may pick an instance that
// waits to start (a restart backoff). It starts on the new spec with the
// run it already had, so that run becoming available must release the
// grant; a grant waiting for a newer run would hold the job's budget, and
// the update, forever.
func TestGrantOfAnInstanceNotStartedYet(t *testing.T) {
	spec := &pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}
	for _, tc := range []struct {
		name  string
		state pelotonv1.TaskState
		// run is the run that later becomes available.
		run uint32
	}{
		{"waiting to start", taskInitialized, 2},
		{"running, replaced by a new run", taskRunning, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jv, err := newJobVersion(1, spec, time.Now(), "created")
			if err != nil {
				t.Fatal(err)
			}
			j := newJob("j", jv, &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_RUNNING}, 1)
			now := time.Unix(1000, 0)
			clock := func() time.Time { return now }
			m := attachParts(&Manager{sla: sla.NewLocal(clock), now: clock, slaTimeout: time.Minute, log: slog.Default()})
			ctx := context.Background()
			m.eng.fillTasks(j)
			setRun(j, 1, taskRunning, 1, now)
			var since time.Time
			if tc.state == taskRunning {
				since = now
			}
			setRun(j, 0, tc.state, 2, since)
			m.recs.reportAvailability(ctx, j)
			if err := m.recs.disrupt(ctx, j, 0, "update/u", "test", defaultMinReady); err != nil {
				t.Fatal(err)
			}
			if held, _ := m.recs.reportAvailability(ctx, j); !held {
				t.Fatal("the grant is gone before the instance ran again")
			}
			// The instance runs (again), on the new spec, and is available.
			now = now.Add(time.Second)
			setRun(j, 0, taskRunning, tc.run, now)
			// Not for long enough yet: a run that crashes a moment after
			// it started must not give the budget back.
			held, again := m.recs.reportAvailability(ctx, j)
			if !held || again <= 0 || again > defaultMinReady+time.Second {
				t.Fatalf("run %d available for an instant: held %v, evaluate again in %v", tc.run, held, again)
			}
			now = now.Add(defaultMinReady)
			if held, _ := m.recs.reportAvailability(ctx, j); held {
				t.Fatalf("run %d has been available for %v but the grant is still held", tc.run, defaultMinReady)
			}
			st, err := m.sla.Status(ctx, "j")
			if err != nil || st.Unavailable != 0 {
				t.Fatalf("evaluator after the release: %+v, %v", st, err)
			}
		})
	}
}

// setRun publishes instance inst of j in state st with run id run,
// available since since (zero: not available), as a write in its turn
// would (the tests that call it write nothing else to the instance).
func setRun(j *job, inst uint32, st taskState, run uint32, since time.Time) {
	t := j.task(inst)
	base := t.view()
	next := *base
	next.rt = cloneStatus(base.rt)
	next.rt.State, next.rt.RunId = st, run
	next.availableSince = since
	t.publish(j, base, &next)
}

// lockProbe is an evaluator that checks, on every call, that the caller
// holds none of the job's SLA state lock (a remote evaluator may take
// seconds to answer), and fails every call while down is set.
type lockProbe struct {
	sla.Evaluator
	t    *testing.T
	j    *job
	down bool
}

func (p *lockProbe) probe(op string) error {
	if !p.j.lr.mu.TryLock() {
		p.t.Errorf("%s: called with the job's SLA lock held", op)
	} else {
		p.j.lr.mu.Unlock()
	}
	if p.down {
		return errors.New("unreachable")
	}
	return nil
}

func (p *lockProbe) Request(ctx context.Context, r sla.Request) (sla.Grant, error) {
	if err := p.probe("request"); err != nil {
		return sla.Grant{}, err
	}
	return p.Evaluator.Request(ctx, r)
}

func (p *lockProbe) Release(ctx context.Context, id string) error {
	if err := p.probe("release"); err != nil {
		return err
	}
	return p.Evaluator.Release(ctx, id)
}

func (p *lockProbe) Renew(ctx context.Context, id string, ttl time.Duration) error {
	if err := p.probe("renew"); err != nil {
		return err
	}
	return p.Evaluator.Renew(ctx, id, ttl)
}

func (p *lockProbe) SetJob(ctx context.Context, s sla.JobSLA) error {
	if err := p.probe("setjob"); err != nil {
		return err
	}
	return p.Evaluator.SetJob(ctx, s)
}

func (p *lockProbe) ReportAvailability(ctx context.Context, id string, down []uint32) error {
	if err := p.probe("report"); err != nil {
		return err
	}
	return p.Evaluator.ReportAvailability(ctx, id, down)
}

// TestEvaluatorCallsHoldNoLockAndErrorsGrantNothing: jobmgr asks the
// evaluator with no lock held; an evaluator that fails grants nothing, and
// what could not be sent is sent on a later evaluation, soon.
func TestEvaluatorCallsHoldNoLockAndErrorsGrantNothing(t *testing.T) {
	spec := &pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 3,
		Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}
	jv, err := newJobVersion(1, spec, time.Now(), "created")
	if err != nil {
		t.Fatal(err)
	}
	j := newJob("j", jv, &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_RUNNING}, 1)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	local := sla.NewLocal(clock)
	p := &lockProbe{Evaluator: local, t: t, j: j, down: true}
	m := attachParts(&Manager{sla: p, now: clock, slaTimeout: time.Minute, log: slog.Default()})
	ctx := context.Background()
	m.eng.fillTasks(j)
	// Instance 2 crashed: the evaluator must hear of it before it grants.
	setRun(j, 0, taskRunning, 1, now)
	setRun(j, 1, taskRunning, 1, now)
	setRun(j, 2, taskRunning, 1, time.Time{})

	if _, again := m.recs.reportAvailability(ctx, j); again <= 0 || again > time.Second {
		t.Errorf("after a failed report, evaluate again in %v; want soon", again)
	}
	if err := m.recs.disrupt(ctx, j, 0, "drain/h", "test", defaultMinReady); err == nil || isRefusal(err) {
		t.Fatalf("disrupt with the evaluator down: %v, want a failure that is not a refusal", err)
	}
	if len(j.lr.grants) != 0 {
		t.Fatalf("an error became a grant: %v", j.lr.grants)
	}
	if w := slaWait(errors.New("x")); !strings.Contains(w, "SLA evaluator") {
		t.Errorf("the wait says %q", w)
	}

	// Back: the job is registered and its crashed instance reported before
	// the request, so the budget of 1 is already used.
	p.down = false
	err = m.recs.disrupt(ctx, j, 0, "drain/h", "test", defaultMinReady)
	if !isRefusal(err) {
		t.Fatalf("disrupt with one instance down and a budget of 1: %v, want a refusal", err)
	}
	setRun(j, 2, taskRunning, 1, now)
	if held, _ := m.recs.reportAvailability(ctx, j); held {
		t.Fatal("grants held although none was given")
	}
	if err := m.recs.disrupt(ctx, j, 0, "drain/h", "test", defaultMinReady); err != nil {
		t.Fatal(err)
	}
	st, err := local.Status(ctx, "j")
	if err != nil || st.Unavailable != 1 || st.InstanceCount != 3 || st.MaximumUnavailableInstances != 1 {
		t.Fatalf("evaluator: %+v, %v", st, err)
	}
}
