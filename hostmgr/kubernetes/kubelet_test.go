package kubernetes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubelettest"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestOnKubelet runs the backend on a control plane of its own with one
// real node: a kubelet over containerd and runc, whose pods run their
// commands for real in the node's local busybox image. The subtests share
// the node, each in a namespace of its own.
func TestOnKubelet(t *testing.T) {
	kubelettest.Require(t)
	c := kubetest.Start(t, kubetest.Options{APIServerArgs: kubelettest.APIServerArgs})
	n := kubelettest.Start(t, c, "real-0")
	newBackend := func(t *testing.T, ns string) *Backend {
		b, err := New(realConfig(c, n, ns))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The backend suite: exit codes and kills are the kernel's, health
	// checks the kubelet's probes, volumes folders on the node that a
	// helper pod removes. Partitions are node labels that the cases would
	// fight over on one node; they are covered on kwok (TestConformance).
	t.Run("Conformance", func(t *testing.T) {
		backendtest.Run(t, backendtest.Harness{
			Caps:    backendtest.Capabilities{HealthChecks: true, RunsOutliveBackend: true, Volumes: true},
			Timeout: 90 * time.Second,
			Setup: func(t *testing.T) func() hostmgr.Backend {
				ns := realNamespace(t, c)
				return func() hostmgr.Backend { return newBackend(t, ns) }
			},
		})
	})
	t.Run("LogsComeFromTheKubelet", func(t *testing.T) { testRealLogs(t, realEnv(t, c, n)) })
	t.Run("InPlaceUpdateRestartsTheContainer", func(t *testing.T) { testRealReplace(t, realEnv(t, c, n)) })
}

// realConfig is a backend's configuration over node n only, in namespace ns.
func realConfig(c *kubetest.Cluster, n *kubelettest.Node, ns string) Config {
	return Config{REST: c.Config, Namespace: ns, NodeSelector: "kubernetes.io/hostname=" + n.Name,
		DefaultImage: kubelettest.Image, VolumeRoot: filepath.Join(n.Dir, "volumes"),
		RequestTimeout: 10 * time.Second, StartTimeout: 60 * time.Second, Logger: slog.New(slog.DiscardHandler)}
}

func realNamespace(t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := fmt.Sprintf("real%d", testSeq.Add(1))
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

// realEnv is an env (backend_test.go) whose one host is the real node.
func realEnv(t *testing.T, c *kubetest.Cluster, n *kubelettest.Node) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	ns := realNamespace(t, c)
	e := &env{t: t, c: c, ctx: ctx, ns: ns, nodes: []string{n.Name}, rec: newRecorder(),
		tweak: func(cfg *Config) { *cfg = realConfig(c, n, ns) }}
	e.b = e.start()
	return e
}

// testRealLogs: a run's output is what its container wrote, read through
// the kubelet, with the kubelet's own times when asked for.
func testRealLogs(t *testing.T, e *env) {
	spec := hostmgr.LaunchSpec{TaskID: "logs-0-1", JobID: "logs", RunID: 1, Host: e.nodes[0],
		Command:   []string{"sh", "-c", "echo out one; echo err one >&2; echo out two; exit 4"},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
	if err := e.b.Launch(e.ctx, spec); err != nil {
		t.Fatal(err)
	}
	evs := e.waitFor(spec.TaskID, pelotonv1.TaskState_FAILED, 90*time.Second)
	if end := evs[len(evs)-1]; end.ExitCode != 4 {
		t.Errorf("end %+v, want exit code 4", end)
	}
	read := func(opts hostmgr.LogOptions) string {
		t.Helper()
		rc, err := e.b.Logs(e.ctx, spec.TaskID, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The kubelet keeps a container's two streams as one log, each
	// stream's lines in order; how the two interleave is the pipes'.
	got := strings.Split(strings.TrimSuffix(read(hostmgr.LogOptions{}), "\n"), "\n")
	var out []string
	for _, l := range got {
		if strings.HasPrefix(l, "out") {
			out = append(out, l)
		}
	}
	if len(got) != 3 || !slices.Contains(got, "err one") || strings.Join(out, ",") != "out one,out two" {
		t.Errorf("logs %q", got)
	}
	stamped := read(hostmgr.LogOptions{Timestamps: true})
	lines := strings.Split(strings.TrimSuffix(stamped, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("timestamped logs %q", stamped)
	}
	for _, l := range lines {
		ts, _, ok := strings.Cut(l, " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); !ok || err != nil || time.Since(at) > 10*time.Minute {
			t.Errorf("line %q: no time of this run (%v)", l, err)
		}
	}
}

// testRealReplace: an in-place update patches the pod's image, and the
// kubelet restarts the container, which runs as the new run.
func testRealReplace(t *testing.T, e *env) {
	spec := hostmgr.LaunchSpec{TaskID: "inplace-0-1", JobID: "inplace", RunID: 1, Host: e.nodes[0],
		Command:   []string{"sh", "-c", "echo started $PELOTON_TASK_ID; exec sleep 3600"},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}, KillGrace: time.Second}
	if err := e.b.Launch(e.ctx, spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor(spec.TaskID, pelotonv1.TaskState_RUNNING, 90*time.Second)
	next := spec
	next.TaskID, next.RunID, next.Image = "inplace-0-2", 2, kubelettest.Image2
	if err := e.b.Replace(e.ctx, spec.TaskID, next); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_RUNNING, 90*time.Second)
	if evs := e.rec.of(spec.TaskID); evs[len(evs)-1].State != pelotonv1.TaskState_KILLED || evs[len(evs)-1].Reason != hostmgr.ReasonReplaced {
		t.Errorf("old run: %s, want it to end KILLED %s", states(evs), hostmgr.ReasonReplaced)
	}
	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, podName(spec.TaskID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 1 || cs[0].State.Running == nil || !strings.HasSuffix(cs[0].Image, kubelettest.Image2) {
		t.Fatalf("container after the update: %+v", cs)
	}
	rc, err := e.b.Logs(e.ctx, next.TaskID, hostmgr.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(rc)
	rc.Close()
	if got := string(out); got != "started inplace-0-2\n" {
		t.Errorf("the new run's logs %q, want its own start", got)
	}
	if err := e.b.Kill(e.ctx, next.TaskID, time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitFor(next.TaskID, pelotonv1.TaskState_KILLED, 90*time.Second)
}
