package jobmgr

import (
	"fmt"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The task lifecycle's core: what one backend event does to an instance.
// decideEvent is a pure function, like the update planner: no lock, no
// clock (the event carries its time), no store, no backend. applyEvent
// (engine.go) is its shell: in the instance's write turn (taskrec.go) it
// decides on the instance's view, writes the decision through writeTask
// (which checks it against the transition table) and then carries out the
// effects.

// taskSnap is the part of an instance decideEvent reads and changes.
type taskSnap struct {
	// rt is the instance's runtime. decideEvent never changes it: the next
	// snapshot holds a copy.
	rt *pelotonv1.TaskStatus
	// streak and blocked are the view's counters (taskrec.go).
	streak, blocked uint32
	// endReason is why the run that a new one replaces in the same write
	// ended, for the history entry of that end (the record's own reason
	// is the new run's).
	endReason string
}

// eventFacts is what decideEvent needs to know besides the instance and the
// event. restart and grace are those of the spec version the instance's
// current run runs (prev.rt.SpecVersion).
type eventFacts struct {
	jobType pelotonv1.JobType
	// foreign: the job's pods belong to someone else (foreign.go).
	foreign bool
	// revoked: the backend's QoS controller killed the run (a revocable
	// job's run that ended other than by succeeding).
	revoked     bool
	restart     *pelotonv1.RestartPolicy
	grace       time.Duration
	lostBackoff time.Duration
	// gang is the instance's RESTART_GANG gang, if it is in one.
	gang *gangFacts
}

// eventEffects is what the shell must do once the decision is written.
type eventEffects struct {
	// skip: the event changes nothing (an old run's late event, a state
	// already recorded); nothing is written.
	skip bool
	// release: the run ended; its host and its room in resmgr are freed.
	release bool
	// heldFor is the next run that holds the ended run's room on its host
	// (a restart in place); inPlace is that host when the new run should
	// start there at once.
	heldFor, inPlace string
	// kill is a run to stop (its health check fails), with grace.
	kill  string
	grace time.Duration
	// backoff holds the instance's next launch off.
	backoff time.Duration
}

// eventWrite says how an event's decision is written: persist is false for
// a RUNNING event a later queued event of its run supersedes (that event's
// write carries it), and via are the states the instance passes through on
// the way, each in its history: a lost run is LOST, an evicted one
// PREEMPTED, and a revoked one KILLED, before the run that replaces it.
func eventWrite(ev hostmgr.TaskEvent, f eventFacts, superseded bool) (persist bool, via []taskState) {
	persist = !(superseded && ev.State == taskRunning)
	if ev.State == taskLost && ev.Reason != hostmgr.ReasonLaunchBlocked && !f.foreign {
		via = []taskState{taskLost}
	}
	if ev.State == taskPreempted && !f.foreign {
		via = []taskState{taskPreempted}
	}
	if f.revoked {
		via = []taskState{taskKilled}
	}
	return persist, via
}

// decideEvent decides what event ev does to an instance in state prev.
func decideEvent(prev taskSnap, ev hostmgr.TaskEvent, f eventFacts) (taskSnap, eventEffects) {
	skip := eventEffects{skip: true}
	jobID, inst, run, ok := parseTaskID(ev.TaskID)
	if !ok || prev.rt.RunId != run {
		return prev, skip // not ours, or an old run's late event
	}
	next := taskSnap{rt: cloneStatus(prev.rt), streak: prev.streak, blocked: prev.blocked}
	rt := next.rt
	if len(ev.Ports) > 0 && !isTerminal(rt.State) {
		rt.Ports = ev.Ports
	}
	switch ev.State {
	case taskLaunched:
		if len(ev.Ports) > 0 && isActive(rt.State) {
			return next, eventEffects{}
		}
		return prev, skip // written when the launch was issued
	case taskRunning:
		return decideRunning(prev, next, ev, f)
	}
	if isTerminal(rt.State) || rt.State == taskInitialized || rt.State == taskPending {
		return prev, skip
	}
	fx := eventEffects{release: true}
	if rt.RestartInPlace && rt.DesiredRunId > rt.RunId {
		fx.heldFor = resmgr.RunTaskID(jobID, inst, rt.DesiredRunId)
	}
	decideEnd(&next, &fx, ev, f, run)
	return next, fx
}

// decideRunning is decideEvent for a RUNNING event: the run started, or its
// health changed.
func decideRunning(prev, next taskSnap, ev hostmgr.TaskEvent, f eventFacts) (taskSnap, eventEffects) {
	rt := next.rt
	switch rt.State {
	case taskLaunched, taskLaunching, taskStarting:
		rt.State, rt.StartTime = taskRunning, timestamppb.New(ev.Time)
		rt.Health = ev.Health
		rt.ExitCode = 0 // the run before's, shown while this one waited to start
	case taskRunning:
		if rt.Health == ev.Health {
			return prev, eventEffects{skip: true}
		}
		rt.Health = ev.Health
	default:
		return prev, eventEffects{skip: true}
	}
	var fx eventEffects
	if isLongRunning(f.jobType) && rt.Health == pelotonv1.HealthState_UNHEALTHY && rt.GoalState != taskKilled {
		// A failing health check: the run is replaced, as if it had failed.
		rt.FailureCount++
		rt.DesiredRunId = rt.RunId + 1
		rt.State, rt.Reason, rt.Message = taskKilling, "unhealthy", "its health check fails; restarting it"
		next.streak++
		fx.kill, fx.grace = ev.TaskID, f.grace
		fx.backoff = restartBackoff(f.restart, next.streak)
	}
	return next, fx
}

// decideEnd is decideEvent for the end of run `run` (a terminal event of
// an active run): the instance's final state, or its next run.
func decideEnd(next *taskSnap, fx *eventEffects, ev hostmgr.TaskEvent, f eventFacts, run uint32) {
	rt := next.rt
	longRunning := isLongRunning(f.jobType)
	rt.ExitCode, rt.CompletionTime = ev.ExitCode, timestamppb.New(ev.Time)
	next.endReason = ev.Reason
	killedByUs := rt.State == taskKilling || rt.GoalState == taskKilled
	msg := ev.Message
	if msg == "" {
		msg = fmt.Sprintf("%s: exit code %d", ev.Reason, ev.ExitCode)
	}
	switch {
	case f.foreign:
		foreignEnd(rt, ev, killedByUs)
	case f.revoked && rt.GoalState != taskKilled:
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was revoked: its host ran hot and its agent killed it (QoS); pending again", run))
		rt.Reason = hostmgr.ReasonQoSRevoked
		next.endReason = hostmgr.ReasonQoSRevoked
	case rt.State == taskPreempting && ev.State != taskSucceeded && rt.GoalState != taskKilled:
		// Preempted: the instance waits for capacity again, with no failure counted.
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was preempted (%s); pending again", run, rt.Reason))
	case rt.DesiredRunId > rt.RunId && rt.GoalState != taskKilled:
		// A restart: the old run is over, start the new one.
		if rt.RestartInPlace && rt.Host != "" {
			fx.inPlace = rt.Host
		}
		newRun(rt, rt.DesiredRunId, fmt.Sprintf("run %d ended (%s); restarting", run, ev.State))
	case ev.State == taskPreempted && rt.GoalState != taskKilled:
		// The backend took the run back (evicted: node pressure, the
		// Eviction API, a NoExecute taint): as a preemption, the instance
		// is placed anew at once, with no failure counted.
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was preempted (%s); pending again", run, msg))
		rt.Reason = ev.Reason
	case killedByUs:
		if ev.State == taskSucceeded && !longRunning {
			rt.State, rt.Reason, rt.Message = taskSucceeded, "exit-zero", ""
			break
		}
		rt.State = taskKilled
		if rt.Reason == "" {
			rt.Reason = "killed"
		}
		rt.Message = ev.Message
		if f.jobType == pelotonv1.JobType_DAEMON && rt.Reason == "host-removed" {
			rt.BoundHost = "" // its host left: the slot is free for the next one
		}
	case ev.Reason == hostmgr.ReasonRunIDTaken:
		// It never ran: the next ID, at once, and no failure.
		newRun(rt, rt.RunId+1, fmt.Sprintf("run id %d was used already; running as run %d", run, run+1))
	case ev.Reason == hostmgr.ReasonLaunchBlocked:
		// The backend refused the launch for something a person must
		// fix (a namespace missing, a right not granted): not the
		// task's failure, so nothing is counted and the job does not
		// fail. The instance waits, its message says why, and it is
		// tried again with a growing backoff.
		next.blocked++
		fx.backoff = launchBlockedBackoff(f.lostBackoff, next.blocked)
		newRun(rt, rt.RunId+1, fmt.Sprintf("cannot launch: %s; trying again in %s", msg, fx.backoff))
		rt.Reason = hostmgr.ReasonLaunchBlocked
	case longRunning:
		// Kept running: whatever ended the run, a new one follows after a
		// backoff that grows while runs keep ending quickly.
		if ev.State != taskLost {
			rt.FailureCount++
		}
		if rt.StartTime != nil && ev.Time.Sub(rt.StartTime.AsTime()) >= stableRun {
			next.streak = 0
		}
		next.streak++
		fx.backoff = restartBackoff(f.restart, next.streak)
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d ended (%s, %s); restarting in %s", run, ev.State, msg, fx.backoff))
		rt.ExitCode = ev.ExitCode
	case ev.State == taskSucceeded:
		rt.State, rt.Reason, rt.Message = taskSucceeded, "exit-zero", ""
	case ev.State == taskLost:
		newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was lost (%s); running again", run, ev.Reason))
		fx.backoff = f.lostBackoff
	case f.gang != nil:
		decideGangFailure(next, &evEnd{run: run, msg: msg, reason: ev.Reason, exitCode: ev.ExitCode}, f)
	default: // FAILED, or KILLED by someone other than us
		rt.FailureCount++
		max := f.restart.GetMaxFailures()
		if rt.FailureCount <= max {
			newRun(rt, rt.RunId+1, fmt.Sprintf("run %d failed (%s); retry %d of %d", run, msg, rt.FailureCount, max))
			rt.ExitCode = ev.ExitCode
		} else {
			rt.State, rt.Reason = taskFailed, ev.Reason
			rt.Message = fmt.Sprintf("run %d failed (%s); %d failures, restartPolicy.maxFailures is %d", run, msg, rt.FailureCount, max)
		}
	}
}
