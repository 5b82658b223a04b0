package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodLifecycles runs pods through the stages on a kwok node: the harness
// itself is what the Kubernetes backend's tests stand on, so its promises
// (bound pods run, end as their command says, deleted pods go) are checked
// here, without Peloton.
func TestPodLifecycles(t *testing.T) {
	// More kwok workers than its default, as the benchmark runs it: the
	// configuration document must not change what the stages do.
	c := Start(t, Options{KwokPodWorkers: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := c.AddNodes(ctx, NodeSpec{Prefix: "kt", Count: 1, CPU: "4", Memory: "8Gi", Labels: map[string]string{"zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		command []string
		ann     map[string]string
		phase   corev1.PodPhase
		code    int32
	}{
		{"sleep", []string{"sleep", "1"}, nil, corev1.PodSucceeded, 0},
		{"true", []string{"true"}, nil, corev1.PodSucceeded, 0},
		{"exit", []string{"sh", "-c", "exit 3"}, nil, corev1.PodFailed, 3},
		{"false", []string{"/bin/false"}, nil, corev1.PodFailed, 1},
		{"annotated", []string{"server"}, map[string]string{AnnotationSimDuration: "500ms", AnnotationSimExitCode: "7"}, corev1.PodFailed, 7},
		{"service", []string{"server"}, nil, corev1.PodRunning, 0},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "t", Annotations: tc.ann},
			Spec: corev1.PodSpec{
				NodeName: nodes[0],
				Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: tc.command,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("t").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		var got *corev1.Pod
		err := Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods("t").Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = p
			return p.Status.Phase == tc.phase, nil
		})
		if err != nil {
			t.Fatalf("%s: phase %s, want %s: %v\n%s", tc.name, got.Status.Phase, tc.phase, err, c.LogTails(30))
		}
		if tc.phase == corev1.PodRunning {
			continue
		}
		st := got.Status.ContainerStatuses
		if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != tc.code {
			t.Errorf("%s: container statuses %+v, want exit code %d", tc.name, st, tc.code)
		}
	}
	if err := c.Client.CoreV1().Pods("t").Delete(ctx, "service", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods("t").Get(ctx, "service", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("deleted pod still there: %v", err)
	}

	// The apiserver comes back on the same address with the same data.
	if err := c.RestartAPIServer(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("t").Get(ctx, "sleep", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
