package jobmgr

import (
	"fmt"

	"github.com/peloton-sched/peloton/internal/fsm"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

type taskState = pelotonv1.TaskState

const (
	taskInitialized = pelotonv1.TaskState_INITIALIZED
	taskPending     = pelotonv1.TaskState_PENDING
	taskReady       = pelotonv1.TaskState_READY
	taskPlacing     = pelotonv1.TaskState_PLACING
	taskPlaced      = pelotonv1.TaskState_PLACED
	taskLaunching   = pelotonv1.TaskState_LAUNCHING
	taskLaunched    = pelotonv1.TaskState_LAUNCHED
	taskStarting    = pelotonv1.TaskState_STARTING
	taskRunning     = pelotonv1.TaskState_RUNNING
	taskSucceeded   = pelotonv1.TaskState_SUCCEEDED
	taskFailed      = pelotonv1.TaskState_FAILED
	taskLost        = pelotonv1.TaskState_LOST
	taskKilled      = pelotonv1.TaskState_KILLED
	taskPreempting  = pelotonv1.TaskState_PREEMPTING
	taskKilling     = pelotonv1.TaskState_KILLING
	taskPreempted   = pelotonv1.TaskState_PREEMPTED
)

// numTaskStates sizes arrays indexed by task state: one past the last.
const numTaskStates = int(taskPreempted) + 1

// taskTransitions is the one table of legal task state changes. A run moves
// forward through it; a terminal state goes back to INITIALIZED only to start
// a new run (retry, restart), which bumps the run ID. READY, PLACING and
// PLACED are held in resmgr's memory, not in the store, but are listed so the
// table describes the whole lifecycle.
var taskTransitions = fsm.New("task",
	fsm.From(taskInitialized).To(taskPending, taskKilled),
	fsm.From(taskPending).To(taskReady, taskPlacing, taskPlaced, taskLaunching, taskLaunched, taskKilled, taskInitialized),
	fsm.From(taskReady).To(taskPlacing, taskPending, taskKilled),
	fsm.From(taskPlacing).To(taskPlaced, taskReady, taskKilled),
	fsm.From(taskPlaced).To(taskLaunching, taskLaunched, taskReady, taskKilled),
	fsm.From(taskLaunching).To(taskLaunched, taskFailed, taskKilled, taskLost, taskInitialized),
	fsm.From(taskLaunched).To(taskStarting, taskRunning, taskSucceeded, taskFailed, taskLost, taskKilling, taskKilled, taskPreempting, taskPreempted, taskInitialized),
	fsm.From(taskStarting).To(taskRunning, taskSucceeded, taskFailed, taskLost, taskKilling, taskKilled, taskPreempting, taskPreempted, taskInitialized),
	fsm.From(taskRunning).To(taskSucceeded, taskFailed, taskLost, taskKilling, taskKilled, taskPreempting, taskPreempted, taskInitialized),
	fsm.From(taskKilling).To(taskKilled, taskSucceeded, taskFailed, taskLost, taskPreempted, taskInitialized),
	fsm.From(taskPreempting).To(taskPending, taskKilled, taskInitialized, taskSucceeded, taskFailed, taskLost, taskPreempted),
	fsm.From(taskSucceeded).To(taskInitialized),
	fsm.From(taskFailed).To(taskInitialized),
	fsm.From(taskLost).To(taskInitialized, taskKilled),
	// A run the backend took back (evicted): it runs again, as a lost one
	// does, or a foreign instance ends there.
	fsm.From(taskPreempted).To(taskInitialized, taskKilled),
	fsm.From(taskKilled).To(taskInitialized),
)

// checkTransition returns an error if from -> to is not in the table.
// Staying in the same state is allowed (fsm's rule: an update of other
// fields).
func checkTransition(from, to taskState) error {
	if taskTransitions.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("jobmgr: illegal task transition %s -> %s", from, to)
}

// checkPath is checkTransition for a write that takes a task from from
// through the states via to to: every step must be in the table.
func checkPath(from taskState, via []taskState, to taskState) error {
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
func steps(from taskState, via []taskState, to taskState, f func(taskState)) {
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
func isTerminal(s taskState) bool {
	switch s {
	case taskSucceeded, taskFailed, taskLost, taskKilled, taskPreempted:
		return true
	}
	return false
}

// isActive reports whether a run holds a host (launched and not yet ended).
func isActive(s taskState) bool {
	switch s {
	case taskLaunching, taskLaunched, taskStarting, taskRunning, taskKilling, taskPreempting:
		return true
	}
	return false
}

type jobState = pelotonv1.JobState

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

func checkJobTransition(from, to jobState) error {
	if jobTransitions.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("jobmgr: illegal job transition %s -> %s", from, to)
}

func isJobTerminal(s jobState) bool {
	switch s {
	case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
		return true
	}
	return false
}
