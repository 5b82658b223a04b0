package hostmgr

import pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"

// RunRank orders the states of a run's events (TaskEvent.State) along its
// life: 1 LAUNCHED, 2 RUNNING, 3 the terminal states (SUCCEEDED, FAILED,
// KILLED, LOST), 0 anything else. A backend never reports a run's state of
// a lower rank after a higher one, nor anything after rank 3.
func RunRank(s pelotonv1.TaskState) int {
	switch s {
	case pelotonv1.TaskState_LAUNCHED:
		return 1
	case pelotonv1.TaskState_RUNNING:
		return 2
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST,
		pelotonv1.TaskState_PREEMPTED:
		return 3
	}
	return 0
}
