package federation

import (
	"reflect"
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestRolloutOrder(t *testing.T) {
	parts := []*pelotonv1.ServiceCluster{{Cluster: "a", Desired: 10}, {Cluster: "b", Desired: 4}, {Cluster: "c", Desired: 10}, {Cluster: "d", Desired: 4}}
	for _, tc := range []struct {
		order []string
		want  []string
		err   string
	}{
		{nil, []string{"b", "d", "a", "c"}, ""}, // the smallest part first (the canary), ties by name
		{[]string{"c"}, []string{"c", "b", "d", "a"}, ""},
		{[]string{"a", "c", "b", "d"}, []string{"a", "c", "b", "d"}, ""},
		{[]string{"zz"}, nil, `rollout.order[0]: cluster "zz" runs no part of this service (its clusters: [a b c d])`},
		{[]string{"a", "a"}, nil, "rollout.order[1]: cluster a is given twice"},
	} {
		got, err := rolloutOrder(parts, tc.order)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("order %v: err %v, want %q", tc.order, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("order %v: %v %v, want %v", tc.order, got, err, tc.want)
		}
	}
}

func TestPlanRollout(t *testing.T) {
	const (
		P  = pelotonv1.RolloutStepState_STEP_PENDING
		U  = pelotonv1.RolloutStepState_STEP_UPDATING
		D  = pelotonv1.RolloutStepState_STEP_DONE
		F  = pelotonv1.RolloutStepState_STEP_FAILED
		RB = pelotonv1.RolloutStepState_STEP_ROLLING_BACK
		RD = pelotonv1.RolloutStepState_STEP_ROLLED_BACK
		A  = pelotonv1.RolloutStepState_STEP_ABORTED

		rolling     = pelotonv1.RolloutState_ROLLOUT_ROLLING
		rollingBack = pelotonv1.RolloutState_ROLLOUT_ROLLING_BACK
		failed      = pelotonv1.RolloutState_ROLLOUT_FAILED
	)
	rollout := func(st pelotonv1.RolloutState, parallel uint32, rollback bool, states ...pelotonv1.RolloutStepState) *pelotonv1.ServiceRollout {
		r := &pelotonv1.ServiceRollout{State: st, Spec: &pelotonv1.RolloutSpec{ParallelClusters: parallel, RollbackOnFailure: rollback}}
		for i, s := range states {
			r.Steps = append(r.Steps, &pelotonv1.RolloutStep{Cluster: string(rune('a' + i)), State: s})
		}
		return r
	}
	cases := []struct {
		name     string
		r        *pelotonv1.ServiceRollout
		start    []int
		rollback []int
		state    pelotonv1.RolloutState
	}{
		{"the canary alone first, even with parallel 3", rollout(rolling, 3, false, P, P, P, P), []int{0}, nil, rolling},
		{"canary under way: nothing else", rollout(rolling, 3, false, U, P, P, P), nil, nil, rolling},
		{"canary done: parallel 3 at once", rollout(rolling, 3, false, D, P, P, P), []int{1, 2, 3}, nil, rolling},
		{"one at a time by default", rollout(rolling, 0, false, D, U, P), nil, nil, rolling},
		{"the next when a slot frees", rollout(rolling, 2, false, D, D, U, P, P), []int{3}, nil, rolling},
		{"all done", rollout(rolling, 1, false, D, D, D), nil, nil, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED},
		{"a failure stops it", rollout(rolling, 1, false, D, F, P), nil, nil, failed},
		{"a failure rolls back the failed step first", rollout(rolling, 1, true, D, F, P), nil, []int{1}, rollingBack},
		{"then the one before it", rollout(rollingBack, 1, true, D, RD, P), nil, []int{0}, rollingBack},
		{"one rollback at a time", rollout(rollingBack, 1, true, D, RB, P), nil, nil, rollingBack},
		{"updating and aborted steps are rolled back too, newest first", rollout(rollingBack, 2, false, D, A, U, P), nil, []int{2}, rollingBack},
		{"nothing left: rolled back", rollout(rollingBack, 1, true, RD, RD, P), nil, nil, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK},
		{"a step that could not be returned fails it", func() *pelotonv1.ServiceRollout {
			r := rollout(rollingBack, 1, true, D, F, RD)
			r.Steps[1].RollbackUpdateId = "u-1"
			return r
		}(), nil, nil, failed},
		{"paused: nothing", rollout(pelotonv1.RolloutState_ROLLOUT_PAUSED, 1, false, D, P), nil, nil, pelotonv1.RolloutState_ROLLOUT_PAUSED},
	}
	for _, tc := range cases {
		got := planRollout(tc.r, nil, time.Time{})
		if !reflect.DeepEqual(got.start, tc.start) || !reflect.DeepEqual(got.rollback, tc.rollback) || got.state != tc.state {
			t.Errorf("%s: start %v rollback %v state %s; want %v %v %s", tc.name, got.start, got.rollback, got.state, tc.start, tc.rollback, tc.state)
		}
	}
}

func TestValidateRolloutSteps(t *testing.T) {
	clusters := []string{"a", "b", "c"}
	step := func(soak uint32, approval bool, cs ...string) *pelotonv1.RolloutStepSpec {
		return &pelotonv1.RolloutStepSpec{Clusters: cs, SoakSeconds: soak, Approval: approval}
	}
	for _, tc := range []struct {
		rs  *pelotonv1.RolloutSpec
		err string
	}{
		{nil, ""},
		{&pelotonv1.RolloutSpec{Order: []string{"a"}}, ""},
		{&pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{step(600, true, "a"), step(0, false, "b", "c")}}, ""},
		{&pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{step(0, false, "a"), step(0, false, "b", "zz")}},
			"spec.rollout.steps[1].clusters[1]: cluster zz is not one of the service's clusters (a, b, c)"},
		{&pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{step(0, false, "a"), step(0, false, "a")}},
			"spec.rollout.steps[1].clusters[0]: cluster a is named already by spec.rollout.steps[0].clusters[0]"},
		{&pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{step(1, false)}}, "spec.rollout.steps[0].clusters: required"},
		{&pelotonv1.RolloutSpec{Order: []string{"a"}, Steps: []*pelotonv1.RolloutStepSpec{step(0, false, "a")}}, "spec.rollout.order: cannot be given with spec.rollout.steps"},
		{&pelotonv1.RolloutSpec{ParallelClusters: 2, Steps: []*pelotonv1.RolloutStepSpec{step(0, false, "a")}}, "spec.rollout.parallelClusters: cannot be given with spec.rollout.steps"},
	} {
		err := validateRolloutSteps(tc.rs, clusters, "spec.rollout")
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: err %v, want %q", tc.rs, err, tc.err)
		}
	}
}

