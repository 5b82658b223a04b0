package federation

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Rollout gates. A RolloutSpec with steps groups a service's clusters:
// each step's clusters update at once; once they all run the new spec with
// every instance healthy, the step soaks (its parts are watched for
// soak_seconds, an unhealthy instance fails the step) and then, with
// approval, waits for the user. The clusters named in no step follow in a
// final step of their own, with no soak and no approval: a service that
// gains a cluster is not refused its updates for it. The gate's state
// (how many steps have passed, when the soak began, since when approval is
// awaited) lives in the rollout record, so a restarted federation resumes
// the soak where it was and keeps an approval given.

// mergeRollout is the rollout an update runs: the service's default with
// every field the update sets taken from the update.
func mergeRollout(def, over *pelotonv1.RolloutSpec) *pelotonv1.RolloutSpec {
	out := &pelotonv1.RolloutSpec{}
	if def != nil {
		out = proto.Clone(def).(*pelotonv1.RolloutSpec)
	}
	if over == nil {
		return out
	}
	if len(over.Order) > 0 {
		out.Order = over.Order
	}
	if len(over.Steps) > 0 {
		out.Steps = over.Steps
	}
	if over.ParallelClusters != 0 {
		out.ParallelClusters = over.ParallelClusters
	}
	if over.Update != nil {
		out.Update = over.Update
	}
	if over.RollbackOnFailure {
		out.RollbackOnFailure = true
	}
	if over.StartPaused {
		out.StartPaused = true
	}
	return out
}

// validateRolloutSteps checks a rollout's steps against the service's
// clusters; at is the rollout's path in the request (spec.rollout,
// rollout).
func validateRolloutSteps(rs *pelotonv1.RolloutSpec, clusters []string, at string) error {
	if len(rs.GetSteps()) == 0 {
		return nil
	}
	switch {
	case len(rs.Order) > 0:
		return apierr.Invalid(at+".order", "cannot be given with %s.steps (the steps give the order)", at)
	case rs.ParallelClusters != 0:
		return apierr.Invalid(at+".parallelClusters", "cannot be given with %s.steps (each step's clusters update at once)", at)
	}
	has := map[string]bool{}
	for _, c := range clusters {
		has[c] = true
	}
	sorted := append([]string(nil), clusters...)
	sort.Strings(sorted)
	seen := map[string]string{}
	for i, st := range rs.Steps {
		field := fmt.Sprintf("%s.steps[%d]", at, i)
		if len(st.Clusters) == 0 {
			return apierr.Invalid(field+".clusters", "required: the clusters this step updates")
		}
		for j, c := range st.Clusters {
			cf := fmt.Sprintf("%s.clusters[%d]", field, j)
			switch {
			case !has[c]:
				return apierr.Invalid(cf, "cluster %s is not one of the service's clusters (%s)", c, strings.Join(sorted, ", "))
			case seen[c] != "":
				return apierr.Invalid(cf, "cluster %s is named already by %s", c, seen[c])
			}
			seen[c] = cf
		}
	}
	return nil
}

// gatedOrder is the clusters of a rollout with steps, in order, each with
// the index of its step; the clusters named in no step come last, in the
// default order (rolloutOrder), with the index after the last step's.
func gatedOrder(parts []*pelotonv1.ServiceCluster, steps []*pelotonv1.RolloutStepSpec) ([]string, []uint32, error) {
	var named []string
	var groups []uint32
	for i, st := range steps {
		for _, c := range st.Clusters {
			named = append(named, c)
			groups = append(groups, uint32(i))
		}
	}
	order, err := rolloutOrder(parts, named)
	if err != nil {
		return nil, nil, err
	}
	for len(groups) < len(order) {
		groups = append(groups, uint32(len(steps)))
	}
	return order, groups, nil
}

// gateState is the gate fields of a rollout as planGated leaves them.
type gateState struct {
	passed        uint32
	soakStart     time.Time
	approvalSince time.Time
	waiting       string
	waitingSince  time.Time
}

func gateOf(r *pelotonv1.ServiceRollout) gateState {
	g := gateState{passed: r.GatesPassed, waiting: r.Waiting}
	if r.SoakStart != nil {
		g.soakStart = r.SoakStart.AsTime()
	}
	if r.ApprovalSince != nil {
		g.approvalSince = r.ApprovalSince.AsTime()
	}
	if r.WaitingSince != nil {
		g.waitingSince = r.WaitingSince.AsTime()
	}
	return g
}

