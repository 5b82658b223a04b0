package jobmgr

import (
	"maps"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// cloneStatus copies a task's runtime for a change: every field, with the
// messages it points to (timestamps, transitions, usage) shared rather
// than copied. They are never changed in place - a change replaces them -
// so the copy and the original never see each other's changes; the slice
// of transitions is cut to its length, so that an append makes its own
// array, and the map of ports is copied. proto.Clone did the same by
// reflection, deep, at a tenth of the launch path's CPU.
//
// TestCloneStatusCopiesEveryField fails when TaskStatus gains a field
// this does not copy.
func cloneStatus(rt *pelotonv1.TaskStatus) *pelotonv1.TaskStatus {
	c := &pelotonv1.TaskStatus{
		State:              rt.State,
		GoalState:          rt.GoalState,
		RunId:              rt.RunId,
		Host:               rt.Host,
		ExitCode:           rt.ExitCode,
		Reason:             rt.Reason,
		Message:            rt.Message,
		FailureCount:       rt.FailureCount,
		StartTime:          rt.StartTime,
		CompletionTime:     rt.CompletionTime,
		UpdateTime:         rt.UpdateTime,
		DesiredRunId:       rt.DesiredRunId,
		PendingReason:      rt.PendingReason,
		History:            rt.History[:len(rt.History):len(rt.History)],
		PreviousHost:       rt.PreviousHost,
		SpecVersion:        rt.SpecVersion,
		Health:             rt.Health,
		BoundHost:          rt.BoundHost,
		Ports:              maps.Clone(rt.Ports),
		DesiredSpecVersion: rt.DesiredSpecVersion,
		RestartInPlace:     rt.RestartInPlace,
		Usage:              rt.Usage,
		Revocable:          rt.Revocable,
	}
	if u := rt.ProtoReflect().GetUnknown(); len(u) > 0 {
		c.ProtoReflect().SetUnknown(u) // a newer version's fields, kept
	}
	return c
}
