package jobmgr

import (
	"regexp"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// gangLayout is how a job spec splits its instances into gangs: gangs of
// size consecutive instances from instance 0, the last one possibly
// smaller, over the first covered instances. The older
// sla.minimumRunningInstances k is one gang of instances 0..k-1 with every
// other instance alone. A job without gangs has size 0.
type gangLayout struct {
	size    uint32
	covered uint32
}

// gangLayoutOf is spec's gang layout; spec has passed validateJobSpec.
func gangLayoutOf(spec *pelotonv1.JobSpec) gangLayout {
	if g := spec.GetGang(); g.GetSize() > 1 {
		return gangLayout{size: g.Size, covered: extentOf(spec.GetInstanceCount(), spec.GetRemovedInstances())}
	}
	if k := spec.GetSla().GetMinimumRunningInstances(); k > 1 {
		return gangLayout{size: k, covered: k}
	}
	return gangLayout{}
}

// ganged reports whether the layout has any gang.
func (l gangLayout) ganged() bool { return l.size > 1 }

// count is how many gangs there are.
func (l gangLayout) count() uint32 {
	if !l.ganged() {
		return 0
	}
	return (l.covered + l.size - 1) / l.size
}

// of is the gang of inst and its rank in it; ok is false for an instance
// in no gang.
func (l gangLayout) of(inst uint32) (gang, rank uint32, ok bool) {
	if !l.ganged() || inst >= l.covered {
		return 0, 0, false
	}
	return inst / l.size, inst % l.size, true
}

// members is gang g's instances, [first, end).
func (l gangLayout) members(g uint32) (first, end uint32) {
	first = g * l.size
	end = min(first+l.size, l.covered)
	return first, end
}

// hostLabelKeyRE is what a host label key may look like.
var hostLabelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?$`)

// validateGang checks spec.gang against the rest of the spec.
func validateGang(s *pelotonv1.JobSpec) error {
	g := s.GetGang()
	if g == nil {
		return nil
	}
	switch {
	case s.Type != pelotonv1.JobType_BATCH:
		return apierr.Invalid("spec.gang", "gangs are for BATCH jobs; a %s job's instances are kept running one by one", s.Type)
	case s.GetSla().GetMinimumRunningInstances() > 0:
		return apierr.Invalid("spec.gang", "set either spec.gang or spec.sla.minimumRunningInstances, not both")
	case g.Size < 2:
		return apierr.Invalid("spec.gang.size", "must be at least 2, got %d", g.Size)
	case g.Size > s.InstanceCount:
		return apierr.Invalid("spec.gang.size", "must be <= instanceCount %d, got %d", s.InstanceCount, g.Size)
	case s.InstanceCount%g.Size != 0 && !g.AllowPartialLast:
		return apierr.Invalid("spec.gang.size", "instanceCount %d is not a multiple of %d; set spec.gang.allowPartialLast to let the last gang have %d", s.InstanceCount, g.Size, s.InstanceCount%g.Size)
	case s.GetSla().GetMaximumRunningInstances() > 0 && g.Size > s.GetSla().GetMaximumRunningInstances():
		return apierr.Invalid("spec.gang.size", "a gang of %d could never start with sla.maximumRunningInstances %d", g.Size, s.Sla.MaximumRunningInstances)
	case g.SameLabel != "" && !hostLabelKeyRE.MatchString(g.SameLabel):
		return apierr.Invalid("spec.gang.sameLabel", "%q is not a label key: letters, digits, '-', '_', '.', '/', at most 63 characters", g.SameLabel)
	}
	if _, ok := pelotonv1.GangFailurePolicy_name[int32(g.OnMemberFailure)]; !ok {
		return apierr.Invalid("spec.gang.onMemberFailure", "unknown policy %d: one of RESTART_GANG, RESTART_MEMBER", int32(g.OnMemberFailure))
	}
	return nil
}

// validateSelfScale checks spec.selfScale.
func validateSelfScale(s *pelotonv1.JobSpec) error {
	ss := s.GetSelfScale()
	if ss == nil {
		return nil
	}
	switch {
	case s.Type != pelotonv1.JobType_BATCH:
		return apierr.Invalid("spec.selfScale", "self-scaling is for BATCH jobs, not %s", s.Type)
	case ss.Min < 1:
		return apierr.Invalid("spec.selfScale.min", "must be at least 1, got %d", ss.Min)
	case ss.Max < ss.Min:
		return apierr.Invalid("spec.selfScale.max", "must be >= min %d, got %d", ss.Min, ss.Max)
	case ss.Max > MaxInstances:
		return apierr.Invalid("spec.selfScale.max", "at most %d, got %d", MaxInstances, ss.Max)
	case s.InstanceCount < ss.Min || s.InstanceCount > ss.Max:
		return apierr.Invalid("spec.instanceCount", "%d is outside spec.selfScale's %d..%d", s.InstanceCount, ss.Min, ss.Max)
	}
	return nil
}

// gangs is the layout of j's current spec.
func (j *job) gangs() gangLayout { return gangLayoutOf(j.spec()) }

// restartsGangs reports whether a member's failure or loss restarts its
// whole gang: spec.gang's default, RESTART_GANG. The older
// sla.minimumRunningInstances gang, and RESTART_MEMBER, restart the member
// alone.
func (j *job) restartsGangs() bool {
	g := j.spec().GetGang()
	return g.GetSize() > 1 && g.OnMemberFailure != pelotonv1.GangFailurePolicy_RESTART_MEMBER
}

// checkGangScale checks that a scale of a job with spec to count
// instances, with holes (holes.go), keeps whole gangs: the gangs are laid
// over the IDs up to the extent, holes included, so it is the extent that
// must be a whole number of gangs.
func checkGangScale(spec *pelotonv1.JobSpec, count uint32, holes []uint32) error {
	if k := spec.GetSla().GetMinimumRunningInstances(); count < k {
		return apierr.Invalid("instanceCount", "at least the job's gang of %d (sla.minimumRunningInstances), got %d", k, count)
	}
	g := spec.GetGang()
	if g.GetSize() < 2 {
		return nil
	}
	ext := extentOf(count, holes)
	if ext < g.Size {
		return apierr.Invalid("instanceCount", "at least one whole gang of %d (spec.gang.size), got %d", g.Size, count)
	}
	if ext%g.Size != 0 && !g.AllowPartialLast {
		return apierr.Invalid("instanceCount", "%d is not a whole number of gangs of %d (spec.gang.size); set spec.gang.allowPartialLast to allow a smaller last gang", count, g.Size)
	}
	return nil
}
