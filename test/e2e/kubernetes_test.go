package e2e

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestKubernetesBatchJob runs the whole stack on the kubernetes backend
// against a real kube-apiserver with kwok nodes: a batch job larger than the
// nodes hold at once, whose every task becomes a pod that Peloton binds, and
// a failing instance whose exit code comes back through the pod's status.
func TestKubernetesBatchJob(t *testing.T) {
	kc := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes, err := kc.AddNodes(ctx, kubetest.NodeSpec{Prefix: "kwok", Count: 3, CPU: "4", Memory: "8Gi", Labels: map[string]string{"zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.CreateNamespace(ctx, "peloton"); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: cluster.KubeConfig{Kubeconfig: kc.Kubeconfig}})

	hl, err := s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hl.Hosts {
		names = append(names, h.Name)
		if h.Capacity.GetCpu() != 4 || h.Capacity.GetMemoryMb() != 8192 || h.Labels["zone"] != "a" {
			t.Errorf("host %v", h)
		}
	}
	sort.Strings(names)
	if len(names) != 3 || names[0] != nodes[0] {
		t.Fatalf("hosts %v, want the kwok nodes %v", names, nodes)
	}

	// 18 one-CPU tasks on 12 CPUs: at least two waves of pods.
	const instances = 18
	spec := &pelotonv1.JobSpec{Name: "kube-batch", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: instances,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 512}}}
	resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	j := s.waitJob(resp.JobId, pelotonv1.JobState_JOB_SUCCEEDED, 2*time.Minute)
	if got := j.Status.TaskCounts["SUCCEEDED"]; got != instances {
		t.Fatalf("task counts %v, want %d SUCCEEDED", j.Status.TaskCounts, instances)
	}
	pods, err := kc.Client.CoreV1().Pods("peloton").List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + resp.JobId})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != instances {
		t.Fatalf("%d pods of the job, want %d", len(pods.Items), instances)
	}
	for _, p := range pods.Items {
		if p.Spec.SchedulerName != kubernetes.SchedulerName || p.Spec.NodeName == "" || p.Status.Phase != "Succeeded" {
			t.Errorf("pod %s: scheduler %q node %q phase %s", p.Name, p.Spec.SchedulerName, p.Spec.NodeName, p.Status.Phase)
		}
	}
	task, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 0})
	if err != nil {
		t.Fatal(err)
	}
	if st := task.Task.Status; st.State != pelotonv1.TaskState_SUCCEEDED || st.Host == "" {
		t.Fatalf("instance 0: %v", st)
	}
	// Every resource was given back.
	hl, _ = s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	for _, h := range hl.Hosts {
		if h.TaskCount != 0 || h.Allocated.GetCpu() != 0 {
			t.Errorf("host %s after the job: %d tasks, %v allocated", h.Name, h.TaskCount, h.Allocated)
		}
	}

	// A cordoned node takes no new tasks: hostmgr hears of it from the
	// backend, drains it (it holds none here) and placement leaves it out.
	node, err := kc.Client.CoreV1().Nodes().Get(ctx, nodes[2], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = true
	if _, err := kc.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitHost(nodes[2], "cordoned", 20*time.Second, func(h *pelotonv1.Host) bool {
		return h.State == pelotonv1.HostState_HOST_DRAINED && strings.Contains(h.MaintenanceMessage, "(cordoned)")
	})
	resp, err = s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "kube-cordon", Type: pelotonv1.JobType_BATCH,
		Pool: "/default", InstanceCount: 6, DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)
	pods, err = kc.Client.CoreV1().Pods("peloton").List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + resp.JobId})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == nodes[2] {
			t.Errorf("pod %s placed on the cordoned node", p.Name)
		}
	}

	// A failing instance: its exit code and reason come from the pod.
	fail := &pelotonv1.JobSpec{Name: "kube-fails", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", "exit 3"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 1}}}
	resp, err = s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: fail})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_FAILED, time.Minute)
	task, err = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 0})
	if err != nil {
		t.Fatal(err)
	}
	if st := task.Task.Status; st.State != pelotonv1.TaskState_FAILED || st.ExitCode != 3 || st.Reason != kubernetes.ReasonExitNonzero || st.RunId != 2 {
		t.Fatalf("failing instance: %v", st)
	}
}
