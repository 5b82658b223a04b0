package mesos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// A substrate that is down never takes the backend down: these tests start
// the backend without a master, or against a server that is not one, and
// stop and start the master under it. No test asserts a duration.

// logged is a backend's log, at debug level, for tests that read it.
type logged struct{ buf testutil.SyncBuffer }

func (l *logged) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// count is how many lines at level (INFO, WARN, ...) contain text.
func (l *logged) count(level, text string) int {
	n := 0
	for line := range strings.Lines(l.buf.String()) {
		if strings.Contains(line, "level="+level+" ") && strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// startUnready starts a backend for master url whose log is l; Start must
// return (and not fail) whether or not anything answers there.
func startUnready(t *testing.T, url string, l *logged) *rec {
	t.Helper()
	cfg := Config{Master: url, Store: newStore(t), Role: "peloton", StartTimeout: 20 * time.Second, MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Logger: l.logger()}
	return startBackend(t, cfg)
}

// TestNoMasterAtStart: with nothing at the master's address, Start returns
// and the backend says the master is not reachable and why; it tries again
// and again, logging that once, not once a try. A master that then starts
// on that address is subscribed to, its agents become hosts and runs go,
// with no restart of the backend.
func TestNoMasterAtStart(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	var l logged
	r := startUnready(t, "http://"+addr, &l)
	s := r.b.Substrate()
	if s.Reachable || s.Name != "mesos master http://"+addr || !strings.Contains(s.Reason, "connection refused") || s.Since.IsZero() {
		t.Fatalf("substrate after Start with no master: %+v", s)
	}
	if hs := r.b.Hosts(); len(hs) != 0 {
		t.Fatalf("hosts without a master: %v", hs)
	}
	testutil.Eventually(t, waitFor, "five more tries", func() error {
		if n := l.count("DEBUG", "still not reachable"); n < 5 {
			return fmt.Errorf("%d tries logged", n)
		}
		return nil
	})
	if n := l.count("WARN", ""); n != 1 {
		t.Errorf("%d warnings for one unreachable master, want 1:\n%s", n, l.buf.String())
	}

	m := newMaster(t, mesostest.Config{Agents: agents(2), Listen: addr})
	testutil.Eventually(t, waitFor, "the master is reached and its agents are hosts", func() error {
		if s := r.b.Substrate(); !s.Reachable || s.Reason != "" {
			return fmt.Errorf("substrate %+v", s)
		}
		if hs := r.b.Hosts(); len(hs) != 2 {
			return fmt.Errorf("%d hosts", len(hs))
		}
		return nil
	})
	if m.FrameworkID() == "" || r.b.FrameworkID() != m.FrameworkID() {
		t.Fatalf("framework %q, master's %q", r.b.FrameworkID(), m.FrameworkID())
	}
	r.launch("late-0-1", "host-0", "true")
	r.waitState("late-0-1", pelotonv1.TaskState_SUCCEEDED)
	if n := l.count("INFO", "mesos: the master is reachable"); n != 1 {
		t.Errorf("%d lines say the master is reachable, want 1:\n%s", n, l.buf.String())
	}
}

// TestNotAMaster: a server at --mesos-master that answers with an HTML
// error page is not reachable as a master, and the reason is the status
// and the page's first line: the page is in neither the reason nor the
// log. One that answers 200 with a page is not a master either.
func TestNotAMaster(t *testing.T) {
	t.Parallel()
	const page = "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1>\n<p>The page is not here.</p></body>\n</html>\n"
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(page))
	}))
	defer notFound.Close()
	var l logged
	r := startUnready(t, notFound.URL, &l)
	if s := r.b.Substrate(); s.Reachable || s.Reason != "HTTP 404 Not Found: <!DOCTYPE html>" {
		t.Fatalf("substrate %+v, want the status and the page's first line", s)
	}
	testutil.Eventually(t, waitFor, "five more tries", func() error {
		if n := l.count("DEBUG", "still not reachable"); n < 5 {
			return fmt.Errorf("%d tries logged", n)
		}
		return nil
	})
	if log := l.buf.String(); strings.Contains(log, "<body") || strings.Contains(log, "<html>") || strings.Contains(log, "not here") {
		t.Errorf("the log carries the page:\n%s", log)
	}
	if n := l.count("WARN", "HTTP 404 Not Found: <!DOCTYPE html>"); n != 1 {
		t.Errorf("%d warnings naming the answer, want 1:\n%s", n, l.buf.String())
	}

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	defer ok.Close()
	r2 := startUnready(t, ok.URL, &logged{})
	if s := r2.b.Substrate(); s.Reachable || !strings.Contains(s.Reason, "not a Mesos master's answer") || !strings.Contains(s.Reason, "text/html") {
		t.Fatalf("substrate %+v, want it not a master's answer", s)
	}
}

// TestMasterStopsAndReturns: a master that goes away under a subscribed
// backend makes it unreachable; one that starts again on the same address
// is subscribed to as the same framework, and runs go again.
func TestMasterStopsAndReturns(t *testing.T) {
	t.Parallel()
	m := newMaster(t, mesostest.Config{Agents: agents(1)})
	addr := strings.TrimPrefix(m.URL(), "http://")
	var l logged
	cfg := testConfig(m, newStore(t))
	cfg.Logger = l.logger()
	r := startBackend(t, cfg)
	if s := r.b.Substrate(); !s.Reachable {
		t.Fatalf("substrate with a master: %+v", s)
	}
	fw := r.b.FrameworkID()
	m.Close()
	testutil.Eventually(t, waitFor, "the backend finds the master gone", func() error {
		if s := r.b.Substrate(); s.Reachable || !strings.Contains(s.Reason, "connection refused") {
			return fmt.Errorf("substrate %+v", s)
		}
		return nil
	})
	// A launch meanwhile waits for an offer, and goes once one comes.
	launched := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		launched <- r.b.Launch(ctx, runSpec("waited-0-1", "host-0", "true"))
	}()
	m2 := newMaster(t, mesostest.Config{Agents: agents(1), Listen: addr})
	testutil.Eventually(t, waitFor, "the master is reached again", func() error {
		if s := r.b.Substrate(); !s.Reachable {
			return fmt.Errorf("substrate %+v", s)
		}
		return nil
	})
	if m2.FrameworkID() != fw {
		t.Fatalf("framework %q after the master returned, want %q", m2.FrameworkID(), fw)
	}
	if err := <-launched; err != nil {
		t.Fatalf("the launch that waited: %v", err)
	}
	r.waitState("waited-0-1", pelotonv1.TaskState_SUCCEEDED)
}
