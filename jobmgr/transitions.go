package jobmgr

import (
	"fmt"

	"github.com/peloton-sched/peloton/internal/fsm"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

type ts = pelotonv1.TaskState

const (
	stInitialized = pelotonv1.TaskState_INITIALIZED
	stPending     = pelotonv1.TaskState_PENDING
	stReady       = pelotonv1.TaskState_READY
	stPlacing     = pelotonv1.TaskState_PLACING
	stPlaced      = pelotonv1.TaskState_PLACED
	stLaunching   = pelotonv1.TaskState_LAUNCHING
	stLaunched    = pelotonv1.TaskState_LAUNCHED
	stStarting    = pelotonv1.TaskState_STARTING
	stRunning     = pelotonv1.TaskState_RUNNING
	stSucceeded   = pelotonv1.TaskState_SUCCEEDED
	stFailed      = pelotonv1.TaskState_FAILED
	stLost        = pelotonv1.TaskState_LOST
	stKilled      = pelotonv1.TaskState_KILLED
	stPreempting  = pelotonv1.TaskState_PREEMPTING
	stKilling     = pelotonv1.TaskState_KILLING
)

// taskTransitions is the one table of legal task state changes. A run moves
// forward through it; a terminal state goes back to INITIALIZED only to start
// a new run (retry, restart), which bumps the run ID. READY, PLACING and
// PLACED are held in resmgr's memory, not in the store, but are listed so the
// table describes the whole lifecycle.
var taskTransitions = fsm.New("task",
	fsm.From(stInitialized).To(stPending, stKilled),
	fsm.From(stPending).To(stReady, stPlacing, stPlaced, stLaunching, stLaunched, stKilled, stInitialized),
	fsm.From(stReady).To(stPlacing, stPending, stKilled),
	fsm.From(stPlacing).To(stPlaced, stReady, stKilled),
	fsm.From(stPlaced).To(stLaunching, stLaunched, stReady, stKilled),
	fsm.From(stLaunching).To(stLaunched, stFailed, stKilled, stLost, stInitialized),
	fsm.From(stLaunched).To(stStarting, stRunning, stSucceeded, stFailed, stLost, stKilling, stKilled, stPreempting, stInitialized),
	fsm.From(stStarting).To(stRunning, stSucceeded, stFailed, stLost, stKilling, stKilled, stPreempting, stInitialized),
	fsm.From(stRunning).To(stSucceeded, stFailed, stLost, stKilling, stKilled, stPreempting, stInitialized),
	fsm.From(stKilling).To(stKilled, stSucceeded, stFailed, stLost, stInitialized),
	fsm.From(stPreempting).To(stPending, stKilled, stInitialized, stSucceeded, stFailed, stLost),
	fsm.From(stSucceeded).To(stInitialized),
	fsm.From(stFailed).To(stInitialized),
	fsm.From(stLost).To(stInitialized, stKilled),
	fsm.From(stKilled).To(stInitialized),
)

// checkTransition returns an error if from -> to is not in the table.
// Staying in the same state is allowed (fsm's rule: an update of other
// fields).
func checkTransition(from, to ts) error {
	if taskTransitions.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("jobmgr: illegal task transition %s -> %s", from, to)
}

// checkPath is checkTransition for a write that takes a task from from
// through the states via to to: every step must be in the table.
func checkPath(from ts, via []ts, to ts) error {
	for _, s := range via {
		if err := checkTransition(from, s); err != nil {
			return err
		}
		from = s
	}
	return checkTransition(from, to)
}

// steps calls f with each state a task enters on its way from from through
// via to to.
func steps(from ts, via []ts, to ts, f func(ts)) {
	for _, s := range via {
		if s != from {
			f(s)
			from = s
		}
	}
	if to != from {
		f(to)
	}
}

// isTerminal reports whether a run has ended.
func isTerminal(s ts) bool {
	switch s {
	case stSucceeded, stFailed, stLost, stKilled:
		return true
	}
	return false
}

// isActive reports whether a run holds a host (launched and not yet ended).
func isActive(s ts) bool {
	switch s {
	case stLaunching, stLaunched, stStarting, stRunning, stKilling, stPreempting:
		return true
	}
	return false
}

type js = pelotonv1.JobState

// jobTransitions is the table of legal job state changes. Restart takes a
// finished job back to PENDING.
var jobTransitions = fsm.New("job",
	fsm.From(jobInitialized).To(jobPending, jobKilling, jobKilled),
	fsm.From(jobPending).To(jobRunning, jobSucceeded, jobFailed, jobKilling, jobKilled),
	fsm.From(jobRunning).To(jobPending, jobSucceeded, jobFailed, jobKilling, jobKilled),
	fsm.From(jobKilling).To(jobKilled, jobSucceeded, jobFailed, jobPending, jobRunning),
	fsm.From(jobSucceeded).To(jobPending, jobRunning),
	fsm.From(jobFailed).To(jobPending, jobRunning),
	fsm.From(jobKilled).To(jobPending, jobRunning),
)

const (
	jobInitialized = pelotonv1.JobState_JOB_INITIALIZED
	jobPending     = pelotonv1.JobState_JOB_PENDING
	jobRunning     = pelotonv1.JobState_JOB_RUNNING
	jobSucceeded   = pelotonv1.JobState_JOB_SUCCEEDED
	jobFailed      = pelotonv1.JobState_JOB_FAILED
	jobKilling     = pelotonv1.JobState_JOB_KILLING
	jobKilled      = pelotonv1.JobState_JOB_KILLED
)

func checkJobTransition(from, to js) error {
	if jobTransitions.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("jobmgr: illegal job transition %s -> %s", from, to)
}

func isJobTerminal(s js) bool {
	switch s {
	case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
		return true
	}
	return false
}
