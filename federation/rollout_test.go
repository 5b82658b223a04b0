package federation

import (
	"reflect"
	"strings"
	"testing"

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
		got := planRollout(tc.r)
		if !reflect.DeepEqual(got.start, tc.start) || !reflect.DeepEqual(got.rollback, tc.rollback) || got.state != tc.state {
			t.Errorf("%s: start %v rollback %v state %s; want %v %v %s", tc.name, got.start, got.rollback, got.state, tc.start, tc.rollback, tc.state)
		}
	}
}
