package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// kubeNamespace is where the stack's pods go (the backend's default).
const kubeNamespace = kubernetes.DefaultNamespace

// kubeStack is a real kube-apiserver with kwok nodes and the whole Peloton
// stack on the kubernetes backend against it. The scenarios of one test
// share it, because a control plane costs seconds to start; each scenario
// brings its own nodes, with a label only its jobs ask for, so that they do
// not take each other's room.
type kubeStack struct {
	kc *kubetest.Cluster
	s  *stack
}

// startKubeStack starts the apiserver, kwok and Peloton for t (skipping t
// when the kube tools are not built), all stopped when t ends.
func startKubeStack(t *testing.T) *kubeStack {
	t.Helper()
	return startKubeStackWith(t, cluster.KubeConfig{})
}

// startKubeStackWith is startKubeStack with the backend configured as kube
// says (its Kubeconfig is filled in).
func startKubeStackWith(t *testing.T, kube cluster.KubeConfig) *kubeStack {
	t.Helper()
	kc := kubetest.Start(t, kubetest.Options{})
	if err := kc.CreateNamespace(ctxT(t), kubeNamespace); err != nil {
		t.Fatal(err)
	}
	kube.Kubeconfig = kc.Kubeconfig
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: kube})
	return &kubeStack{kc: kc, s: s}
}

// on is the stack as seen by one subtest: its helpers fail that subtest,
// from that subtest's goroutine.
func (k *kubeStack) on(t *testing.T) *stack {
	c := *k.s
	c.t = t
	return &c
}

// addNodes creates kwok nodes labelled suite=<suite> (and with labels) and
// waits until Peloton offers every one of them.
func (k *kubeStack) addNodes(t *testing.T, prefix string, count int, cpu, suite string, labels map[string]string) []string {
	t.Helper()
	l := map[string]string{"suite": suite}
	for key, v := range labels {
		l[key] = v
	}
	names, err := k.kc.AddNodes(ctxT(t), kubetest.NodeSpec{Prefix: prefix, Count: count, CPU: cpu, Memory: "8Gi", Labels: l})
	if err != nil {
		t.Fatal(err)
	}
	s := k.on(t)
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("the nodes %v offered as hosts", names), func() error {
		hl, err := s.hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		up := map[string]bool{}
		for _, h := range hl.Hosts {
			up[h.Name] = h.MaintenanceMessage == ""
		}
		missing := 0
		for _, n := range names {
			if !up[n] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d missing: %v", missing, hl.Hosts)
		}
		return nil
	})
	return names
}

// onSuite makes spec's tasks run only on the nodes of one suite.
func onSuite(spec *pelotonv1.JobSpec, suite string) *pelotonv1.JobSpec {
	if spec.DefaultSpec.Placement == nil {
		spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{}
	}
	spec.DefaultSpec.Placement.Constraints = append(spec.DefaultSpec.Placement.Constraints,
		&pelotonv1.Constraint{Label: "suite", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{suite}})
	return spec
}

// jobPods lists the pods of a job in the apiserver, by the job-id label
// Peloton puts on them.
func (k *kubeStack) jobPods(t *testing.T, jobID string) []corev1.Pod {
	t.Helper()
	pl, err := k.kc.Client.CoreV1().Pods(kubeNamespace).List(ctxT(t), metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + jobID})
	if err != nil {
		t.Fatal(err)
	}
	return pl.Items
}

// runPod is the pod of one run of an instance among pods, or nil.
func runPod(pods []corev1.Pod, inst, run uint32) *corev1.Pod {
	for i := range pods {
		p := &pods[i]
		if p.Labels[kubernetes.LabelInstance] == strconv.FormatUint(uint64(inst), 10) &&
			p.Labels[kubernetes.LabelRunID] == strconv.FormatUint(uint64(run), 10) {
			return p
		}
	}
	return nil
}

// podEnv is the value of an environment variable of a pod's task container.
func podEnv(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// describePods is a short listing of pods for failure messages.
func describePods(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  %s inst %s run %s node %q phase %s deleting %v", p.Name, p.Labels[kubernetes.LabelInstance],
			p.Labels[kubernetes.LabelRunID], p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	return b.String()
}

// waitPods waits until cond holds for a job's pods, or fails with them.
func (k *kubeStack) waitPods(t *testing.T, jobID, what string, within time.Duration, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	testutil.Eventually(t, within, fmt.Sprintf("pods of job %s: %s", jobID, what), func() error {
		if pods = k.jobPods(t, jobID); cond(pods) {
			return nil
		}
		return fmt.Errorf("they are:%s", describePods(pods))
	})
	return pods
}

// checkRunPods checks that every task runs in its own pod: the pod of its
// current run exists, is bound to the task's host and running, and (if
// check is set) passes check. It returns the instances' nodes.
func checkRunPods(t *testing.T, ts []*pelotonv1.Task, pods []corev1.Pod, check func(*pelotonv1.Task, *corev1.Pod)) map[uint32]string {
	t.Helper()
	nodes := map[uint32]string{}
	for _, tk := range ts {
		p := runPod(pods, tk.InstanceId, tk.Status.RunId)
		if p == nil {
			t.Errorf("instance %d run %d has no pod; pods:%s", tk.InstanceId, tk.Status.RunId, describePods(pods))
			continue
		}
		if p.Spec.NodeName == "" || p.Spec.NodeName != tk.Status.Host || p.Status.Phase != corev1.PodRunning || p.Spec.SchedulerName != kubernetes.SchedulerName {
			t.Errorf("instance %d runs on %q, its pod %s is on %q, %s, scheduler %q", tk.InstanceId, tk.Status.Host, p.Name, p.Spec.NodeName, p.Status.Phase, p.Spec.SchedulerName)
		}
		if check != nil {
			check(tk, p)
		}
		nodes[tk.InstanceId] = p.Spec.NodeName
	}
	return nodes
}

// sawThen says whether a task's history shows state and, later, then.
func sawThen(tk *pelotonv1.Task, state, then pelotonv1.TaskState) bool {
	seen := false
	for _, h := range tk.Status.History {
		if h.State == state {
			seen = true
		} else if seen && h.State == then {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isNotFound says whether an apiserver call failed because the object does
// not exist.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
