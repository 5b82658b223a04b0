package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
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
// evaluation of the job renews the grants it holds that are due, and a job
// with grants is evaluated at least every grantRenewEvery, so only a dead
// process (or an evaluator unreachable for the whole TTL) lets them lapse.
const (
	grantTTL        = 2 * time.Minute
	grantRenewEvery = 20 * time.Second
)

// defaultMinReady is the stability window of an instance that comes back
// from a voluntary disruption when the update sets no minReadySeconds (and
// for drains, kills and preemptions, which have no spec of their own): its
// new run must stay available (running, and healthy if it has a health
// check) this long before the update counts it as done and its SLA grant
// is released. A longer minReadySeconds delays only the former. Without it, a run that crashes a moment after it started
// looks available for an instant, the update moves on to the next batch,
// and the crashed instances push the job over its budget. A process that
// fails at start-up usually does so within a few seconds; one that fails
// later is caught by maxInstanceRetries on the next batches.
const defaultMinReady = 5 * time.Second

// minReadyOf is an update's stability window: its minReadySeconds, or
// defaultMinReady when unset.
func minReadyOf(s *pelotonv1.UpdateSpec) time.Duration {
	if r := s.GetMinReadySeconds(); r > 0 {
		return time.Duration(r) * time.Second
	}
	return defaultMinReady
}

// defaultSLATimeout bounds each call to the SLA evaluator (Options.SLATimeout
// overrides it). A remote evaluator that does not answer in time is treated
// like one that refused: the disruption waits and is asked for again.
const defaultSLATimeout = 5 * time.Second

// stableRun is how long a run must stay up for the restart backoff to
// start again from its base.
const stableRun = time.Minute

// heldGrant is a disruption grant on one instance: it is released once a
// run newer than run has been available for minReady (or the instance is
// stopped for good).
type heldGrant struct {
	id       string
	run      uint32
	holder   string
	minReady time.Duration
	// renewed is when the evaluator last extended the grant.
	renewed time.Time
}

// longRunning is the per-job state of long-running jobs: what the SLA
// evaluator has been told and which grants the job holds. mu guards these
// fields only; it is never held across a call to the evaluator, which may
// be remote and slow. Each call is made on a copy taken under mu, and its
// result is applied under mu afterwards.
type longRunning struct {
	mu     sync.Mutex
	grants map[uint32]heldGrant
	// registered is the last JobSLA the evaluator accepted (valid if
	// isRegistered), to send SetJob only when it changes.
	registered   sla.JobSLA
	isRegistered bool
	// reported is the last unavailability the evaluator accepted (valid if
	// isReported), to skip identical reports.
	reported   []uint32
	isReported bool
	// budget is the disruption budget the hosts were last told (valid if
	// isBudgetTold), or are being told.
	budget       hostmgr.DisruptionBudget
	isBudgetTold bool
}

// budgetOf is the job's sla.maximumUnavailableInstances, 1 when unset. A
// federated service's part is the exception: the federation always sets
// its budget, to the part's share of the service's rounded down, and a
// share of 0 means this cluster on its own (while the federation's
// evaluator cannot be reached) may take none of its instances down.
func budgetOf(s *pelotonv1.JobSpec) uint32 {
	b := s.GetSla().GetMaximumUnavailableInstances()
	if b == 0 && s.GetLabels()[sla.GroupLabel] == "" {
		return 1
	}
	return b
}

// slaCtx is the context of one call to the evaluator: parent's, bounded by
// the per-call timeout.
func (rc *reconcilers) slaCtx(parent context.Context) (context.Context, context.CancelFunc) {
	m := rc.m
	return context.WithTimeout(parent, m.slaTimeout)
}

