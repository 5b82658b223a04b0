package jobmgr

import (
	"fmt"
	"slices"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Instance-number holes. A job's instances are the first
// spec.instanceCount IDs not listed in spec.removedInstances (the holes),
// so a job of 10 with 3 and 7 removed has 8 instances, 0..9 less 3 and 7.
// The extent is one past the highest of them: the task slice is that long,
// and a hole's slot holds nil once its last run is stopped and its record
// deleted (a task while it is being stopped).
//
// Holes are never filled again: a scale-up adds IDs above the highest,
// and the holes stay in the list even when a scale-down by count leaves
// them above the extent. A driver that removed executor 3 must never see
// a new executor 3 it could take for the old one (its logs, its run
// history, its peers' address books all name instances by ID), and
// keeping every hole makes "the first count IDs not removed" the whole
// rule, with no choice of which hole to fill. (A scale-down by count
// alone still takes the highest instances, and a scale-up gives their IDs
// out again, as before holes existed; their run ids stay above every
// removed run, status.removedRunId.)
//
// The holes live in the spec, so each change is one new spec version,
// written in one transaction, and a restart recovers them with the spec.

// extentOf is one past the highest instance of a spec of count instances
// with holes (sorted, ascending).
func extentOf(count uint32, holes []uint32) uint32 {
	e := count
	for _, h := range holes {
		if h >= e {
			break
		}
		e++
	}
	return e
}

// holeSet is the holes, for lookups; nil when none.
func holeSet(holes []uint32) map[uint32]bool {
	if len(holes) == 0 {
		return nil
	}
	set := make(map[uint32]bool, len(holes))
	for _, h := range holes {
		set[h] = true
	}
	return set
}

// hasInstance reports whether the version's instances include inst.
func (v *jobVersion) hasInstance(inst uint32) bool {
	return inst < v.extent && !v.holes[inst]
}

// isHole reports whether inst is a removed instance of j.
func (j *job) isHole(inst uint32) bool { return j.current().holes[inst] }

// removed reports whether inst is a hole of j whose removal is done: no
// instance, listed nowhere. One still being stopped is listed, as an
// instance beyond a smaller count is until it is removed.
func (j *job) removed(inst uint32) bool { return j.task(inst) == nil && j.isHole(inst) }

// HasInstance reports whether a job whose spec is s has instance inst,
// holes considered: the API asks it of an archived job.
func HasInstance(s *pelotonv1.JobSpec, inst uint32) bool {
	if s.GetType() == pelotonv1.JobType_DAEMON {
		return true
	}
	return inst < InstanceExtent(s) && !slices.Contains(s.GetRemovedInstances(), inst)
}

// InstanceExtent is one past the highest instance ID of a job whose spec
// is s: the IDs its instances (and gangs) are laid over, holes included.
func InstanceExtent(s *pelotonv1.JobSpec) uint32 {
	return extentOf(s.GetInstanceCount(), s.GetRemovedInstances())
}

// liveTasks is how many instances j has in memory: its task slice less
// the holes whose removal is done.
func (j *job) liveTasks() int32 {
	var n int32
	for s := range j.counts {
		n += j.counts[s].Load()
	}
	return n
}

// planRemoval checks the instances a ScaleJob asks to remove from a job
// whose spec is cur and returns the spec's new holes (sorted) and the count: count itself, or the current count less
// the removed ones when count is 0. Nothing is changed.
func planRemoval(jobID string, cur *jobVersion, count uint32, remove []uint32) ([]uint32, uint32, error) {
	spec := cur.spec
	seen := map[uint32]int{}
	for i, inst := range remove {
		field := fmt.Sprintf("removeInstances[%d]", i)
		if !cur.hasInstance(inst) {
			return nil, 0, apierr.NotFound("%s: job %s has no instance %d", field, jobID, inst)
		}
		if first, dup := seen[inst]; dup {
			return nil, 0, apierr.Invalid(field, "instance %d is listed twice (also removeInstances[%d])", inst, first)
		}
		seen[inst] = i
	}
	if err := checkGangRemoval(spec, cur, remove); err != nil {
		return nil, 0, err
	}
	live := spec.InstanceCount - uint32(len(remove))
	if count == 0 {
		count = live
	}
	if count == 0 {
		return nil, 0, apierr.FailedPrecondition("removeInstances: would remove every instance of job %s; cancel the job instead", jobID)
	}
	if ss := spec.GetSelfScale(); ss != nil && count < ss.Min {
		return nil, 0, apierr.FailedPrecondition("removeInstances: job %s would have %d instances, fewer than spec.selfScale.min %d", jobID, count, ss.Min)
	}
	if k := spec.GetSla().GetMinimumRunningInstances(); count < k {
		return nil, 0, apierr.FailedPrecondition("removeInstances: job %s would have %d instances, fewer than sla.minimumRunningInstances %d", jobID, count, k)
	}
	holes := append(slices.Clone(spec.RemovedInstances), remove...)
	slices.Sort(holes)
	return holes, count, nil
}

// checkGangRemoval refuses to remove part of a gang: a gang runs whole,
// so it goes whole or stays whole. The older sla.minimumRunningInstances
// gang (instances 0..k-1) cannot be removed at all: it is the job's first
// k instances by definition.
func checkGangRemoval(spec *pelotonv1.JobSpec, cur *jobVersion, remove []uint32) error {
	l := gangLayoutOf(spec)
	if !l.ganged() {
		return nil
	}
	if spec.GetGang().GetSize() < 2 {
		for i, inst := range remove {
			if inst < l.covered {
				return apierr.FailedPrecondition("removeInstances[%d]: instance %d is in the job's gang of %d (sla.minimumRunningInstances), which cannot be removed", i, inst, l.size)
			}
		}
		return nil
	}
	gone := map[uint32]bool{}
	for _, inst := range remove {
		gone[inst] = true
	}
	for i, inst := range remove {
		g, _, ok := l.of(inst)
		if !ok {
			continue
		}
		first, end := l.members(g)
		for m := first; m < end; m++ {
			if cur.hasInstance(m) && !gone[m] {
				return apierr.FailedPrecondition("removeInstances[%d]: instance %d is in gang %d (instances %d..%d); remove the whole gang or none of it (instance %d is not listed)", i, inst, g, first, end-1, m)
			}
		}
	}
	return nil
}
