package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Rolling updates. An update record (updates/<id>) names the job, the spec
// version it rolls out, the instances it replaces and its state; the
// instances' own records say which version each runs. The driver below runs
// inside the job's evaluation: it snapshots the update's instances, asks the
// pure planner (update_plan.go) what to do, asks the SLA evaluator for each
// instance the plan starts, and restarts the granted ones onto the target.
// Everything it needs after a crash is in etcd (the update record and the
// task records), so a restarted process continues where the last one
// stopped.

func updateKey(id string) string { return "updates/" + id }

// update is one update in memory: its record, published (updaterec.go),
// and what its driver remembers of it.
type update struct {
	rec    atomic.Pointer[updateView]
	writes turns[*updateWrite]

	// mu guards the driver's memory below. It is never held across a
	// store call or a call to the SLA evaluator.
	mu sync.Mutex
	// baseline is each started instance's failure count when the update
	// started it (memory only: after a restart it starts again from the
	// count then, which at worst grants an instance its retries again).
	baseline map[uint32]uint32
	done     map[uint32]bool
	// started are the instances this process restarted for the update; an
	// instance already on the target that it never touched needs no
	// minReadySeconds wait (it never went down).
	started map[uint32]bool
	// prefetched is the first instance not yet prefetched for.
	prefetched int
	// slaFailures counts the driver's steps in a row in which the SLA
	// evaluator did not answer; the next step backs off by it.
	slaFailures int
	memo        sameTaskMemo
}

// activeUpdate returns the update that owns job j's instances, if any.
func (up *Updates) activeUpdate(jobID string) *update {
	m := up.m
	return m.upd.activeUpdateExcept(jobID, nil)
}

// activeUpdateExcept is activeUpdate ignoring skip.
func (up *Updates) activeUpdateExcept(jobID string, skip *update) *update {
	m := up.m
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, u := range m.updates {
		if u == skip {
			continue
		}
		if x := u.record(); x.JobId == jobID && updateActive(x.Status.State) {
			return u
		}
	}
	return nil
}

func (up *Updates) getUpdate(id string) (*update, error) {
	m := up.m
	if id == "" {
		return nil, apierr.Invalid("updateId", "required")
	}
	m.mu.RLock()
	u := m.updates[id]
	m.mu.RUnlock()
	if u == nil {
		return nil, apierr.NotFound("update %s does not exist", id)
	}
	return u, nil
}

