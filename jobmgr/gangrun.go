package jobmgr

import (
	"context"
	"fmt"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// How a job's gangs run (the layout is gangLayoutOf, gangs.go).
//
// Queueing: a gang none of whose members holds a host is queued to resmgr
// as one resmgr.Gang (admitted, placed and preempted all-or-nothing), and
// held back while any of its members is still being stopped, so that a
// preempted gang queues again whole. Each gang is held or queued on its
// own: one gang waiting for room never holds the job's others.
//
// Failure (RESTART_GANG, spec.gang's default): a member whose run fails or
// is lost gets its next run at once, as any instance does (lifecycle.go,
// decideGangFailure); the job's evaluation (restartGangs) then finds a
// gang with a member waiting to run while others still run or have ended,
// and stops those others for a new run each. The gang is queued again once
// every member waits (gangWaits). The state that drives this is in the
// members' own records (one INITIALIZED next to peers that are not), so a
// control plane that restarts between the failed member's write and its
// peers' finds the same state and finishes the restart: no separate
// record has to be kept in step. The failure is counted once: the member
// takes the gang's count (the highest failureCount of its members) plus
// one, and a member that fails while its gang is already restarting
// counts nothing.

// reasonGangRestart is the reason of a run stopped, or started again,
// because its gang restarts.
const reasonGangRestart = "gang-restart"

// gangID is the LaunchSpec.Gang (and resmgr Task.Gang) of gang index of
// job jobID. Two placements of one gang never overlap: it is queued again
// only once no member holds a host.
func gangID(jobID string, index int) string { return fmt.Sprintf("%s/gang-%d", jobID, index) }

// gangsFor groups instances into the resmgr gangs they are queued as: the
// members in insts of a gang none of whose members holds a host are
// queued together; a member of a gang that runs (the older
// minimumRunningInstances gang, or RESTART_MEMBER, after a failure) joins
// it alone, as does every instance in no gang.
func (en *engine) gangsFor(j *job, insts []uint32) []*resmgr.Gang {
	m := en.m
	l := j.gangs()
	running := map[uint32]bool{}
	groups := map[uint32][]*resmgr.Task{}
	var order []uint32
	var out []*resmgr.Gang
	// Each instance has waited since its record last changed (the move
	// to its run's wait), which a restart does not change: resmgr counts
	// a gang's wait towards its host reservation from its earliest member.
	since := map[uint32]time.Time{}
	for _, inst := range insts {
		tv := j.task(inst).view()
		t := m.eng.rmTask(j, inst, tv.rt.RunId)
		if ut := tv.rt.GetUpdateTime(); ut != nil {
			since[inst] = ut.AsTime()
		}
		g, _, ok := l.of(inst)
		if ok {
			r, seen := running[g]
			if !seen {
				r = m.eng.gangActive(j, g, false)
				running[g] = r
			}
			if !r {
				if len(groups[g]) == 0 {
					order = append(order, g)
				}
				groups[g] = append(groups[g], t)
				continue
			}
		}
		out = append(out, withSince(resmgr.NewGang(t), since))
	}
	named := j.spec().GetGang() != nil // even a last gang of one is a gang
	for _, g := range order {
		ts := groups[g]
		if len(ts) > 1 || named {
			for _, t := range ts {
				t.Gang = gangID(j.id, int(g))
			}
		}
		rg := resmgr.NewGang(ts...)
		if len(ts) > 1 {
			rg.SameLabel = j.spec().GetGang().GetSameLabel()
		}
		out = append(out, withSince(rg, since))
	}
	return out
}

// withSince sets g's WaitingSince to its earliest member's, from since (by
// instance).
func withSince(g *resmgr.Gang, since map[uint32]time.Time) *resmgr.Gang {
	for _, t := range g.Tasks {
		if s, ok := since[t.Instance]; ok && (g.WaitingSince.IsZero() || s.Before(g.WaitingSince)) {
			g.WaitingSince = s
		}
	}
	return g
}

// gangActive reports whether any member of gang g holds a host; with
// stopping, only members being stopped (preempted, killed for a restart)
// count.
func (en *engine) gangActive(j *job, g uint32, stopping bool) bool {
	tasks := j.tasks()
	first, end := j.gangs().members(g)
	for inst := first; inst < end && inst < uint32(len(tasks)); inst++ {
		t := tasks[inst]
		if t == nil {
			continue
		}
		st := t.view().rt.State
		if stopping && (st == taskPreempting || st == taskKilling) {
			return true
		}
		if !stopping && isActive(st) {
			return true
		}
	}
	return false
}

// gangWaits reports whether every member of gang g waits to run
// (INITIALIZED) with its backoff over, as a RESTART_GANG gang must before
// it is queued: it runs as one. A member killed on its own (KillTask) is
// left out: the rest run without it. wait is the longest backoff still to
// go, when that is what holds it.
func gangWaits(j *job, g uint32, now time.Time) (ok bool, wait time.Duration) {
	tasks := j.tasks()
	first, end := j.gangs().members(g)
	if end > uint32(len(tasks)) {
		return false, 0
	}
	for inst := first; inst < end; inst++ {
		t := tasks[inst]
		if t == nil {
			return false, 0
		}
		rt := t.view().rt
		if rt.GoalState == taskKilled {
			continue
		}
		if rt.State != taskInitialized {
			return false, 0
		}
		if d := time.Unix(0, t.notBefore.Load()).Sub(now); d > wait {
			wait = d
		}
	}
	return wait <= 0, wait
}

// readyToQueue is the INITIALIZED instances of j that may be queued now,
// and the shortest wait for one held by its backoff.
func readyToQueue(m *Manager, j *job, now time.Time) (ready []uint32, wait time.Duration) {
	l := j.gangs()
	whole := j.restartsGangs()
	held := map[uint32]bool{}
	holds := func(g uint32) bool {
		h, seen := held[g]
		if seen {
			return h
		}
		if whole {
			ok, w := gangWaits(j, g, now)
			h = !ok
			if w > 0 && (wait == 0 || w < wait) {
				wait = w
			}
		} else {
			// Members wait while any of them is still being stopped, so
			// that a preempted gang queues again as a whole.
			h = m.eng.gangActive(j, g, true)
		}
		held[g] = h
		return h
	}
	for inst, t := range j.tasks() {
		if t == nil {
			continue // a removed instance (holes.go)
		}
		if g, _, ok := l.of(uint32(inst)); ok && holds(g) {
			continue
		}
		tv := t.view()
		if tv.rt.State == taskInitialized && tv.rt.GoalState != taskKilled {
			if d := time.Unix(0, t.notBefore.Load()).Sub(now); d > 0 {
				if wait == 0 || d < wait {
					wait = d
				}
			} else {
				ready = append(ready, uint32(inst))
			}
		}
	}
	return ready, wait
}

// trimToRoom keeps the first of ready (in instance order) that fit in room
// (sla.maximumRunningInstances), never part of a gang that would be
// queued together: a gang that does not fit whole waits, and so does
// everything after it.
func trimToRoom(m *Manager, j *job, ready []uint32, room int) []uint32 {
	l := j.gangs()
	n := 0
	for n < len(ready) {
		size := 1
		if g, _, ok := l.of(ready[n]); ok && !m.eng.gangActive(j, g, false) {
			for n+size < len(ready) {
				if g2, _, ok := l.of(ready[n+size]); !ok || g2 != g {
					break
				}
				size++
			}
		}
		if n+size > room {
			break
		}
		n += size
	}
	return ready[:n]
}

// restartGangs carries on each RESTART_GANG gang of j that a member's
// failure or loss (or a preemption of part of it) broke: while a member
// waits for its next run, every other member that still runs is stopped
// for a new run, and one that had ended runs again; once a member has
// FAILED for good (the gang's failures are spent), the others are killed.
// It does nothing while the backend must be asked about waiting runs
// first (unrecorded.go).
func (en *engine) restartGangs(ctx context.Context, j *job) error {
	m := en.m
	if !j.restartsGangs() || m.unverified.waits(j.id) {
		return nil
	}
	l := j.gangs()
	tasks := j.tasks()
	var restart, kill []uint32
	cause := map[uint32]uint32{} // a member to restart -> the member that waits
	for g := range l.count() {
		first, end := l.members(g)
		end = min(end, uint32(len(tasks)))
		failed, waiting := -1, -1
		for inst := first; inst < end; inst++ {
			if tasks[inst] == nil {
				continue
			}
			rt := tasks[inst].view().rt
			switch {
			case rt.State == taskFailed:
				failed = int(inst)
			case rt.State == taskInitialized && rt.GoalState != taskKilled && waiting < 0:
				waiting = int(inst)
			}
		}
		for inst := first; inst < end && (failed >= 0 || waiting >= 0); inst++ {
			if tasks[inst] == nil {
				continue
			}
			rt := tasks[inst].view().rt
			switch {
			case rt.GoalState == taskKilled || rt.State == taskFailed:
			case failed >= 0:
				if !isTerminal(rt.State) {
					kill = append(kill, inst)
				}
			case rt.State == taskInitialized || rt.State == taskPending || rt.State == taskKilling || rt.State == taskPreempting:
			case isActive(rt.State) || isTerminal(rt.State):
				restart = append(restart, inst)
				cause[inst] = uint32(waiting)
			}
		}
	}
	if err := parallel(kill, func(inst uint32) error {
		return m.killInstance(ctx, j, inst, "gang-failed")
	}); err != nil {
		return err
	}
	return parallel(restart, func(inst uint32) error {
		return restartForGang(ctx, m, j, inst, cause[inst])
	})
}

// restartForGang gives member inst of a RESTART_GANG gang a new run because
// member by waits for its own: a run still going is stopped first.
func restartForGang(ctx context.Context, m *Manager, j *job, inst, by uint32) error {
	g, _, _ := j.gangs().of(inst)
	var kill string
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		msg := fmt.Sprintf("instance %d of its gang %d runs again; the gang restarts as one", by, g)
		switch {
		case rt.GoalState == taskKilled || rt.State == taskFailed:
			return errSkip
		case rt.State == taskKilling || rt.State == taskPreempting:
			return errSkip // already being stopped
		case isActive(rt.State):
			rt.DesiredRunId = rt.RunId + 1
			rt.State, rt.Reason, rt.Message = taskKilling, reasonGangRestart, msg
			kill = resmgr.RunTaskID(j.id, inst, rt.RunId)
		case isTerminal(rt.State):
			newRun(rt, rt.RunId+1, msg)
			rt.Reason = reasonGangRestart
		default:
			return errSkip // waiting already
		}
		return nil
	})
	return m.eng.killDecided(ctx, j, inst, kill, m.killGrace(j, inst), err)
}

