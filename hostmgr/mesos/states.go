package mesos

import (
	"regexp"
	"strconv"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Reasons of the events this backend reports beyond the shared ones.
const (
	ReasonKilled         = "killed"
	ReasonExitNonzero    = "exit-nonzero"
	ReasonLaunchFailed   = "launch-failed"
	ReasonAgentLost      = "agent-lost"
	ReasonUnknownToMesos = "unknown-to-mesos"
	ReasonMesosDropped   = "mesos-dropped"
	ReasonMesosLost      = "mesos-lost"
)

// exitStatus finds the exit code in the message Mesos' command executor
// gives a failed task ("Command exited with status 3").
var exitStatus = regexp.MustCompile(`exited with status (\d+)`)

// mapped is what one Mesos task state means to Peloton.
type mapped struct {
	State    pelotonv1.TaskState
	Reason   string
	ExitCode int32
	// Skip: the update says nothing Peloton tracks (TASK_KILLING: the run
	// still runs until KILLED).
	Skip bool
}

// mapStatus maps a Mesos task status to a Peloton task state: the one
// table of the backend.
//
//	TASK_STAGING, TASK_STARTING       LAUNCHED
//	TASK_RUNNING                      RUNNING (healthy → Health)
//	TASK_KILLING                      (no change)
//	TASK_FINISHED                     SUCCEEDED, exit 0
//	TASK_FAILED                       FAILED exit-nonzero, exit code from the message
//	TASK_KILLED                       KILLED killed
//	TASK_ERROR                        FAILED launch-failed (Mesos refused the task)
//	TASK_DROPPED                      LOST mesos-dropped (never started)
//	TASK_LOST, GONE, GONE_BY_OPERATOR LOST mesos-lost, or agent-lost when the agent went
//	TASK_UNREACHABLE                  LOST agent-lost
//	TASK_UNKNOWN                      LOST unknown-to-mesos
func mapStatus(st *mesosv1.TaskStatus) mapped {
	reason := st.GetReason()
	agentGone := reason == mesosv1.REASON_AGENT_REMOVED || reason == mesosv1.REASON_AGENT_DISCONNECTED ||
		reason == mesosv1.REASON_AGENT_UNKNOWN || reason == mesosv1.REASON_AGENT_REMOVED_BY_OPERATOR
	switch st.GetState() {
	case mesosv1.TASK_STAGING, mesosv1.TASK_STARTING:
		return mapped{State: pelotonv1.TaskState_LAUNCHED}
	case mesosv1.TASK_RUNNING:
		return mapped{State: pelotonv1.TaskState_RUNNING}
	case mesosv1.TASK_KILLING:
		return mapped{Skip: true}
	case mesosv1.TASK_FINISHED:
		return mapped{State: pelotonv1.TaskState_SUCCEEDED}
	case mesosv1.TASK_FAILED:
		code := int32(1)
		if m := exitStatus.FindStringSubmatch(st.GetMessage()); m != nil {
			if n, err := strconv.ParseInt(m[1], 10, 32); err == nil {
				code = int32(n)
			}
		}
		return mapped{State: pelotonv1.TaskState_FAILED, Reason: ReasonExitNonzero, ExitCode: code}
	case mesosv1.TASK_KILLED:
		return mapped{State: pelotonv1.TaskState_KILLED, Reason: ReasonKilled}
	case mesosv1.TASK_ERROR:
		return mapped{State: pelotonv1.TaskState_FAILED, Reason: ReasonLaunchFailed}
	case mesosv1.TASK_DROPPED:
		return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonMesosDropped}
	case mesosv1.TASK_UNREACHABLE:
		return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonAgentLost}
	case mesosv1.TASK_UNKNOWN:
		return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonUnknownToMesos}
	default: // TASK_LOST, TASK_GONE, TASK_GONE_BY_OPERATOR
		if agentGone {
			return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonAgentLost}
		}
		if reason == mesosv1.REASON_RECONCILIATION {
			return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonUnknownToMesos}
		}
		return mapped{State: pelotonv1.TaskState_LOST, Reason: ReasonMesosLost}
	}
}

func terminal(s pelotonv1.TaskState) bool { return hostmgr.RunRank(s) == 3 }

// rank orders a run's states, so that a late or redelivered update never
// takes a run back.
func rank(s pelotonv1.TaskState) int { return hostmgr.RunRank(s) }
