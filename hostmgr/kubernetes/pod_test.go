package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestPodNames(t *testing.T) {
	for in, want := range map[string]string{
		"0f8fad5b-d9cb-469f-a165-70867728950e-12-3": "0f8fad5b-d9cb-469f-a165-70867728950e-12-3",
		"Job_A-0-1":              "job-a-0-1",
		"--x--":                  "x",
		"":                       "task",
		strings.Repeat("a", 300): strings.Repeat("a", 253),
	} {
		if got := podName(in); got != want {
			t.Errorf("podName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAssignPorts(t *testing.T) {
	got := assignPorts([]hostmgr.Port{{Name: "a"}, {Name: "b", Value: portBase}, {Name: "c"}})
	if got["a"] != portBase+1 || got["b"] != portBase || got["c"] != portBase+2 {
		t.Fatalf("ports %v: chosen numbers must skip the fixed ones", got)
	}
}

func TestNamespaceOfPool(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "peloton", PoolNamespaces: map[string]string{"/org": "org", "/org/ml": "ml"}}}
	for pool, want := range map[string]string{"/org/ml/vision": "ml", "/org/web": "org", "/org": "org", "/other": "peloton", "": "peloton"} {
		if got := b.namespaceOf(pool); got != want {
			t.Errorf("namespaceOf(%q) = %q, want %q", pool, got, want)
		}
	}
}

func TestObserve(t *testing.T) {
	running := corev1.ContainerStatus{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	exited := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	restarted := running
	restarted.RestartCount = 1
	for _, tc := range []struct {
		name   string
		node   string
		status corev1.PodStatus
		health bool
		state  pelotonv1.TaskState
		code   int32
		reason string
		hs     pelotonv1.HealthState
	}{
		{"unbound", "", corev1.PodStatus{Phase: corev1.PodPending}, false, 0, 0, "", 0},
		{"bound", "n", corev1.PodStatus{Phase: corev1.PodPending}, false, pelotonv1.TaskState_LAUNCHED, 0, "", 0},
		{"running", "n", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}, false, pelotonv1.TaskState_RUNNING, 0, "", 0},
		{"running, not ready", "n", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}, true, pelotonv1.TaskState_RUNNING, 0, "", pelotonv1.HealthState_UNHEALTHY},
		{"running, ready", "n", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{ready}, ContainerStatuses: []corev1.ContainerStatus{running}}, true, pelotonv1.TaskState_RUNNING, 0, "", pelotonv1.HealthState_HEALTHY},
		{"succeeded", "n", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{exited(0)}}, false, pelotonv1.TaskState_SUCCEEDED, 0, ReasonExitZero, 0},
		{"failed", "n", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{exited(137)}}, false, pelotonv1.TaskState_FAILED, 137, ReasonExitNonzero, 0},
		{"evicted", "n", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, false, pelotonv1.TaskState_PREEMPTED, 0, ReasonEvicted, 0},
		{"evicted, was running", "n", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", ContainerStatuses: []corev1.ContainerStatus{exited(137)}}, false, pelotonv1.TaskState_PREEMPTED, 0, ReasonEvicted, 0},
		{"rejected", "n", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu"}, false, pelotonv1.TaskState_LOST, 0, ReasonPodRejected, 0},
		// Patched to the run that begins with restart 1 (Replace): the
		// container that still runs is the previous run's.
		{"replaced, old container", "n", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{ready}, ContainerStatuses: []corev1.ContainerStatus{running}}, true, pelotonv1.TaskState_LAUNCHED, 0, "", 0},
		{"replaced, new container", "n", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{restarted}}, false, pelotonv1.TaskState_RUNNING, 0, "", 0},
		{"replaced, ended", "n", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{exited(2)}}, false, pelotonv1.TaskState_FAILED, 2, ReasonExitNonzero, 0},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: tc.node}, Status: tc.status}
		if strings.HasPrefix(tc.name, "replaced") {
			p.Annotations = map[string]string{AnnotationRunRestarts: "1"}
		}
		o := observe(p, tc.health)
		if o.state != tc.state || o.exitCode != tc.code || o.reason != tc.reason || o.health != tc.hs {
			t.Errorf("%s: %+v, want %s exit %d %q health %s", tc.name, o, tc.state, tc.code, tc.reason, tc.hs)
		}
	}
}

