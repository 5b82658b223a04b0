package hostmgr

import (
	"strconv"
	"strings"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// LabelTaints is the host label that lists a host's taints, as
// key=value:Effect (or key:Effect) joined by commas. A host with taints
// takes only tasks whose placement tolerates each of them. Backends set
// it (the Kubernetes backend from a node's NoSchedule and NoExecute
// taints); an operator may set it on any host.
const LabelTaints = "peloton.io/taints"

// Matches reports whether a host with this partition and these labels passes
// a placement spec's partition, constraints, terms and taints, the cheap
// string compare first. It is the one such test: placement filters hosts
// with it, and callers that choose hosts themselves (DAEMON jobs follow
// every matching host) use it too. A nil spec tolerates no taint.
func Matches(p *pelotonv1.PlacementSpec, partition string, labels map[string]string) bool {
	if p.GetPartition() != "" && p.GetPartition() != partition {
		return false
	}
	for _, c := range p.GetConstraints() {
		if !Holds(c, labels) {
			return false
		}
	}
	return HoldsAnyOf(p.GetAnyOf(), labels) && TaintsTolerated(p.GetTolerations(), labels[LabelTaints]) == ""
}

// HoldsAnyOf reports whether every constraint of at least one term holds
// on a host's labels (true when there are no terms).
func HoldsAnyOf(terms []*pelotonv1.ConstraintTerm, labels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	for _, t := range terms {
		ok := true
		for _, c := range t.GetConstraints() {
			if !Holds(c, labels) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Holds reports whether one constraint holds on a host's labels.
func Holds(c *pelotonv1.Constraint, labels map[string]string) bool {
	v, ok := labels[c.Label]
	switch c.Op {
	case pelotonv1.ConstraintOp_EQUALS:
		return ok && len(c.Values) == 1 && v == c.Values[0]
	case pelotonv1.ConstraintOp_NOT_EQUALS:
		return !ok || len(c.Values) != 1 || v != c.Values[0]
	case pelotonv1.ConstraintOp_EXISTS:
		return ok
	case pelotonv1.ConstraintOp_IN:
		return ok && contains(c.Values, v)
	case pelotonv1.ConstraintOp_NOT_IN:
		return !ok || !contains(c.Values, v)
	case pelotonv1.ConstraintOp_DOES_NOT_EXIST:
		return !ok
	case pelotonv1.ConstraintOp_GREATER_THAN, pelotonv1.ConstraintOp_LESS_THAN:
		if !ok || len(c.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(c.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if c.Op == pelotonv1.ConstraintOp_GREATER_THAN {
			return have > want
		}
		return have < want
	}
	return false // validation refuses other ops; never match what we do not understand
}

// TaintsTolerated checks a host's taints (the value of its LabelTaints)
// against tolerations and returns the first taint not tolerated, or "".
// The label is parsed as it is read: it is short, and the placement round
// tests each host once per class of spec.
func TaintsTolerated(tols []*pelotonv1.Toleration, taints string) string {
	for taints != "" {
		var taint string
		taint, taints, _ = strings.Cut(taints, ",")
		if taint = strings.TrimSpace(taint); taint == "" {
			continue
		}
		kv, effect, _ := strings.Cut(taint, ":")
		key, value, _ := strings.Cut(kv, "=")
		if !tolerated(tols, key, value, effect) {
			return taint
		}
	}
	return ""
}

func tolerated(tols []*pelotonv1.Toleration, key, value, effect string) bool {
	for _, t := range tols {
		if t.Effect != "" && t.Effect != effect {
			continue
		}
		switch t.Op {
		case pelotonv1.TolerationOp_TOLERATE_EXISTS:
			if t.Key == "" || t.Key == key {
				return true
			}
		case pelotonv1.TolerationOp_EQUAL:
			if t.Key == key && t.Value == value {
				return true
			}
		}
	}
	return false
}

func contains(vs []string, v string) bool {
	for _, w := range vs {
		if w == v {
			return true
		}
	}
	return false
}