func (up *Updates) recoverUpdates(ctx context.Context) error {
	m := up.m
	kvs, err := m.store.List(ctx, "updates/")
	if err != nil {
		return fmt.Errorf("jobmgr: load updates: %w", err)
	}
	for _, kv := range kvs {
		u := &pelotonv1.Update{}
		if err := proto.Unmarshal(kv.Value, u); err != nil {
			if err := m.eng.quarantineRecord(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		if m.held[u.JobId] {
			continue // kept for the job's return
		}
		if m.jobs[u.JobId] == nil && m.finished[u.JobId] == nil {
			// Its job was deleted; the record is swept with it, or here.
			if _, err := m.store.Txn(ctx, store.Delete(kv.Key, kv.Revision)); err != nil {
				m.log.Warn("sweep update of a deleted job", "update", u.Id, "err", err)
			}
			continue
		}
		m.updates[u.Id] = newUpdate(u, kv.Revision)
	}
	return nil
}

// validateUpdateSpec checks an UpdateSpec.
func validateUpdateSpec(s *pelotonv1.UpdateSpec, instances uint32) error {
	if s == nil {
		return nil
	}
	if s.BatchSize > instances && instances > 0 {
		return apierr.Invalid("updateSpec.batchSize", "at most the job's %d instances, got %d", instances, s.BatchSize)
	}
	if s.MinReadySeconds > 3600 {
		return apierr.Invalid("updateSpec.minReadySeconds", "at most 3600, got %d", s.MinReadySeconds)
	}
	return nil
}

// CreateUpdate starts rolling spec out to a long-running job.
func (up *Updates) CreateUpdate(ctx context.Context, jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec, jobVersion uint64) (*pelotonv1.Update, error) {
	m := up.m
	return m.upd.CreateUpdateOnce(ctx, jobID, spec, us, jobVersion, requestid.Request{})
}

// CreateUpdateOnce is CreateUpdate made safe to retry by r (see package
// requestid): if r was carried out before it returns the update it created,
// as it is now, and creates nothing; otherwise the update and r's record
// are stored in one transaction.
func (up *Updates) CreateUpdateOnce(ctx context.Context, jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec, jobVersion uint64, r requestid.Request) (*pelotonv1.Update, error) {
	m := up.m
	o, err := requestid.Lookup(ctx, m.store, r, m.now())
	if err == nil && !o.Done {
		var u *pelotonv1.Update
		u, err = m.upd.createUpdate(ctx, jobID, spec, us, jobVersion, func(id string) []store.Op { return o.Ops(r, id, m.now()) })
		if err == nil {
			return u, nil
		}
		o, err = requestid.Recheck(ctx, m.store, r, m.now(), err)
	}
	if err != nil {
		return nil, err
	}
	u, err := m.upd.GetUpdate(o.Object)
	if apierr.Code(err) == codes.NotFound {
		return nil, apierr.FailedPrecondition("%s: %q created update %s, which no longer exists", requestid.Field, r.ID, o.Object)
	}
	return u, err
}

// createUpdate validates and stores a new update; with(id) are more writes
// for the update's own transaction.
func (up *Updates) createUpdate(ctx context.Context, jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec, jobVersion uint64, with func(id string) []store.Op) (*pelotonv1.Update, error) {
	m := up.m
	id := newJobID()
	j, jv, u, err := up.planUpdate(jobID, spec, us, jobVersion, id)
	if err != nil {
		return nil, err
	}
	// The answer is the update as stored. Copy it before storing: from then
	// on the engine owns u and may drive it at once.
	created := u.snapshot()
	if err := m.upd.storeNewVersion(ctx, j, jv, u, with(id)...); err != nil {
		return nil, err
	}
	m.log.Info("update created", "update", id, "job", jobID, "from", created.FromVersion, "to", jv.version, "instances", len(created.Instances))
	m.queue.Add(jobID)
	return created, nil
}

// CheckUpdate makes every check CreateUpdate makes and returns the update
// as it would be created, without an id, storing nothing: a dry run of
// CreateUpdate.
func (up *Updates) CheckUpdate(jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec, jobVersion uint64) (*pelotonv1.Update, error) {
	_, _, u, err := up.planUpdate(jobID, spec, us, jobVersion, "")
	if err != nil {
		return nil, err
	}
	return u.snapshot(), nil
}

// planUpdate checks a new update of jobID and builds it, with id, and the
// job version it rolls out, storing nothing.
func (up *Updates) planUpdate(jobID string, spec *pelotonv1.JobSpec, us *pelotonv1.UpdateSpec, jobVersion uint64, id string) (*job, *jobVersion, *update, error) {
	m := up.m
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, nil, nil, err
	}
	if !isLongRunning(j.typ) {
		return nil, nil, nil, apierr.FailedPrecondition("job %s is %s; updates roll out SERVICE, STATEFUL and DAEMON jobs (scale a batch job with `job scale`)", jobID, j.typ)
	}
	if spec == nil {
		return nil, nil, nil, apierr.Invalid("spec", "required: the new job spec")
	}
	spec = proto.Clone(spec).(*pelotonv1.JobSpec)
	if spec.Pool != "" {
		p, err := m.rm.CheckLeafPool(spec.Pool, "spec.pool")
		if err != nil {
			return nil, nil, nil, err
		}
		spec.Pool = p
	}
	cur := j.current()
	// The holes are the job's, not the document's: a deploy system that
	// resubmits its spec keeps them (holes.go).
	spec.RemovedInstances = cur.spec.RemovedInstances
	switch {
	case spec.Name != cur.spec.Name:
		return nil, nil, nil, apierr.Invalid("spec.name", "cannot change in an update (%q -> %q)", cur.spec.Name, spec.Name)
	case spec.Type != cur.spec.Type:
		return nil, nil, nil, apierr.Invalid("spec.type", "cannot change in an update (%s -> %s)", cur.spec.Type, spec.Type)
	case spec.Pool != cur.spec.Pool:
		return nil, nil, nil, apierr.Invalid("spec.pool", "cannot change in an update (%s -> %s)", cur.spec.Pool, spec.Pool)
	case !proto.Equal(spec.Foreign, cur.spec.Foreign):
		return nil, nil, nil, apierr.Invalid("spec.foreign", "set by Peloton only, for the jobs it adopts from Kubernetes")
	}
	if err := validateJobSpec(spec, m.largestHost()); err != nil {
		return nil, nil, nil, err
	}
	if err := validateUpdateSpec(us, max(spec.InstanceCount, j.instanceCount())); err != nil {
		return nil, nil, nil, err
	}
	if us == nil {
		us = &pelotonv1.UpdateSpec{}
	}
	rec := j.view()
	state, curVer := rec.rt.State, rec.rt.SpecVersion
	if isJobTerminal(state) || j.goalKilled.Load() {
		return nil, nil, nil, apierr.FailedPrecondition("job %s is %s; restart it before updating it", jobID, state)
	}
	if state == pelotonv1.JobState_JOB_INITIALIZED {
		return nil, nil, nil, apierr.FailedPrecondition("job %s is still creating its tasks; retry in a moment", jobID)
	}
	if jobVersion != 0 && jobVersion != curVer {
		return nil, nil, nil, apierr.Aborted("job %s is at spec version %d, not %d; get it again and retry", jobID, curVer, jobVersion)
	}
	if a := m.upd.activeUpdate(jobID); a != nil {
		return nil, nil, nil, apierr.FailedPrecondition("job %s has update %s in progress; abort it or wait for it to finish", jobID, a.snapshot().Id)
	}
	v := j.latestVersion() + 1
	jv, err := newJobVersion(v, spec, m.now(), "update "+id)
	if err != nil {
		return nil, nil, nil, err
	}
	// The scope: instances that exist before and after whose task changes.
	n := min(j.instanceCount(), jv.extent)
	if j.typ == pelotonv1.JobType_DAEMON {
		n = j.instanceCount()
	}
	var scope []uint32
	memo := sameTaskMemo{}
	for inst := uint32(0); inst < n; inst++ {
		if jv.holes[inst] || j.task(inst) == nil && j.isHole(inst) {
			continue
		}
		if !memo.same(j.runVersion(inst), jv, inst) {
			scope = append(scope, inst)
		}
	}
	return j, jv, m.upd.newUpdateRecord(id, jobID, us, curVer, v, scope, "update"), nil
}

func (up *Updates) newUpdateRecord(id, jobID string, us *pelotonv1.UpdateSpec, from, to uint64, scope []uint32, cause string) *update {
	m := up.m
	now := timestamppb.New(m.now())
	st := &pelotonv1.UpdateStatus{State: updateRollingForward, InstancesTotal: uint32(len(scope)), CreateTime: now, UpdateTime: now}
	if us.GetStartPaused() {
		st.State, st.PausedFrom, st.Message = updatePaused, updateRollingForward, "created paused; resume it to start"
	}
	return newUpdate(&pelotonv1.Update{Id: id, JobId: jobID, Spec: us, FromVersion: from, ToVersion: to, Status: st, Instances: scope, Cause: cause}, 0)
}

// newUpdate is an update whose record is x, stored at rev (0: not yet).
func newUpdate(x *pelotonv1.Update, rev int64) *update {
	u := &update{baseline: map[uint32]uint32{}, done: map[uint32]bool{}}
	u.publish(x, rev)
	return u
}

// storeNewVersion makes jv the job's version in force, in one transaction
// with the job's runtime and, if u is set, the new update record. It then
// applies the version's instance count. extra are more writes for the same
// transaction.
func (up *Updates) storeNewVersion(ctx context.Context, j *job, jv *jobVersion, u *update, extra ...store.Op) error {
	m := up.m
	enc, err := encodeVersion(jv.record())
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	enc, undoChunks, err := m.versionRecord(ctx, j.id, jv.version, enc)
	if err != nil {
		return apierr.Unavailable("store spec version: %v", err)
	}
	stored := false
	defer func() {
		// A version whose record was not written leaves no chunks (one
		// that may have been is the next start's to sweep).
		if undoChunks != nil && !stored {
			undoChunks()
		}
	}()
	ops := []store.Op{store.Put(jobSpecKey(j.id, jv.version), enc, store.MustNotExist)}
	if u != nil {
		x := u.record()
		b, err := proto.Marshal(x)
		if err != nil {
			return fmt.Errorf("jobmgr: encode update %s: %w", x.Id, err)
		}
		ops = append(ops, store.Put(updateKey(x.Id), b, store.MustNotExist))
	}
	w := &jobWrite{
		decide: func(rt *pelotonv1.JobStatus) error {
			rt.SpecVersion = jv.version
			return nil
		},
		extra: append(ops, extra...),
	}
	if err := m.rw.writeJob(ctx, j, w); err != nil {
		switch {
		case errors.Is(err, store.ErrConflict):
			return apierr.Aborted("job %s changed concurrently; retry", j.id)
		case isStoreError(err):
			stored = true // perhaps: its chunks stay
			return apierr.Unavailable("store spec version: %v", err)
		}
		return err // the job left memory (Aborted), or its record cannot be encoded
	}
	stored = true
	rev := w.rev
	j.addVersion(jv, true)
	if u != nil {
		u.publish(u.record(), rev) // before anyone else sees it
		m.mu.Lock()
		m.updates[u.record().Id] = u
		m.mu.Unlock()
	}
	// evaluateJob grows or shrinks the job to the new instance count.
	m.queue.Add(j.id)
	return nil
}

// GetUpdate returns one update.
func (up *Updates) GetUpdate(id string) (*pelotonv1.Update, error) {
	m := up.m
	u, err := m.upd.getUpdate(id)
	if err != nil {
		return nil, err
	}
	return u.snapshot(), nil
}

// ListUpdates returns the updates of one job (or of every job), newest first.
func (up *Updates) ListUpdates(jobID string) ([]*pelotonv1.Update, error) {
	m := up.m
	if jobID != "" {
		if _, err := m.getJob(jobID); err != nil {
			return nil, err
		}
	}
	m.mu.RLock()
	var out []*pelotonv1.Update
	for _, u := range m.updates {
		s := u.snapshot()
		if jobID == "" || s.JobId == jobID {
			out = append(out, s)
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool {
		ta, tb := out[a].Status.CreateTime.AsTime(), out[b].Status.CreateTime.AsTime()
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return out[a].Id < out[b].Id
	})
	return out, nil
}

// PauseUpdate stops an update from starting more instances; those already
// being replaced finish.
func (up *Updates) PauseUpdate(ctx context.Context, id string) (*pelotonv1.Update, error) {
	m := up.m
	return m.upd.changeUpdate(ctx, id, func(x *pelotonv1.Update) error {
		s := x.Status.State
		if s == updatePaused {
			return nil
		}
		if s != updateRollingForward && s != updateRollingBack {
			return apierr.FailedPrecondition("update %s is %s; only a rolling update can be paused", id, s)
		}
		x.Status.PausedFrom, x.Status.State, x.Status.Message = s, updatePaused, "paused by user"
		return nil
	})
}

// ResumeUpdate continues a paused update.
func (up *Updates) ResumeUpdate(ctx context.Context, id string) (*pelotonv1.Update, error) {
	m := up.m
	return m.upd.changeUpdate(ctx, id, func(x *pelotonv1.Update) error {
		if x.Status.State != updatePaused {
			return apierr.FailedPrecondition("update %s is %s, not paused", id, x.Status.State)
		}
		x.Status.State = x.Status.PausedFrom
		if x.Status.State != updateRollingBack {
			x.Status.State = updateRollingForward
		}
		x.Status.PausedFrom, x.Status.Message = 0, "resumed by user"
		return nil
	})
}

// AbortUpdate stops an update for good; every instance keeps the spec it
// runs, and the job's spec in force stays the update's.
func (up *Updates) AbortUpdate(ctx context.Context, id string) (*pelotonv1.Update, error) {
	m := up.m
	return m.upd.changeUpdate(ctx, id, func(x *pelotonv1.Update) error {
		if !updateActive(x.Status.State) {
			return apierr.FailedPrecondition("update %s is %s; only an update in progress can be aborted", id, x.Status.State)
		}
		x.Status.State, x.Status.Message = updateAborted, "aborted by user"
		x.Status.CompletionTime = timestamppb.New(m.now())
		x.Status.InstancesCurrent = nil
		return nil
	})
}

// RollbackUpdate returns every instance the update changed to the spec
// before it. The job gets a new spec version, a copy of that spec.
func (up *Updates) RollbackUpdate(ctx context.Context, id string) (*pelotonv1.Update, error) {
	m := up.m
	u, err := m.upd.getUpdate(id)
	if err != nil {
		return nil, err
	}
	j, err := m.getJob(u.snapshot().JobId)
	if err != nil {
		return nil, err
	}
	if err := m.upd.startRollback(ctx, j, u, rollbackByUser, "rolled back by user"); err != nil {
		return nil, err
	}
	m.queue.Add(j.id)
	return u.snapshot(), nil
}

// Who turns an update around (UpdateStatus.rollback_cause).
const (
	rollbackByUser    = "user"
	rollbackOnFailure = "failure"
)

// startRollback turns u into a rollback, for cause: a new spec version
// copying the update's from-version becomes the job's spec in force and the
// update's target. Two rollbacks of one update that race (the user's and the
// driver's) cannot both store their version: the version's record must
// not exist yet, so the second fails.
func (up *Updates) startRollback(ctx context.Context, j *job, u *update, cause, why string) error {
	m := up.m
	x := u.record()
	if err := canRollBack(x); err != nil {
		return err
	}
	if curVer := j.status().SpecVersion; curVer != x.ToVersion {
		return apierr.FailedPrecondition("job %s moved on to spec version %d since update %s; roll back the later change instead", j.id, curVer, x.Id)
	}
	if a := m.upd.activeUpdateExcept(j.id, u); a != nil {
		return apierr.FailedPrecondition("job %s has update %s in progress", j.id, a.snapshot().Id)
	}
	from := j.version(x.FromVersion)
	spec := proto.Clone(from.spec).(*pelotonv1.JobSpec)
	jv, err := newJobVersion(j.latestVersion()+1, spec, m.now(), "rollback of update "+x.Id)
	if err != nil {
		return err
	}
	if err := m.upd.storeNewVersion(ctx, j, jv, nil); err != nil {
		return err
	}
	err = m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
		if err := canRollBack(x); err != nil {
			return err
		}
		x.RollbackVersion = jv.version
		x.Status.State, x.Status.PausedFrom, x.Status.Message = updateRollingBack, 0, why
		x.Status.RollbackCause = cause
		x.Status.InstancesDone, x.Status.InstancesFailed, x.Status.FailedInstances = 0, 0, nil
		x.Status.CompletionTime = nil
		return nil
	})
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.baseline, u.done, u.started, u.prefetched = map[uint32]uint32{}, map[uint32]bool{}, map[uint32]bool{}, 0
	u.mu.Unlock()
	m.log.Info("rolling back", "update", x.Id, "job", j.id, "to", jv.version, "why", why)
	return nil
}

