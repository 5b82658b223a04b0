package jobmgr

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/sla"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Long-running jobs (SERVICE, STATEFUL, DAEMON) keep their instances
// running: a run that ends, for whatever reason other than a stop the
// scheduler or the user asked for, is followed by a new run after a backoff.
// Their availability is reported to the SLA evaluator on every evaluation,
// and every voluntary disruption of one of their instances (an update, a
// kill, a drain, a preemption) first takes a grant from it.

// isLongRunning reports whether jobs of type t are kept running.
func isLongRunning(t pelotonv1.JobType) bool {
	switch t {
	case pelotonv1.JobType_SERVICE, pelotonv1.JobType_STATEFUL, pelotonv1.JobType_DAEMON:
		return true
	}
	return false
}

// grantTTL is how long a disruption grant lives unless renewed. Every
// evaluation of the job renews the grants it holds, and a job with grants
// is evaluated at least every grantRenewEvery, so only a dead process lets
// them lapse.
const (
	grantTTL        = 2 * time.Minute
	grantRenewEvery = 20 * time.Second
)

// stableRun is how long a run must stay up for the restart backoff to
// start again from its base.
const stableRun = time.Minute

// heldGrant is a disruption grant on one instance: it is released once a
// run newer than run is available again (or the instance is stopped for
// good).
type heldGrant struct {
	id     string
	run    uint32
	holder string
}

// longRunning is the per-job state of long-running jobs.
type longRunning struct {
	mu     sync.Mutex
	grants map[uint32]heldGrant
	// reported is the last unavailability reported to the evaluator, to skip
	// identical reports.
	reported []uint32
}

// budgetOf is the job's sla.maximumUnavailableInstances, 1 when unset.
func budgetOf(s *pelotonv1.JobSpec) uint32 {
	if b := s.GetSla().GetMaximumUnavailableInstances(); b > 0 {
		return b
	}
	return 1
}

// registerSLA tells the evaluator about a long-running job's size and budget.
func (m *Manager) registerSLA(j *job) {
	if !isLongRunning(j.typ) {
		return
	}
	m.sla.SetJob(sla.JobSLA{JobID: j.id, InstanceCount: j.instanceCount(), MaximumUnavailableInstances: budgetOf(j.spec())})
}

// hasHealthCheck reports whether instance inst has a health check under v.
func (v *jobVersion) hasHealthCheck(inst uint32) bool {
	if o := v.spec.InstanceSpecs[inst]; o != nil && o.HealthCheck != nil {
		return true
	}
	return v.spec.GetDefaultSpec().GetHealthCheck() != nil
}

// available reports whether a run serves: running, and healthy if it has a
// health check.
func available(rt *pelotonv1.TaskStatus, hasCheck bool) bool {
	if rt.State != stRunning {
		return false
	}
	if hasCheck {
		return rt.Health == pelotonv1.HealthState_HEALTHY
	}
	return rt.Health != pelotonv1.HealthState_UNHEALTHY
}