// gangFacts is what decideEvent needs to know of the gang of an instance
// whose run ended, in a RESTART_GANG job.
type gangFacts struct {
	index, member, first, end uint32
	// failures is the gang's failure count: its members' highest
	// failureCount.
	failures uint32
	// restarting: another member already waits for its next run (or is
	// being stopped for one), so this failure is part of that restart.
	restarting bool
}

// gangFactsOf is the gangFacts of instance inst of j, nil when a failure of
// it does not restart a gang.
func gangFactsOf(j *job, inst uint32) *gangFacts {
	if !j.restartsGangs() {
		return nil
	}
	l := j.gangs()
	g, _, ok := l.of(inst)
	if !ok {
		return nil
	}
	first, end := l.members(g)
	f := &gangFacts{index: g, member: inst, first: first, end: end}
	tasks := j.tasks()
	for i := first; i < end && i < uint32(len(tasks)); i++ {
		if tasks[i] == nil {
			continue
		}
		rt := tasks[i].view().rt
		f.failures = max(f.failures, rt.FailureCount)
		if i == inst || rt.GoalState == taskKilled {
			continue
		}
		if rt.State == taskInitialized || (rt.State == taskKilling && rt.Reason == reasonGangRestart) {
			f.restarting = true
		}
	}
	return f
}