// canRollBack says why update x cannot be rolled back, if it cannot.
func canRollBack(x *pelotonv1.Update) error {
	s := x.Status.State
	if s == updateRollingBack || (s == updatePaused && x.Status.PausedFrom == updateRollingBack) || s == updateRolledBack {
		return apierr.FailedPrecondition("update %s is already %s", x.Id, s)
	}
	if x.Cause == "restart" {
		return apierr.FailedPrecondition("update %s is a restart; there is nothing to roll back", x.Id)
	}
	return nil
}

func (up *Updates) changeUpdate(ctx context.Context, id string, fn func(x *pelotonv1.Update) error) (*pelotonv1.Update, error) {
	m := up.m
	u, err := m.upd.getUpdate(id)
	if err != nil {
		return nil, err
	}
	if err := m.upd.saveUpdate(ctx, u, fn); err != nil {
		return nil, err
	}
	m.queue.Add(u.record().JobId)
	return u.snapshot(), nil
}

// driveUpdate runs one step of j's active update, if it has one. It
// returns when the job should be evaluated again for it (0: no need).
//
// A step is snapshot, plan, ask, apply. The SLA evaluator may be remote and
// the store slow, so the step never holds u's lock while it asks or writes:
// it takes the snapshot under the lock (updateSnapshot), plans on it
// (planUpdate) and asks for the instances the plan starts without it
// (askGrants), and applies what was granted (applyStep), unless the user
// changed the update meanwhile (then the grants go back). An instance the evaluator
// does not grant, or does not answer for, is not started: the update
// waits, says why in its message, and asks again on a later step (after a
// backoff if the evaluator failed).
func (up *Updates) driveUpdate(ctx context.Context, j *job) (time.Duration, error) {
	m := up.m
	u := m.upd.activeUpdate(j.id)
	if u == nil {
		return 0, nil
	}
	// Asked first, before any lock: what the evaluator counts unavailable
	// includes other holders' grants (a drain moving an instance).
	unavailable := m.upd.slaUnavailable(ctx, j)
	var step updateStep
	u.locked(func() { step = m.upd.updateSnapshot(j, u, unavailable) })
	if step.in.state == updatePaused {
		return 0, nil
	}
	step.plan = planUpdate(step.in)
	g := m.upd.askGrants(ctx, j, &step)
	var next time.Duration
	var changed bool
	var err error
	next, changed, err = m.upd.applyStep(ctx, j, u, &step, g)
	if changed {
		// Paused, aborted or rolled back by the user while the evaluator
		// answered: nothing started; give the grants back.
		for _, p := range g.picks {
			if p.granted {
				m.recs.dropGrant(ctx, j, p.inst, step.holder)
			}
		}
		return 10 * time.Millisecond, nil
	}
	if err != nil {
		return time.Second, err
	}
	if step.plan.end == updateRollingBack && step.in.state == updateRollingForward {
		err := m.upd.startRollback(ctx, j, u, rollbackOnFailure, step.plan.endMessage+"; rolling back")
		return 10 * time.Millisecond, err
	}
	return next, nil
}

