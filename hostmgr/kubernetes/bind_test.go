package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// podWrites sits in the backend's HTTP transport and counts the mutating
// requests it sends on pods: creates and binds. With failCreates > 0 it
// lets that many pod creates reach the apiserver and then tells the backend
// the connection broke, as a timeout after the apiserver acted would.
type podWrites struct {
	mu          sync.Mutex
	creates     int
	binds       int
	other       []string
	failCreates int
}

func (w *podWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if req.Method != http.MethodPost && req.Method != http.MethodPut && req.Method != http.MethodPatch {
			return resp, err
		}
		path := req.URL.Path
		if !strings.Contains(path, "/pods") {
			return resp, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(path, "/pods"):
			w.creates++
			if w.failCreates > 0 && err == nil {
				w.failCreates--
				resp.Body.Close()
				return nil, errors.New("injected: connection reset by peer after the apiserver created the pod")
			}
		case req.Method == http.MethodPost && strings.HasSuffix(path, "/binding"):
			w.binds++
		default:
			w.other = append(w.other, req.Method+" "+path)
		}
		return resp, err
	})
}

func (w *podWrites) counts() (creates, binds int, other []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.creates, w.binds, append([]string(nil), w.other...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingEnv is an env of two nodes whose backend runs in mode, with w in
// its transport.
func countingEnv(t *testing.T, mode BindMode, w *podWrites) *env {
	t.Helper()
	return newEnvWith(t, cluster(t), 2, nil, func(cfg *Config) {
		rc := rest.CopyConfig(cfg.REST)
		rc.WrapTransport = w.wrap
		cfg.REST, cfg.BindMode = rc, mode
	})
}

// batchSpec is a run of "sleep 1" on host.
func batchSpec(job, host string) hostmgr.LaunchSpec {
	return hostmgr.LaunchSpec{TaskID: job + "-0-1", JobID: job, Host: host, Command: []string{"sleep", "1"},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
}

// checkRun waits until the run succeeds and checks it went LAUNCHED,
// RUNNING, SUCCEEDED on host, and that its pod is on host.
func (e *env) checkRun(spec hostmgr.LaunchSpec) {
	e.t.Helper()
	evs := e.waitFor(spec.TaskID, pelotonv1.TaskState_SUCCEEDED, 30*time.Second)
	var seq []string
	for i, ev := range evs {
		if i == 0 || ev.State != evs[i-1].State {
			seq = append(seq, ev.State.String())
		}
	}
	if got := strings.Join(seq, " "); got != "LAUNCHED RUNNING SUCCEEDED" {
		e.t.Errorf("%s: events %s, want LAUNCHED RUNNING SUCCEEDED", spec.TaskID, states(evs))
	}
	for _, ev := range evs {
		if ev.Host != spec.Host {
			e.t.Errorf("%s: event %+v, want host %s", spec.TaskID, ev, spec.Host)
		}
	}
	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, podName(spec.TaskID), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if p.Spec.NodeName != spec.Host || p.Annotations[AnnotationTaskID] != spec.TaskID {
		e.t.Errorf("%s: pod on node %q with task ID %q, want %s", spec.TaskID, p.Spec.NodeName, p.Annotations[AnnotationTaskID], spec.Host)
	}
}

// TestBindModeWritesPerLaunch counts what each launch costs the apiserver:
// a create and a bind in binding mode, one create in node-name mode.
func TestBindModeWritesPerLaunch(t *testing.T) {
	const runs = 3
	for _, tc := range []struct {
		mode          BindMode
		creates, bind int
	}{
		{BindModeBinding, 1, 1},
		{BindModeNodeName, 1, 0},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			w := &podWrites{}
			e := countingEnv(t, tc.mode, w)
			var specs []hostmgr.LaunchSpec
			for i := range runs {
				// The second node: not the first one listed, so a pod that
				// landed anywhere but where Peloton chose would show.
				spec := batchSpec(fmt.Sprintf("writes%d", i), e.nodes[1])
				if err := e.b.Launch(e.ctx, spec); err != nil {
					t.Fatal(err)
				}
				specs = append(specs, spec)
			}
			for _, spec := range specs {
				e.checkRun(spec)
			}
			creates, binds, other := w.counts()
			if creates != tc.creates*runs || binds != tc.bind*runs || len(other) != 0 {
				t.Fatalf("%d launches sent %d creates, %d binds and %q; want %d creates and %d binds",
					runs, creates, binds, other, tc.creates*runs, tc.bind*runs)
			}
		})
	}
}

// TestLaunchTakesARetriedCreateThatWentThrough breaks the connection after
// the apiserver created the pod: the backend retries, finds the pod of this
// run, and goes on with it.
func TestLaunchTakesARetriedCreateThatWentThrough(t *testing.T) {
	for _, tc := range []struct {
		mode BindMode
		bind int
	}{{BindModeBinding, 1}, {BindModeNodeName, 0}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			w := &podWrites{failCreates: 1}
			e := countingEnv(t, tc.mode, w)
			spec := batchSpec("retried", e.nodes[1])
			if err := e.b.Launch(e.ctx, spec); err != nil {
				t.Fatal(err)
			}
			e.checkRun(spec)
			if creates, binds, _ := w.counts(); creates != 2 || binds != tc.bind {
				t.Fatalf("%d creates and %d binds, want 2 (the second finds the first's pod) and %d", creates, binds, tc.bind)
			}
		})
	}
}

// TestLaunchRefusesAPodOfTheRunOnAnotherNode: a pod of this run already on
// another node (left by an earlier launch) is not taken as this launch's;
// the launch fails and deletes it, as it would any pod it made.
func TestLaunchRefusesAPodOfTheRunOnAnotherNode(t *testing.T) {
	for _, mode := range BindModes {
		t.Run(string(mode), func(t *testing.T) {
			e := countingEnv(t, mode, &podWrites{})
			spec := batchSpec("elsewhere", e.nodes[1])
			left := e.b.buildPod(spec, e.ns, nil)
			left.Spec.NodeName = e.nodes[0]
			if _, err := e.c.Client.CoreV1().Pods(e.ns).Create(e.ctx, left, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			err := e.b.Launch(e.ctx, spec)
			if err == nil || !strings.Contains(err.Error(), e.nodes[0]) {
				t.Fatalf("launch with this run's pod on %s: %v, want an error naming that node", e.nodes[0], err)
			}
			if _, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.ctx, left.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the pod on the wrong node is still there: %v", err)
			}
			// Status also answers from the informer, until it sees the delete.
			err = kubetest.Poll(e.ctx, 10*time.Second, func(context.Context) (bool, error) {
				_, err := e.b.Status(spec.TaskID)
				return errors.Is(err, hostmgr.ErrUnknownTask), nil
			})
			if err != nil {
				t.Fatalf("a failed launch left a run behind: %v", err)
			}
			if evs := e.rec.of(spec.TaskID); len(evs) != 0 {
				t.Fatalf("a failed launch sent events: %s", states(evs))
			}
		})
	}
}

func TestBindModeIsChecked(t *testing.T) {
	for _, s := range []string{"binding", "node-name"} {
		if m, err := ParseBindMode(s); err != nil || string(m) != s {
			t.Errorf("ParseBindMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseBindMode("nodeName"); err == nil {
		t.Error("ParseBindMode accepted nodeName")
	}
	_, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, BindMode: "bind"})
	if err == nil || !strings.Contains(err.Error(), `"bind"`) {
		t.Fatalf("New with bind mode \"bind\": %v", err)
	}
}