func TestBuildPodRequestsEqualLimits(t *testing.T) {
	b, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Launch(context.Background(), hostmgr.LaunchSpec{TaskID: "j-0-1", Host: "n"}); err == nil {
		t.Fatal("launch before start succeeded")
	}
	spec := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", Host: "n", Command: []string{"x"},
		Volume: &hostmgr.Volume{ID: "j-0", MountPath: "/data"}}
	spec.Resources.MilliCPU, spec.Resources.MemoryMB, spec.Resources.GPU = 1500, 100, 1
	p := b.buildPod(spec, "ns", nil)
	c := p.Spec.Containers[0]
	if !equalLists(c.Resources.Requests, c.Resources.Limits) || c.Resources.Limits.Cpu().MilliValue() != 1500 ||
		c.Resources.Limits.Name(DefaultGPUResource, "").Value() != 1 {
		t.Errorf("resources %+v", c.Resources)
	}
	if p.Spec.Volumes[0].HostPath.Path != DefaultVolumeRoot+"/j-0" || c.VolumeMounts[0].MountPath != "/data" ||
		p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] != "n" {
		t.Errorf("volume %+v mounts %+v affinity %+v", p.Spec.Volumes, c.VolumeMounts, p.Spec.Affinity)
	}
	if got := b.podRequests(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{}, Spec: p.Spec}); got != spec.Resources {
		t.Errorf("podRequests %v, want %v", got, spec.Resources)
	}
}

// TestBuildPodRevocableRequestsNothing: a revocable run's pod asks the
// kubelet for nothing (it runs on slack, which a node's admission would
// count as taken) and is held to what it was placed with.
func TestBuildPodRevocableRequestsNothing(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	spec := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", RunID: 1, Host: "n", Command: []string{"x"},
		Env: map[string]string{envRevocable: "true"}}
	spec.Resources.MilliCPU, spec.Resources.MemoryMB = 200, 32
	r := b.buildPod(spec, "ns", nil).Spec.Containers[0].Resources
	if !r.Requests.Cpu().IsZero() || !r.Requests.Memory().IsZero() || len(r.Requests) != 2 ||
		r.Limits.Cpu().MilliValue() != 200 || r.Limits.Memory().Value() != 32<<20 {
		t.Errorf("revocable pod's resources %+v", r)
	}
	delete(spec.Env, envRevocable)
	if r := b.buildPod(spec, "ns", nil).Spec.Containers[0].Resources; r.Requests.Cpu().MilliValue() != 200 {
		t.Errorf("a run that is not revocable requests %+v", r.Requests)
	}
}

// TestSpecHash: the digest of a run's pod ignores the image and what names
// the run, and nothing else.
func TestSpecHash(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	base := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", RunID: 1, Host: "n", Command: []string{"server"}, Image: "img:1",
		Env: map[string]string{"A": "1"}, Ports: []hostmgr.Port{{Name: "http"}}}
	base.Resources.MilliCPU, base.Resources.MemoryMB = 500, 64
	hash := func(s hostmgr.LaunchSpec) string {
		p := b.buildPod(s, "ns", assignPorts(s.Ports))
		if p.Annotations[AnnotationSpecHash] != specHash(p) {
			t.Fatalf("buildPod's digest %q is not the pod's %q", p.Annotations[AnnotationSpecHash], specHash(p))
		}
		return specHash(p)
	}
	want := hash(base)
	next := base
	next.TaskID, next.RunID, next.Image = "j-0-2", 2, "img:2"
	if got := hash(next); got != want {
		t.Errorf("the next run with another image: digest %s, want %s", got, want)
	}
	for name, change := range map[string]func(*hostmgr.LaunchSpec){
		"env":       func(s *hostmgr.LaunchSpec) { s.Env = map[string]string{"A": "2"} },
		"command":   func(s *hostmgr.LaunchSpec) { s.Command = []string{"server", "-v"} },
		"resources": func(s *hostmgr.LaunchSpec) { s.Resources.MilliCPU = 600 },
		"ports":     func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Name: "http", Value: 9000}} },
		"pool":      func(s *hostmgr.LaunchSpec) { s.Pool = "/other" },
		"instance":  func(s *hostmgr.LaunchSpec) { s.InstanceID = 1 },
		"health":    func(s *hostmgr.LaunchSpec) { s.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"true"}} },
	} {
		s := next
		change(&s)
		if hash(s) == want {
			t.Errorf("a change of %s leaves the digest as it was", name)
		}
	}
}