// locked runs fn under u's lock.
func (u *update) locked(fn func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn()
}

// updateStep is one step of an update's driver: what it took from the
// update under its lock, and the plan it made of that.
type updateStep struct {
	id, holder, reason string
	target             *jobVersion
	minReady           time.Duration
	now                time.Time
	in                 planInput
	// down are the instances of the scope that are not available now.
	down map[uint32]bool
	// wake is when the first instance not ready yet will be (zero: none).
	wake time.Time
	plan updatePlan
}

// updateSnapshot builds the planner's input from u and j's instances. It
// records the failure count of an instance the update is replacing when
// it first sees it (u.baseline). Caller holds u.mu; the step is paused
// when u is.
func (up *Updates) updateSnapshot(j *job, u *update, unavailable int) updateStep {
	m := up.m
	x := u.record()
	target := j.version(targetOf(x))
	step := updateStep{
		id: x.Id, holder: "update/" + x.Id, target: target,
		reason:   fmt.Sprintf("update %s to spec version %d", x.Id, target.version),
		minReady: minReadyOf(x.Spec), now: m.now(), down: map[uint32]bool{},
		in: planInput{spec: x.Spec, state: x.Status.State, failed: map[uint32]bool{}, done: maps.Clone(u.done), unavailable: unavailable},
	}
	if step.in.state == updatePaused {
		return step
	}
	for _, f := range x.Status.FailedInstances {
		step.in.failed[f] = true
	}
	for _, inst := range x.Instances {
		t := j.task(inst)
		if t == nil {
			continue // removed by a scale-down
		}
		pi := planInstance{inst: inst}
		tv := t.view()
		rt := tv.rt
		run := rt.RunId
		if r, ok := x.Restarts[inst]; ok {
			pi.atTarget = run > r
			pi.starting = !pi.atTarget && rt.DesiredRunId > r
		} else {
			if u.memo == nil {
				u.memo = sameTaskMemo{}
			}
			pi.atTarget = rt.SpecVersion == target.version || u.memo.same(j.version(rt.SpecVersion), target, inst)
			pi.starting = rt.DesiredSpecVersion == target.version
		}
		pi.stopped = rt.GoalState == taskKilled
		fc := rt.FailureCount
		since := tv.availableSince
		pi.down = since.IsZero()
		step.down[inst] = pi.down
		if pi.atTarget || pi.starting {
			b, ok := u.baseline[inst]
			if !ok {
				b = fc
				u.baseline[inst] = b
			}
			if fc > b {
				pi.failures = fc - b
			}
		}
		if pi.atTarget && !since.IsZero() {
			// An instance the update restarted counts as done only once
			// its new run has stayed available for the window: a run
			// that crashes a moment after it started must not let the
			// next batch go.
			at := since.Add(step.minReady)
			if !u.started[inst] {
				at = since
			}
			pi.ready = !step.now.Before(at)
			if !pi.ready && (step.wake.IsZero() || at.Before(step.wake)) {
				step.wake = at
			}
		}
		step.in.instances = append(step.in.instances, pi)
	}
	return step
}

