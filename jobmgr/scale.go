package jobmgr

import (
	"context"
	"errors"
	"fmt"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// reasonScaledDown is the reason of an instance a scale-down stops.
const reasonScaledDown = "scaled-down"

// Instance counts. A job's instance count is its spec's (a DAEMON job's
// follows its hosts, daemon.go). Changing it stores a new spec version;
// the job's evaluation then grows the task slice (new instances start on
// the current spec) or stops the instances beyond the count, highest first,
// and removes them once stopped.

// ScaleJob changes a job's instance count, removing the instances in
// remove first (holes.go); count 0 with remove shrinks the job by them.
func (up *Updates) ScaleJob(ctx context.Context, jobID string, count uint32, remove []uint32, version uint64) (uint64, error) {
	m := up.m
	j, jv, curVer, err := up.planScale(jobID, count, remove, version)
	if err != nil || jv == nil {
		return curVer, err
	}
	if err := m.upd.storeNewVersion(ctx, j, jv, nil); err != nil {
		return 0, err
	}
	m.log.Info("job scaled", "job", jobID, "to", jv.spec.InstanceCount, "removed", remove, "version", jv.version)
	return jv.version, nil
}

// CheckScale makes every check ScaleJob makes and returns the spec version
// the scale would make, changing nothing: a dry run of ScaleJob.
func (up *Updates) CheckScale(jobID string, count uint32, remove []uint32, version uint64) (uint64, error) {
	_, jv, curVer, err := up.planScale(jobID, count, remove, version)
	if err != nil || jv == nil {
		return curVer, err
	}
	return jv.version, nil
}

// planScale checks a scale of jobID to count, less the instances in
// remove, and builds the job version it would store; none when it would
// change nothing (curVer is then the version in force).
func (up *Updates) planScale(jobID string, count uint32, remove []uint32, version uint64) (j *job, jv *jobVersion, curVer uint64, err error) {
	m := up.m
	j, err = m.getJob(jobID)
	if err != nil {
		return nil, nil, 0, err
	}
	if j.typ == pelotonv1.JobType_DAEMON {
		return nil, nil, 0, apierr.FailedPrecondition("job %s is a DAEMON job; its instance count follows the hosts that match it", jobID)
	}
	if m.adopt.isForeign(j) {
		return nil, nil, 0, refuseForeign(j, "scale")
	}
	if count == 0 && len(remove) == 0 {
		return nil, nil, 0, apierr.Invalid("instanceCount", "must be > 0 (cancel the job to stop every instance)")
	}
	if count > MaxInstances {
		return nil, nil, 0, apierr.Invalid("instanceCount", "at most %d, got %d", MaxInstances, count)
	}
	if err := up.checkScalable(j, version); err != nil {
		return nil, nil, 0, err
	}
	cur := j.current()
	holes := cur.spec.RemovedInstances
	if len(remove) > 0 {
		if holes, count, err = planRemoval(jobID, cur, count, remove); err != nil {
			return nil, nil, 0, err
		}
	}
	if ext := extentOf(count, holes); ext > MaxInstances {
		return nil, nil, 0, apierr.Invalid("instanceCount", "%d instances would take instance IDs up to %d, beyond the highest allowed %d", count, ext-1, MaxInstances-1)
	}
	if err := checkGangScale(cur.spec, count, holes); err != nil {
		return nil, nil, 0, err
	}
	curVer = j.view().rt.SpecVersion
	if count == cur.spec.InstanceCount && len(remove) == 0 {
		return j, nil, curVer, nil
	}
	spec := proto.Clone(cur.spec).(*pelotonv1.JobSpec)
	spec.InstanceCount, spec.RemovedInstances = count, holes
	jv, err = newJobVersion(j.latestVersion()+1, spec, m.now(), scaleCause(cur.spec.InstanceCount, count, remove))
	if err != nil {
		return nil, nil, 0, err
	}
	for inst := range spec.InstanceSpecs {
		if !jv.hasInstance(inst) {
			delete(spec.InstanceSpecs, inst) // overrides of removed instances go with them
		}
	}
	return j, jv, curVer, nil
}

// checkScalable refuses a scale of j while the job cannot take one: it has
// finished or is being cancelled, is still creating its tasks, is at
// another version than the caller's (version 0: any), or is being updated.
func (up *Updates) checkScalable(j *job, version uint64) error {
	rec := j.view()
	state, curVer := rec.rt.State, rec.rt.SpecVersion
	if isJobTerminal(state) || j.goalKilled.Load() {
		return apierr.FailedPrecondition("job %s is %s; only a job that has not finished can be scaled", j.id, state)
	}
	if state == pelotonv1.JobState_JOB_INITIALIZED {
		return apierr.FailedPrecondition("job %s is still creating its tasks; retry in a moment", j.id)
	}
	if version != 0 && version != curVer {
		return apierr.Aborted("job %s is at spec version %d, not %d; get it again and retry", j.id, curVer, version)
	}
	if a := up.m.upd.activeUpdate(j.id); a != nil {
		return apierr.FailedPrecondition("job %s has update %s in progress; scale it in the update's spec, or wait", j.id, a.snapshot().Id)
	}
	return nil
}

// scaleCause is why a scale made its spec version.
func scaleCause(from, to uint32, remove []uint32) string {
	if len(remove) == 0 {
		return fmt.Sprintf("scaled from %d to %d instances", from, to)
	}
	return fmt.Sprintf("scaled from %d to %d instances, removing %s", from, to, listU32(remove, 10))
}

// ListJobVersions returns a job's spec history, oldest first.
func (up *Updates) ListJobVersions(jobID string) ([]*pelotonv1.JobVersion, error) {
	m := up.m
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, err
	}
	return j.history(), nil
}

