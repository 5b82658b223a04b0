package cli

import (
	"fmt"
	"slices"
	"strings"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The job and task state names users type. Job states are JOB_ prefixed in
// the API; users may leave the prefix off and use any case, so SUCCEEDED,
// succeeded and JOB_SUCCEEDED all name JOB_SUCCEEDED.

// parseJobState parses one job state name.
func parseJobState(s string) (pelotonv1.JobState, error) {
	name := normalizeState(s)
	if !strings.HasPrefix(name, "JOB_") {
		name = "JOB_" + name
	}
	v, ok := pelotonv1.JobState_value[name]
	if !ok || v == int32(pelotonv1.JobState_JOB_STATE_UNSPECIFIED) {
		return 0, fmt.Errorf("unknown job state %q (want one of %s)", s, strings.Join(jobStateNames(), ", "))
	}
	return pelotonv1.JobState(v), nil
}

// parseTaskState parses one task state name; a TASK_ prefix is tolerated.
func parseTaskState(s string) (pelotonv1.TaskState, error) {
	name := normalizeState(s)
	v, ok := pelotonv1.TaskState_value[name]
	if !ok {
		v, ok = pelotonv1.TaskState_value[strings.TrimPrefix(name, "TASK_")]
	}
	if !ok || v == int32(pelotonv1.TaskState_TASK_STATE_UNSPECIFIED) {
		return 0, fmt.Errorf("unknown task state %q (want one of %s)", s, strings.Join(taskStateNames(), ", "))
	}
	return pelotonv1.TaskState(v), nil
}

// parseJobStates parses the values of a repeated state flag; errors are
// usage errors naming the flag.
func parseJobStates(flag string, in []string) ([]pelotonv1.JobState, error) {
	out := make([]pelotonv1.JobState, 0, len(in))
	for _, s := range in {
		st, err := parseJobState(s)
		if err != nil {
			return nil, usageErrorf("invalid --%s: %v", flag, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// parseTaskStates is parseJobStates for task states.
func parseTaskStates(flag string, in []string) ([]pelotonv1.TaskState, error) {
	out := make([]pelotonv1.TaskState, 0, len(in))
	for _, s := range in {
		st, err := parseTaskState(s)
		if err != nil {
			return nil, usageErrorf("invalid --%s: %v", flag, err)
		}
		out = append(out, st)
	}
	return out, nil
}

func normalizeState(s string) string {
	return strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
}

// jobStateNames lists the job states in lifecycle order, without the prefix.
func jobStateNames() []string {
	var names []string
	for v := int32(1); ; v++ {
		n, ok := pelotonv1.JobState_name[v]
		if !ok {
			return names
		}
		names = append(names, strings.TrimPrefix(n, "JOB_"))
	}
}

// taskStateNames lists the task states in lifecycle order.
func taskStateNames() []string {
	var names []string
	for v := int32(1); ; v++ {
		n, ok := pelotonv1.TaskState_name[v]
		if !ok {
			return names
		}
		names = append(names, n)
	}
}

// jobTerminal reports whether a job in state s will never change state again.
func jobTerminal(s pelotonv1.JobState) bool {
	return slices.Contains([]pelotonv1.JobState{
		pelotonv1.JobState_JOB_SUCCEEDED,
		pelotonv1.JobState_JOB_FAILED,
		pelotonv1.JobState_JOB_KILLED,
	}, s)
}