// pick is an instance a step starts.
type pick struct {
	inst    uint32
	granted bool // holds a grant; false: replaced because it is down
}

// stepGrants is what the SLA evaluator answered for a step's plan.
type stepGrants struct {
	picks []pick
	// waiting is why an instance was not granted; evaluatorFailed says the
	// evaluator did not answer (rather than refused).
	waiting         string
	evaluatorFailed bool
}

// askGrants asks the SLA evaluator for the instances the plan starts, in
// order, stopping at the first it refuses. Called without u's lock. An
// instance that is down now takes nothing more down, so it needs no grant
// and never waits for the budget (a job over its budget because the
// update's instances crash must still be able to replace them, or its
// rollback could never finish). It is restarted only if it is still down
// then (restartOnto checks).
func (up *Updates) askGrants(ctx context.Context, j *job, step *updateStep) stepGrants {
	m := up.m
	var g stepGrants
	refused := false
	for _, inst := range step.plan.start {
		if step.down[inst] {
			g.picks = append(g.picks, pick{inst: inst})
			continue
		}
		if refused {
			continue // in order: later instances wait behind the refused one
		}
		// The grant goes back once the new run has stayed available for
		// the update's window, at most the default one: a long
		// minReadySeconds paces the update (the instance stays in its
		// batch until then), but must not hold the job's budget against
		// everyone else, nor outlive the update if it is aborted.
		if err := m.recs.disrupt(ctx, j, inst, step.holder, step.reason, min(step.minReady, defaultMinReady)); err != nil {
			g.waiting = slaWait(err)
			g.evaluatorFailed = !isRefusal(err)
			refused = true
			continue
		}
		g.picks = append(g.picks, pick{inst: inst, granted: true})
	}
	return g
}

