package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// TestForeignAffinityTaintsPriority: a foreign pod's required node
// affinity becomes an OR of constraint terms over node labels (matchFields
// on metadata.name over the node's name), its tolerations the placement's
// tolerations, its priority class its priority; nodes report their
// NoSchedule and NoExecute taints as host labels, and a change of taints
// reaches hostmgr.
func TestForeignAffinityTaintsPriority(t *testing.T) {
	c := cluster(t)
	e := newEnvWith(t, c, 2, map[string]string{"cores": "16", "disk": "ssd"}, func(cfg *Config) {
		cfg.Secondary = true
		cfg.SecondaryNamespaces = []string{cfg.Namespace}
	})
	l := &foreignLog{seen: map[string][]hostmgr.ForeignTask{}}
	e.b.WatchForeign(l.add)

	// Taints: NoSchedule and NoExecute are reported, PreferNoSchedule not.
	node, err := c.Client.CoreV1().Nodes().Get(e.ctx, e.nodes[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule},
		{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}, {Key: "maint", Effect: corev1.TaintEffectNoExecute}}
	if _, err := c.Client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("the taints reported", func(h map[string]hostmgr.HostInfo) bool {
		return h[e.nodes[1]].Labels[hostmgr.LabelTaints] != ""
	})
	hs := e.hosts()
	if got := hs[e.nodes[1]].Labels[hostmgr.LabelTaints]; got != "gpu=yes:NoSchedule,maint:NoExecute" {
		t.Errorf("taints label %q", got)
	}
	if got := hs[e.nodes[0]].Labels; got[hostmgr.LabelTaints] != "" || got[LabelNodeName] != e.nodes[0] || got["cores"] != "16" {
		// (The not-ready taint the apiserver gives a new node, which no
		// controller clears here, is Peloton's Unschedulable, not a taint.)
		t.Errorf("labels of the untainted node: %v", got)
	}

	// Priority classes: the apiserver resolves the class into
	// spec.priority; negative values count as 0; the annotation wins.
	for name, v := range map[string]int32{e.ns + "-high": 1000, e.ns + "-low": -5} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := c.Client.SchedulingV1().PriorityClasses().Create(e.ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.SchedulingV1().PriorityClasses().Delete(e.ctx, name, metav1.DeleteOptions{}) })
	}
	p := e.foreignPod("placed", map[string]string{AnnotationPool: "/team"}, func(p *corev1.Pod) {
		p.Spec.PriorityClassName = e.ns + "-high"
		p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"8"}},
					{Key: "zone", Operator: corev1.NodeSelectorOpDoesNotExist}}},
				{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{e.nodes[0]}}}},
			}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}},
		}}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule},
			{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			{Key: "soft", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectPreferNoSchedule}}
	})
	ft := e.waitForeign(e.ns+"/placed", "a pod with affinity", func(hostmgr.ForeignTask) bool { return true }, l)
	want := &pelotonv1.PlacementSpec{
		Constraints: []*pelotonv1.Constraint{{Label: "disk", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"ssd"}}},
		AnyOf: []*pelotonv1.ConstraintTerm{
			{Constraints: []*pelotonv1.Constraint{{Label: "cores", Op: pelotonv1.ConstraintOp_GREATER_THAN, Values: []string{"8"}},
				{Label: "zone", Op: pelotonv1.ConstraintOp_DOES_NOT_EXIST}}},
			{Constraints: []*pelotonv1.Constraint{{Label: LabelNodeName, Op: pelotonv1.ConstraintOp_IN, Values: []string{e.nodes[0]}}}},
		},
		Tolerations: []*pelotonv1.Toleration{{Key: "gpu", Op: pelotonv1.TolerationOp_EQUAL, Value: "yes", Effect: "NoSchedule"},
			{Op: pelotonv1.TolerationOp_TOLERATE_EXISTS, Effect: "NoExecute"}},
	}
	if !proto.Equal(ft.Placement, want) || ft.Invalid != "" {
		t.Errorf("placement\n got %v\nwant %v (invalid %q)", ft.Placement, want, ft.Invalid)
	}
	if ft.Priority != 1000 {
		t.Errorf("priority %d, want the class's 1000 (spec.priority %v)", ft.Priority, p.Spec.Priority)
	}
	// The pod tolerates both taints of the tainted node and passes the
	// first term there; the untainted node passes the second one.
	for _, n := range e.nodes {
		if h := hs[n]; !hostmgr.Matches(ft.Placement, h.Partition, h.Labels) {
			t.Errorf("node %s (labels %v) does not match the pod", n, h.Labels)
		}
	}

	e.foreignPod("low", map[string]string{AnnotationPool: "/team"}, func(p *corev1.Pod) { p.Spec.PriorityClassName = e.ns + "-low" })
	e.foreignPod("annotated", map[string]string{AnnotationPool: "/team", AnnotationPriority: "3"}, func(p *corev1.Pod) {
		p.Spec.PriorityClassName = e.ns + "-high"
	})
	if ft := e.waitForeign(e.ns+"/low", "a pod of a negative class", func(hostmgr.ForeignTask) bool { return true }, l); ft.Priority != 0 || ft.Invalid != "" {
		t.Errorf("negative class: priority %d, invalid %q; want 0", ft.Priority, ft.Invalid)
	}
	if ft := e.waitForeign(e.ns+"/annotated", "a pod with both", func(hostmgr.ForeignTask) bool { return true }, l); ft.Priority != 3 {
		t.Errorf("annotation and class: priority %d, want the annotation's 3", ft.Priority)
	}
	// Where the apiserver did not resolve the class (its Priority
	// admission is off), Peloton reads the PriorityClass itself.
	unresolved := &corev1.Pod{Spec: corev1.PodSpec{PriorityClassName: e.ns + "-high"}}
	if v, problem := e.b.podPriority(e.ctx, unresolved); v != 1000 || problem != "" {
		t.Errorf("class read by Peloton: %d %q, want 1000", v, problem)
	}
	unresolved.Spec.PriorityClassName = e.ns + "-none"
	if _, problem := e.b.podPriority(e.ctx, unresolved); problem != `spec.priorityClassName: no PriorityClass "`+e.ns+`-none"` {
		t.Errorf("missing class: %q", problem)
	}
	// A pod whose affinity has only empty terms can go nowhere: refused.
	if _, problems := podPlacement(&corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}}}}}); len(problems) != 1 {
		t.Errorf("empty terms: problems %q, want one", problems)
	}
}