// syncSLAJob tells the evaluator about a long-running job's size and budget
// if they changed since it last accepted them. Jobs are registered lazily
// (here, from the job's evaluation and before a disruption) rather than
// when created, so creating or scaling a job never waits on the evaluator.
func (rc *reconcilers) syncSLAJob(ctx context.Context, j *job) error {
	m := rc.m
	if !isLongRunning(j.typ) {
		return nil
	}
	rc.syncBudget(j)
	want := sla.JobSLA{JobID: j.id, InstanceCount: j.instanceCount(), MaximumUnavailableInstances: budgetOf(j.spec()),
		Group: j.spec().GetLabels()[sla.GroupLabel]}
	j.lr.mu.Lock()
	same := j.lr.isRegistered && j.lr.registered == want
	j.lr.mu.Unlock()
	if same {
		return nil
	}
	cctx, cancel := m.recs.slaCtx(ctx)
	err := m.sla.SetJob(cctx, want)
	cancel()
	if err != nil {
		return fmt.Errorf("register job with the SLA evaluator: %w", err)
	}
	j.lr.mu.Lock()
	j.lr.registered, j.lr.isRegistered = want, true
	// A new instance count may drop reported instances; report again.
	j.lr.isReported = false
	j.lr.mu.Unlock()
	return nil
}

// syncBudget tells the hosts the job's disruption budget if it changed
// since they were last told (a new spec changed its SLA or its size, or
// jobmgr started), in the background: the kubernetes backend keeps it in
// a PodDisruptionBudget, and a slow apiserver must not hold up the job's
// evaluation. A failure is logged and told again at the next evaluation.
func (rc *reconcilers) syncBudget(j *job) {
	m := rc.m
	b, ok := disruptionBudget(j, j.spec())
	if !ok || m.budgets == nil {
		return
	}
	j.lr.mu.Lock()
	same := j.lr.isBudgetTold && j.lr.budget == b
	j.lr.budget, j.lr.isBudgetTold = b, true
	j.lr.mu.Unlock()
	if same {
		return
	}
	m.spawn(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, budgetTimeout)
		defer cancel()
		if err := m.budgets.SetDisruptionBudget(ctx, j.id, j.pool, b); err != nil {
			m.log.Warn("tell the hosts the job's disruption budget", "job", j.id, "err", err)
			j.lr.mu.Lock()
			if j.lr.budget == b {
				j.lr.isBudgetTold = false
			}
			j.lr.mu.Unlock()
		}
	})
}

// budgetTimeout bounds telling the hosts a job's disruption budget.
const budgetTimeout = 30 * time.Second