// decideGangFailure is decideEnd for a failed run of a RESTART_GANG gang's
// member: the member runs again and its gang with it (restartGangs),
// counted once against restartPolicy.maxFailures for the gang; once those
// are spent, the member FAILS, naming its gang, and the gang ends.
func decideGangFailure(next *taskSnap, ev *evEnd, f eventFacts) {
	rt, g := next.rt, f.gang
	limit := f.restart.GetMaxFailures()
	span := fmt.Sprintf("gang %d (instances %d-%d)", g.index, g.first, g.end-1)
	if g.restarting {
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d failed (%s) while its %s was restarting; it runs again with the gang", ev.run, ev.msg, span))
		rt.Reason, rt.ExitCode = reasonGangRestart, ev.exitCode
		return
	}
	rt.FailureCount = g.failures + 1
	if rt.FailureCount <= limit {
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d failed (%s); its %s restarts, retry %d of %d", ev.run, ev.msg, span, rt.FailureCount, limit))
		rt.Reason, rt.ExitCode = reasonGangRestart, ev.exitCode
		return
	}
	rt.State, rt.Reason = taskFailed, ev.reason
	rt.Message = fmt.Sprintf("%s failed: run %d of instance %d failed (%s); %d failures of the gang, restartPolicy.maxFailures is %d",
		span, ev.run, g.member, ev.msg, rt.FailureCount, limit)
}

// evEnd is what decideGangFailure reads of the event that ended a run.
type evEnd struct {
	run      uint32
	msg      string
	reason   string
	exitCode int32
}

// waitsForGang is recovery's step for a PENDING record of a RESTART_GANG
// gang's member: instead of being queued alone, it goes back to
// INITIALIZED, and the job's evaluation queues its gang whole (or
// finishes the gang's restart first). It reports whether it did so.
func waitsForGang(m *Manager, j *job, inst uint32) bool {
	if !j.restartsGangs() {
		return false
	}
	if _, _, ok := j.gangs().of(inst); !ok {
		return false
	}
	_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
		if rt.State != taskPending {
			return errSkip
		}
		rt.State = taskInitialized
		return nil
	})
	return true
}
