package e2e

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// appsNamespace is where the secondary-scheduler scenarios create their
// pods, as a client other than Peloton would.
const appsNamespace = "apps"

// TestKubernetesSecondaryScheduler: pods that another client creates with
// schedulerName peloton and the annotation peloton.io/pool are admitted
// through the pool, placed and bound by Peloton, preempted by priority and
// held back as gangs, and show up as jobs of their owners.
func TestKubernetesSecondaryScheduler(t *testing.T) {
	k := startKubeStackWith(t, cluster.KubeConfig{Secondary: true, SecondaryNamespaces: []string{appsNamespace}})
	if err := k.kc.CreateNamespace(ctxT(t), appsNamespace); err != nil {
		t.Fatal(err)
	}
	// First, while its node is the whole cluster: a pool is held to its
	// entitlement only when the cluster is full.
	t.Run("priority-preemption", k.testForeignPriority)
	t.Run("bare-pod", k.testForeignBarePod)
	t.Run("owner", k.testForeignOwner)
	t.Run("gang", k.testForeignGang)
	t.Run("bad-pool", k.testForeignBadPool)
	t.Run("node-affinity", k.testForeignAffinity)
	t.Run("taints", k.testForeignTaints)
	t.Run("priority-class", k.testForeignPriorityClass)
	t.Run("restart", k.testForeignRestart)
}

