package hostmgr

import pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"

// Matches reports whether a host with this partition and these labels passes
// a placement spec's partition and constraints, the cheap string compare
// first. It is the one such test: placement filters hosts with it, and
// callers that choose hosts themselves (DAEMON jobs follow every matching
// host) use it too.
func Matches(p *pelotonv1.PlacementSpec, partition string, labels map[string]string) bool {
	if p == nil {
		return true
	}
	if p.Partition != "" && p.Partition != partition {
		return false
	}
	for _, c := range p.Constraints {
		if !Holds(c, labels) {
			return false
		}
	}
	return true
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
	}
	return false // validation refuses other ops; never match what we do not understand
}

func contains(vs []string, v string) bool {
	for _, w := range vs {
		if w == v {
			return true
		}
	}
	return false
}
