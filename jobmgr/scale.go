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

// ScaleJob changes a job's instance count.
func (up *Updates) ScaleJob(ctx context.Context, jobID string, count uint32, version uint64) (uint64, error) {
	m := up.m
	j, jv, curVer, err := up.planScale(jobID, count, version)
	if err != nil || jv == nil {
		return curVer, err
	}
	if err := m.upd.storeNewVersion(ctx, j, jv, nil); err != nil {
		return 0, err
	}
	m.log.Info("job scaled", "job", jobID, "to", count, "version", jv.version)
	return jv.version, nil
}

// CheckScale makes every check ScaleJob makes and returns the spec version
// the scale would make, changing nothing: a dry run of ScaleJob.
func (up *Updates) CheckScale(jobID string, count uint32, version uint64) (uint64, error) {
	_, jv, curVer, err := up.planScale(jobID, count, version)
	if err != nil || jv == nil {
		return curVer, err
	}
	return jv.version, nil
}

// planScale checks a scale of jobID to count and builds the job version it
// would store; none when count is the job's count already (curVer is then
// the version in force).
func (up *Updates) planScale(jobID string, count uint32, version uint64) (j *job, jv *jobVersion, curVer uint64, err error) {
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
	if count == 0 {
		return nil, nil, 0, apierr.Invalid("instanceCount", "must be > 0 (cancel the job to stop every instance)")
	}
	if count > MaxInstances {
		return nil, nil, 0, apierr.Invalid("instanceCount", "at most %d, got %d", MaxInstances, count)
	}
	cur := j.current()
	if err := checkGangScale(cur.spec, count); err != nil {
		return nil, nil, 0, err
	}
	rec := j.view()
	state := rec.rt.State
	curVer = rec.rt.SpecVersion
	if isJobTerminal(state) || j.goalKilled.Load() {
		return nil, nil, 0, apierr.FailedPrecondition("job %s is %s; only a job that has not finished can be scaled", jobID, state)
	}
	if state == pelotonv1.JobState_JOB_INITIALIZED {
		return nil, nil, 0, apierr.FailedPrecondition("job %s is still creating its tasks; retry in a moment", jobID)
	}
	if version != 0 && version != curVer {
		return nil, nil, 0, apierr.Aborted("job %s is at spec version %d, not %d; get it again and retry", jobID, curVer, version)
	}
	if a := m.upd.activeUpdate(jobID); a != nil {
		return nil, nil, 0, apierr.FailedPrecondition("job %s has update %s in progress; scale it in the update's spec, or wait", jobID, a.snapshot().Id)
	}
	if count == cur.spec.InstanceCount {
		return j, nil, curVer, nil
	}
	spec := proto.Clone(cur.spec).(*pelotonv1.JobSpec)
	spec.InstanceCount = count
	for inst := range spec.InstanceSpecs {
		if inst >= count {
			delete(spec.InstanceSpecs, inst) // overrides of removed instances go with them
		}
	}
	jv, err = newJobVersion(j.latestVersion()+1, spec, m.now(), fmt.Sprintf("scaled from %d to %d instances", cur.spec.InstanceCount, count))
	if err != nil {
		return nil, nil, 0, err
	}
	return j, jv, curVer, nil
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

// wantInstances is how many instances j should have now.
func (up *Updates) wantInstances(j *job) uint32 {
	m := up.m
	if j.typ == pelotonv1.JobType_DAEMON {
		return m.recs.daemonSlots(j)
	}
	return j.current().spec.InstanceCount
}

// reconcileCount grows or shrinks j's instances towards its count. It runs
// in the job's evaluation only, which is never concurrent with itself, so
// it alone replaces the task slice after creation.
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
		return nil
	}
	if want == have {
		return nil
	}
	// Stop the instances beyond the count.
	var extra []uint32
	for inst := want; inst < have; inst++ {
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
	// Remove the stopped ones from the top down; one still running keeps
	// those below it (instance IDs stay dense). First the job remembers the
	// highest run id they had, so that an instance added again later does
	// not reuse one (see fillTasks). Only the runs it counted are removed:
	// an instance that stopped (or started a run) since waits for the next
	// evaluation.
	floor, highest, err := m.upd.rememberRemovedRuns(ctx, j, want, have)
	if err != nil {
		return err
	}
	n := have
	for n > floor {
		t := j.task(n - 1)
		if t != nil {
			tv := t.view()
			st, rev, run := tv.rt.State, tv.rev, max(tv.rt.RunId, tv.rt.DesiredRunId)
			if !isTerminal(st) || run > highest {
				break
			}
			if rev != 0 {
				if _, err := m.batcher.Write(ctx, store.Delete(taskKey(j.id, n-1), rev)); err != nil && !errors.Is(err, store.ErrConflict) {
					return fmt.Errorf("remove instance %d of job %s: %w", n-1, j.id, err)
				}
			}
			j.counts[st].Add(-1)
			m.rm.Release(j.id, n-1)
		}
		n--
	}
	if n < have {
		next := make([]*task, n)
		copy(next, j.tasks())
		j.taskSlice.Store(&next)
		m.log.Info("instances removed", "job", j.id, "from", have, "to", n)
	}
	return nil
}

// rememberRemovedRuns raises the job's RemovedRunId to the highest run id
// (or run id asked for) of the stopped instances from the top (have) down
// to want that the scale-down can remove now. It returns the lowest
// instance ID it counted (have if none) and the highest run: only those
// instances, at no later run, may be removed.
func (up *Updates) rememberRemovedRuns(ctx context.Context, j *job, want, have uint32) (uint32, uint32, error) {
	m := up.m
	var highest uint32
	low := have
	for ; low > want; low-- {
		t := j.task(low - 1)
		if t == nil {
			continue
		}
		tv := t.view()
		st, run := tv.rt.State, max(tv.rt.RunId, tv.rt.DesiredRunId)
		if !isTerminal(st) {
			break // it and those below it stay for now
		}
		highest = max(highest, run)
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
		if t == nil {
			break
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