// appPod is a pod as kubectl or a controller would create it for Peloton:
// cpu millicores on the nodes of suite, in pool.
func (k *kubeStack) appPod(t *testing.T, name, pool, suite string, milliCPU int64, annotations map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	a := map[string]string{kubernetes.AnnotationPool: pool}
	for key, v := range annotations {
		a[key] = v
	}
	rl := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("64Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appsNamespace, Annotations: a},
		Spec: corev1.PodSpec{SchedulerName: kubernetes.SchedulerName, NodeSelector: map[string]string{"suite": suite},
			Containers: []corev1.Container{{Name: "app", Image: "nginx:stable", Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	created, err := k.kc.Client.CoreV1().Pods(appsNamespace).Create(ctxT(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// unschedulableSaying reports whether p's PodScheduled condition is
// False/Unschedulable with a message containing text.
func unschedulableSaying(p *corev1.Pod, text string) bool {
	if p == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, text)
		}
	}
	return false
}

func replicaSet(name string, uid types.UID) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: uid, Controller: &yes}
}

// appPods are the pods of the apps namespace, by name.
func (k *kubeStack) appPods(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	pl, err := k.kc.Client.CoreV1().Pods(appsNamespace).List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range pl.Items {
		out[pl.Items[i].Name] = &pl.Items[i]
	}
	return out
}

// waitAppPods polls the apps pods until cond holds, or fails.
func (k *kubeStack) waitAppPods(t *testing.T, what string, within time.Duration, cond func(map[string]*corev1.Pod) bool) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	testutil.Eventually(t, within, "apps pods: "+what, func() error {
		if pods = k.appPods(t); cond(pods) {
			return nil
		}
		var b strings.Builder
		for _, p := range pods {
			b.WriteString("\n  " + p.Name + " node=" + p.Spec.NodeName + " phase=" + string(p.Status.Phase) + " task=" + p.Annotations[kubernetes.AnnotationTaskID])
		}
		return errors.New("they are:" + b.String())
	})
	return pods
}

func podsRunning(names ...string) func(map[string]*corev1.Pod) bool {
	return func(pods map[string]*corev1.Pod) bool {
		for _, n := range names {
			p := pods[n]
			if p == nil || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	}
}

// foreignJob waits for the job Peloton made for a Kubernetes owner.
func (k *kubeStack) foreignJob(t *testing.T, name string) *pelotonv1.Job {
	t.Helper()
	s := k.on(t)
	var job *pelotonv1.Job
	testutil.Eventually(t, 30*time.Second, "a job named "+name, func() bool {
		resp, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.Jobs {
			if j.Spec.Name == name {
				job = j
				return true
			}
		}
		return false
	})
	return job
}

// testForeignPriority: two low-priority pods of a ReplicaSet fill the only
// node; a pod of priority 5 in the same pool displaces one of them. The
// victim's pod is deleted (its owner would make another) and its instance
// ends as preempted.
func (k *kubeStack) testForeignPriority(t *testing.T) {
	s := k.on(t)
	k.addNodes(t, "sec-prio", 1, "2", "sec-prio", nil)
	if _, err := s.pools.CreatePool(ctxT(t), &pelotonv1.CreatePoolRequest{Path: "/apps-prio"}); err != nil {
		t.Fatal(err)
	}
	rs := replicaSet("low", "rs-low")
	k.appPod(t, "low-a", "/apps-prio", "sec-prio", 1000, nil, rs)
	k.appPod(t, "low-b", "/apps-prio", "sec-prio", 1000, nil, rs)
	k.waitAppPods(t, "both low-priority pods running", 60*time.Second, podsRunning("low-a", "low-b"))
	low := k.foreignJob(t, appsNamespace+"/ReplicaSet/low")

	k.appPod(t, "high", "/apps-prio", "sec-prio", 1000, map[string]string{kubernetes.AnnotationPriority: "5"}, nil)
	pods := k.waitAppPods(t, "the high-priority pod running and one low one gone", 60*time.Second, func(pods map[string]*corev1.Pod) bool {
		return podsRunning("high")(pods) && (pods["low-a"] == nil) != (pods["low-b"] == nil)
	})
	victim := "low-a"
	if pods["low-a"] != nil {
		victim = "low-b"
	}
	ts := s.waitTasks(low.Id, "one low-priority instance preempted", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		n := 0
		for _, tk := range ts {
			if tk.Status.State == pelotonv1.TaskState_KILLED && strings.HasPrefix(tk.Status.Reason, "preempted") {
				n++
			}
		}
		return n == 1
	})
	for _, tk := range ts {
		if tk.Status.RunId != 1 {
			t.Errorf("instance %d of a foreign job has run %d: Peloton must not re-run a pod", tk.InstanceId, tk.Status.RunId)
		}
	}
	high := k.foreignJob(t, appsNamespace+"/Pod/high")
	if high.Spec.Sla.GetPriority() != 5 || low.Spec.Sla.GetPriority() != 0 {
		t.Errorf("priorities: high %d, low %d", high.Spec.Sla.GetPriority(), low.Spec.Sla.GetPriority())
	}
	t.Logf("preempted %s for the priority-5 pod", victim)
	// A pod whose PriorityClass (value 10) outranks both displaces the
	// last low one, not the priority-5 pod.
	survivor := "low-a"
	if victim == "low-a" {
		survivor = "low-b"
	}
	k.priorityClass(t, "apps-top", 10)
	k.appPodWith(t, "top", "sec-prio", 1000, func(p *corev1.Pod) {
		p.Annotations[kubernetes.AnnotationPool] = "/apps-prio"
		p.Spec.PriorityClassName = "apps-top"
	})
	k.waitAppPods(t, "the pod of class apps-top running in place of "+survivor, 60*time.Second, func(pods map[string]*corev1.Pod) bool {
		return podsRunning("top", "high")(pods) && pods[survivor] == nil
	})
	if top := k.foreignJob(t, appsNamespace+"/Pod/top"); top.Spec.Sla.GetPriority() != 10 {
		t.Errorf("job of a pod of class apps-top (10): priority %d", top.Spec.Sla.GetPriority())
	}
	// Leave the node empty for the scenarios after this one.
	for _, n := range []string{"low-a", "low-b", "high", "top"} {
		_ = k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
}

// testForeignBarePod: a plain pod runs to completion under Peloton, as a
// job of its own that Peloton's API shows but will not change.
func (k *kubeStack) testForeignBarePod(t *testing.T) {
	s := k.on(t)
	nodes := k.addNodes(t, "sec-bare", 1, "2", "sec-bare", nil)
	if _, err := s.pools.CreatePool(ctxT(t), &pelotonv1.CreatePoolRequest{Path: "/apps"}); err != nil {
		t.Fatal(err)
	}
	p := k.appPod(t, "hello", "/apps", "sec-bare", 500, map[string]string{kubetest.AnnotationSimDuration: "3s"}, nil)
	j := k.foreignJob(t, appsNamespace+"/Pod/hello")
	f := j.Spec.Foreign
	if f.GetSource() != "kubernetes" || f.GetKind() != "Pod" || f.GetName() != "hello" || f.GetNamespace() != appsNamespace ||
		f.GetUid() != string(p.UID) || j.Spec.Pool != "/apps" || j.Spec.Labels["peloton.io/source"] != "kubernetes" {
		t.Errorf("job of a bare pod: %+v", j.Spec)
	}
	ts := s.waitTasks(j.Id, "the pod's instance succeeded", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 1 && ts[0].Status.State == pelotonv1.TaskState_SUCCEEDED
	})
	if ts[0].Status.Host != nodes[0] {
		t.Errorf("instance ran on %q, want %s", ts[0].Status.Host, nodes[0])
	}
	got, err := k.kc.Client.CoreV1().Pods(appsNamespace).Get(ctxT(t), "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != p.UID || got.Spec.NodeName != nodes[0] || got.Annotations[kubernetes.AnnotationTaskID] != j.Id+"-0-1" ||
		got.Status.Phase != corev1.PodSucceeded {
		t.Errorf("the pod: node %q, phase %s, annotations %v", got.Spec.NodeName, got.Status.Phase, got.Annotations)
	}
	s.waitJob(j.Id, pelotonv1.JobState_JOB_SUCCEEDED, 30*time.Second)
	// Peloton leaves a finished pod to its owner, and changes such a job
	// only through Kubernetes.
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: j.Id}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "through Kubernetes") {
		t.Errorf("CancelJob of a foreign job: %v, want FailedPrecondition", err)
	}
	if _, err := s.jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: j.Id, InstanceCount: 3}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ScaleJob of a foreign job: %v, want FailedPrecondition", err)
	}
	if _, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "x", Type: pelotonv1.JobType_BATCH, Pool: "/apps", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}},
		Foreign:     &pelotonv1.ForeignOwner{Kind: "Pod"}}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.foreign") {
		t.Errorf("CreateJob with spec.foreign: %v, want InvalidArgument naming it", err)
	}
}

