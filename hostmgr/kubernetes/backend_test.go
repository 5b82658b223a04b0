package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// One control plane serves the package's tests; each test has its own
// nodes (selected by label) and namespace, so they do not see each other.
// The apiserver restart test starts its own.
var (
	sharedOnce sync.Once
	shared     *kubetest.Cluster
	sharedErr  error
	sharedDir  string
)

func TestMain(m *testing.M) {
	testutil.LeakCheckMainThen(m, func(g string) bool { return strings.Contains(g, "hostmgr/kubernetes.(*Backend)") }, func() {
		if shared != nil {
			shared.Close()
		}
		if sharedDir != "" {
			os.RemoveAll(sharedDir)
		}
	})
}

func cluster(t *testing.T) *kubetest.Cluster {
	t.Helper()
	bin, err := kubetest.Tools()
	if err != nil {
		t.Skip(err.Error())
	}
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "peloton-kubetest-")
		if sharedErr == nil {
			shared, sharedErr = kubetest.New(sharedDir, bin, kubetest.Options{})
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// env is one test's nodes, namespace and backend.
type env struct {
	t       *testing.T
	c       *kubetest.Cluster
	ctx     context.Context
	ns      string
	nodes   []string
	b       *Backend
	rec     *recorder
	changes atomic.Int64
	// tweak, if set, changes the backend's configuration before start.
	tweak func(*Config)
}

var testSeq atomic.Int64

// newEnv makes n nodes of 4 CPUs and 8 GiB labelled for this test, a
// namespace, and a started backend that sees only those nodes.
func newEnv(t *testing.T, c *kubetest.Cluster, n int, nodeLabels map[string]string) *env {
	t.Helper()
	return newEnvWith(t, c, n, nodeLabels, nil)
}

// newEnvWith is newEnv with tweak applied to the backend's configuration.
func newEnvWith(t *testing.T, c *kubetest.Cluster, n int, nodeLabels map[string]string, tweak func(*Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	id := fmt.Sprintf("t%d", testSeq.Add(1))
	lbls := map[string]string{"peloton.io/test": id}
	for k, v := range nodeLabels {
		lbls[k] = v
	}
	nodes, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: id, Count: n, CPU: "4", Memory: "8Gi", Labels: lbls})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, id); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, c: c, ctx: ctx, ns: id, nodes: nodes, rec: newRecorder(), tweak: tweak}
	e.b = e.start()
	return e
}

func (e *env) start() *Backend {
	e.t.Helper()
	cfg := Config{REST: e.c.Config, Namespace: e.ns, NodeSelector: "peloton.io/test=" + e.ns,
		RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second}
	if e.tweak != nil {
		e.tweak(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	b.WatchHosts(func() { e.changes.Add(1) })
	if err := b.Start(e.ctx, e.rec.sink); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

// recorder keeps every event, by task.
type recorder struct {
	mu     sync.Mutex
	events map[string][]hostmgr.TaskEvent
}

func newRecorder() *recorder { return &recorder{events: map[string][]hostmgr.TaskEvent{}} }

func (r *recorder) sink(ev hostmgr.TaskEvent) {
	r.mu.Lock()
	r.events[ev.TaskID] = append(r.events[ev.TaskID], ev)
	r.mu.Unlock()
}

func (r *recorder) of(id string) []hostmgr.TaskEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hostmgr.TaskEvent(nil), r.events[id]...)
}

func states(evs []hostmgr.TaskEvent) string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.State.String())
	}
	return strings.Join(s, " ")
}

// waitFor waits until the task's events end with state.
func (e *env) waitFor(id string, state pelotonv1.TaskState, timeout time.Duration) []hostmgr.TaskEvent {
	e.t.Helper()
	err := kubetest.Poll(e.ctx, timeout, func(context.Context) (bool, error) {
		evs := e.rec.of(id)
		return len(evs) > 0 && evs[len(evs)-1].State == state, nil
	})
	if err != nil {
		e.t.Fatalf("%s: events %q, want them to end with %s: %v", id, states(e.rec.of(id)), state, err)
	}
	return e.rec.of(id)
}

