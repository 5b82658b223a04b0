package kubernetes

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestReplacePatchesThePod: a running run replaced by the next run of its
// instance with another image keeps its pod (same UID, node and name); the
// pod gets the new image, run-id label and task-id annotation; the old run
// ends KILLED (replaced-in-place), the new one is LAUNCHED at once and
// RUNNING once the container was restarted with the new image. kwok plays
// the kubelet's part: its stage peloton-pod-restart-changed
// (internal/testing/kubetest/stages.go) restarts a running pod's container whose
// image changed, raising its restartCount.
func TestReplacePatchesThePod(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := e.launch("repl", "server")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	name := podName(spec.TaskID)
	before, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := spec
	next.TaskID, next.RunID, next.Image = "repl-0-2", 2, "busybox:1.37"
	if err := e.b.CheckReplace(spec.TaskID, next); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Replace(e.ctx, spec.TaskID, next); err != nil {
		t.Fatal(err)
	}

	old := e.waitFor(spec.TaskID, pelotonv1.TaskState_KILLED, 10*time.Second)
	if last := old[len(old)-1]; last.Reason != hostmgr.ReasonReplaced {
		t.Errorf("old run ended %+v, want reason %s", last, hostmgr.ReasonReplaced)
	}
	evs := e.waitFor(next.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if evs[0].State != pelotonv1.TaskState_LAUNCHED || evs[0].Host != e.nodes[0] {
		t.Errorf("new run's events %s, first %+v; want LAUNCHED on %s first", states(evs), evs[0], e.nodes[0])
	}
	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case p.UID != before.UID || p.Spec.NodeName != e.nodes[0]:
		t.Errorf("pod %s (%s) on %s, was %s on %s", p.Name, p.UID, p.Spec.NodeName, before.UID, before.Spec.NodeName)
	case p.Spec.Containers[0].Image != "busybox:1.37":
		t.Errorf("pod's image %q, want busybox:1.37", p.Spec.Containers[0].Image)
	case p.Labels[LabelRunID] != "2" || p.Annotations[AnnotationTaskID] != next.TaskID || p.Annotations[AnnotationRunRestarts] != "1":
		t.Errorf("pod labels %v annotations %v", p.Labels, p.Annotations)
	case len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 1 ||
		p.Status.ContainerStatuses[0].Image != "busybox:1.37":
		t.Errorf("container statuses %+v: the kubelet (kwok) did not restart the container", p.Status.ContainerStatuses)
	}
	// The run's IDs reach the container through the downward API, so the
	// restarted container sees the new run's.
	for _, v := range p.Spec.Containers[0].Env {
		if v.Name == "PELOTON_TASK_ID" && (v.ValueFrom == nil || v.ValueFrom.FieldRef == nil ||
			v.ValueFrom.FieldRef.FieldPath != "metadata.annotations['"+AnnotationTaskID+"']") {
			t.Errorf("PELOTON_TASK_ID is %+v, want it from the task-id annotation", v)
		}
	}
	if st, err := e.b.Status(next.TaskID); err != nil || st.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("status of the new run: %+v %v", st, err)
	}

	// Anything but the image differs: refused, and nothing is patched.
	third := next
	third.TaskID, third.RunID, third.Image = "repl-0-3", 3, "busybox:1.38"
	refused := map[string]func(s *hostmgr.LaunchSpec) string{
		"env":        func(s *hostmgr.LaunchSpec) string { s.Env = map[string]string{"GREETING": "bye"}; return next.TaskID },
		"same image": func(s *hostmgr.LaunchSpec) string { s.Image = next.Image; return next.TaskID },
		"other node": func(s *hostmgr.LaunchSpec) string { s.Host = "elsewhere"; return next.TaskID },
		"ended run":  func(s *hostmgr.LaunchSpec) string { return spec.TaskID },
		"unknown":    func(s *hostmgr.LaunchSpec) string { return "nope-0-1" },
	}
	for what, change := range refused {
		s := third
		from := change(&s)
		if err := e.b.CheckReplace(from, s); !errors.Is(err, hostmgr.ErrNotReplaceable) {
			t.Errorf("%s: CheckReplace: %v, want ErrNotReplaceable", what, err)
		}
		if err := e.b.Replace(e.ctx, from, s); !errors.Is(err, hostmgr.ErrNotReplaceable) {
			t.Errorf("%s: Replace: %v, want ErrNotReplaceable", what, err)
		}
	}
	after, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Spec.Containers[0].Image != "busybox:1.37" || after.Annotations[AnnotationTaskID] != next.TaskID {
		t.Errorf("a refused replacement changed the pod: image %q, task %q", after.Spec.Containers[0].Image, after.Annotations[AnnotationTaskID])
	}
	if _, err := e.b.Status(third.TaskID); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("a refused replacement left run %s behind: %v", third.TaskID, err)
	}

	// A restarted Peloton adopts the pod as the new run, and can replace
	// it again.
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	e.rec = newRecorder()
	e.b = e.start()
	if st, err := e.b.Status(next.TaskID); err != nil || st.State != pelotonv1.TaskState_RUNNING || st.Host != e.nodes[0] {
		t.Fatalf("status of the adopted new run: %+v %v", st, err)
	}
	if _, err := e.b.Status(spec.TaskID); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("the replaced run is known after a restart: %v", err)
	}
	if err := e.b.Replace(e.ctx, next.TaskID, third); err != nil {
		t.Fatal(err)
	}
	e.waitFor(third.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := e.b.Kill(e.ctx, third.TaskID, time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitFor(third.TaskID, pelotonv1.TaskState_KILLED, 20*time.Second)
}

// TestReplacedRunWaitsForItsContainer: until the container restarts with
// the new image the new run is LAUNCHED, however long that takes, also for
// a Peloton that adopts the pod meanwhile. The test plays the kubelet: the
// pod's AnnotationHoldStatus keeps kwok from restarting the container, and
// the test reports the restarted container itself, through the status
// subresource. A second run, whose end the test also reports, is the
// witness that the backend has handled the pod update of the Replace.
func TestReplacedRunWaitsForItsContainer(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := e.launch("slow", "server")
	witness := e.launch("witness", "server")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	e.waitFor(witness.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	name := podName(spec.TaskID)
	pods := e.c.Client.CoreV1().Pods(e.ns)
	for _, n := range []string{name, podName(witness.TaskID)} {
		p, err := pods.Get(e.ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations[kubetest.AnnotationHoldStatus] = "true"
		if _, err := pods.Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The informer must have seen it, or Replace would test the old
		// pod's fields against the new one's (and kwok could still end
		// the witness).
		if err := kubetest.Poll(e.ctx, 10*time.Second, func(context.Context) (bool, error) {
			obj, ok, _ := e.b.pods.GetByKey(e.ns + "/" + n)
			return ok && obj.(*corev1.Pod).Annotations[kubetest.AnnotationHoldStatus] != "", nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	next := spec
	next.TaskID, next.RunID, next.Image = "slow-0-2", 2, "busybox:1.37"
	if err := e.b.Replace(e.ctx, spec.TaskID, next); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_LAUNCHED, 10*time.Second)
	// The pod update of Replace must not be taken for the restart. The
	// witness's end, written after it, reaches the backend's pod handler
	// after it (one watch, in the order of the writes): once the witness
	// has ended, the handler has seen the update.
	wp, err := pods.Get(e.ctx, podName(witness.TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wp.Status.Phase = corev1.PodSucceeded
	wp.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: wp.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.Now()}}}}
	if _, err := pods.UpdateStatus(e.ctx, wp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(witness.TaskID, pelotonv1.TaskState_SUCCEEDED, 10*time.Second)
	if evs := e.rec.of(next.TaskID); len(evs) != 1 {
		t.Fatalf("new run before its container restarted: %s, want LAUNCHED only", states(evs))
	}
	// Adopted meanwhile: still LAUNCHED.
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	e.rec = newRecorder()
	e.b = e.start()
	if st, err := e.b.Status(next.TaskID); err != nil || st.State != pelotonv1.TaskState_LAUNCHED {
		t.Fatalf("adopted new run before its container restarted: %+v %v", st, err)
	}
	p, err := pods.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: "busybox:1.37", RestartCount: 1,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_RUNNING, 10*time.Second)
}
