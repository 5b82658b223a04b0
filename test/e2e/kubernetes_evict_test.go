package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// evictedOnce reports whether instance tk's run 1 ended PREEMPTED, reason
// evicted, and its run 2 runs with no failure counted.
func evictedOnce(tk *pelotonv1.Task) bool {
	st := tk.Status
	if st.RunId != 2 || st.State != pelotonv1.TaskState_RUNNING || st.FailureCount != 0 {
		return false
	}
	for _, tr := range st.History {
		if tr.State == pelotonv1.TaskState_PREEMPTED && tr.RunId == 1 && tr.Reason == kubernetes.ReasonEvicted {
			return true
		}
	}
	return false
}

// instance returns instance i of ts.
func instance(ts []*pelotonv1.Task, i uint32) *pelotonv1.Task {
	for _, tk := range ts {
		if tk.InstanceId == i {
			return tk
		}
	}
	return &pelotonv1.Task{Status: &pelotonv1.TaskStatus{}}
}

// TestKubernetesEvictedRunsAgain: on the kubernetes backend, the whole
// stack ends an instance's run PREEMPTED (reason evicted) when its pod is
// evicted, through the Eviction API within the service's budget or by the
// kubelet under node pressure (the pod's status set Failed, Evicted, as
// the kubelet writes it), and runs it again with no failure counted.
func TestKubernetesEvictedRunsAgain(t *testing.T) {
	kc := kubetest.Start(t, kubetest.Options{})
	if err := kc.StartControllerManager("disruption"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := kc.AddNodes(ctx, kubetest.NodeSpec{Prefix: "kwok", Count: 3, CPU: "4", Memory: "8Gi"}); err != nil {
		t.Fatal(err)
	}
	if err := kc.CreateNamespace(ctx, "peloton"); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: cluster.KubeConfig{Kubeconfig: kc.Kubeconfig}})
	id := s.createJob(&pelotonv1.JobSpec{Name: "kube-evicted", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 3,
		Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}})
	s.waitTasks(id, "the service runs", time.Minute, allRunning(3))
	pods := kc.Client.CoreV1().Pods("peloton")
	podOf := func(inst int) *corev1.Pod {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%s,%s=%d", kubernetes.LabelJobID, id, kubernetes.LabelInstance, inst)})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			t.Fatalf("instance %d has pods %+v; want one", inst, l.Items)
		}
		return &l.Items[0]
	}

	// kubectl drain's way: the Eviction API, once the disruption
	// controller says the budget allows one.
	p := podOf(0)
	err := kubetest.Poll(ctx, time.Minute, func(context.Context) (bool, error) {
		err := pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("evict %s: never allowed: %v", p.Name, err)
	}
	s.waitTasks(id, "instance 0 evicted and running again", time.Minute, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 3 && evictedOnce(instance(ts, 0))
	})

	// The kubelet's way, under node pressure.
	p = podOf(1)
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ts := s.waitTasks(id, "instance 1 evicted and running again", time.Minute, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 3 && evictedOnce(instance(ts, 1))
	})
	if st := instance(ts, 2).Status; st.RunId != 1 || st.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("instance 2 was not evicted, yet it is %s in run %d", st.State, st.RunId)
	}
}

// TestKubernetesCordonedNodeDrainsWithinBudget: a node cordoned, then one
// tainted NoExecute, is drained by Peloton as `peloton host drain` drains
// a host: its instances move off within the service's budget (never more
// than sla.maximumUnavailableInstances down, polled throughout), the host
// list shows it DRAINING then DRAINED, it takes no new runs, and it is UP
// again once uncordoned (untainted).
func TestKubernetesCordonedNodeDrainsWithinBudget(t *testing.T) {
	kc := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nodes, err := kc.AddNodes(ctx, kubetest.NodeSpec{Prefix: "kwok", Count: 2, CPU: "4", Memory: "8Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.CreateNamespace(ctx, "peloton"); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: cluster.KubeConfig{Kubeconfig: kc.Kubeconfig}})
	id := s.createJob(&pelotonv1.JobSpec{Name: "kube-cordoned", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 4,
		Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}})
	ts := s.waitTasks(id, "the service runs", time.Minute, allRunning(4))
	update := func(name string, f func(*corev1.Node)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := kc.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			f(n)
			_, err = kc.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// drained waits until node holds none of the job's instances, all of
	// which run, with never more than the budget down meanwhile.
	drained := func(node, what, why string) {
		t.Helper()
		w := &budgetWatch{t: t, budget: 1}
		s.waitFor(what, 2*time.Minute, w, id, func() bool {
			ts := s.listTasks(id)
			w.check(ts)
			for _, tk := range ts {
				if tk.Status.Host == node || tk.Status.State != pelotonv1.TaskState_RUNNING {
					return false
				}
			}
			return true
		})
		moved := 0
		for _, tk := range s.listTasks(id) {
			for _, tr := range tk.Status.History {
				if tr.State == pelotonv1.TaskState_PREEMPTING && tr.Reason == "preempted-host-drain" {
					moved++
					break
				}
			}
		}
		if moved == 0 {
			t.Errorf("%s: no instance was moved by a host drain (PREEMPTING, preempted-host-drain)", what)
		}
		h := s.waitHost(node, what, 30*time.Second, func(h *pelotonv1.Host) bool { return h.State == pelotonv1.HostState_HOST_DRAINED })
		if !strings.Contains(h.MaintenanceMessage, "kubernetes") || !strings.Contains(h.MaintenanceMessage, why) {
			t.Errorf("%s: host message %q does not say the kubernetes backend drained it, %s", node, h.MaintenanceMessage, why)
		}
	}

	// The node holding the most instances is cordoned.
	on := map[string]int{}
	for _, tk := range ts {
		on[tk.Status.Host]++
	}
	first, second := nodes[0], nodes[1]
	if on[second] > on[first] {
		first, second = second, first
	}
	update(first, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	s.waitHost(first, "cordoned: draining", 30*time.Second, func(h *pelotonv1.Host) bool {
		return h.State == pelotonv1.HostState_HOST_DRAINING || h.State == pelotonv1.HostState_HOST_DRAINED
	})
	drained(first, "the cordoned node drained", "(cordoned)")
	update(first, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	s.waitHost(first, "uncordoned: up", 30*time.Second, func(h *pelotonv1.Host) bool { return h.State == pelotonv1.HostState_HOST_UP })

	// The other node, which now holds every instance, is tainted NoExecute.
	taint := corev1.Taint{Key: "example.com/maintenance", Value: "now", Effect: corev1.TaintEffectNoExecute}
	update(second, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) })
	drained(second, "the tainted node drained", "(tainted example.com/maintenance=now:NoExecute)")
	update(second, func(n *corev1.Node) { n.Spec.Taints = nil })
	s.waitHost(second, "untainted: up", 30*time.Second, func(h *pelotonv1.Host) bool { return h.State == pelotonv1.HostState_HOST_UP })
}