func (e *env) launch(id string, cmd ...string) hostmgr.LaunchSpec {
	e.t.Helper()
	spec := hostmgr.LaunchSpec{TaskID: id + "-0-1", JobID: id, InstanceID: 0, RunID: 1, Host: e.nodes[0],
		Command: cmd, Env: map[string]string{"GREETING": "hello"}, Resources: resources.Resources{MilliCPU: 500, MemoryMB: 256}}
	if err := e.b.Launch(e.ctx, spec); err != nil {
		e.t.Fatal(err)
	}
	return spec
}

func (e *env) hosts() map[string]hostmgr.HostInfo {
	out := map[string]hostmgr.HostInfo{}
	for _, h := range e.b.Hosts() {
		out[h.Name] = h
	}
	return out
}

func (e *env) waitHosts(what string, ok func(map[string]hostmgr.HostInfo) bool) {
	e.t.Helper()
	if err := kubetest.Poll(e.ctx, 20*time.Second, func(context.Context) (bool, error) { return ok(e.hosts()), nil }); err != nil {
		e.t.Fatalf("%s: hosts %+v: %v", what, e.hosts(), err)
	}
}

func TestNodesBecomeHosts(t *testing.T) {
	c := cluster(t)
	e := newEnv(t, c, 2, map[string]string{"zone": "a"})
	n0, n1 := e.nodes[0], e.nodes[1]
	node, err := c.Client.CoreV1().Nodes().Get(e.ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels[LabelPartition] = "stateless"
	if _, err := c.Client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("partition label", func(h map[string]hostmgr.HostInfo) bool { return h[n1].Partition == "stateless" })
	h := e.hosts()
	if len(h) != 2 || h[n0].Capacity != (resources.Resources{MilliCPU: 4000, MemoryMB: 8192}) ||
		h[n0].Labels["zone"] != "a" || h[n0].Partition != DefaultPartition || h[n0].Unschedulable {
		t.Fatalf("hosts %+v", h)
	}

	// A pod Peloton does not manage holds part of its node.
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: e.ns},
		Spec: corev1.PodSpec{NodeName: n0, Containers: []corev1.Container{{Name: "c", Image: "x", Command: []string{"server"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
	}
	if _, err := c.Client.CoreV1().Pods(e.ns).Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("an unmanaged pod", func(h map[string]hostmgr.HostInfo) bool {
		return h[n0].Capacity == resources.Resources{MilliCPU: 2500, MemoryMB: 7168}
	})
	// ...and a pod of Peloton's own does not: hostmgr accounts for it.
	spec := e.launch("own", "server")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if got := e.hosts()[n0].Capacity; got != (resources.Resources{MilliCPU: 2500, MemoryMB: 7168}) {
		t.Fatalf("a run of Peloton's changed its host's capacity: %v", got)
	}
	if err := c.Client.CoreV1().Pods(e.ns).Delete(e.ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("unmanaged pod gone", func(h map[string]hostmgr.HostInfo) bool { return h[n0].Capacity.MilliCPU == 4000 })

	// Cordoned, then NotReady: no new work, and hostmgr is told.
	before := e.changes.Load()
	node, _ = c.Client.CoreV1().Nodes().Get(e.ctx, n1, metav1.GetOptions{})
	node.Spec.Unschedulable = true
	if _, err := c.Client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("cordoned", func(h map[string]hostmgr.HostInfo) bool { return h[n1].Unschedulable })
	if err := kubetest.Poll(e.ctx, 5*time.Second, func(context.Context) (bool, error) { return e.changes.Load() > before, nil }); err != nil {
		t.Fatal("hostmgr was not told about the cordon")
	}
	node, _ = c.Client.CoreV1().Nodes().Get(e.ctx, n1, metav1.GetOptions{})
	node.Spec.Unschedulable = false
	node.Annotations[kubetest.AnnotationHoldStatus] = "true"
	node, err = c.Client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("not ready", func(h map[string]hostmgr.HostInfo) bool { return h[n1].Unschedulable && !h[n0].Unschedulable })

	// A node that goes away takes its runs with it.
	if err := c.Client.CoreV1().Nodes().Delete(e.ctx, n0, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("node deleted", func(h map[string]hostmgr.HostInfo) bool { _, ok := h[n0]; return !ok && len(h) == 1 })
	evs := e.waitFor(spec.TaskID, pelotonv1.TaskState_LOST, 20*time.Second)
	if last := evs[len(evs)-1]; last.Reason != ReasonNodeGone {
		t.Fatalf("run on a deleted node: %+v", last)
	}
}

func TestBatchRunSucceeds(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := hostmgr.LaunchSpec{TaskID: "job1-3-2", JobID: "job1", InstanceID: 3, RunID: 2, Host: e.nodes[0], Pool: "/org/team",
		Command: []string{"sleep", "1"}, Env: map[string]string{"GREETING": "hello"},
		Resources:   resources.Resources{MilliCPU: 500, MemoryMB: 256, DiskMB: 100},
		Ports:       []hostmgr.Port{{Name: "http"}, {Name: "admin", Value: 9000}},
		HealthCheck: &pelotonv1.HealthCheck{Command: []string{"true"}}, KillGrace: 3 * time.Second}
	if err := e.b.Launch(e.ctx, spec); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(spec.TaskID, pelotonv1.TaskState_SUCCEEDED, 30*time.Second)
	var seq []string
	for i, ev := range evs {
		if i == 0 || ev.State != evs[i-1].State {
			seq = append(seq, ev.State.String())
		}
		if ev.Host != e.nodes[0] || ev.Ports["http"] != portBase || ev.Ports["admin"] != 9000 {
			t.Errorf("event %+v: want host %s and ports http=%d admin=9000", ev, e.nodes[0], portBase)
		}
	}
	if got := strings.Join(seq, " "); got != "LAUNCHED RUNNING SUCCEEDED" {
		t.Fatalf("events %s, want LAUNCHED RUNNING SUCCEEDED", states(evs))
	}
	last := evs[len(evs)-1]
	if last.ExitCode != 0 || last.Reason != ReasonExitZero {
		t.Fatalf("end %+v", last)
	}
	healthy := false
	for _, ev := range evs {
		healthy = healthy || ev.State == pelotonv1.TaskState_RUNNING && ev.Health == pelotonv1.HealthState_HEALTHY
	}
	if !healthy {
		t.Errorf("a run with a health check was never reported healthy: %+v", evs)
	}
	if st, err := e.b.Status(spec.TaskID); err != nil || st.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("status %+v %v", st, err)
	}

	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, podName(spec.TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The informers keep no managedFields: nothing reads them, and for
	// thousands of pods they are most of what the cache holds.
	cached, ok, err := e.b.pods.GetByKey(e.ns + "/" + p.Name)
	if err != nil || !ok {
		t.Fatalf("pod %s not in the informer's cache: %v", p.Name, err)
	}
	if len(p.ManagedFields) == 0 || len(cached.(*corev1.Pod).ManagedFields) != 0 {
		t.Errorf("managedFields: %d entries on the apiserver, %d in the cache; want some and none",
			len(p.ManagedFields), len(cached.(*corev1.Pod).ManagedFields))
	}
	if n, err := e.b.nodes.Get(e.nodes[0]); err != nil || len(n.ManagedFields) != 0 {
		t.Errorf("node %s in the cache: %v, %d managedFields entries", e.nodes[0], err, len(n.ManagedFields))
	}
	c0 := p.Spec.Containers[0]
	switch {
	case p.Spec.SchedulerName != SchedulerName || p.Spec.NodeName != e.nodes[0]:
		t.Errorf("pod scheduler %q node %q", p.Spec.SchedulerName, p.Spec.NodeName)
	case p.Labels[LabelJobID] != "job1" || p.Labels[LabelInstance] != "3" || p.Labels[LabelRunID] != "2" ||
		p.Annotations[AnnotationTaskID] != spec.TaskID || p.Annotations[AnnotationPool] != "/org/team":
		t.Errorf("pod labels %v annotations %v", p.Labels, p.Annotations)
	case c0.Image != DefaultImage || strings.Join(c0.Command, " ") != "sleep 1":
		t.Errorf("container image %q command %q", c0.Image, c0.Command)
	case c0.Resources.Requests.Cpu().MilliValue() != 500 || c0.Resources.Limits.Memory().Value() != 256<<20 ||
		c0.Resources.Limits.StorageEphemeral().Value() != 100<<20:
		t.Errorf("resources %+v", c0.Resources)
	case c0.ReadinessProbe == nil || c0.ReadinessProbe.Exec == nil:
		t.Errorf("health check is not a readiness probe: %+v", c0.ReadinessProbe)
	case p.Spec.TerminationGracePeriodSeconds == nil || *p.Spec.TerminationGracePeriodSeconds != 3:
		t.Errorf("grace %v", p.Spec.TerminationGracePeriodSeconds)
	}
	env := map[string]string{}
	for _, v := range c0.Env {
		env[v.Name] = v.Value
		if v.ValueFrom != nil && v.ValueFrom.FieldRef != nil {
			env[v.Name] = "from " + v.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["GREETING"] != "hello" || env["PELOTON_PORT_HTTP"] != fmt.Sprint(portBase) ||
		env["PELOTON_TASK_ID"] != "from metadata.annotations['"+AnnotationTaskID+"']" ||
		env["PELOTON_RUN_ID"] != "from metadata.labels['"+LabelRunID+"']" || env["PELOTON_JOB_ID"] != "job1" ||
		env["PELOTON_HOST"] != "from spec.nodeName" {
		t.Errorf("env %v", env)
	}
}

func TestKillDeletesThePod(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := e.launch("svc", "server", "--port", "8080")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := e.b.Kill(e.ctx, spec.TaskID, time.Second); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(spec.TaskID, pelotonv1.TaskState_KILLED, 20*time.Second)
	if last := evs[len(evs)-1]; last.Reason != ReasonKilled {
		t.Fatalf("end %+v", last)
	}
	if _, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, podName(spec.TaskID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod of a killed run: %v", err)
	}

	// A pod that someone else deletes is a lost run, not a killed one.
	spec2 := e.launch("svc2", "server")
	e.waitFor(spec2.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := e.c.Client.CoreV1().Pods(e.ns).Delete(e.ctx, podName(spec2.TaskID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	evs = e.waitFor(spec2.TaskID, pelotonv1.TaskState_LOST, 20*time.Second)
	if last := evs[len(evs)-1]; last.Reason != ReasonPodDeleted {
		t.Fatalf("end %+v", last)
	}
}

func TestLaunchFailuresLeaveNothing(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := hostmgr.LaunchSpec{TaskID: "x-0-1", JobID: "x", Host: "no-such-node", Command: []string{"true"},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 10}}
	if err := e.b.Launch(e.ctx, spec); err == nil || !strings.Contains(err.Error(), "no-such-node") {
		t.Fatalf("launch on a missing node: %v", err)
	}
	// A namespace that does not exist: create fails, nothing is recorded.
	spec.Host, spec.Pool = e.nodes[0], "/missing"
	e.b.cfg.PoolNamespaces = map[string]string{"/missing": "no-such-namespace"}
	if err := e.b.Launch(e.ctx, spec); err == nil {
		t.Fatal("launch into a missing namespace succeeded")
	}
	if _, err := e.b.Status(spec.TaskID); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Fatalf("a failed launch left a run behind: %v", err)
	}
	if evs := e.rec.of(spec.TaskID); len(evs) != 0 {
		t.Fatalf("a failed launch sent events: %s", states(evs))
	}
	// The same task ID can launch once things are right.
	spec.Pool = ""
	if err := e.b.Launch(e.ctx, spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor(spec.TaskID, pelotonv1.TaskState_SUCCEEDED, 20*time.Second)
	if err := e.b.Launch(e.ctx, spec); err == nil {
		t.Fatal("the same run launched twice")
	}
}

func TestLogsFailFastOnKwok(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	spec := e.launch("logs", "server")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	start := time.Now()
	rc, err := e.b.Logs(e.ctx, spec.TaskID, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false})
	if err == nil {
		rc.Close()
		t.Fatal("kwok nodes have no kubelet to serve logs, yet Logs succeeded")
	}
	if d := time.Since(start); d > 3*e.b.cfg.RequestTimeout {
		t.Fatalf("Logs took %s to fail", d)
	}
	t.Logf("logs on kwok: %v", err)
	// Since and timestamps go to the kubelet as PodLogOptions, which the
	// apiserver accepts (and then fails on kwok as above).
	since := time.Now().Add(-time.Minute)
	opts := hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Since: since, Timestamps: true}
	if o := podLogOptions(opts); !o.Timestamps || o.SinceTime == nil || !o.SinceTime.Time.Equal(since) || o.Container != ContainerName {
		t.Errorf("pod log options %+v; want the container's, since %v, with timestamps", o, since)
	}
	if rc, err := e.b.Logs(e.ctx, spec.TaskID, opts); err == nil {
		rc.Close()
		t.Fatal("kwok nodes have no kubelet to serve logs, yet Logs with since and timestamps succeeded")
	} else if apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
		t.Fatalf("the apiserver refused the log options: %v", err)
	}
	if _, err := e.b.Logs(e.ctx, "nope-0-1", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false}); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Fatalf("logs of an unknown run: %v", err)
	}
}

// TestAPIServerRestart stops the apiserver while runs are in flight: the
// informers must resume by themselves and every run still reach its end.
func TestAPIServerRestart(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	e := newEnv(t, c, 2, nil)
	before := e.launch("before", "sleep", "4")
	e.waitFor(before.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := c.RestartAPIServer(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitFor(before.TaskID, pelotonv1.TaskState_SUCCEEDED, 60*time.Second)

	// New work goes on after the restart, and host changes are seen.
	after := e.launch("after", "sleep", "1")
	e.waitFor(after.TaskID, pelotonv1.TaskState_SUCCEEDED, 30*time.Second)
	node, err := c.Client.CoreV1().Nodes().Get(e.ctx, e.nodes[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = true
	if _, err := c.Client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHosts("cordoned after restart", func(h map[string]hostmgr.HostInfo) bool { return h[e.nodes[1]].Unschedulable })
}

func TestHealthFromReadiness(t *testing.T) {
	e := newEnv(t, cluster(t), 1, nil)
	base := hostmgr.LaunchSpec{JobID: "h", Host: e.nodes[0], Command: []string{"server"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
	good, bad := base, base
	good.TaskID, good.HealthCheck = "h-0-1", &pelotonv1.HealthCheck{Command: []string{"true"}}
	// A check that never passes is UNHEALTHY after its failure threshold
	// (1s interval × 1 + 1s timeout), though the pod was never Ready.
	bad.TaskID, bad.InstanceID, bad.HealthCheck = "h-1-1", 1,
		&pelotonv1.HealthCheck{Command: []string{"false"}, IntervalSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}
	for _, s := range []hostmgr.LaunchSpec{good, bad} {
		if err := e.b.Launch(e.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	healthOf := func(id string) []pelotonv1.HealthState {
		var hs []pelotonv1.HealthState
		for _, ev := range e.rec.of(id) {
			if ev.State == pelotonv1.TaskState_RUNNING {
				hs = append(hs, ev.Health)
			}
		}
		return hs
	}
	err := kubetest.Poll(e.ctx, 20*time.Second, func(context.Context) (bool, error) {
		g, b := healthOf(good.TaskID), healthOf(bad.TaskID)
		return len(g) > 0 && g[len(g)-1] == pelotonv1.HealthState_HEALTHY &&
			len(b) > 0 && b[len(b)-1] == pelotonv1.HealthState_UNHEALTHY, nil
	})
	if err != nil {
		t.Fatalf("health: good %v, bad %v: %v", healthOf(good.TaskID), healthOf(bad.TaskID), err)
	}
	if b := healthOf(bad.TaskID); b[0] != pelotonv1.HealthState_HEALTH_UNKNOWN {
		t.Errorf("a run whose check has not failed enough yet: %v, want HEALTH_UNKNOWN first", b)
	}
}

// TestRBACManifestIsEnough applies deploy/kubernetes/rbac.yaml and runs the
// backend as its service account: the rights it grants are the rights the
// code needs, no fewer.
func TestRBACManifestIsEnough(t *testing.T) {
	c := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, "peloton"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range strings.Split(string(raw), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = c.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.Client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("document %d: unexpected %T", i, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("document %d: %v", i, err)
		}
	}

	nodes, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: "rbac", Count: 1, CPU: "4", Memory: "8Gi", Labels: map[string]string{"peloton.io/test": "rbac"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(c.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:peloton:peloton"}
	if err := c.CreateNamespace(ctx, "rbac-apps"); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{REST: rc, NodeSelector: "peloton.io/test=rbac", RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second,
		Secondary: true, SecondaryNamespaces: []string{"rbac-apps"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := b.Start(ctx, rec.sink); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := &env{t: t, c: c, ctx: ctx, ns: "peloton", nodes: nodes, b: b, rec: rec}
	if h := e.hosts(); len(h) != 1 {
		t.Fatalf("hosts as the service account: %v", h)
	}
	spec := hostmgr.LaunchSpec{TaskID: "rbac-0-1", JobID: "rbac", RunID: 1, Host: nodes[0], Command: []string{"server"},
		Resources: resources.Resources{MilliCPU: 500, MemoryMB: 256}, Budget: &hostmgr.DisruptionBudget{Instances: 2, MaxUnavailable: 1}}
	if err := b.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	// The job's PodDisruptionBudget: made at launch, updated, reconciled
	// (listed) and deleted, all as the service account.
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("peloton").Get(ctx, budgetName("rbac"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the job's PodDisruptionBudget: %v", err)
	}
	if err := b.SetDisruptionBudget(ctx, "rbac", "", hostmgr.DisruptionBudget{Instances: 2, MaxUnavailable: 0}); err != nil {
		t.Fatal(err)
	}
	if err := b.reconcileBudgetsOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Logs(ctx, spec.TaskID, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT}); apierrors.IsForbidden(err) {
		t.Fatalf("logs: %v", err)
	}
	if err := b.Prefetch(ctx, nodes, "busybox:stable"); err != nil {
		t.Fatal(err)
	}
	next := spec
	next.TaskID, next.RunID, next.Image = "rbac-0-2", 2, "busybox:1.37"
	if err := b.Replace(ctx, spec.TaskID, next); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := b.Kill(ctx, next.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_KILLED, 20*time.Second)
	if err := b.RemoveJobOutput(ctx, "rbac"); err != nil {
		t.Fatal(err)
	}
	// The secondary-scheduler mode: a pod another client made is adopted,
	// bound and deleted; one with a bad annotation gets an event.
	l := &foreignLog{seen: map[string][]hostmgr.ForeignTask{}}
	b.WatchForeign(l.add)
	apps := &env{t: t, c: c, ctx: ctx, ns: "rbac-apps", nodes: nodes, b: b, rec: rec}
	apps.foreignPod("bad", map[string]string{}, nil)
	apps.foreignPod("app", map[string]string{AnnotationPool: "/team"}, nil)
	ft := apps.waitForeign("rbac-apps/app", "a foreign pod", func(hostmgr.ForeignTask) bool { return true }, l)
	if err := b.Adopt(ctx, ft.ForeignRef, "rbac-app-0-1"); err != nil {
		t.Fatal(err)
	}
	apps.waitWaiting(ft.ForeignRef, "no room")
	if err := b.Launch(ctx, hostmgr.LaunchSpec{TaskID: "rbac-app-0-1", JobID: "rbac-app", RunID: 1, Host: nodes[0], Foreign: &ft.ForeignRef}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("rbac-app-0-1", pelotonv1.TaskState_RUNNING, 20*time.Second)
	if err := b.Kill(ctx, "rbac-app-0-1", 0); err != nil {
		t.Fatal(err)
	}
	e.waitFor("rbac-app-0-1", pelotonv1.TaskState_KILLED, 20*time.Second)
	if err := kubetest.Poll(ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events("rbac-apps").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad"})
		return err == nil && len(evs.Items) > 0, err
	}); err != nil {
		t.Errorf("no event on the pod with a bad annotation: %v", err)
	}
	// Anything else is refused.
	if _, err := b.client.CoreV1().Secrets("peloton").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the service account may list secrets: %v", err)
	}
}

// TestStartCreatesMissingNamespaces: on a fresh cluster the namespaces the
// backend sends pods to (the default and the pools') are created at start.
func TestStartCreatesMissingNamespaces(t *testing.T) {
	c := cluster(t)
	id := fmt.Sprintf("fresh%d", testSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: id, Count: 1, CPU: "4", Memory: "8Gi", Labels: map[string]string{"peloton.io/test": id}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{REST: c.Config, Namespace: id, PoolNamespaces: map[string]string{"/team": id + "-team"},
		NodeSelector: "peloton.io/test=" + id, RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := b.Start(ctx, rec.sink); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, ns := range []string{id, id + "-team"} {
		if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s after start: %v", ns, err)
		}
	}
	e := &env{t: t, c: c, ctx: ctx, ns: id, nodes: nodes, b: b, rec: rec}
	spec := e.launch(id, "server")
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 20*time.Second)
}

// TestStartRefusesANamespaceItMayNotCreate: when a namespace is missing and
// Peloton may not create it, Start fails and names the namespace and flag.
func TestStartRefusesANamespaceItMayNotCreate(t *testing.T) {
	c := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := fmt.Sprintf("nocreate%d", testSeq.Add(1))
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: id},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}}}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: id},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: id},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: id}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(c.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: id}
	b, err := New(Config{REST: rc, Namespace: id + "-missing", RequestTimeout: 5 * time.Second, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Start(ctx, newRecorder().sink)
	if err == nil || !strings.Contains(err.Error(), `namespace "`+id+`-missing" does not exist and peloton may not create it`) ||
		!strings.Contains(err.Error(), "--kube-namespace") {
		t.Fatalf("start with a namespace it may not create: %v", err)
	}
}

// TestLaunchIntoMissingNamespaceIsBlocked: a launch that fails because the
// namespace is missing is hostmgr.ErrLaunchBlocked, whose message says which
// namespace and which flag; nothing is left behind.
func TestLaunchIntoMissingNamespaceIsBlocked(t *testing.T) {
	c := cluster(t)
	e := newEnv(t, c, 1, nil)
	// A pool entry added after start: its namespace was never created.
	e.b.cfg.PoolNamespaces = map[string]string{"/ghost": e.ns + "-ghost"}
	spec := hostmgr.LaunchSpec{TaskID: "ghost-0-1", JobID: "ghost", RunID: 1, Host: e.nodes[0], Pool: "/ghost",
		Command: []string{"server"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
	err := e.b.Launch(e.ctx, spec)
	if !errors.Is(err, hostmgr.ErrLaunchBlocked) {
		t.Fatalf("launch into a missing namespace: %v, want ErrLaunchBlocked", err)
	}
	if want := `namespace "` + e.ns + `-ghost" does not exist; create it, or change the entry /ghost=` + e.ns + `-ghost of --kube-pool-namespaces`; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q, want it to contain %q", err, want)
	}
	if _, err := e.b.Status(spec.TaskID); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("a blocked launch left the task known: %v", err)
	}
}
