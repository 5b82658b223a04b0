package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// countLines is how many lines of a text log at level (INFO, WARN, ...)
// contain text.
func countLines(log, level, text string) int {
	n := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// TestAPIServerAway: a backend started while the apiserver is stopped
// starts, says the apiserver is not reachable and why, and refuses
// launches as blocked (not as failed runs); once the apiserver runs it
// lists the nodes and runs work. Stopped again under the backend, it is
// reported away once, not once a retry, and when it starts again work goes
// on, with no restart of the backend.
func TestAPIServerAway(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	id := fmt.Sprintf("away%d", testSeq.Add(1))
	nodes, err := c.AddNodes(ctx, kubetest.NodeSpec{Prefix: id, Count: 2, CPU: "4", Memory: "8Gi", Labels: map[string]string{"peloton.io/test": id}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.StopAPIServer()

	var log testutil.SyncBuffer
	b, err := New(Config{REST: c.Config, Namespace: id, NodeSelector: "peloton.io/test=" + id, RequestTimeout: 2 * time.Second,
		StartTimeout: 30 * time.Second, ProbeEvery: 200 * time.Millisecond, MaxProbeBackoff: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := b.Start(ctx, rec.sink); err != nil {
		t.Fatalf("Start with the apiserver stopped: %v", err)
	}
	defer b.Close()
	e := &env{t: t, c: c, ctx: ctx, ns: id, nodes: nodes, b: b, rec: rec}
	s := b.Substrate()
	if s.Reachable || s.Name != "kubernetes apiserver "+c.URL() || !strings.Contains(s.Reason, "connection refused") {
		t.Fatalf("substrate with the apiserver stopped: %+v", s)
	}
	if hs := b.Hosts(); len(hs) != 0 {
		t.Fatalf("hosts before the apiserver answered: %v", hs)
	}
	blocked := func(name string) {
		t.Helper()
		spec := hostmgr.LaunchSpec{TaskID: name + "-0-1", JobID: name, RunID: 1, Host: nodes[0], Command: []string{"true"},
			Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}}
		err := b.Launch(ctx, spec)
		if !errors.Is(err, hostmgr.ErrLaunchBlocked) || !strings.Contains(err.Error(), "is not reachable") {
			t.Fatalf("launch with the apiserver away: %v, want it blocked, saying why", err)
		}
	}
	blocked("early")

	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the apiserver is reached and the nodes listed", func() error {
		if s := b.Substrate(); !s.Reachable {
			return fmt.Errorf("substrate %+v", s)
		}
		if hs := b.Hosts(); len(hs) != 2 {
			return fmt.Errorf("%d hosts", len(hs))
		}
		return nil
	})
	first := e.launch("first", "sleep", "1")
	e.waitFor(first.TaskID, pelotonv1.TaskState_SUCCEEDED, 30*time.Second)
	long := e.launch("long", "sleep", "3600")
	e.waitFor(long.TaskID, pelotonv1.TaskState_RUNNING, 30*time.Second)

	warned := countLines(log.String(), "WARN", "apiserver is not reachable")
	tries := countLines(log.String(), "DEBUG", "still not reachable")
	c.StopAPIServer()
	testutil.Eventually(t, time.Minute, "the backend finds the apiserver gone, and tries again and again", func() error {
		if s := b.Substrate(); s.Reachable {
			return fmt.Errorf("substrate %+v", s)
		}
		if n := countLines(log.String(), "DEBUG", "still not reachable"); n < tries+5 {
			return fmt.Errorf("%d more tries", n-tries)
		}
		return nil
	})
	if n := countLines(log.String(), "WARN", "apiserver is not reachable"); n != warned+1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", n-warned, log.String())
	}
	blocked("during")
	if st, err := b.Status(long.TaskID); err != nil || st.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("the long run while the apiserver is away: %+v, %v; want RUNNING as last seen", st, err)
	}

	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the apiserver is reached again", func() error {
		if s := b.Substrate(); !s.Reachable {
			return fmt.Errorf("substrate %+v", s)
		}
		return nil
	})
	after := e.launch("after", "sleep", "1")
	e.waitFor(after.TaskID, pelotonv1.TaskState_SUCCEEDED, 60*time.Second)
	if err := b.Kill(ctx, long.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	e.waitFor(long.TaskID, pelotonv1.TaskState_KILLED, 60*time.Second)
}

// TestNotAnAPIServer: a server that answers with an HTML error page is not
// reachable as an apiserver; the reason is the status and the page's first
// line, and the page is in neither the reason nor the log.
func TestNotAnAPIServer(t *testing.T) {
	const page = "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body><p>The page is not here.</p></body>\n</html>\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	var log testutil.SyncBuffer
	b, err := New(Config{REST: &rest.Config{Host: srv.URL}, Namespace: "peloton", RequestTimeout: 2 * time.Second,
		ProbeEvery: 100 * time.Millisecond, MaxProbeBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx, newRecorder().sink); err != nil {
		t.Fatalf("Start against a web server: %v", err)
	}
	defer b.Close()
	if s := b.Substrate(); s.Reachable || s.Reason != "HTTP 404 Not Found: <!DOCTYPE html>" {
		t.Fatalf("substrate %+v, want the status and the page's first line", s)
	}
	testutil.Eventually(t, 30*time.Second, "five more tries", func() error {
		if n := countLines(log.String(), "DEBUG", "still not reachable"); n < 5 {
			return fmt.Errorf("%d tries", n)
		}
		return nil
	})
	if l := log.String(); strings.Contains(l, "<body") || strings.Contains(l, "not here") {
		t.Errorf("the log carries the page:\n%s", l)
	}
	if n := countLines(log.String(), "WARN", "HTTP 404 Not Found: <!DOCTYPE html>"); n != 1 {
		t.Errorf("%d warnings naming the answer, want 1:\n%s", n, log.String())
	}
}