// wantInstances is the length j's task slice should have now: one past
// its highest instance (its extent, holes.go).
func (up *Updates) wantInstances(j *job) uint32 {
	m := up.m
	if j.typ == pelotonv1.JobType_DAEMON {
		return m.recs.daemonSlots(j)
	}
	return j.current().extent
}

// reconcileCount grows or shrinks j's instances towards its spec: it adds
// the instances up to the extent, and stops, then removes, those beyond it
// and the holes (holes.go) that still have a task. It runs in the job's
// evaluation only, which is never concurrent with itself, so it alone
// replaces the task slice after creation.
func (up *Updates) reconcileCount(ctx context.Context, j *job) error {
	m := up.m
	want := m.upd.wantInstances(j)
	have := j.instanceCount()
	if err := m.upd.unscale(ctx, j, min(want, have)); err != nil {
		return err
	}
	if want > have {
		cur := j.tasks()
		next := make([]*task, want)
		copy(next, cur)
		j.taskSlice.Store(&next)
		m.eng.fillTasks(j)
		have = want
	}
	holes := heldHoles(j, want)
	if want == have && len(holes) == 0 {
		return nil
	}
	// Stop the instances beyond the count, and the removed ones.
	var extra []uint32
	for _, inst := range append(holes, idRange(want, have)...) {
		if t := j.task(inst); t != nil {
			tv := t.view()
			done := isTerminal(tv.rt.State) || (tv.rt.State == taskKilling && tv.rt.GoalState == taskKilled)
			if done {
				continue
			}
		}
		extra = append(extra, inst)
	}
	if err := parallel(extra, func(inst uint32) error { return m.killInstance(ctx, j, inst, reasonScaledDown) }); err != nil {
		return err
	}
	return up.removeStopped(ctx, j, want, have, holes)
}

// heldHoles is j's holes below want that still have a task: removed
// instances whose removal is not done.
func heldHoles(j *job, want uint32) []uint32 {
	var out []uint32
	for _, h := range j.current().spec.RemovedInstances {
		if h < want && j.task(h) != nil {
			out = append(out, h)
		}
	}
	return out
}

// idRange is the IDs from..to-1.
func idRange(from, to uint32) []uint32 {
	var out []uint32
	for inst := from; inst < to; inst++ {
		out = append(out, inst)
	}
	return out
}

