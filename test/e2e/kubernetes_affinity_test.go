package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// requireNodes gives a pod required node affinity: any of terms.
func requireNodes(terms ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

// appPodWith is appPod with a change made to the pod before it is created.
func (k *kubeStack) appPodWith(t *testing.T, name, suite string, milliCPU int64, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	rl := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("64Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appsNamespace, Annotations: map[string]string{kubernetes.AnnotationPool: "/apps"}},
		Spec: corev1.PodSpec{SchedulerName: kubernetes.SchedulerName, NodeSelector: map[string]string{"suite": suite},
			Containers: []corev1.Container{{Name: "app", Image: "nginx:stable", Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}},
	}
	edit(p)
	created, err := k.kc.Client.CoreV1().Pods(appsNamespace).Create(ctxT(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitEvent waits for a FailedScheduling event on pod name whose message
// holds text.
func (k *kubeStack) waitEvent(t *testing.T, name, text string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "a FailedScheduling event on "+name+" saying "+text, func() error {
		evs, err := k.kc.Client.CoreV1().Events(appsNamespace).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == kubernetes.EventReasonFailedScheduling && strings.Contains(ev.Message, text) {
				return nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return fmt.Errorf("events: %q", seen)
	})
}

// testForeignAffinity: a pod with required node affinity (an OR of
// terms, with Gt) binds only to a node that passes a term; one whose
// affinity no node passes stays pending, and kubectl shows why in its
// PodScheduled condition and a FailedScheduling event.
func (k *kubeStack) testForeignAffinity(t *testing.T) {
	ssd := k.addNodes(t, "sec-aff-ssd", 1, "2", "sec-aff", map[string]string{"disk": "ssd", "cores": "16"})
	k.addNodes(t, "sec-aff-hdd", 1, "2", "sec-aff", map[string]string{"disk": "hdd", "cores": "16"})
	small := k.addNodes(t, "sec-aff-small", 1, "2", "sec-aff", map[string]string{"disk": "ssd", "cores": "4"})
	k.appPodWith(t, "aff", "sec-aff", 500, requireNodes(
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}},
			{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"8"}}}},
		corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"no-such-node"}}}}))
	k.appPodWith(t, "aff-never", "sec-aff", 500, requireNodes(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}}))
	pods := k.waitAppPods(t, "the pod with affinity running", 60*time.Second, podsRunning("aff"))
	if got := pods["aff"].Spec.NodeName; got != ssd[0] {
		t.Errorf("the pod with affinity runs on %s, want %s (the only ssd node with more than 8 cores; %s has 4)", got, ssd[0], small[0])
	}
	const why = "no host matches constraint any of (disk IN [nvme])"
	k.waitAppPods(t, "the pod no node matches marked unschedulable", 30*time.Second, func(pods map[string]*corev1.Pod) bool {
		return unschedulableSaying(pods["aff-never"], why)
	})
	k.waitEvent(t, "aff-never", why)
	if p := k.appPods(t)["aff-never"]; p == nil || p.Spec.NodeName != "" {
		t.Errorf("the pod no node matches: %+v", p)
	}
	for _, n := range []string{"aff", "aff-never"} {
		_ = k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
}