// TestOwnPodsCarryTolerations: a run of Peloton's own whose placement
// tolerates taints gets them as its pod's tolerations, which read back as
// the same placement tolerations; a run without any gets none.
func TestOwnPodsCarryTolerations(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	tols := []*pelotonv1.Toleration{{Key: "gpu", Op: pelotonv1.TolerationOp_EQUAL, Value: "yes", Effect: "NoSchedule"},
		{Op: pelotonv1.TolerationOp_TOLERATE_EXISTS, Effect: "NoExecute"}}
	spec := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", Host: "n", Command: []string{"x"}, Tolerations: tols}
	spec.Resources.MilliCPU, spec.Resources.MemoryMB = 500, 64
	p := b.buildPod(spec, "ns", nil)
	want := []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	if len(p.Spec.Tolerations) != 2 || p.Spec.Tolerations[0] != want[0] || p.Spec.Tolerations[1] != want[1] {
		t.Fatalf("pod tolerations %+v, want %+v", p.Spec.Tolerations, want)
	}
	if back, _ := podPlacement(p); !proto.Equal(back, &pelotonv1.PlacementSpec{Tolerations: tols}) {
		t.Errorf("read back as %v", back)
	}
	spec.Tolerations = nil
	if p := b.buildPod(spec, "ns", nil); p.Spec.Tolerations != nil {
		t.Errorf("a run without tolerations: %+v", p.Spec.Tolerations)
	}
}