// testForeignOwner: pods of one ReplicaSet are instances of one job, which
// grows as the ReplicaSet adds pods; a pod deleted ends its instance.
func (k *kubeStack) testForeignOwner(t *testing.T) {
	s := k.on(t)
	k.addNodes(t, "sec-rs", 1, "4", "sec-rs", nil)
	rs := replicaSet("web-5d9f", "rs-web")
	k.appPod(t, "web-a", "/apps", "sec-rs", 500, nil, rs)
	k.appPod(t, "web-b", "/apps", "sec-rs", 500, nil, rs)
	k.waitAppPods(t, "two pods of the ReplicaSet running", 60*time.Second, podsRunning("web-a", "web-b"))
	j := k.foreignJob(t, appsNamespace+"/ReplicaSet/web-5d9f")
	s.waitTasks(j.Id, "two instances running", 30*time.Second, allRunning(2))
	k.appPod(t, "web-c", "/apps", "sec-rs", 500, nil, rs)
	k.waitAppPods(t, "the third pod running", 60*time.Second, podsRunning("web-c"))
	s.waitTasks(j.Id, "three instances running", 30*time.Second, allRunning(3))
	if err := k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), "web-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	ts := s.waitTasks(j.Id, "the deleted pod's instance ended", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		ended := 0
		for _, tk := range ts {
			if tk.Status.State == pelotonv1.TaskState_LOST {
				ended++
			}
		}
		return len(ts) == 3 && ended == 1
	})
	for _, tk := range ts {
		if tk.Status.RunId != 1 {
			t.Errorf("instance %d: run %d; a foreign instance is one pod for life", tk.InstanceId, tk.Status.RunId)
		}
	}
	s.waitJob(j.Id, pelotonv1.JobState_JOB_RUNNING, 30*time.Second)
}

// testForeignGang: two of a gang of three pods wait, unbound and with no
// job, until the third arrives; then all three bind.
func (k *kubeStack) testForeignGang(t *testing.T) {
	s := k.on(t)
	k.addNodes(t, "sec-gang", 1, "4", "sec-gang", nil)
	gang := map[string]string{kubernetes.AnnotationGangName: "train", kubernetes.AnnotationGangSize: "3"}
	k.appPod(t, "train-0", "/apps", "sec-gang", 1000, gang, nil)
	k.appPod(t, "train-1", "/apps", "sec-gang", 1000, gang, nil)
	// kubectl (and an autoscaler) see why they wait: once both say so,
	// the incomplete gang was looked at and held, and neither may have
	// been bound at any poll on the way.
	k.waitAppPods(t, "the waiting gang members marked unschedulable", 20*time.Second, func(pods map[string]*corev1.Pod) bool {
		for _, n := range []string{"train-0", "train-1"} {
			if p := pods[n]; p != nil && p.Spec.NodeName != "" {
				t.Fatalf("gang member %s bound with the gang incomplete", n)
			}
		}
		return unschedulableSaying(pods["train-0"], "gang train") && unschedulableSaying(pods["train-1"], "gang train")
	})
	if resp, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{Name: "Gang/train"}); err != nil || len(resp.Jobs) != 0 {
		t.Fatalf("a job for an incomplete gang: %v, %v", resp, err)
	}
	k.appPod(t, "train-2", "/apps", "sec-gang", 1000, gang, nil)
	k.waitAppPods(t, "the whole gang running", 60*time.Second, podsRunning("train-0", "train-1", "train-2"))
	j := k.foreignJob(t, appsNamespace+"/Gang/train")
	if j.Spec.Sla.GetMinimumRunningInstances() != 3 || j.Spec.InstanceCount != 3 {
		t.Errorf("gang job: %+v", j.Spec)
	}
}

