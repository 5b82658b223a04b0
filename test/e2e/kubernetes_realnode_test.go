package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubelettest"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// agentImage is the host agent's image on the real node: busybox and the
// slim agent binary where the DaemonSet runs it.
const agentImage = "peloton.test/hostagent:1"

// TestKubernetesRealNode runs Peloton's Kubernetes backend with a real
// node (a kubelet over containerd and runc) and the host agent DaemonSet
// of deploy/kubernetes on it: the agent, in a pod, reads the node's
// cgroups and its pods' processes, and reports real usage; its QoS
// controller kills a revocable pod's processes when the node runs hot,
// and Peloton sees the run end qos-revoked and runs it again.
func TestKubernetesRealNode(t *testing.T) {
	kubelettest.Require(t)
	kc := kubetest.Start(t, kubetest.Options{APIServerArgs: kubelettest.APIServerArgs})
	n := kubelettest.Start(t, kc, "real-0")
	if err := kc.StartControllerManager("daemonset"); err != nil {
		t.Fatal(err)
	}
	if err := kc.StartScheduler(); err != nil { // for the DaemonSet's pod
		t.Fatal(err)
	}
	for _, ns := range []string{kubeNamespace, "peloton"} {
		if err := kc.CreateNamespace(ctxT(t), ns); err != nil {
			t.Fatal(err)
		}
	}
	// The stack listens on the node's address: the agent's pod reaches it
	// through the node's bridge.
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes",
		kube:      cluster.KubeConfig{Kubeconfig: kc.Kubeconfig, Image: kubelettest.Image},
		configure: func(c *cluster.Config) { c.Listen = n.IP + ":0" }})

	agent := filepath.Join(t.TempDir(), "peloton-hostagent")
	build := exec.Command("go", "build", "-o", agent, repoPath("cmd/peloton-hostagent"))
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // the image has no C library
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := n.ImportImage(agentImage, nil, map[string]string{"/usr/local/bin/peloton-hostagent": agent}); err != nil {
		t.Fatal(err)
	}
	applyAgentDaemonSet(t, kc, s.ready.GRPCAddr)

	testutil.Eventually(t, 90*time.Second, "the node reported by the agent in its pod", func() error {
		h, err := s.hostNamed(n.Name)
		if err != nil {
			return err
		}
		if u := h.Usage; u.GetReceiveTime() == nil || u.GetSource() != "runs" || u.GetSequence() == 0 {
			return fmt.Errorf("host usage %v; agent pods: %s", u, agentPods(kc))
		}
		return nil
	})
	k := &kubeStack{kc: kc, s: s}
	t.Run("pod-usage", func(t *testing.T) { testRealPodUsage(t, k.on(t)) })
	t.Run("qos-revokes-a-revocable-pod", func(t *testing.T) { testRealQoS(t, k.on(t), kc) })
}

// applyAgentDaemonSet creates deploy/kubernetes' host agent DaemonSet and
// its service account, changed only where the test cluster differs from a
// real one: the image is the node's local one, the stack is at server
// (no cluster DNS here) without TLS, and the QoS controller runs hot early.
func applyAgentDaemonSet(t *testing.T, kc *kubetest.Cluster, server string) {
	t.Helper()
	raw, err := os.ReadFile(repoPath("deploy/kubernetes/hostagent-daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubetest.DecodeObjects(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount":
			sa := &corev1.ServiceAccount{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, sa); err != nil {
				t.Fatal(err)
			}
			if _, err := kc.Client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctxT(t), sa, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
				t.Fatal(err)
			}
			localAgent(ds, server)
			if _, err := kc.Client.AppsV1().DaemonSets(ds.Namespace).Create(ctxT(t), ds, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected %s in the DaemonSet's manifest", u.GetKind())
		}
	}
}

// localAgent points the DaemonSet's agent at the test's stack and image.
func localAgent(ds *appsv1.DaemonSet, server string) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Image, c.ImagePullPolicy = agentImage, corev1.PullNever
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--server="):
			args = append(args, "--server="+server)
		case strings.HasPrefix(a, "--interval="):
			args = append(args, "--interval=1s")
		case strings.HasPrefix(a, "--ca-file="), strings.HasPrefix(a, "--cert-file="), strings.HasPrefix(a, "--key-file="):
		default:
			args = append(args, a)
		}
	}
	// The node is a kubelet on a machine the rest of the suite shares: its
	// cgroups' use is the whole machine's, which leaves no slack when the
	// machine is busy. So the agent counts its pods' use as the node's
	// (--virtual, as the local backend's agents do), read from their
	// processes all the same, and is hot at a tenth of two cores: a
	// revocable pod that burns and a batch pod beside it are enough.
	c.Args = append(args, "--virtual", "--capacity-cpu=2", "--capacity-memory-mb=4096", "--qos-cpu-high=0.1", "--qos-cpu-low=0.05")
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name != "tls" {
			mounts = append(mounts, m)
		}
	}
	c.VolumeMounts = mounts
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		if v.Name != "tls" {
			vols = append(vols, v)
		}
	}
	spec.Volumes = vols
}