// TestBuildPodMetricsHost: a run with metrics learns where it listens, the
// pod's IP, for the host agent to scrape it there; a run without metrics
// gets no such variable.
func TestBuildPodMetricsHost(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	envOf := func(s hostmgr.LaunchSpec) map[string]string {
		env := map[string]string{}
		for _, v := range b.buildPod(s, "ns", assignPorts(s.Ports)).Spec.Containers[0].Env {
			env[v.Name] = v.Value
			if v.ValueFrom != nil && v.ValueFrom.FieldRef != nil {
				env[v.Name] = "from " + v.ValueFrom.FieldRef.FieldPath
			}
		}
		return env
	}
	spec := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", RunID: 1, Host: "n", Command: []string{"server"},
		Ports: []hostmgr.Port{{Name: "http"}}, Env: map[string]string{"A": "1"}}
	if env := envOf(spec); env[envMetricsHost] != "" {
		t.Errorf("a run without metrics: %s=%q", envMetricsHost, env[envMetricsHost])
	}
	spec.Env = map[string]string{envMetricsPort: "http", "PELOTON_METRICS_HISTOGRAM": "request_seconds"}
	env := envOf(spec)
	if env[envMetricsHost] != "from status.podIP" || env[envMetricsPort] != "http" || env["PELOTON_PORT_HTTP"] == "" {
		t.Errorf("a run with metrics: env %v", env)
	}
}

// TestLeanPodKeepsWhatTheBackendReads: the informers' transform drops a
// run's environment, mounts and volumes, and keeps everything the backend
// reads of a cached pod: its identity, labels and annotations, requests,
// ports, readiness probe, image and command, node and status.
func TestLeanPodKeepsWhatTheBackendReads(t *testing.T) {
	b, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spec := hostmgr.LaunchSpec{TaskID: "j-0-1", JobID: "j", Host: "n", Command: []string{"x"}, Pool: "/p",
		Env:         map[string]string{"A": "1"},
		Ports:       []hostmgr.Port{{Name: "http"}},
		HealthCheck: &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}, IntervalSeconds: 2},
		Volume:      &hostmgr.Volume{ID: "j-0", MountPath: "/data"}}
	spec.Resources.MilliCPU, spec.Resources.MemoryMB = 1500, 100
	ports := assignPorts(spec.Ports)
	p := b.buildPod(spec, "ns", ports)
	p.Spec.NodeName = "n"
	p.Spec.NodeSelector = map[string]string{"zone": "a"}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	p.Annotations[corev1.LastAppliedConfigAnnotation] = "{}"
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, RestartCount: 2}}}
	before := p.DeepCopy()
	obj, err := leanObject(p)
	if err != nil || obj != p {
		t.Fatalf("leanObject: %v, %p for %p", err, obj, p)
	}
	c := p.Spec.Containers[0]
	if c.Env != nil || c.VolumeMounts != nil || len(p.Spec.Volumes) != 1 || p.Spec.Affinity != nil || p.Spec.Tolerations != nil ||
		p.ManagedFields != nil || p.Annotations[corev1.LastAppliedConfigAnnotation] != "" {
		t.Errorf("kept what nothing reads: %+v", p)
	}
	if b.podRequests(p) != b.podRequests(before) || !equalMaps(p.Labels, before.Labels) || len(p.Annotations) != len(before.Annotations)-1 ||
		p.Annotations[AnnotationSpecHash] != before.Annotations[AnnotationSpecHash] || p.Spec.NodeName != "n" || p.Spec.NodeSelector["zone"] != "a" ||
		c.Image != before.Spec.Containers[0].Image || c.Command[0] != "x" || !hasProbe(p) || failAfter(p) != failAfter(before) ||
		podPorts(p)["http"] != ports["http"] || !mountsHostPath(p, b.volumePath("j-0")) {
		t.Errorf("lost what the backend reads:\n%+v\nwas\n%+v", p, before)
	}
	if o, ob := observe(p, true), observe(before, true); o.state != ob.state || o.health != ob.health {
		t.Errorf("observed %+v, was %+v", o, ob)
	}
}

