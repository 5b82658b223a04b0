package jobmgr

import (
	"context"
	"errors"
	"fmt"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Restarts patched in place. A backend that is a hostmgr.Replacer (the
// kubernetes backend) can make a running run into the next run of its
// instance without a new sandbox: a pod whose image is patched. For an
// in-place restart whose resources do not change, the update driver asks
// it first (patchOnto) and stops the run and launches the next only when
// the backend cannot.
//
// The order is the one a launch follows: the record first, then the
// backend. One task write ends the old run and makes the next LAUNCHED on
// the same host (RUNNING -> INITIALIZED -> PENDING -> LAUNCHED, each step
// in the table), then hostmgr.Replace patches. A restart in between finds
// a LAUNCHED run the backend does not know while the backend still runs
// the run before it on the same host: recovery asks for the patch again
// (resumePatch) and, if it cannot be done, stops the old run and reruns
// the instance, so that no run of the old spec is left behind.

// patchOnto restarts instance inst onto version target (its own version
// for a rolling restart) by patching its running run in place. It returns
// false, having changed nothing, when the run is not running, its
// resources change, its host left service or the backend cannot make the
// change in place; the caller then stops the run as usual.
func (up *Updates) patchOnto(ctx context.Context, j *job, inst uint32, target *jobVersion, restart bool) (bool, error) {
	m := up.m
	t := j.task(inst)
	if t == nil {
		return false, nil
	}
	tv := t.view()
	run, host, state, goal, ver := tv.rt.RunId, tv.rt.Host, tv.rt.State, tv.rt.GoalState, tv.rt.SpecVersion
	if goal == taskKilled || state != taskRunning || host == "" {
		return false, nil
	}
	cur, next := j.version(ver), target
	if restart {
		next = cur
	}
	r := next.resourcesOf(inst)
	if cur.resourcesOf(inst) != r || !m.hm.HostUp(host) {
		return false, nil
	}
	old := resmgr.RunTaskID(j.id, inst, run)
	spec := m.eng.launchSpec(j, inst, run+1, host, next, r)
	if err := m.hm.CheckReplace(old, spec); err != nil {
		if !errors.Is(err, hostmgr.ErrNotReplaceable) {
			m.log.Warn("in-place patch check failed; restarting the usual way", "task", old, "err", err)
		}
		return false, nil
	}
	err := m.applyTaskVia(ctx, j, inst, true, []taskState{taskInitialized, taskPending}, func(rt *pelotonv1.TaskStatus) error {
		if rt.RunId != run || rt.State != taskRunning || rt.GoalState == taskKilled || rt.Host != host {
			return errSkip // it changed since; the caller looks again
		}
		rt.DesiredSpecVersion = next.version
		newRun(rt, run+1, fmt.Sprintf("run %d patched in place to spec version %d", run, next.version))
		rt.State, rt.Host = taskLaunched, host
		return nil
	})
	if errors.Is(err, errSkip) {
		return false, nil
	}
	if err != nil {
		return true, err // nothing was written; the evaluation is retried
	}
	// resmgr's allocation moves to the new run, as for an in-place launch.
	rmt := m.eng.rmTask(j, inst, run+1)
	m.rm.Release(j.id, inst)
	m.rm.Recover(rmt)
	done := m.recon.begin(old, spec.TaskID)
	err = m.hm.Replace(ctx, old, spec)
	done()
	if err != nil {
		m.upd.abandonPatch(ctx, j, inst, old, spec, err)
		return true, nil
	}
	metrics.Restarts.WithLabelValues("patched").Inc()
	return true, nil
}

// abandonPatch deals with a patch recorded but refused, or of unknown
// outcome: the old run is killed (which stops its sandbox whichever run it
// runs by now, see hostmgr.Replacer) and the new run is lost, so the
// instance runs again through placement (a lost run counts no failure).
func (up *Updates) abandonPatch(ctx context.Context, j *job, inst uint32, old string, next hostmgr.LaunchSpec, why error) {
	m := up.m
	m.log.Warn("in-place patch failed after it was recorded; stopping the old run and running the instance again",
		"job", j.id, "instance", inst, "old", old, "new", next.TaskID, "err", why)
	metrics.Restarts.WithLabelValues("placed").Inc()
	m.eng.killRun(ctx, j, inst, old, next.KillGrace)
	m.eng.handleEvent(ctx, hostmgr.TaskEvent{TaskID: next.TaskID, Host: next.Host, State: taskLost, Reason: "patch-failed",
		Message: why.Error(), Time: m.now()})
}

// resumePatch is recovery's part: rt is instance inst's LAUNCHED run, which
// the backend does not know. If the backend still runs the run before it
// on the same host, the process stopped between recording a patch and
// asking for it: it asks again. It returns whether the backend now has the
// run, and otherwise the previous run if that one still runs and must be
// stopped.
func (up *Updates) resumePatch(ctx context.Context, j *job, inst uint32, rt *pelotonv1.TaskStatus) (resumed bool, stale string) {
	m := up.m
	if rt.State != taskLaunched || rt.RunId < 2 || rt.Host == "" {
		return false, ""
	}
	prev := resmgr.RunTaskID(j.id, inst, rt.RunId-1)
	ev, err := m.hm.Status(prev)
	if err != nil || isTerminal(ev.State) || ev.Host != rt.Host {
		return false, ""
	}
	v := j.version(rt.SpecVersion)
	spec := m.eng.launchSpec(j, inst, rt.RunId, rt.Host, v, v.resourcesOf(inst))
	done := m.recon.begin(prev, spec.TaskID)
	err = m.hm.Replace(ctx, prev, spec)
	done()
	if err != nil {
		m.log.Warn("in-place patch cut short by a restart cannot be finished; stopping the old run",
			"job", j.id, "instance", inst, "old", prev, "new", spec.TaskID, "err", err)
		return false, prev
	}
	m.log.Info("finished an in-place patch cut short by a restart", "job", j.id, "instance", inst, "task", spec.TaskID)
	metrics.Restarts.WithLabelValues("patched").Inc()
	return true, ""
}