// testForeignTaints: a node tainted NoSchedule takes only the pods that
// tolerate the taint: a pod that does not waits while that node has room,
// one that does runs there, and so does a job of Peloton's own whose
// placement tolerates it (its pod carries the toleration).
func (k *kubeStack) testForeignTaints(t *testing.T) {
	s := k.on(t)
	tainted := k.addNodes(t, "sec-taint-gpu", 1, "2", "sec-taint", nil)[0]
	plain := k.addNodes(t, "sec-taint-plain", 1, "1", "sec-taint", nil)[0]
	node, err := k.kc.Client.CoreV1().Nodes().Get(ctxT(t), tainted, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule})
	if _, err := k.kc.Client.CoreV1().Nodes().Update(ctxT(t), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the taint in host list", func() error {
		hl, err := s.hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hl.Hosts {
			if h.Name == tainted && h.Labels[hostmgr.LabelTaints] == "gpu=yes:NoSchedule" {
				return nil
			}
		}
		return fmt.Errorf("hosts %v", hl.Hosts)
	})
	none := func(*corev1.Pod) {}
	tolerate := func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule}}
	}
	k.appPodWith(t, "plain-a", "sec-taint", 800, none)
	k.waitAppPods(t, "the first plain pod running", 60*time.Second, podsRunning("plain-a"))
	k.appPodWith(t, "plain-b", "sec-taint", 800, none)
	k.appPodWith(t, "tolerant", "sec-taint", 800, tolerate)
	pods := k.waitAppPods(t, "the tolerant pod running", 60*time.Second, podsRunning("tolerant"))
	if pods["plain-a"].Spec.NodeName != plain || pods["tolerant"].Spec.NodeName != tainted {
		t.Errorf("plain-a on %s, tolerant on %s; want %s and %s", pods["plain-a"].Spec.NodeName, pods["tolerant"].Spec.NodeName, plain, tainted)
	}
	// plain-b has been looked at and held: it says it waits for room.
	k.waitAppPods(t, "the second plain pod waiting for room", 30*time.Second, func(pods map[string]*corev1.Pod) bool {
		if p := pods["plain-b"]; p != nil && p.Spec.NodeName != "" {
			t.Fatalf("plain-b bound to %s, which it does not tolerate", p.Spec.NodeName)
		}
		return unschedulableSaying(pods["plain-b"], "no host has room now")
	})

	// Peloton's own job, tolerating the taint, fits only on that node.
	spec := onSuite(sleeper("kube-tolerant", "/apps", 1, 1), "sec-taint")
	spec.DefaultSpec.Placement.Tolerations = []*pelotonv1.Toleration{{Key: "gpu", Op: pelotonv1.TolerationOp_TOLERATE_EXISTS}}
	id := s.createJob(spec)
	ts := s.waitTasks(id, "the tolerant job running", 60*time.Second, allRunning(1))
	if ts[0].Status.Host != tainted {
		t.Errorf("the tolerant job runs on %s, want %s", ts[0].Status.Host, tainted)
	}
	if ps := k.jobPods(t, id); len(ps) != 1 || len(ps[0].Spec.Tolerations) == 0 || ps[0].Spec.Tolerations[0].Key != "gpu" ||
		ps[0].Spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("the tolerant job's pods: %+v", ps)
	}
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"plain-a", "plain-b", "tolerant"} {
		_ = k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
}

// priorityClass creates a PriorityClass and waits until the apiserver's
// Priority admission, which caches classes, resolves pods of it.
func (k *kubeStack) priorityClass(t *testing.T, name string, value int32) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := k.kc.Client.SchedulingV1().PriorityClasses().Create(ctxT(t), pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the Priority admission to know class "+name, func() error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "class-probe", Namespace: appsNamespace},
			Spec: corev1.PodSpec{PriorityClassName: name, Containers: []corev1.Container{{Name: "app", Image: "nginx:stable"}}}}
		_, err := k.kc.Client.CoreV1().Pods(appsNamespace).Create(ctxT(t), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// testForeignPriorityClass: a pod's PriorityClass sets its job's priority.
func (k *kubeStack) testForeignPriorityClass(t *testing.T) {
	k.addNodes(t, "sec-pc", 1, "2", "sec-pc", nil)
	k.priorityClass(t, "apps-high", 100)
	k.appPodWith(t, "classy", "sec-pc", 500, func(p *corev1.Pod) { p.Spec.PriorityClassName = "apps-high" })
	k.waitAppPods(t, "the pod of a priority class running", 60*time.Second, podsRunning("classy"))
	if j := k.foreignJob(t, appsNamespace+"/Pod/classy"); j.Spec.Sla.GetPriority() != 100 {
		t.Errorf("job of a pod of class apps-high (100): priority %d", j.Spec.Sla.GetPriority())
	}
	_ = k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), "classy", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
}