func TestMergeRollout(t *testing.T) {
	def := &pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{{Clusters: []string{"a"}, Approval: true}},
		Update: &pelotonv1.UpdateSpec{BatchSize: 3}}
	got := mergeRollout(def, &pelotonv1.RolloutSpec{RollbackOnFailure: true, Update: &pelotonv1.UpdateSpec{BatchSize: 1}})
	if len(got.Steps) != 1 || !got.Steps[0].Approval || !got.RollbackOnFailure || got.Update.BatchSize != 1 {
		t.Errorf("merged %v", got)
	}
	if def.RollbackOnFailure || def.Update.BatchSize != 3 {
		t.Errorf("the default changed: %v", def)
	}
	if got := mergeRollout(nil, nil); got == nil || len(got.Steps) != 0 {
		t.Errorf("merge of nothing: %v", got)
	}
}

func TestGatedOrder(t *testing.T) {
	parts := []*pelotonv1.ServiceCluster{{Cluster: "a", Desired: 10}, {Cluster: "b", Desired: 4}, {Cluster: "c", Desired: 10}, {Cluster: "d", Desired: 4}}
	order, groups, err := gatedOrder(parts, []*pelotonv1.RolloutStepSpec{{Clusters: []string{"c"}}, {Clusters: []string{"a", "b"}}})
	if err != nil || !reflect.DeepEqual(order, []string{"c", "a", "b", "d"}) || !reflect.DeepEqual(groups, []uint32{0, 1, 1, 2}) {
		t.Errorf("order %v groups %v err %v", order, groups, err)
	}
}

