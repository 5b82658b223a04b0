package federation

import (
	"fmt"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Rollouts of federated services. An update of a service makes a new spec
// version and a rollout: one step per cluster, in order, each carried by
// an update in that cluster. planRollout (pure) decides which steps start
// and what the rollout becomes; the rollout loop applies it to the record,
// and each cluster's worker carries out its own step (syncRolloutStep).

// rolloutOrder is the order of a rollout's steps: the clusters the user
// named, then the rest by the default order (the smallest part first, the
// canary, then by name). Naming a cluster that runs no part, or one twice,
// is an InvalidArgument naming the entry.
func rolloutOrder(parts []*pelotonv1.ServiceCluster, order []string) ([]string, error) {
	has := map[string]bool{}
	for _, p := range parts {
		has[p.Cluster] = true
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(parts))
	for i, name := range order {
		field := fmt.Sprintf("rollout.order[%d]", i)
		switch {
		case !has[name]:
			return nil, apierr.Invalid(field, "cluster %q runs no part of this service (%s)", name, partList(parts))
		case seen[name]:
			return nil, apierr.Invalid(field, "cluster %s is given twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	rest := make([]*pelotonv1.ServiceCluster, 0, len(parts))
	for _, p := range parts {
		if !seen[p.Cluster] {
			rest = append(rest, p)
		}
	}
	sort.Slice(rest, func(a, b int) bool {
		if rest[a].Desired != rest[b].Desired {
			return rest[a].Desired < rest[b].Desired
		}
		return rest[a].Cluster < rest[b].Cluster
	})
	for _, p := range rest {
		out = append(out, p.Cluster)
	}
	return out, nil
}

func partList(parts []*pelotonv1.ServiceCluster) string {
	names := make([]string, 0, len(parts))
	for _, p := range parts {
		names = append(names, p.Cluster)
	}
	sort.Strings(names)
	return fmt.Sprintf("its clusters: %v", names)
}

// rolloutPlan is what planRollout decides: steps to start (indexes), steps
// to start rolling back, and the rollout's next state (unchanged if the
// same) with why.
type rolloutPlan struct {
	start    []int
	rollback []int
	state    pelotonv1.RolloutState
	message  string
	// Steps that fail, and why (a health failure during a soak), and the
	// gate state of a rollout with steps (nil: unchanged).
	fail        []int
	failMessage string
	gate        *gateState
}

// planRollout is the next move of rollout r of a service whose parts are
// as last seen, at time now. It is pure.
//
// Rolling: the first step runs alone (the canary); once one step is done,
// up to parallelClusters run at once, in order. A failed step fails the
// rollout, or turns it to rolling back when the spec says so; every step
// done makes it succeeded. Rolling back: the steps that were started are
// returned one at a time, the last started first; when none is left the
// rollout is rolled back, unless a step could not be returned (then it
// failed). Other states wait for the user. A rollout with steps goes
// group by group through their gates (planGated).
func planRollout(r *pelotonv1.ServiceRollout, parts []*pelotonv1.ServiceCluster, now time.Time) rolloutPlan {
	plan := rolloutPlan{state: r.State}
	steps := r.Steps
	switch r.State {
	case pelotonv1.RolloutState_ROLLOUT_ROLLING:
		for _, s := range steps {
			if s.State != pelotonv1.RolloutStepState_STEP_FAILED {
				continue
			}
			if !r.Spec.GetRollbackOnFailure() {
				plan.state = pelotonv1.RolloutState_ROLLOUT_FAILED
				plan.message = fmt.Sprintf("cluster %s failed (%s); the rollout stops here", s.Cluster, s.Message)
				return plan
			}
			// Rolling back, and its first move at once.
			back := planRollout(&pelotonv1.ServiceRollout{State: pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK, Steps: steps, Spec: r.Spec}, parts, now)
			if back.state == pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK {
				back.message = fmt.Sprintf("cluster %s failed (%s); rolling back", s.Cluster, s.Message)
			}
			return back
		}
		if len(r.Spec.GetSteps()) > 0 {
			return planGated(r, parts, now)
		}
		done, updating := 0, 0
		for _, s := range steps {
			switch s.State {
			case pelotonv1.RolloutStepState_STEP_DONE:
				done++
			case pelotonv1.RolloutStepState_STEP_UPDATING:
				updating++
			}
		}
		if done == len(steps) {
			plan.state = pelotonv1.RolloutState_ROLLOUT_SUCCEEDED
			plan.message = "every cluster runs the new spec"
			return plan
		}
		allowed := 1
		if done > 0 {
			allowed = int(max(r.Spec.GetParallelClusters(), 1))
		}
		for i, s := range steps {
			if updating >= allowed {
				break
			}
			if s.State == pelotonv1.RolloutStepState_STEP_PENDING {
				plan.start = append(plan.start, i)
				updating++
			}
		}
	case pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK:
		for _, s := range steps {
			if s.State == pelotonv1.RolloutStepState_STEP_ROLLING_BACK {
				return plan // one at a time
			}
		}
		for i := len(steps) - 1; i >= 0; i-- {
			switch steps[i].State {
			case pelotonv1.RolloutStepState_STEP_FAILED:
				if steps[i].RollbackUpdateId != "" {
					plan.state = pelotonv1.RolloutState_ROLLOUT_FAILED
					plan.message = fmt.Sprintf("cluster %s could not be rolled back (%s)", steps[i].Cluster, steps[i].Message)
					return plan
				}
				plan.rollback = []int{i}
				return plan
			case pelotonv1.RolloutStepState_STEP_DONE, pelotonv1.RolloutStepState_STEP_UPDATING, pelotonv1.RolloutStepState_STEP_ABORTED:
				plan.rollback = []int{i}
				return plan
			}
		}
		plan.state = pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK
		plan.message = "every cluster runs the previous spec again"
	}
	return plan
}

// rolloutActive reports whether a rollout still moves (or waits paused).
func rolloutActive(r *pelotonv1.ServiceRollout) bool {
	switch r.GetState() {
	case pelotonv1.RolloutState_ROLLOUT_ROLLING, pelotonv1.RolloutState_ROLLOUT_PAUSED, pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK:
		return true
	}
	return false
}