// instanceReady reports whether instance inst's current run has been
// available for at least minReady at now.
func (j *job) instanceReady(inst uint32, minReady time.Duration, now time.Time) (ready bool, run uint32, readyAt time.Time) {
	t := j.task(inst)
	if t == nil {
		return false, 0, time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.availableSince.IsZero() {
		return false, t.rt.RunId, time.Time{}
	}
	at := t.availableSince.Add(minReady)
	return !now.Before(at), t.rt.RunId, at
}

// restartBackoff is the delay before the next run of a long-running
// instance that has ended quickly `streak` times in a row.
func restartBackoff(rp *pelotonv1.RestartPolicy, streak uint32) time.Duration {
	base := time.Duration(rp.GetBackoffSeconds()) * time.Second
	if base == 0 {
		base = time.Second
	}
	ceil := time.Duration(rp.GetMaxBackoffSeconds()) * time.Second
	if ceil == 0 {
		ceil = time.Minute
	}
	d := base
	for i := uint32(1); i < streak && d < ceil; i++ {
		d *= 2
	}
	return min(d, ceil)
}

// reportAvailability sends the evaluator the instances of a long-running
// job that are not available now, and renews or releases the job's
// disruption grants. It returns whether the job still holds grants.
func (m *Manager) reportAvailability(j *job) bool {
	if !isLongRunning(j.typ) {
		return false
	}
	var down []uint32
	type inst struct {
		run       uint32
		available bool
		stopped   bool
	}
	tasks := j.tasks()
	states := make([]inst, len(tasks))
	for i, t := range tasks {
		if t == nil {
			down = append(down, uint32(i))
			continue
		}
		t.mu.Lock()
		av := !t.availableSince.IsZero()
		free := j.typ == pelotonv1.JobType_DAEMON && freeSlot(t.rt)
		states[i] = inst{run: t.rt.RunId, available: av, stopped: t.rt.GoalState == stKilled && isTerminal(t.rt.State)}
		t.mu.Unlock()
		if !av && !free { // a DAEMON's free slot is no instance at all
			down = append(down, uint32(i))
		}
	}
	j.lr.mu.Lock()
	defer j.lr.mu.Unlock()
	if !equalU32(down, j.lr.reported) {
		m.sla.ReportAvailability(j.id, down)
		j.lr.reported = down
	}
	for i, g := range j.lr.grants {
		if int(i) >= len(states) {
			_ = m.sla.Release(g.id)
			delete(j.lr.grants, i)
			continue
		}
		s := states[i]
		if (s.run > g.run && s.available) || s.stopped {
			_ = m.sla.Release(g.id)
			delete(j.lr.grants, i)
			continue
		}
		if err := m.sla.Renew(g.id, grantTTL); err != nil {
			delete(j.lr.grants, i) // lapsed; the instance still counts while it is down
		}
	}
	return len(j.lr.grants) > 0
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// disrupt asks the evaluator for a grant to take instance inst of j down,
// for holder. With no error the grant is held until a newer run of the
// instance is available (or, for an instance that has not started its
// current run yet, that run). Batch jobs need no grant.
func (m *Manager) disrupt(j *job, inst uint32, holder, reason string) error {
	if !isLongRunning(j.typ) {
		return nil
	}
	t := j.task(inst)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	run := t.rt.RunId
	if t.rt.State == stInitialized && run > 0 {
		// Not started yet (a restart backoff): it starts on whatever spec
		// it has then, with this run, so this run being available is what
		// ends the disruption.
		run--
	}
	t.mu.Unlock()
	j.lr.mu.Lock()
	defer j.lr.mu.Unlock()
	if g, ok := j.lr.grants[inst]; ok && g.holder == holder {
		return nil
	}
	g, err := m.sla.Request(sla.Request{JobID: j.id, Instances: []uint32{inst}, Holder: holder, Reason: reason, TTL: grantTTL})
	if err != nil {
		return err
	}
	if j.lr.grants == nil {
		j.lr.grants = map[uint32]heldGrant{}
	}
	if old, ok := j.lr.grants[inst]; ok {
		_ = m.sla.Release(old.id)
	}
	j.lr.grants[inst] = heldGrant{id: g.ID, run: run, holder: holder}
	return nil
}

// slaError turns an evaluator refusal into the API's FailedPrecondition.
func slaError(err error) error {
	var r *sla.RefusedError
	if errors.As(err, &r) {
		return apierr.FailedPrecondition("SLA: %s", r.Error())
	}
	return apierr.Unavailable("SLA evaluator: %v", err)
}

// unavailableSummary is one line about what holds a job's budget, for
// messages of updates and drains that wait.
func (m *Manager) unavailableSummary(j *job) string {
	st, ok := m.sla.Status(j.id)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d of %d instances unavailable, sla.maximumUnavailableInstances %d", st.Unavailable, st.InstanceCount, st.MaximumUnavailableInstances)
}