// testForeignBadPool: a pod asking for a pool that does not exist stays
// unbound, and its owner is told why.
func (k *kubeStack) testForeignBadPool(t *testing.T) {
	k.appPod(t, "lost", "/no/such/pool", "sec-bare", 100, nil, nil)
	testutil.Eventually(t, 30*time.Second, "an event on a pod whose pool does not exist", func() bool {
		evs, err := k.kc.Client.CoreV1().Events(appsNamespace).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=lost"})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 0 {
			return false
		}
		if ev := evs.Items[0]; ev.Reason != kubernetes.EventReasonFailedScheduling || !strings.Contains(ev.Message, "peloton.io/pool") {
			t.Errorf("event on the pod: %s %q", ev.Reason, ev.Message)
		}
		return true
	})
	if p := k.appPods(t)["lost"]; p == nil || p.Spec.NodeName != "" {
		t.Errorf("the pod with a bad pool: %+v", p)
	}
}

// testForeignRestart: Peloton stops while two adopted pods wait for room.
// Meanwhile one of them is deleted, and the pod in their way too. The
// restarted Peloton finds the waiting pod's instance from the pod's
// annotation and binds it as that instance; the deleted pod's instance
// ends; no instance is made twice.
func (k *kubeStack) testForeignRestart(t *testing.T) {
	k.addNodes(t, "sec-restart", 1, "1", "sec-restart", nil)
	rs := replicaSet("big", "rs-big")
	k.appPod(t, "big-0", "/apps", "sec-restart", 800, nil, rs)
	k.waitAppPods(t, "the first pod running", 60*time.Second, podsRunning("big-0"))
	k.appPod(t, "big-1", "/apps", "sec-restart", 800, nil, rs)
	k.appPod(t, "big-2", "/apps", "sec-restart", 800, nil, rs)
	pods := k.waitAppPods(t, "the waiting pods adopted", 30*time.Second, func(pods map[string]*corev1.Pod) bool {
		return pods["big-1"] != nil && pods["big-1"].Annotations[kubernetes.AnnotationTaskID] != "" &&
			pods["big-2"] != nil && pods["big-2"].Annotations[kubernetes.AnnotationTaskID] != ""
	})
	k.waitAppPods(t, "the waiting pods marked unschedulable, with Peloton's reason", 30*time.Second, func(pods map[string]*corev1.Pod) bool {
		return unschedulableSaying(pods["big-1"], "Peloton: ") && unschedulableSaying(pods["big-2"], "Peloton: ")
	})
	adoptedAs := pods["big-1"].Annotations[kubernetes.AnnotationTaskID]
	goneAs := pods["big-2"].Annotations[kubernetes.AnnotationTaskID]
	j := k.foreignJob(t, appsNamespace+"/ReplicaSet/big")

	dataDir := k.s.dataDir
	k.s.stop()
	for _, n := range []string{"big-0", "big-2"} {
		if err := k.kc.Client.CoreV1().Pods(appsNamespace).Delete(ctxT(t), n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	k.s = startStack(t, dataDir, stackOpts{backend: "kubernetes",
		kube: cluster.KubeConfig{Kubeconfig: k.kc.Kubeconfig, Secondary: true, SecondaryNamespaces: []string{appsNamespace}}})
	s := k.on(t)

	pods = k.waitAppPods(t, "the waiting pod running after the restart", 60*time.Second, podsRunning("big-1"))
	if got := pods["big-1"].Annotations[kubernetes.AnnotationTaskID]; got != adoptedAs {
		t.Errorf("big-1 runs as %s, was adopted as %s", got, adoptedAs)
	}
	ts := s.waitTasks(j.Id, "one instance running, the deleted pods' ended", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		running, ended := 0, 0
		for _, tk := range ts {
			switch tk.Status.State {
			case pelotonv1.TaskState_RUNNING:
				running++
			case pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
				ended++
			}
		}
		return running == 1 && ended == 2
	})
	if len(ts) != 3 {
		t.Errorf("%d instances after the restart, want the 3 there were", len(ts))
	}
	for _, tk := range ts {
		id := j.Id + "-" + strconv.FormatUint(uint64(tk.InstanceId), 10) + "-1"
		if id == goneAs && (tk.Status.State != pelotonv1.TaskState_KILLED || tk.Status.Reason != "pod-deleted") {
			t.Errorf("the instance of the pod deleted while it waited: %s (%s)", tk.Status.State, tk.Status.Reason)
		}
	}
}