// TestSpecHashOfEarlierReleases: pods that earlier releases made carry the
// digest of their JSON (a deep copy with the run's identity and images
// blanked); jsonSpecHash is that digest, so they stay replaceable in place
// by a run whose pod is the same, and only by one; a pod of this release
// carries the protobuf digest, stable whatever the maps' order.
func TestSpecHashOfEarlierReleases(t *testing.T) {
	reference := func(p *corev1.Pod) string {
		q := p.DeepCopy()
		q.Name = ""
		delete(q.Labels, LabelRunID)
		delete(q.Annotations, AnnotationTaskID)
		delete(q.Annotations, AnnotationSpecHash)
		for i := range q.Spec.Containers {
			q.Spec.Containers[i].Image = ""
		}
		b, err := json.Marshal(struct {
			Meta metav1.ObjectMeta `json:"meta"`
			Spec corev1.PodSpec    `json:"spec"`
		}{q.ObjectMeta, q.Spec})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:16])
	}
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	base := hostmgr.LaunchSpec{TaskID: "j-3-2", JobID: "j", InstanceID: 3, RunID: 2, Host: "n", Command: []string{"server"}, Image: "img:1"}
	base.Resources.MilliCPU, base.Resources.MemoryMB = 500, 64
	full := base
	full.Pool, full.Env, full.KillGrace = "/a/b", map[string]string{"A": "1", "B": "2"}, 30*time.Second
	full.Ports = []hostmgr.Port{{Name: "http"}, {Name: "admin", Value: 9001}}
	full.HealthCheck = &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http", Path: "/ok"}}
	full.Volume = &hostmgr.Volume{ID: "j-3", MountPath: "/data"}
	for name, s := range map[string]hostmgr.LaunchSpec{"minimal": base, "full": full} {
		p := b.buildPod(s, "ns", assignPorts(s.Ports))
		if got, want := jsonSpecHash(p), reference(p); got != want {
			t.Errorf("%s: JSON digest %s, earlier releases' %s", name, got, want)
		}
		for range 20 {
			if q := b.buildPod(s, "ns", assignPorts(s.Ports)); specHash(q) != p.Annotations[AnnotationSpecHash] ||
				!strings.HasPrefix(specHash(q), specHashProto) {
				t.Fatalf("%s: digest %s, then %s", name, p.Annotations[AnnotationSpecHash], specHash(q))
			}
		}
		old := p.DeepCopy()
		old.Annotations[AnnotationSpecHash] = reference(p)
		next := s
		next.TaskID, next.RunID, next.Image = s.TaskID+"-next", s.RunID+1, "img:2"
		want := b.buildPod(next, "ns", assignPorts(s.Ports))
		if !sameSpec(old, want) || !sameSpec(p, want) {
			t.Errorf("%s: the next run's pod is not the same as an earlier release's (%v) or this one's (%v)", name, sameSpec(old, want), sameSpec(p, want))
		}
		next.Command = []string{"other"}
		if other := b.buildPod(next, "ns", assignPorts(s.Ports)); sameSpec(old, other) || sameSpec(p, other) {
			t.Errorf("%s: a pod with another command is taken for the same", name)
		}
		before := p.DeepCopy()
		specHash(p)
		jsonSpecHash(p)
		if !equalMaps(p.Labels, before.Labels) || !equalMaps(p.Annotations, before.Annotations) || p.Name != before.Name ||
			p.Spec.Containers[0].Image != before.Spec.Containers[0].Image {
			t.Errorf("%s: specHash changed the pod", name)
		}
	}
}

// TestBuildPodGangEnv: the gang variables jobmgr sets on a gang member's
// launch reach the pod's task container as they are.
func TestBuildPodGangEnv(t *testing.T) {
	b := &Backend{cfg: Config{Namespace: "ns", DefaultImage: DefaultImage, GPUResource: DefaultGPUResource, VolumeRoot: DefaultVolumeRoot}}
	gang := map[string]string{"PELOTON_GANG_ID": "j/gang-1", "PELOTON_GANG_SIZE": "2", "PELOTON_GANG_RANK": "1",
		"PELOTON_GANG_MEMBERS": "n1:7070,n2:7071"}
	s := hostmgr.LaunchSpec{TaskID: "j-3-1", JobID: "j", InstanceID: 3, RunID: 1, Host: "n2", Command: []string{"train"},
		Env: gang, Ports: []hostmgr.Port{{Name: "rpc", Value: 7071}}}
	s.Resources.MilliCPU, s.Resources.MemoryMB = 500, 64
	env := map[string]string{}
	for _, v := range b.buildPod(s, "ns", assignPorts(s.Ports)).Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	for k, v := range gang {
		if env[k] != v {
			t.Errorf("pod env %s=%q, want %q (env %v)", k, env[k], v, env)
		}
	}
}