// applyStep applies a step's plan and grants to u: it restarts the picked
// instances onto the target and writes the update's record, with the
// state the plan ends it in. It reports changed, doing nothing, when the
// update's record changed since the snapshot (the user paused, aborted or
// rolled it back). u's memory changes under its lock; the restarts and
// the record's write go without it. A change by the user that lands while
// the restarts are on their way takes effect from the next step: the
// step's own record write is dropped, and its restarts stand, holding
// their grants until their new runs are available as any other.
func (up *Updates) applyStep(ctx context.Context, j *job, u *update, step *updateStep, g stepGrants) (next time.Duration, changed bool, err error) {
	m := up.m
	var started, onlyIfDown []uint32
	var done map[uint32]bool
	var slaFailures int
	var pf prefetch
	u.locked(func() {
		if x := u.record(); x.Status.State != step.in.state || targetOf(x) != step.target.version {
			changed = true
			return
		}
		for _, inst := range step.plan.newlyDone {
			u.done[inst] = true
		}
		for _, inst := range step.plan.newlyFailed {
			delete(u.done, inst)
		}
		if g.evaluatorFailed {
			u.slaFailures++
		} else {
			u.slaFailures = 0
		}
		slaFailures = u.slaFailures
		for _, p := range g.picks {
			t := j.task(p.inst)
			if t == nil {
				continue
			}
			u.baseline[p.inst] = t.status().FailureCount
			if u.started == nil {
				u.started = map[uint32]bool{}
			}
			u.started[p.inst] = true
			started = append(started, p.inst)
			if !p.granted {
				onlyIfDown = append(onlyIfDown, p.inst)
			}
		}
		done = maps.Clone(u.done)
		if len(started) > 0 {
			pf = m.upd.prefetchNext(j, u, step.target)
		}
	})
	if changed {
		return 0, true, nil
	}
	x := u.record()
	// Concurrently, so the group committer packs a whole batch's writes
	// into a few transactions instead of one round trip per instance.
	if err := parallel(started, func(inst uint32) error {
		return m.upd.restartOnto(ctx, j, inst, step.target, x.Spec.GetInPlace(), x.Restarts, slices.Contains(onlyIfDown, inst))
	}); err != nil {
		return 0, false, err
	}
	pf.start(m, j)
	waiting := g.waiting
	if waiting == "" {
		waiting = step.plan.waiting
	}
	err = m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
		if x.Status.State != step.in.state || targetOf(x) != step.target.version {
			return errStepStale
		}
		writeStep(x.Status, done, step, started, waiting)
		return nil
	})
	if errors.Is(err, errStepStale) {
		return 10 * time.Millisecond, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if !updateActive(u.record().Status.State) {
		return 0, false, nil
	}
	next = grantRenewEvery
	if !step.wake.IsZero() {
		next = min(next, step.wake.Sub(step.now)+10*time.Millisecond)
	}
	if waiting != "" {
		next = min(next, time.Second)
	}
	if slaFailures > 0 {
		next = slaBackoff(slaFailures)
	}
	return next, false, nil
}

