package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// wantPreempted checks that a run's last event is PREEMPTED, reason
// evicted, with a message "evicted: <want...>".
func wantPreempted(t *testing.T, evs []hostmgr.TaskEvent, want string) {
	t.Helper()
	last := evs[len(evs)-1]
	if last.State != pelotonv1.TaskState_PREEMPTED || last.Reason != ReasonEvicted ||
		!strings.HasPrefix(last.Message, "evicted: ") || !strings.Contains(last.Message, want) {
		t.Errorf("the evicted run ended %+v; want PREEMPTED, reason %q, message \"evicted: ...%s...\"", last, ReasonEvicted, want)
	}
	for _, ev := range evs {
		if ev.State == pelotonv1.TaskState_LOST || ev.State == pelotonv1.TaskState_FAILED {
			t.Errorf("the evicted run was said to be %s first: %q", ev.State, states(evs))
		}
	}
}

// TestKubeletEvictionEndsThePreempted: a pod the kubelet evicts under node
// pressure (its status set Failed, reason Evicted, as the kubelet writes
// it) ends its run PREEMPTED with the kubelet's message.
func TestKubeletEvictionEndsThePreempted(t *testing.T) {
	e := newEnvWith(t, cluster(t), 1, nil, fastBudgets)
	spec := e.launchJob("pressed", 1, nil)[0]
	pods := e.c.Client.CoreV1().Pods(e.ns)
	p, err := pods.Get(e.ctx, podName(spec.TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 20Mi."
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", msg
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: msg, LastTransitionTime: metav1.Now()})
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error",
			FinishedAt: metav1.Now()}}
	}
	if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantPreempted(t, e.waitFor(spec.TaskID, pelotonv1.TaskState_PREEMPTED, 30*time.Second), "low on resource: memory")
}

// TestTaintManagerDeletionEndsThePreempted: a pod deleted by the taint
// manager (a NoExecute taint it does not tolerate; the DisruptionTarget
// condition says so before the delete) ends its run PREEMPTED, as does an
// eviction through the Eviction API (TestEvictionWithinTheBudget); a pod
// deleted with no such condition is still LOST, deleted by someone else.
func TestTaintManagerDeletionEndsThePreempted(t *testing.T) {
	e := newEnvWith(t, cluster(t), 2, nil, fastBudgets)
	specs := e.launchJob("tainted", 2, nil)
	pods := e.c.Client.CoreV1().Pods(e.ns)
	p, err := pods.Get(e.ctx, podName(specs[0].TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint",
		LastTransitionTime: metav1.Now()})
	if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	for _, s := range specs {
		if err := pods.Delete(e.ctx, podName(s.TaskID), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	wantPreempted(t, e.waitFor(specs[0].TaskID, pelotonv1.TaskState_PREEMPTED, 30*time.Second), "NoExecute taint")
	evs := e.waitFor(specs[1].TaskID, pelotonv1.TaskState_LOST, 30*time.Second)
	if last := evs[len(evs)-1]; last.Reason != ReasonPodDeleted {
		t.Errorf("a pod deleted with no disruption condition ended %+v; want LOST, reason %q", last, ReasonPodDeleted)
	}
}
