package placement

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func term(cs ...*pelotonv1.Constraint) *pelotonv1.ConstraintTerm {
	return &pelotonv1.ConstraintTerm{Constraints: cs}
}

func cons(label string, op pelotonv1.ConstraintOp, values ...string) *pelotonv1.Constraint {
	return &pelotonv1.Constraint{Label: label, Op: op, Values: values}
}

// TestPlaceAnyOfAndTaints: a task with terms lands only on a host that
// passes one of them; hosts with taints take only the tasks that tolerate
// them, and tasks with no placement at all avoid them; a task nothing can
// take is unresolvable with a reason that says which filter left nothing.
func TestPlaceAnyOfAndTaints(t *testing.T) {
	hs := []hostmgr.HostOffer{
		MakeHost("big").Label("cores", "64").Obj(),
		MakeHost("small").Label("cores", "4").Label("zone", "a").Obj(),
		MakeHost("gpu").Label("cores", "64").Label(hostmgr.LabelTaints, "gpu=yes:NoSchedule").Obj(),
		MakeHost("evicting").Label(hostmgr.LabelTaints, "maint:NoExecute").Obj(),
	}
	gpuTol := &pelotonv1.Toleration{Key: "gpu", Op: pelotonv1.TolerationOp_EQUAL, Value: "yes", Effect: "NoSchedule"}
	for _, tc := range []struct {
		name   string
		task   *taskBuilder
		hosts  []string // where it may land; none: unplaced
		reason string
	}{
		{"no placement avoids tainted hosts", MakeTask("plain", 0), []string{"big", "small"}, ""},
		{"OR of terms", MakeTask("or", 0).AnyOf(
			term(cons("cores", pelotonv1.ConstraintOp_LESS_THAN, "8")),
			term(cons("zone", pelotonv1.ConstraintOp_EXISTS), cons("cores", pelotonv1.ConstraintOp_GREATER_THAN, "32"))),
			[]string{"small"}, ""},
		{"greater than, tolerating the gpu taint", MakeTask("gt", 0).AnyOf(term(cons("cores", pelotonv1.ConstraintOp_GREATER_THAN, "32"),
			cons("zone", pelotonv1.ConstraintOp_DOES_NOT_EXIST))).Tolerate(gpuTol), []string{"big", "gpu"}, ""},
		{"a taint it tolerates and a constraint only that host passes", MakeTask("tol", 0).Where("cores", pelotonv1.ConstraintOp_EQUALS, "64").
			Where("zone", pelotonv1.ConstraintOp_DOES_NOT_EXIST).Tolerate(&pelotonv1.Toleration{Op: pelotonv1.TolerationOp_TOLERATE_EXISTS}),
			[]string{"big", "gpu"}, ""},
		{"no term holds", MakeTask("none", 0).AnyOf(term(cons("cores", pelotonv1.ConstraintOp_GREATER_THAN, "100"))), nil,
			ReasonNoMatch + " any of (cores GREATER_THAN [100])"},
		{"only tainted hosts match", MakeTask("taint", 0).Where("cores", pelotonv1.ConstraintOp_DOES_NOT_EXIST), nil,
			ReasonUntolerated + " (every matching host has a taint it does not tolerate, e.g. maint:NoExecute)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Place(singles(tc.task.Obj()), hs)
			if tc.hosts == nil {
				if len(d.Unplaced) != 1 || d.Unplaced[0].Code != Unresolvable || d.Unplaced[0].Reason != tc.reason {
					t.Fatalf("decision %+v, want unresolvable: %s", d, tc.reason)
				}
				return
			}
			if len(d.Placed) != 1 {
				t.Fatalf("not placed: %+v", d.Unplaced)
			}
			got := d.Placed[0].Host
			ok := false
			for _, h := range tc.hosts {
				ok = ok || h == got
			}
			if !ok {
				t.Errorf("placed on %s, want one of %s", got, strings.Join(tc.hosts, ", "))
			}
		})
	}
	// Many plain tasks: none reaches a tainted host even when the others are full.
	var ts []*taskBuilder
	for i := range 20 {
		ts = append(ts, MakeTask("many", uint32(i)).CPU(1))
	}
	d := Place(singles(objs(ts)...), hs)
	for _, p := range d.Placed {
		if p.Host == "gpu" || p.Host == "evicting" {
			t.Errorf("instance %d placed on tainted host %s", p.Task.Instance, p.Host)
		}
	}
	if len(d.Placed) != 16 {
		t.Errorf("placed %d, want 16 (two untainted hosts of 8 cores)", len(d.Placed))
	}
}