// errStepStale is a driver step's record write finding the update changed
// by the user since the step's snapshot.
var errStepStale = errors.New("the update changed since the step began")

// writeStep records a step in the update's status: the instances it counts
// failed (they leave done), done and current, and the state and message
// the plan ends it with, or why it waits.
func writeStep(st *pelotonv1.UpdateStatus, done map[uint32]bool, step *updateStep, started []uint32, waiting string) {
	plan := step.plan
	for _, f := range plan.newlyFailed {
		st.FailedInstances = append(st.FailedInstances, f)
		delete(done, f)
	}
	slices.Sort(st.FailedInstances)
	st.InstancesFailed = uint32(len(st.FailedInstances))
	st.InstancesDone = uint32(len(done))
	st.InstancesCurrent = append(append([]uint32(nil), plan.current...), started...)
	slices.Sort(st.InstancesCurrent)
	switch plan.end {
	case 0:
		st.Message = waiting
	case updateRollingBack:
		// The rollback itself is started after this write (startRollback).
		st.Message = plan.endMessage
	default:
		st.State, st.Message = plan.end, plan.endMessage
		st.CompletionTime = timestamppb.New(step.now)
		st.InstancesCurrent = nil
	}
}

// slaUnavailable is how many of j's instances the evaluator counts
// unavailable now. If it does not answer, jobmgr's own count of the
// instances that are down stands in: it leaves out other holders' grants,
// but an evaluator that does not answer grants nothing either, so only
// instances that are down anyway can start meanwhile.
func (up *Updates) slaUnavailable(ctx context.Context, j *job) int {
	m := up.m
	cctx, cancel := m.recs.slaCtx(ctx)
	st, err := m.sla.Status(cctx, j.id)
	cancel()
	if err == nil {
		return st.Unavailable
	}
	return len(downInstances(j))
}