// forgetSLAJob removes a deleted job from the evaluator, in the background:
// deleting a job does not wait on the evaluator, and a removal that fails
// only leaves the evaluator a job nobody asks about (so does a removal the
// Manager's stop cuts short).
func (rc *reconcilers) forgetSLAJob(id string) {
	m := rc.m
	m.spawn(func(ctx context.Context) {
		ctx, cancel := m.recs.slaCtx(ctx)
		defer cancel()
		if err := m.sla.RemoveJob(ctx, id); err != nil {
			m.log.Warn("SLA evaluator: remove deleted job", "job", id, "err", err)
		}
	})
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
	if rt.State != taskRunning {
		return false
	}
	if hasCheck {
		return rt.Health == pelotonv1.HealthState_HEALTHY
	}
	return rt.Health != pelotonv1.HealthState_UNHEALTHY
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
// disruption grants. It returns whether the job still holds grants, and
// when it should be evaluated again for them (0: at the next renewal): the
// instant the first grant's new run will have been available for its
// window, or soon if the evaluator failed and something is left to send.
func (rc *reconcilers) reportAvailability(ctx context.Context, j *job) (held bool, again time.Duration) {
	m := rc.m
	if !isLongRunning(j.typ) {
		return false, 0
	}
	now := m.now()
	var down []uint32
	type inst struct {
		run     uint32
		since   time.Time // zero: not available
		stopped bool
	}
	tasks := j.tasks()
	states := make([]inst, len(tasks))
	for i, t := range tasks {
		if t == nil {
			if !j.isHole(uint32(i)) { // a removed instance is no instance
				down = append(down, uint32(i))
			}
			continue
		}
		tv := t.view()
		since := tv.availableSince
		free := j.typ == pelotonv1.JobType_DAEMON && freeSlot(tv.rt)
		states[i] = inst{run: tv.rt.RunId, since: since, stopped: tv.rt.GoalState == taskKilled && isTerminal(tv.rt.State)}
		if since.IsZero() && !free { // a DAEMON's free slot is no instance at all
			down = append(down, uint32(i))
		}
	}
	failed := false
	if err := m.recs.syncSLAJob(ctx, j); err != nil {
		m.log.Warn("SLA evaluator", "job", j.id, "err", err)
		failed = true
	}

	// Decide under the lock, call without it.
	type action struct {
		inst    uint32
		g       heldGrant
		release bool
	}
	var acts []action
	var wake time.Time
	j.lr.mu.Lock()
	report := !failed && !(j.lr.isReported && equalU32(down, j.lr.reported))
	for i, g := range j.lr.grants {
		if int(i) >= len(states) {
			acts = append(acts, action{i, g, true})
			continue
		}
		s := states[i]
		if s.stopped {
			acts = append(acts, action{i, g, true})
			continue
		}
		if s.run > g.run && !s.since.IsZero() {
			at := s.since.Add(g.minReady)
			if !now.Before(at) {
				acts = append(acts, action{i, g, true})
				continue
			}
			if wake.IsZero() || at.Before(wake) {
				wake = at
			}
		}
		if now.Sub(g.renewed) >= grantRenewEvery {
			acts = append(acts, action{i, g, false})
		}
	}
	j.lr.mu.Unlock()

	if report {
		if err := m.recs.sendReport(ctx, j, down); err != nil {
			m.log.Warn("SLA evaluator", "job", j.id, "err", err)
			failed = true
		}
	}
	for _, a := range acts {
		cctx, cancel := m.recs.slaCtx(ctx)
		var err error
		if a.release {
			err = m.sla.Release(cctx, a.g.id)
		} else {
			err = m.sla.Renew(cctx, a.g.id, grantTTL)
		}
		cancel()
		gone := err == nil && a.release || errors.Is(err, sla.ErrUnknownGrant)
		if err != nil && !errors.Is(err, sla.ErrUnknownGrant) {
			// Kept: released or renewed on a later evaluation. A grant
			// the evaluator stops knowing meanwhile only frees budget.
			m.log.Warn("SLA evaluator: release or renew a grant", "job", j.id, "instance", a.inst, "err", err)
			failed = true
		}
		j.lr.mu.Lock()
		if cur, ok := j.lr.grants[a.inst]; ok && cur.id == a.g.id {
			if gone {
				// Released, or lapsed (the instance still counts while
				// it is down, through the reports).
				delete(j.lr.grants, a.inst)
			} else if err == nil {
				cur.renewed = now
				j.lr.grants[a.inst] = cur
			}
		}
		j.lr.mu.Unlock()
	}
	j.lr.mu.Lock()
	held = len(j.lr.grants) > 0
	j.lr.mu.Unlock()
	if !wake.IsZero() {
		again = wake.Sub(now) + 10*time.Millisecond
	}
	if failed && (again == 0 || again > time.Second) {
		again = time.Second
	}
	return held, again
}

// sendReport tells the evaluator which of j's instances are down now.
func (rc *reconcilers) sendReport(ctx context.Context, j *job, down []uint32) error {
	m := rc.m
	cctx, cancel := m.recs.slaCtx(ctx)
	err := m.sla.ReportAvailability(cctx, j.id, down)
	cancel()
	if err != nil {
		return fmt.Errorf("report availability to the SLA evaluator: %w", err)
	}
	j.lr.mu.Lock()
	j.lr.reported, j.lr.isReported = down, true
	j.lr.mu.Unlock()
	return nil
}

// downInstances is the instances of j that are not available now (a
// DAEMON's free slot is no instance at all).
func downInstances(j *job) []uint32 {
	var down []uint32
	for i, t := range j.tasks() {
		if t == nil {
			if !j.isHole(uint32(i)) { // a removed instance is no instance
				down = append(down, uint32(i))
			}
			continue
		}
		tv := t.view()
		if tv.availableSince.IsZero() && !(j.typ == pelotonv1.JobType_DAEMON && freeSlot(tv.rt)) {
			down = append(down, uint32(i))
		}
	}
	return down
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
// instance has been available for minReady (or, for an instance that has
// not started its current run yet, that run). Batch jobs need no grant.
//
// No lock is held while the evaluator answers: a remote evaluator may take
// up to the call timeout. Two disruptions of one instance by the same
// holder may ask at once; the later grant replaces the earlier, which is
// released.
func (rc *reconcilers) disrupt(ctx context.Context, j *job, inst uint32, holder, reason string, minReady time.Duration) error {
	m := rc.m
	if !isLongRunning(j.typ) {
		return nil
	}
	t := j.task(inst)
	if t == nil {
		return nil
	}
	tv := t.view()
	run := tv.rt.RunId
	if tv.rt.State == taskInitialized && run > 0 {
		// Not started yet (a restart backoff): it starts on whatever spec
		// it has then, with this run, so this run being available is what
		// ends the disruption.
		run--
	}
	j.lr.mu.Lock()
	g, ok := j.lr.grants[inst]
	j.lr.mu.Unlock()
	if ok && g.holder == holder {
		return nil
	}
	if err := m.recs.syncSLAJob(ctx, j); err != nil {
		return err
	}
	// The evaluator must know what is down before it decides: one that has
	// just learnt of the job (a restart, a failed report) would otherwise
	// take every instance for available.
	j.lr.mu.Lock()
	reported := j.lr.isReported
	j.lr.mu.Unlock()
	if !reported {
		if err := m.recs.sendReport(ctx, j, downInstances(j)); err != nil {
			return err
		}
	}
	cctx, cancel := m.recs.slaCtx(ctx)
	gr, err := m.sla.Request(cctx, sla.Request{JobID: j.id, Instances: []uint32{inst}, Holder: holder, Reason: reason, TTL: grantTTL})
	cancel()
	if err != nil {
		return err
	}
	j.lr.mu.Lock()
	if j.lr.grants == nil {
		j.lr.grants = map[uint32]heldGrant{}
	}
	old, replaced := j.lr.grants[inst]
	j.lr.grants[inst] = heldGrant{id: gr.ID, run: run, holder: holder, minReady: minReady, renewed: m.now()}
	j.lr.mu.Unlock()
	if replaced {
		m.recs.releaseGrant(ctx, j, old.id)
	}
	return nil
}

// releaseGrant gives a grant back that the job no longer keeps track of. A
// failure only leaves the grant to expire at its TTL.
func (rc *reconcilers) releaseGrant(ctx context.Context, j *job, id string) {
	m := rc.m
	cctx, cancel := m.recs.slaCtx(ctx)
	defer cancel()
	if err := m.sla.Release(cctx, id); err != nil && !errors.Is(err, sla.ErrUnknownGrant) {
		m.log.Warn("SLA evaluator: release a grant; it expires on its own", "job", j.id, "err", err)
	}
}

// dropGrant forgets and releases the grant instance inst holds for holder,
// if any: the disruption it was for will not happen.
func (rc *reconcilers) dropGrant(ctx context.Context, j *job, inst uint32, holder string) {
	m := rc.m
	j.lr.mu.Lock()
	g, ok := j.lr.grants[inst]
	if ok && g.holder == holder {
		delete(j.lr.grants, inst)
	}
	j.lr.mu.Unlock()
	if ok && g.holder == holder {
		m.recs.releaseGrant(ctx, j, g.id)
	}
}

// slaWait says why a disruption the evaluator did not grant waits, for the
// update or drain status a user reads: the refusal's reason, or that the
// evaluator could not be asked.
func slaWait(err error) string {
	var r *sla.RefusedError
	if errors.As(err, &r) {
		return "waiting for the SLA: " + r.Reason
	}
	return "waiting for the SLA evaluator, which did not answer (" + err.Error() + "); asking again"
}

// slaBackoff is the delay before asking the evaluator again after n calls
// in a row failed (not refused): 1s, doubling, at most 30s.
func slaBackoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// isRefusal reports whether err is the evaluator's answer "not within the
// budget" rather than a failure to answer.
func isRefusal(err error) bool {
	var r *sla.RefusedError
	return errors.As(err, &r)
}

// slaError turns an evaluator refusal into the API's FailedPrecondition.
func slaError(err error) error {
	var r *sla.RefusedError
	if errors.As(err, &r) {
		return apierr.FailedPrecondition("SLA: %s", r.Error())
	}
	return apierr.Unavailable("SLA evaluator: %v", err)
}
