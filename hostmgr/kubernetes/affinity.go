package kubernetes

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Where a foreign pod may run, in Peloton's terms: its nodeSelector and
// required node affinity become placement constraints over node labels,
// its tolerations the placement's tolerations of the taints nodes report
// (hostmgr.LabelTaints). What Peloton cannot express it refuses, naming
// the part, rather than place the pod where its owner said it must not
// go. Preferred node affinity and pod (anti-)affinity are not read: the
// placement engine has no per-task scoring to honour them with.

// LabelNodeName is the host label that holds the node's name, which a
// node affinity's matchFields on metadata.name compares.
const LabelNodeName = "peloton.io/node-name"

// hostLabels are the host labels of node n: its own labels, its name
// (LabelNodeName) and its NoSchedule and NoExecute taints
// (hostmgr.LabelTaints). PreferNoSchedule taints are not reported: they
// only ask schedulers to avoid the node, and Peloton has no such soft
// preference.
func hostLabels(n *corev1.Node) map[string]string {
	lbls := make(map[string]string, len(n.Labels)+2)
	for k, v := range n.Labels {
		lbls[k] = v
	}
	lbls[LabelNodeName] = n.Name
	if t := nodeTaints(n); t != "" {
		lbls[hostmgr.LabelTaints] = t
	}
	return lbls
}

// leanPlacement drops what the backend never reads of where p may run:
// everything of a pod that is not waiting for Peloton to place it (its
// scheduler is another or it is bound), and of the others all but their
// tolerations and required node affinity.
func leanPlacement(p *corev1.Pod) {
	if p.Spec.SchedulerName != SchedulerName || p.Spec.NodeName != "" {
		p.Spec.Tolerations, p.Spec.Affinity = nil, nil
		return
	}
	if a := p.Spec.Affinity; a != nil {
		p.Spec.Affinity = nil
		if a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
		}
	}
}

// nodeStateTaints are the taints Kubernetes puts on a node to mirror its
// Ready condition and spec.unschedulable, which Peloton reads directly (a
// cordoned or NotReady node takes no new tasks); they are not reported as
// taints, so that a node whose controller has not cleared them yet is not
// held against it.
var nodeStateTaints = map[string]bool{corev1.TaintNodeNotReady: true, corev1.TaintNodeUnreachable: true, corev1.TaintNodeUnschedulable: true}

// nodeTaints renders n's NoSchedule and NoExecute taints as
// hostmgr.LabelTaints holds them: key=value:Effect, comma separated.
func nodeTaints(n *corev1.Node) string {
	var parts []string
	for _, t := range n.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute || nodeStateTaints[t.Key] {
			continue
		}
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		parts = append(parts, s+":"+string(t.Effect))
	}
	return strings.Join(parts, ",")
}

// podPlacement is the placement spec of foreign pod p, or the problems
// that keep Peloton from honouring where p may run (each naming its field).
func podPlacement(p *corev1.Pod) (*pelotonv1.PlacementSpec, []string) {
	ps := &pelotonv1.PlacementSpec{}
	keys := make([]string, 0, len(p.Spec.NodeSelector))
	for k := range p.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ps.Constraints = append(ps.Constraints, &pelotonv1.Constraint{Label: k, Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{p.Spec.NodeSelector[k]}})
	}
	var problems []string
	if na := p.Spec.Affinity; na != nil && na.NodeAffinity != nil && na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		const field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
		for i, term := range na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			// A term with no requirements matches no node: leave it out of the OR.
			if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
				continue
			}
			t := &pelotonv1.ConstraintTerm{}
			for j, e := range term.MatchExpressions {
				c, err := nodeRequirement(e.Key, e.Operator, e.Values)
				if err != "" {
					problems = append(problems, fmt.Sprintf("%s[%d].matchExpressions[%d]: %s", field, i, j, err))
					continue
				}
				t.Constraints = append(t.Constraints, c)
			}
			for j, e := range term.MatchFields {
				if e.Key != "metadata.name" {
					problems = append(problems, fmt.Sprintf("%s[%d].matchFields[%d].key: %q: only metadata.name is supported", field, i, j, e.Key))
					continue
				}
				c, err := nodeRequirement(LabelNodeName, e.Operator, e.Values)
				if err != "" {
					problems = append(problems, fmt.Sprintf("%s[%d].matchFields[%d]: %s", field, i, j, err))
					continue
				}
				t.Constraints = append(t.Constraints, c)
			}
			ps.AnyOf = append(ps.AnyOf, t)
		}
		if len(ps.AnyOf) == 0 && len(problems) == 0 {
			problems = append(problems, field+": no term has a requirement, so no node matches")
		}
	}
	for i, tol := range p.Spec.Tolerations {
		if tol.Effect == corev1.TaintEffectPreferNoSchedule || nodeStateTaints[tol.Key] {
			// No such taint is reported. (The apiserver gives every pod
			// tolerations of not-ready and unreachable for a while.)
			continue
		}
		t := &pelotonv1.Toleration{Key: tol.Key, Value: tol.Value, Effect: string(tol.Effect)}
		switch tol.Operator {
		case corev1.TolerationOpEqual, "":
			t.Op = pelotonv1.TolerationOp_EQUAL
		case corev1.TolerationOpExists:
			t.Op = pelotonv1.TolerationOp_TOLERATE_EXISTS
		default:
			problems = append(problems, fmt.Sprintf("spec.tolerations[%d].operator: %q: one of Equal, Exists", i, tol.Operator))
			continue
		}
		ps.Tolerations = append(ps.Tolerations, t)
	}
	if len(ps.Constraints) == 0 && len(ps.AnyOf) == 0 && len(ps.Tolerations) == 0 {
		return nil, problems
	}
	return ps, problems
}

// nodeRequirement turns one requirement of a node selector term into a
// constraint on label, or says why it cannot.
func nodeRequirement(label string, op corev1.NodeSelectorOperator, values []string) (*pelotonv1.Constraint, string) {
	c := &pelotonv1.Constraint{Label: label, Values: values}
	switch op {
	case corev1.NodeSelectorOpIn:
		c.Op = pelotonv1.ConstraintOp_IN
	case corev1.NodeSelectorOpNotIn:
		c.Op = pelotonv1.ConstraintOp_NOT_IN
	case corev1.NodeSelectorOpExists:
		c.Op = pelotonv1.ConstraintOp_EXISTS
	case corev1.NodeSelectorOpDoesNotExist:
		c.Op = pelotonv1.ConstraintOp_DOES_NOT_EXIST
	case corev1.NodeSelectorOpGt:
		c.Op = pelotonv1.ConstraintOp_GREATER_THAN
	case corev1.NodeSelectorOpLt:
		c.Op = pelotonv1.ConstraintOp_LESS_THAN
	default:
		return nil, fmt.Sprintf("operator %q: one of In, NotIn, Exists, DoesNotExist, Gt, Lt", op)
	}
	return c, ""
}

// podTolerations are the Kubernetes tolerations of a run of Peloton's own
// that tolerates tols (its placement's): the kubelet refuses, and the
// taint manager evicts, a pod that does not tolerate its node's NoExecute
// taints, however it came to be bound there.
func podTolerations(tols []*pelotonv1.Toleration) []corev1.Toleration {
	if len(tols) == 0 {
		return nil
	}
	out := make([]corev1.Toleration, 0, len(tols))
	for _, t := range tols {
		op := corev1.TolerationOpEqual
		if t.Op == pelotonv1.TolerationOp_TOLERATE_EXISTS {
			op = corev1.TolerationOpExists
		}
		out = append(out, corev1.Toleration{Key: t.Key, Operator: op, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out
}