// setGate writes g into r.
func setGate(r *pelotonv1.ServiceRollout, g gateState) {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	r.GatesPassed, r.Waiting = g.passed, g.waiting
	r.SoakStart, r.ApprovalSince, r.WaitingSince = ts(g.soakStart), ts(g.approvalSince), ts(g.waitingSince)
}

// planGated is planRollout for a rolling rollout with steps: the steps of
// the current group start together; once all are done the group soaks,
// watching parts (the service's, as last seen) for unhealthy instances,
// then waits for approval if it asks for it; then the next group starts.
// now is the time of the plan.
func planGated(r *pelotonv1.ServiceRollout, parts []*pelotonv1.ServiceCluster, now time.Time) rolloutPlan {
	plan := rolloutPlan{state: r.State}
	g := gateOf(r)
	last := uint32(0)
	for _, s := range r.Steps {
		last = max(last, s.Group)
	}
	for ; g.passed <= last; g.passed++ {
		var members []int
		done := true
		for i, s := range r.Steps {
			if s.Group != g.passed {
				continue
			}
			members = append(members, i)
			if s.State == pelotonv1.RolloutStepState_STEP_PENDING {
				plan.start = append(plan.start, i)
			}
			if s.State != pelotonv1.RolloutStepState_STEP_DONE {
				done = false
			}
		}
		if !done {
			g.soakStart, g.approvalSince, g.waiting, g.waitingSince = time.Time{}, time.Time{}, "", time.Time{}
			plan.gate = &g
			return plan
		}
		if held := holdGate(r, parts, members, &g, &plan, now); held {
			plan.gate = &g
			return plan
		}
		g.soakStart, g.approvalSince, g.waiting, g.waitingSince = time.Time{}, time.Time{}, "", time.Time{}
	}
	plan.gate = &g
	plan.state = pelotonv1.RolloutState_ROLLOUT_SUCCEEDED
	plan.message = "every cluster runs the new spec"
	return plan
}

// holdGate decides whether group g.passed, whose steps (members) are all
// done, still holds the rollout: soaking, or waiting for approval. A part
// found unhealthy during the soak fails the group's steps (plan.fail).
func holdGate(r *pelotonv1.ServiceRollout, parts []*pelotonv1.ServiceCluster, members []int, g *gateState, plan *rolloutPlan, now time.Time) bool {
	var spec *pelotonv1.RolloutStepSpec
	if int(g.passed) < len(r.Spec.GetSteps()) {
		spec = r.Spec.Steps[g.passed]
	}
	names := make([]string, 0, len(members))
	for _, i := range members {
		names = append(names, r.Steps[i].Cluster)
	}
	what := fmt.Sprintf("step %d (clusters %s)", g.passed+1, strings.Join(names, ", "))
	if soak := time.Duration(spec.GetSoakSeconds()) * time.Second; soak > 0 {
		if g.soakStart.IsZero() {
			g.soakStart = now
		}
		for _, p := range parts {
			if !slices.Contains(names, p.Cluster) || p.Healthy >= p.Desired {
				continue
			}
			plan.fail = members
			plan.failMessage = fmt.Sprintf("cluster %s: %d of %d instances healthy during the soak of %s", p.Cluster, p.Healthy, p.Desired, what)
			return true
		}
		if until := g.soakStart.Add(soak); now.Before(until) {
			g.waiting = fmt.Sprintf("soak of %s until %s", what, until.UTC().Format("15:04:05 UTC"))
			g.waitingSince = g.soakStart
			return true
		}
	}
	if spec.GetApproval() {
		if g.approvalSince.IsZero() {
			g.approvalSince = now
		}
		g.waiting = fmt.Sprintf("approval of %s (peloton fed service approve)", what)
		g.waitingSince = g.approvalSince
		return true
	}
	return false
}

// gateEqual reports whether two gate states are the same.
func gateEqual(a, b gateState) bool {
	return a.passed == b.passed && a.waiting == b.waiting && a.soakStart.Equal(b.soakStart) &&
		a.approvalSince.Equal(b.approvalSince) && a.waitingSince.Equal(b.waitingSince)
}
