package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/sanitize"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestPodMessageNotUTF8: a pod's termination message is whatever the
// container wrote to its termination log. A kubelet that sends it in
// protobuf stores its bytes as they are; one that is not valid UTF-8, and
// far longer than a task record should keep, reaches the stack through
// hostmgr (as in a running cluster) valid and bounded.
func TestPodMessageNotUTF8(t *testing.T) {
	c := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := fmt.Sprintf("t%d", testSeq.Add(1))
	nodes, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: id, Count: 1, CPU: "4", Memory: "8Gi", Labels: map[string]string{"peloton.io/test": id}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, id); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{REST: c.Config, Namespace: id, NodeSelector: "peloton.io/test=" + id,
		RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hm := hostmgr.NewManager(b, hostmgr.Options{})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer hm.Close()
	spec := hostmgr.LaunchSpec{TaskID: id + "-0-1", JobID: id, Host: nodes[0], Command: []string{"sleep", "3600"},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
	if err := hm.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	next := func(want pelotonv1.TaskState) hostmgr.TaskEvent {
		t.Helper()
		for {
			select {
			case ev := <-hm.Events():
				if ev.TaskID == spec.TaskID && ev.State == want {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no %s event of %s", want, spec.TaskID)
			}
		}
	}
	next(pelotonv1.TaskState_RUNNING)

	// The kubelet's side: the container ended, its message in protobuf.
	rc := rest.CopyConfig(c.Config)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	kubelet, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	said := "panic: \xff\xfe bad \xc3 " + strings.Repeat("é", 5000)
	pods := kubelet.CoreV1().Pods(id)
	pod, err := pods.Get(ctx, podName(spec.TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 3, Reason: "Error", Message: said, FinishedAt: metav1.Now()}}
	}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := next(pelotonv1.TaskState_FAILED)
	if !utf8.ValidString(ev.Message) || len(ev.Message) > sanitize.MaxMessage || !strings.HasPrefix(ev.Message, "Error panic: \uFFFD") {
		t.Errorf("the FAILED event's message is %d bytes, valid %v: %.40q", len(ev.Message), utf8.ValidString(ev.Message), ev.Message)
	}
	if got, err := hm.Status(spec.TaskID); err != nil || !utf8.ValidString(got.Message) || len(got.Message) > sanitize.MaxMessage {
		t.Errorf("Status: %.40q, %v", got.Message, err)
	}
}
