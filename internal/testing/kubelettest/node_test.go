package kubelettest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/internal/testing/kubelettest"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// TestPodRunsOnTheNode: a pod bound to the node runs its command in the
// local image and ends Succeeded with its output in the kubelet's logs.
func TestPodRunsOnTheNode(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{APIServerArgs: kubelettest.APIServerArgs})
	n := kubelettest.Start(t, c, "real-0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      n.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: kubelettest.Image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "echo hello from a real pod; exit 0"},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err := kubetest.Poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod never ended: %v; status %+v", err, last.Status)
	}
	if last.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %+v", last.Status.Phase, last.Status)
	}
	logs, err := c.Client.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || string(logs) != "hello from a real pod\n" {
		t.Fatalf("logs %q, %v", logs, err)
	}
}