// testRealPodUsage: a pod that burns CPU is seen using it, by the agent
// that reads its processes through the node's /proc.
func testRealPodUsage(t *testing.T, s *stack) {
	burn := s.createJob(&pelotonv1.JobSpec{Name: "burn", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"timeout", "60", "sh", "-c", "while :; do :; done"},
			Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 32}}})
	testutil.Eventually(t, 60*time.Second, "the burning pod seen using CPU", func() error {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: burn, InstanceId: 0})
		if err != nil {
			return err
		}
		// Loose: its cgroup holds it to half a core, and the machine is shared.
		if u := resp.Task.Status.Usage; u.GetCpu() < 0.1 {
			return fmt.Errorf("task %s, usage %v", resp.Task.Status.State, u)
		}
		h, err := s.hostNamed("real-0")
		if err != nil {
			return err
		}
		if u := h.Usage; u.GetCpu() < 0.1 {
			return fmt.Errorf("host usage %v", u)
		}
		return nil
	})
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: burn}); err != nil {
		t.Fatal(err)
	}
}

// testRealQoS: a revocable pod rides on the slack of a sleeping service;
// once a batch pod burns beside it the node runs hot, the agent kills the
// revocable pod's processes, and Peloton ends the run qos-revoked with no
// failure counted; the pod has stopped for good.
func testRealQoS(t *testing.T, s *stack, kc *kubetest.Cluster) {
	sleeper := service("sleeper", 1, 1, "sleep", "3600")
	sleeper.DefaultSpec.Resources.Cpu, sleeper.DefaultSpec.Resources.MemoryMb = 1, 512
	svc := s.createJob(sleeper)
	s.waitTasks(svc, "the service running", 60*time.Second, allRunning(1))
	rev := s.createJob(&pelotonv1.JobSpec{Name: "rev", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		Sla: &pelotonv1.SlaSpec{Revocable: true},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"timeout", "120", "sh", "-c", "while :; do :; done"},
			Resources: &pelotonv1.Resources{Cpu: 0.2, MemoryMb: 32}}})
	s.waitTasks(rev, "the revocable run on the service's slack", 60*time.Second, allRunning(1))
	pods, err := kc.Client.CoreV1().Pods(kubeNamespace).List(ctxT(t), metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + rev})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the revocable run's pods: %v, %v", pods, err)
	}
	pod := pods.Items[0]
	// It rides on slack: it asks the kubelet for nothing, and is held to
	// what it was placed with.
	if c := pod.Spec.Containers[0]; !c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Cpu().MilliValue() != 200 {
		t.Errorf("the revocable pod's resources: %+v", c.Resources)
	}
	s.createJob(&pelotonv1.JobSpec{Name: "heat", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"timeout", "60", "sh", "-c", "while :; do :; done"},
			Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 32}}})
	testutil.Eventually(t, 90*time.Second, "the revocable run revoked", func() error {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: rev, InstanceId: 0})
		if err != nil {
			return err
		}
		st := resp.Task.Status
		for _, tr := range st.History {
			if tr.RunId == 1 && tr.State == pelotonv1.TaskState_KILLED && tr.Reason == hostmgr.ReasonQoSRevoked {
				if st.FailureCount != 0 {
					return fmt.Errorf("revoked with %d failures", st.FailureCount)
				}
				return nil
			}
		}
		return fmt.Errorf("run %d %s (%s): history %v", st.RunId, st.State, st.Reason, st.History)
	})
	// Its pod has stopped for good (restartPolicy Never): killed, not
	// restarted in place. Like every finished run's pod it is kept for
	// its logs until the finished-pod TTL, then deleted.
	testutil.Eventually(t, 60*time.Second, "the revoked run's pod stopped", func() error {
		p, err := kc.Client.CoreV1().Pods(kubeNamespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil || p.UID != pod.UID {
			return nil // already deleted
		}
		cs := p.Status.ContainerStatuses
		if p.Status.Phase != corev1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].RestartCount != 0 {
			return fmt.Errorf("pod %s: %s %+v", pod.Name, p.Status.Phase, cs)
		}
		return nil
	})
}

// agentPods says how the DaemonSet's pods stand, for a failure message.
func agentPods(kc *kubetest.Cluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := kc.Client.CoreV1().Pods("peloton").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		line := fmt.Sprintf("%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
		for _, cs := range p.Status.ContainerStatuses {
			line += fmt.Sprintf(" [%s restarts %d waiting %v terminated %v]", cs.Name, cs.RestartCount, cs.State.Waiting, cs.LastTerminationState.Terminated)
		}
		if logs, err := kc.Client.CoreV1().Pods("peloton").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx); err == nil {
			line += " logs: " + string(logs)
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}