func listU32(xs []uint32, limit int) string {
	var b strings.Builder
	for i, x := range xs {
		if i == limit {
			b.WriteString(", ...")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", x)
	}
	return b.String()
}

// restartOnto starts a new run of instance inst on version target: at once
// if it runs nothing, else by stopping the current run first (in place, on
// the same host, when asked and the resources do not change), unless the
// backend can patch the running run into the new one (patch.go). For a
// rolling restart (restarts set) the version stays.
//
// With onlyIfDown the caller holds no SLA grant for the instance because it
// was down: if it has become available since, it is left alone (the next
// step asks for a grant).
func (up *Updates) restartOnto(ctx context.Context, j *job, inst uint32, target *jobVersion, inPlace bool, restarts map[uint32]uint32, onlyIfDown bool) error {
	m := up.m
	_, restart := restarts[inst]
	// A patch replaces a running run at once, with no availability check
	// of its own; an instance taken without a grant is stopped instead.
	if inPlace && !onlyIfDown {
		if done, err := m.upd.patchOnto(ctx, j, inst, target, restart); done || err != nil {
			return err
		}
	}
	var kill, held, dropHold string
	var grace time.Duration
	var requeue bool
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		dropHold = ""
		if rt.GoalState == taskKilled {
			return errSkip
		}
		cur := j.version(rt.SpecVersion)
		if onlyIfDown && available(rt, cur.hasHealthCheck(inst)) {
			return errSkip
		}
		switch {
		case isActive(rt.State):
			rt.DesiredRunId = max(rt.DesiredRunId, rt.RunId+1)
			if !restart {
				rt.DesiredSpecVersion = target.version
			}
			wasInPlace, same := rt.RestartInPlace, cur.resourcesOf(inst) == target.resourcesOf(inst)
			rt.RestartInPlace = inPlace && same
			if rt.State == taskKilling || rt.State == taskPreempting {
				// Already stopping; the new run follows. A stop begun in
				// place (an update aborted meanwhile, a rolling restart)
				// moved the run's room to the next run (TransferHold):
				// that run still starts there if it fits, else the room
				// is given back, or placement would find the next run
				// holding room already and refuse it for ever.
				if wasInPlace && !rt.RestartInPlace {
					if same {
						rt.RestartInPlace = true
					} else {
						dropHold = resmgr.RunTaskID(j.id, inst, rt.DesiredRunId)
					}
				}
				return nil
			}
			rt.State, rt.Reason, rt.Message = taskKilling, "updating", fmt.Sprintf("stopping to run spec version %d", target.version)
			if restart {
				rt.Reason, rt.Message = "restarting", "stopping for a rolling restart"
			}
			kill, grace = resmgr.RunTaskID(j.id, inst, rt.RunId), graceOf(cur, inst)
			if rt.RestartInPlace {
				held = resmgr.RunTaskID(j.id, inst, rt.DesiredRunId)
			}
		case rt.State == taskPending:
			// Queued with the old spec: take it back and queue it again.
			requeue = true
			if !restart {
				rt.SpecVersion = target.version
			}
			newRun(rt, rt.RunId+1, fmt.Sprintf("queued again with spec version %d", target.version))
		default:
			if !restart {
				rt.SpecVersion = target.version
			}
			if isTerminal(rt.State) {
				newRun(rt, rt.RunId+1, fmt.Sprintf("started with spec version %d", target.version))
			} else if restart {
				return errSkip
			}
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if dropHold != "" {
		m.hm.ReleaseTask(dropHold)
	}
	if requeue {
		m.rm.Release(j.id, inst)
	}
	if kill != "" {
		if held != "" {
			// The room stays the instance's: hostmgr frees the old run's
			// hold when it ends, so move it to the next run first.
			m.hm.TransferHold(kill, held)
		}
		m.eng.killRun(ctx, j, inst, kill, grace)
	}
	return nil
}

// prefetch is an image to fetch to hosts ahead of the instances there.
type prefetch struct {
	hosts []string
	image string
}

// prefetchNext picks the hosts of the instances the update will start
// next, while the current ones run, to fetch the target's image to.
// Caller holds u.mu.
func (up *Updates) prefetchNext(j *job, u *update, target *jobVersion) prefetch {
	x := u.record()
	n := batchSize(x.Spec)
	var pf prefetch
	seen := map[string]bool{}
	i := u.prefetched
	for ; i < len(x.Instances) && len(pf.hosts) < n; i++ {
		inst := x.Instances[i]
		if u.done[inst] {
			continue
		}
		prev, _ := j.hosts(inst)
		img := target.sharedTaskSpec(inst).Image
		if prev == "" || img == "" {
			continue
		}
		pf.image = img
		if !seen[prev] {
			seen[prev] = true
			pf.hosts = append(pf.hosts, prev)
		}
	}
	u.prefetched = i
	return pf
}

// start asks the backend for the prefetch, in the background, owned by
// the Manager: the prefetch ends with it.
func (pf prefetch) start(m *Manager, j *job) {
	if len(pf.hosts) == 0 {
		return
	}
	m.spawn(func(ctx context.Context) {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := m.hm.Prefetch(pctx, pf.hosts, pf.image); err != nil {
			m.log.Warn("image prefetch failed", "job", j.id, "image", pf.image, "hosts", len(pf.hosts), "err", err)
		}
	})
}

// rollingRestart restarts instances of a long-running job (default: all)
// through an update that replaces each with a new run of the same spec,
// batch by batch within the job's SLA.
func (up *Updates) rollingRestart(ctx context.Context, j *job, instances []uint32) error {
	m := up.m
	if a := m.upd.activeUpdate(j.id); a != nil {
		return apierr.FailedPrecondition("job %s has update %s in progress; abort it or wait for it to finish", j.id, a.snapshot().Id)
	}
	if len(instances) == 0 {
		for i := uint32(0); i < j.instanceCount(); i++ {
			if !j.removed(i) {
				instances = append(instances, i)
			}
		}
	}
	restarts := map[uint32]uint32{}
	var scope []uint32
	for _, inst := range instances {
		t := j.task(inst)
		if t == nil {
			continue
		}
		tv := t.view()
		run, stopped, free := tv.rt.RunId, tv.rt.GoalState == taskKilled, j.typ == pelotonv1.JobType_DAEMON && freeSlot(tv.rt)
		if free {
			continue
		}
		if stopped {
			// Stopped by the user: it is down already, so starting it
			// again takes nothing down and needs no grant.
			err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
				if rt.GoalState != taskKilled || !isTerminal(rt.State) {
					return errSkip // still stopping; the user asks again
				}
				rt.GoalState = m.taskGoal(j)
				newRun(rt, rt.RunId+1, "started again by user")
				rt.FailureCount = 0
				return nil
			})
			if err != nil && !errors.Is(err, errSkip) {
				return apierr.Unavailable("%v", err)
			}
			continue
		}
		if _, dup := restarts[inst]; !dup {
			restarts[inst] = run
			scope = append(scope, inst)
		}
	}
	rec := j.view()
	ver := rec.rt.SpecVersion
	us := &pelotonv1.UpdateSpec{BatchSize: budgetOf(j.spec())}
	x := m.upd.newUpdateRecord(newJobID(), j.id, us, ver, ver, scope, "restart").record()
	x.Restarts = restarts
	b, err := proto.Marshal(x)
	if err != nil {
		return fmt.Errorf("jobmgr: encode update %s: %w", x.Id, err)
	}
	rev, err := m.store.Txn(ctx, store.Put(updateKey(x.Id), b, store.MustNotExist))
	if err != nil {
		return apierr.Unavailable("store update: %v", err)
	}
	u := newUpdate(x, rev)
	m.mu.Lock()
	m.updates[x.Id] = u
	m.mu.Unlock()
	m.log.Info("rolling restart", "job", j.id, "update", x.Id, "instances", len(scope))
	m.queue.Add(j.id)
	return nil
}

// UpdateJob returns the job an update changes.
func (up *Updates) UpdateJob(id string) (string, error) {
	m := up.m
	u, err := m.upd.getUpdate(id)
	if err != nil {
		return "", err
	}
	return u.record().GetJobId(), nil
}