// TestPlanGated walks a rollout with steps through its gates with a
// clock the test moves.
func TestPlanGated(t *testing.T) {
	const (
		P = pelotonv1.RolloutStepState_STEP_PENDING
		U = pelotonv1.RolloutStepState_STEP_UPDATING
		D = pelotonv1.RolloutStepState_STEP_DONE
	)
	t0 := time.Date(2026, 1, 2, 12, 20, 0, 0, time.UTC)
	spec := &pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{{Clusters: []string{"a"}, SoakSeconds: 600, Approval: true}, {Clusters: []string{"b", "c"}}}}
	r := &pelotonv1.ServiceRollout{State: pelotonv1.RolloutState_ROLLOUT_ROLLING, Spec: spec, Steps: []*pelotonv1.RolloutStep{
		{Cluster: "a", State: P, Group: 0}, {Cluster: "b", State: P, Group: 1}, {Cluster: "c", State: P, Group: 1}, {Cluster: "d", State: P, Group: 2}}}
	parts := []*pelotonv1.ServiceCluster{{Cluster: "a", Desired: 2, Healthy: 2}, {Cluster: "b", Desired: 2, Healthy: 2}, {Cluster: "c", Desired: 2, Healthy: 2}, {Cluster: "d", Desired: 2, Healthy: 2}}
	set := func(states ...pelotonv1.RolloutStepState) {
		for i, s := range states {
			r.Steps[i].State = s
		}
	}
	apply := func(p rolloutPlan) {
		if p.gate != nil {
			setGate(r, *p.gate)
		}
	}

	plan := planRollout(r, parts, t0)
	if !reflect.DeepEqual(plan.start, []int{0}) {
		t.Fatalf("first: start %v, want the first step's cluster alone", plan.start)
	}
	set(D, P, P, P)
	plan = planRollout(r, parts, t0)
	apply(plan)
	if len(plan.start) != 0 || r.Waiting != "soak of step 1 (clusters a) until 12:30:00 UTC" || !r.SoakStart.AsTime().Equal(t0) || !r.WaitingSince.AsTime().Equal(t0) {
		t.Fatalf("step 1 done: start %v, waiting %q since %v", plan.start, r.Waiting, r.WaitingSince)
	}
	// Mid-soak (as after a restart: the soak start is in the record) it
	// still waits, and the soak's start stays.
	plan = planRollout(r, parts, t0.Add(5*time.Minute))
	apply(plan)
	if len(plan.start) != 0 || !r.SoakStart.AsTime().Equal(t0) {
		t.Fatalf("mid-soak: start %v, soak start %v", plan.start, r.SoakStart)
	}
	// Soaked: approval is awaited from then on.
	t1 := t0.Add(10 * time.Minute)
	plan = planRollout(r, parts, t1)
	apply(plan)
	if len(plan.start) != 0 || r.Waiting != "approval of step 1 (clusters a) (peloton fed service approve)" || !r.ApprovalSince.AsTime().Equal(t1) {
		t.Fatalf("soaked: start %v, waiting %q since %v", plan.start, r.Waiting, r.ApprovalSince)
	}
	plan = planRollout(r, parts, t1.Add(time.Hour))
	if len(plan.start) != 0 || plan.state != pelotonv1.RolloutState_ROLLOUT_ROLLING {
		t.Fatalf("approval not given: start %v", plan.start)
	}
	// Approved (what ControlRollout does): step 2's clusters at once.
	setGate(r, gateState{passed: 1})
	plan = planRollout(r, parts, t1.Add(time.Hour))
	apply(plan)
	if !reflect.DeepEqual(plan.start, []int{1, 2}) || r.Waiting != "" {
		t.Fatalf("approved: start %v, waiting %q", plan.start, r.Waiting)
	}
	// Step 2 has no gate: the final step (the cluster named nowhere)
	// follows, and then the rollout succeeded.
	set(D, D, D, U)
	plan = planRollout(r, parts, t1.Add(time.Hour))
	apply(plan)
	if len(plan.start) != 0 || r.GatesPassed != 2 {
		t.Fatalf("step 2 done: start %v, gates passed %d", plan.start, r.GatesPassed)
	}
	set(D, D, D, D)
	if plan = planRollout(r, parts, t1.Add(time.Hour)); plan.state != pelotonv1.RolloutState_ROLLOUT_SUCCEEDED || plan.gate.passed != 3 {
		t.Fatalf("all done: %s, gates passed %d", plan.state, plan.gate.passed)
	}

	// An unhealthy instance during a soak fails the step's clusters.
	r2 := &pelotonv1.ServiceRollout{State: pelotonv1.RolloutState_ROLLOUT_ROLLING, Spec: spec, SoakStart: r.SoakStart,
		Steps: []*pelotonv1.RolloutStep{{Cluster: "a", State: D}, {Cluster: "b", State: P, Group: 1}}}
	parts[0].Healthy = 1
	plan = planRollout(r2, parts, t0.Add(time.Minute))
	if !reflect.DeepEqual(plan.fail, []int{0}) || plan.failMessage != "cluster a: 1 of 2 instances healthy during the soak of step 1 (clusters a)" || len(plan.start) != 0 {
		t.Fatalf("unhealthy in the soak: fail %v %q, start %v", plan.fail, plan.failMessage, plan.start)
	}
}
