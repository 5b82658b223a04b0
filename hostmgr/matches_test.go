package hostmgr

import (
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func con(label string, op pelotonv1.ConstraintOp, values ...string) *pelotonv1.Constraint {
	return &pelotonv1.Constraint{Label: label, Op: op, Values: values}
}

func TestHoldsNewOps(t *testing.T) {
	labels := map[string]string{"zone": "a", "cores": "16", "name": "x"}
	for _, tc := range []struct {
		c    *pelotonv1.Constraint
		want bool
	}{
		{con("gpu", pelotonv1.ConstraintOp_DOES_NOT_EXIST), true},
		{con("zone", pelotonv1.ConstraintOp_DOES_NOT_EXIST), false},
		{con("cores", pelotonv1.ConstraintOp_GREATER_THAN, "8"), true},
		{con("cores", pelotonv1.ConstraintOp_GREATER_THAN, "16"), false},
		{con("cores", pelotonv1.ConstraintOp_LESS_THAN, "17"), true},
		{con("cores", pelotonv1.ConstraintOp_LESS_THAN, "-3"), false},
		{con("name", pelotonv1.ConstraintOp_GREATER_THAN, "1"), false}, // not an integer
		{con("gpu", pelotonv1.ConstraintOp_LESS_THAN, "1"), false},     // not set
	} {
		if got := Holds(tc.c, labels); got != tc.want {
			t.Errorf("%v on %v: %v, want %v", tc.c, labels, got, tc.want)
		}
	}
}

func TestMatchesAnyOf(t *testing.T) {
	p := &pelotonv1.PlacementSpec{AnyOf: []*pelotonv1.ConstraintTerm{
		{Constraints: []*pelotonv1.Constraint{con("zone", pelotonv1.ConstraintOp_EQUALS, "a"), con("disk", pelotonv1.ConstraintOp_EXISTS)}},
		{Constraints: []*pelotonv1.Constraint{con("zone", pelotonv1.ConstraintOp_IN, "b", "c")}},
	}}
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"zone": "a", "disk": "ssd"}, true},
		{map[string]string{"zone": "a"}, false}, // first term half true
		{map[string]string{"zone": "c"}, true},
		{map[string]string{}, false},
	} {
		if got := Matches(p, "", tc.labels); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.labels, got, tc.want)
		}
	}
	if !Matches(&pelotonv1.PlacementSpec{}, "", nil) {
		t.Error("no terms must match every host")
	}
}

func TestTaintsTolerated(t *testing.T) {
	tol := func(key string, op pelotonv1.TolerationOp, value, effect string) *pelotonv1.Toleration {
		return &pelotonv1.Toleration{Key: key, Op: op, Value: value, Effect: effect}
	}
	eq, ex := pelotonv1.TolerationOp_EQUAL, pelotonv1.TolerationOp_TOLERATE_EXISTS
	for _, tc := range []struct {
		name   string
		tols   []*pelotonv1.Toleration
		taints string
		want   string
	}{
		{"no taints", nil, "", ""},
		{"untolerated", nil, "gpu=yes:NoSchedule", "gpu=yes:NoSchedule"},
		{"equal", []*pelotonv1.Toleration{tol("gpu", eq, "yes", "NoSchedule")}, "gpu=yes:NoSchedule", ""},
		{"equal, other value", []*pelotonv1.Toleration{tol("gpu", eq, "no", "")}, "gpu=yes:NoSchedule", "gpu=yes:NoSchedule"},
		{"exists", []*pelotonv1.Toleration{tol("gpu", ex, "", "")}, "gpu=yes:NoSchedule,gpu:NoExecute", ""},
		{"effect differs", []*pelotonv1.Toleration{tol("gpu", ex, "", "NoSchedule")}, "gpu:NoExecute", "gpu:NoExecute"},
		{"empty key exists", []*pelotonv1.Toleration{tol("", ex, "", "")}, "a=1:NoSchedule,b:NoExecute", ""},
		{"one of two", []*pelotonv1.Toleration{tol("a", eq, "1", "")}, "a=1:NoSchedule,b:NoExecute", "b:NoExecute"},
		{"equal, no value", []*pelotonv1.Toleration{tol("b", eq, "", "NoExecute")}, "b:NoExecute", ""},
	} {
		if got := TaintsTolerated(tc.tols, tc.taints); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		want := tc.want == ""
		if got := Matches(&pelotonv1.PlacementSpec{Tolerations: tc.tols}, "", map[string]string{LabelTaints: tc.taints}); got != want {
			t.Errorf("%s: Matches %v, want %v", tc.name, got, want)
		}
	}
	if Matches(nil, "", map[string]string{LabelTaints: "a:NoSchedule"}) {
		t.Error("a nil placement spec must not land on a tainted host")
	}
}