// removeStopped removes the stopped instances of j beyond want (from the
// top down: one still running keeps those below it, so the slice stays
// dense above the extent) and the stopped holes. First the job remembers
// the highest run id they had, so that an instance added again later does
// not reuse one (see fillTasks). Only the runs it counted are removed: an
// instance that stopped (or started a run) since waits for the next
// evaluation.
func (up *Updates) removeStopped(ctx context.Context, j *job, want, have uint32, holes []uint32) error {
	m := up.m
	floor, highest, err := m.upd.rememberRemovedRuns(ctx, j, want, have, holes)
	if err != nil {
		return err
	}
	next := make([]*task, have)
	copy(next, j.tasks())
	remove := func(inst uint32) (bool, error) {
		t := next[inst]
		if t == nil {
			return true, nil
		}
		tv := t.view()
		st, rev, run := tv.rt.State, tv.rev, max(tv.rt.RunId, tv.rt.DesiredRunId)
		if !isTerminal(st) || run > highest {
			return false, nil
		}
		if rev != 0 {
			if _, err := m.batcher.Write(ctx, store.Delete(taskKey(j.id, inst), rev)); err != nil && !errors.Is(err, store.ErrConflict) {
				return false, fmt.Errorf("remove instance %d of job %s: %w", inst, j.id, err)
			}
		}
		j.counts[st].Add(-1)
		m.rm.Release(j.id, inst)
		next[inst] = nil
		return true, nil
	}
	n := have
	for n > floor {
		ok, err := remove(n - 1)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		n--
	}
	removed := have - n
	for _, h := range holes {
		ok, err := remove(h)
		if err != nil {
			return err
		}
		if ok {
			removed++
		}
	}
	if removed > 0 {
		next = next[:n:n]
		j.taskSlice.Store(&next)
		m.log.Info("instances removed", "job", j.id, "from", have, "to", n, "removed", removed)
	}
	return nil
}

// rememberRemovedRuns raises the job's RemovedRunId to the highest run id
// (or run id asked for) of the stopped instances that the scale-down can
// remove now: from the top (have) down to want, and the holes. It returns
// the lowest instance ID it counted from the top (have if none) and the
// highest run: only those instances, at no later run, may be removed.
func (up *Updates) rememberRemovedRuns(ctx context.Context, j *job, want, have uint32, holes []uint32) (uint32, uint32, error) {
	m := up.m
	var highest uint32
	stoppedRun := func(inst uint32) (uint32, bool) {
		t := j.task(inst)
		if t == nil {
			return 0, true
		}
		tv := t.view()
		return max(tv.rt.RunId, tv.rt.DesiredRunId), isTerminal(tv.rt.State)
	}
	low := have
	for ; low > want; low-- {
		run, stopped := stoppedRun(low - 1)
		if !stopped {
			break // it and those below it stay for now
		}
		highest = max(highest, run)
	}
	for _, h := range holes {
		if run, stopped := stoppedRun(h); stopped {
			highest = max(highest, run)
		}
	}
	err := m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		rt.RemovedRunId = max(rt.RemovedRunId, highest)
		return nil
	})
	if err != nil {
		return have, 0, fmt.Errorf("remove instances of job %s: %w", j.id, err)
	}
	return low, highest, nil
}

// unscale takes back the instances below upto that a scale-down was
// stopping when the count grew again before they were removed: each is
// kept running (a new run once its stopped one ends). They are the
// highest instances below upto, so the walk stops at the first that is
// not one.
func (up *Updates) unscale(ctx context.Context, j *job, upto uint32) error {
	m := up.m
	if j.goalKilled.Load() || j.typ == pelotonv1.JobType_DAEMON {
		return nil
	}
	goal := m.taskGoal(j)
	for inst := upto; inst > 0; inst-- {
		t := j.task(inst - 1)
		if t == nil || j.isHole(inst-1) {
			break // a removed instance is never taken back
		}
		tv := t.view()
		scaled := tv.rt.GoalState == taskKilled && tv.rt.Reason == reasonScaledDown
		if !scaled {
			break
		}
		err := m.updateTask(ctx, j, inst-1, func(rt *pelotonv1.TaskStatus) error {
			if rt.GoalState != taskKilled || rt.Reason != reasonScaledDown {
				return errSkip
			}
			rt.GoalState = goal
			if isTerminal(rt.State) {
				newRun(rt, max(rt.RunId, rt.DesiredRunId)+1, "scaled up again before its removal")
			} else {
				rt.DesiredRunId = rt.RunId + 1 // started again once its stop ends
			}
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) {
			return err
		}
		m.log.Info("instance scaled up again while it was stopping", "job", j.id, "instance", inst-1)
	}
	return nil
}
