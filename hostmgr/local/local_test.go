package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// waitTimeout bounds every wait on a condition. It is generous because the
// race detector on two shared cores is slow; passing tests never reach it.
const waitTimeout = 15 * time.Second

// recorder is a sink that keeps every event per task and lets a test wait
// for a condition on them.
type recorder struct {
	mu     sync.Mutex
	events map[string][]hostmgr.TaskEvent
	wake   chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder {
	return &recorder{events: map[string][]hostmgr.TaskEvent{}, wake: make(chan struct{})}
}

func (r *recorder) sink(ev hostmgr.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[ev.TaskID] = append(r.events[ev.TaskID], ev)
	close(r.wake)
	r.wake = make(chan struct{})
}

func (r *recorder) get(id string) []hostmgr.TaskEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hostmgr.TaskEvent(nil), r.events[id]...)
}

// waitFor waits until cond holds for the task's events and returns them.
func (r *recorder) waitFor(t *testing.T, id string, what string, cond func([]hostmgr.TaskEvent) bool) []hostmgr.TaskEvent {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		evs := append([]hostmgr.TaskEvent(nil), r.events[id]...)
		wake := r.wake
		r.mu.Unlock()
		if cond(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("task %s: timed out waiting for %s; events so far: %v", id, what, states(evs))
		}
	}
}

// waitTerminal waits for the task's terminal event, checks that the events
// came in lifecycle order, and returns the terminal one.
func (r *recorder) waitTerminal(t *testing.T, id string) hostmgr.TaskEvent {
	t.Helper()
	evs := r.waitFor(t, id, "a terminal event", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && terminal(evs[len(evs)-1].State)
	})
	checkOrder(t, evs)
	return evs[len(evs)-1]
}

func (r *recorder) waitState(t *testing.T, id string, s pelotonv1.TaskState) {
	t.Helper()
	r.waitFor(t, id, s.String(), func(evs []hostmgr.TaskEvent) bool {
		for _, ev := range evs {
			if ev.State == s {
				return true
			}
		}
		return false
	})
}

func terminal(s pelotonv1.TaskState) bool {
	switch s {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
		return true
	}
	return false
}

func states(evs []hostmgr.TaskEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.State.String())
	}
	return out
}

// checkOrder asserts LAUNCHED, RUNNING, terminal — or LAUNCHED, FAILED for a
// launch that failed — and nothing after the terminal event. RUNNING events
// that report a change of health (see healthOf) may follow the first
// RUNNING; they are left out of the comparison.
func checkOrder(t *testing.T, evs []hostmgr.TaskEvent) {
	t.Helper()
	var lifecycle []hostmgr.TaskEvent
	for i, ev := range evs {
		if i > 0 && ev.State == pelotonv1.TaskState_RUNNING && ev.Health != pelotonv1.HealthState_HEALTH_UNKNOWN {
			continue
		}
		lifecycle = append(lifecycle, ev)
	}
	evs = lifecycle
	got := strings.Join(states(evs), ",")
	last := evs[len(evs)-1]
	want := "LAUNCHED,RUNNING," + last.State.String()
	if last.Reason == "launch-failed" {
		want = "LAUNCHED,FAILED"
	}
	if got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
}

// newBackend starts a Backend on a fresh Dir and closes it at test end.
func newBackend(t *testing.T) (*Backend, *recorder) {
	t.Helper()
	rec := newRecorder()
	b := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	return b, rec
}

func mustNew(t testing.TB, cfg Config) *Backend {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		// Close removes the backend's parent cgroup, unless another
		// backend over the same Dir still has runs in it.
		b.mu.Lock()
		cg := b.cg
		b.mu.Unlock()
		if cg == nil {
			return
		}
		for _, p := range cg.parents() {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				if left, _ := os.ReadDir(p); !slices.ContainsFunc(left, func(e os.DirEntry) bool { return e.IsDir() }) {
					t.Errorf("Close left the cgroup %s behind (%v)", p, err)
				}
			}
		}
	})
	return b
}

func spec(id string, cmd ...string) hostmgr.LaunchSpec {
	return hostmgr.LaunchSpec{TaskID: id, JobID: "job1", InstanceID: 7, RunID: 2, Host: "local-0", Command: cmd}
}

func launch(t *testing.T, b *Backend, s hostmgr.LaunchSpec) {
	t.Helper()
	if err := b.Launch(context.Background(), s); err != nil {
		t.Fatalf("Launch %s: %v", s.TaskID, err)
	}
}

// waitFile waits until path exists and is non-empty, and returns its content.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	var data []byte
	testutil.Eventually(t, waitTimeout, path+" written", func() error {
		var err error
		if data, err = os.ReadFile(path); err == nil && len(data) == 0 {
			err = errors.New("empty")
		}
		return err
	})
	return data
}

// waitGone waits until pid no longer runs. A zombie counts as gone: it has
// been killed, and reaping orphans is the job of whatever is pid 1.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "pid "+strconv.Itoa(pid)+" gone", func() error {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil
		}
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) && (data[i+2] == 'Z' || data[i+2] == 'X') {
			return nil
		}
		return errors.New("still running: " + string(data))
	})
}

func readLogs(t *testing.T, b *Backend, id string, stream pelotonv1.LogStream, follow bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rc, err := b.Logs(ctx, id, hostmgr.LogOptions{Stream: stream, Follow: follow})
	if err != nil {
		t.Fatalf("Logs %s: %v", id, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading logs of %s: %v", id, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("logs of %s: follow did not end before the deadline", id)
	}
	return string(data)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(waitFile(t, path))))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// Not parallel: it sets a variable in the control plane's environment to
// check that it does not reach the task.
func TestEnvAndSandbox(t *testing.T) {
	t.Setenv("PELOTON_LOCAL_TEST_SECRET", "must-not-leak")
	b, rec := newBackend(t)
	s := spec("env-1", "sh", "-c", `echo "$PELOTON_JOB_ID|$PELOTON_INSTANCE_ID|$PELOTON_RUN_ID|$PELOTON_TASK_ID|$PELOTON_HOST|$FOO|$PELOTON_LOCAL_TEST_SECRET"; echo "$PELOTON_SANDBOX"; pwd -P`)
	s.Env = map[string]string{"FOO": "bar baz", "PELOTON_TASK_ID": "spoofed"}
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal = %+v, want SUCCEEDED", ev)
	}
	lines := strings.Split(readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDOUT, false), "\n")
	if want := "job1|7|2|env-1|local-0|bar baz|"; lines[0] != want {
		t.Errorf("env line = %q, want %q", lines[0], want)
	}
	sandbox := filepath.Join(b.dir, s.TaskID)
	if lines[1] != sandbox {
		t.Errorf("PELOTON_SANDBOX = %q, want %q", lines[1], sandbox)
	}
	real, err := filepath.EvalSymlinks(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if lines[2] != real {
		t.Errorf("working dir = %q, want %q", lines[2], real)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	tests := []struct {
		id     string
		cmd    []string
		state  pelotonv1.TaskState
		code   int32
		reason string
	}{
		{"ok", []string{"true"}, pelotonv1.TaskState_SUCCEEDED, 0, ""},
		{"exit3", []string{"sh", "-c", "exit 3"}, pelotonv1.TaskState_FAILED, 3, "exit-nonzero"},
		{"selfkill", []string{"sh", "-c", "kill -KILL $$"}, pelotonv1.TaskState_FAILED, 137, "signaled"},
		{"notfound", []string{"peloton-no-such-command"}, pelotonv1.TaskState_FAILED, 0, "launch-failed"},
		{"notexec", []string{"./missing"}, pelotonv1.TaskState_FAILED, 0, "launch-failed"},
	}
	for _, tc := range tests {
		launch(t, b, spec(tc.id, tc.cmd...))
	}
	for _, tc := range tests {
		ev := rec.waitTerminal(t, tc.id)
		if ev.State != tc.state || ev.ExitCode != tc.code || ev.Reason != tc.reason {
			t.Errorf("%s: terminal = %v code %d reason %q, want %v code %d reason %q",
				tc.id, ev.State, ev.ExitCode, ev.Reason, tc.state, tc.code, tc.reason)
		}
		if ev.Host != "local-0" || ev.TaskID != tc.id || ev.Time.IsZero() {
			t.Errorf("%s: event identity = %+v", tc.id, ev)
		}
		st, err := b.Status(tc.id)
		if err != nil || st.State != tc.state {
			t.Errorf("%s: Status = %v, %v; want %v", tc.id, st.State, err, tc.state)
		}
		if err := b.Kill(context.Background(), tc.id, 0); err != nil {
			t.Errorf("%s: Kill of a finished task = %v, want nil", tc.id, err)
		}
	}
	ev := rec.waitTerminal(t, "notfound")
	if !strings.Contains(ev.Message, "peloton-no-such-command") {
		t.Errorf("launch-failed message = %q, want the exec error", ev.Message)
	}
	if got := readLogs(t, b, "notfound", pelotonv1.LogStream_STDERR, true); !strings.Contains(got, "launch failed") {
		t.Errorf("stderr of a failed launch = %q, want the reason", got)
	}
}

func TestKillEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("stubborn", "sh", "-c", `trap "" TERM; sleep 100 & echo $! > child.pid; echo ready; wait`)
	launch(t, b, s)
	sandbox := filepath.Join(b.dir, s.TaskID)
	waitFile(t, filepath.Join(sandbox, "stdout"))
	child := readPid(t, filepath.Join(sandbox, "child.pid"))

	if err := b.Kill(context.Background(), s.TaskID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ev := rec.waitTerminal(t, s.TaskID)
	// 137 = 128+SIGKILL: the shell ignored SIGTERM, so only the escalation
	// could have ended it.
	if ev.State != pelotonv1.TaskState_KILLED || ev.Reason != "killed" || ev.ExitCode != 137 {
		t.Fatalf("terminal = %+v, want KILLED by SIGKILL (137)", ev)
	}
	waitGone(t, child)
}

func TestKillReachesGrandchildren(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("tree", "sh", "-c", `sleep 100 & echo $! > child.pid; wait`)
	launch(t, b, s)
	child := readPid(t, filepath.Join(b.dir, s.TaskID, "child.pid"))
	if err := b.Kill(context.Background(), s.TaskID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_KILLED {
		t.Fatalf("terminal = %+v, want KILLED", ev)
	}
	waitGone(t, child)
}

func TestLeftoversKilledOnExit(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("leaver", "sh", "-c", `sleep 100 & echo $! > child.pid`)
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal = %+v, want SUCCEEDED", ev)
	}
	waitGone(t, readPid(t, filepath.Join(b.dir, s.TaskID, "child.pid")))
}

func TestKillSooner(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("sooner", "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`)
	launch(t, b, s)
	waitFile(t, filepath.Join(b.dir, s.TaskID, "stdout"))
	if err := b.Kill(context.Background(), s.TaskID, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A second Kill with no grace must not wait for the first one's hour.
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_KILLED || ev.ExitCode != 137 {
		t.Fatalf("terminal = %+v, want KILLED by SIGKILL", ev)
	}
}

func TestSinkMayCallBack(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	b := mustNew(t, Config{Dir: t.TempDir()})
	// The sink kills the task as soon as it runs and reads its status on
	// every event; a lock held around the sink would deadlock here.
	err := b.Start(context.Background(), func(ev hostmgr.TaskEvent) {
		if _, err := b.Status(ev.TaskID); err != nil {
			t.Errorf("Status from the sink: %v", err)
		}
		if ev.State == pelotonv1.TaskState_RUNNING {
			if err := b.Kill(context.Background(), ev.TaskID, 0); err != nil {
				t.Errorf("Kill from the sink: %v", err)
			}
		}
		rec.sink(ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	launch(t, b, spec("reentrant", "sleep", "100"))
	if ev := rec.waitTerminal(t, "reentrant"); ev.State != pelotonv1.TaskState_KILLED {
		t.Fatalf("terminal = %+v, want KILLED", ev)
	}
}

func TestLogsFollow(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("follow", "sh", "-c", `echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; echo oops >&2`)
	launch(t, b, s)
	rec.waitState(t, s.TaskID, pelotonv1.TaskState_RUNNING)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rc, err := b.Logs(ctx, s.TaskID, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// "second" is written only after the reader is open.
	if err := os.WriteFile(filepath.Join(b.dir, s.TaskID, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("follow did not end when the task exited")
	}
	if string(data) != "first\nsecond\n" {
		t.Errorf("followed stdout = %q", data)
	}
	if got := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDERR, true); got != "oops\n" {
		t.Errorf("stderr = %q", got)
	}
}

func TestLogsFollowEndsWithContext(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	launch(t, b, spec("forever", "sleep", "100"))
	rec.waitState(t, "forever", pelotonv1.TaskState_RUNNING)

	ctx, cancel := context.WithCancel(context.Background())
	rc, err := b.Logs(ctx, "forever", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(rc)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadAll after cancel = %v, want io.EOF (nil)", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("follow did not end when ctx was cancelled")
	}
}

func TestLogsAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := newRecorder()
	b1 := mustNew(t, Config{Dir: dir})
	if err := b1.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	launch(t, b1, spec("old", "sh", "-c", "echo hello; echo bye >&2"))
	rec.waitTerminal(t, "old")
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	// Status after a restart is the conformance suite's (EventsAfterRestart);
	// the logs stay on disk, which is this backend's own promise.
	b2 := mustNew(t, Config{Dir: dir})
	if got := readLogs(t, b2, "old", pelotonv1.LogStream_STDOUT, true); got != "hello\n" {
		t.Errorf("stdout after restart = %q", got)
	}
	if got := readLogs(t, b2, "old", pelotonv1.LogStream_STDERR, false); got != "bye\n" {
		t.Errorf("stderr after restart = %q", got)
	}
	for _, id := range []string{"never", "../old", "", "old/stdout"} {
		if _, err := b2.Logs(context.Background(), id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false}); !errors.Is(err, hostmgr.ErrUnknownTask) {
			t.Errorf("Logs(%q) = %v, want ErrUnknownTask", id, err)
		}
	}
	// The sandbox of the old run is never reused.
	if err := b2.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	if err := b2.Launch(context.Background(), spec("old", "true")); err == nil {
		t.Error("relaunching a task ID whose sandbox exists succeeded")
	}
	if got := readLogs(t, b2, "old", pelotonv1.LogStream_STDOUT, false); got != "hello\n" {
		t.Errorf("stdout after a refused relaunch = %q", got)
	}
}

// TestLaunchCutShortBeforeItsRecord: a control plane killed between making
// a run's sandbox and recording the run leaves an empty sandbox and no
// record; the next one's launch of the same run goes ahead in it, while a
// sandbox with anything in it is still never reused.
func TestLaunchCutShortBeforeItsRecord(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	if err := os.Mkdir(filepath.Join(b.dir, "cut"), 0o700); err != nil {
		t.Fatal(err)
	}
	launch(t, b, spec("cut", "sh", "-c", "echo again"))
	if ev := rec.waitTerminal(t, "cut"); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("relaunch into an empty sandbox ended %v %q; want SUCCEEDED", ev.State, ev.Message)
	}
	if got := readLogs(t, b, "cut", pelotonv1.LogStream_STDOUT, false); got != "again\n" {
		t.Errorf("stdout = %q", got)
	}

	full := filepath.Join(b.dir, "full")
	if err := os.Mkdir(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "stdout"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Launch(context.Background(), spec("full", "true")); err == nil || !strings.Contains(err.Error(), "spec.taskId") {
		t.Errorf("launch into a sandbox with output = %v; want refused naming spec.taskId", err)
	}
	if data, _ := os.ReadFile(filepath.Join(full, "stdout")); string(data) != "old\n" {
		t.Errorf("the refused launch changed the old output: %q", data)
	}
}

func TestCloseKillsRunningTasks(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	ids := []string{"c1", "c2"}
	for _, id := range ids {
		launch(t, b, spec(id, "sh", "-c", "sleep 100; echo done"))
	}
	for _, id := range ids {
		rec.waitState(t, id, pelotonv1.TaskState_RUNNING)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns after the last events are delivered, not before.
	for _, id := range ids {
		evs := rec.get(id)
		// Stopped by a shutdown, not by anyone's kill: LOST, not a failure.
		if len(evs) == 0 || evs[len(evs)-1].State != pelotonv1.TaskState_LOST || evs[len(evs)-1].Reason != ReasonShutdown {
			t.Errorf("%s: events after Close = %v, want ending in LOST %s", id, states(evs), ReasonShutdown)
			continue
		}
		checkOrder(t, evs)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := b.Launch(context.Background(), spec("late", "true")); err == nil {
		t.Error("Launch after Close succeeded")
	}
}

func TestLaunchErrors(t *testing.T) {
	t.Parallel()
	b := mustNew(t, Config{Dir: t.TempDir(), Hosts: 2})
	if err := b.Launch(context.Background(), spec("early", "true")); err == nil {
		t.Error("Launch before Start succeeded")
	}
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), rec.sink); err == nil {
		t.Error("second Start succeeded")
	}
	bad := map[string]hostmgr.LaunchSpec{
		"unknown host":  {TaskID: "h", Host: "local-2", Command: []string{"true"}},
		"empty command": {TaskID: "c", Host: "local-1"},
		"path in id":    {TaskID: "a/b", Host: "local-1", Command: []string{"true"}},
		"dot-dot id":    {TaskID: "..", Host: "local-1", Command: []string{"true"}},
		"bad env name":  {TaskID: "e", Host: "local-1", Command: []string{"true"}, Env: map[string]string{"A=B": "x"}},
	}
	for name, s := range bad {
		if err := b.Launch(context.Background(), s); err == nil {
			t.Errorf("%s: Launch succeeded", name)
		}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Launch(cancelled, spec("cancelled", "true")); err == nil {
		t.Error("Launch with a cancelled ctx succeeded")
	}

	s := spec("dup", "sleep", "100")
	s.Host = "local-1"
	launch(t, b, s)
	if err := b.Launch(context.Background(), s); err == nil {
		t.Error("second Launch of the same task ID succeeded")
	}
	if err := b.Kill(context.Background(), "dup", 0); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, "dup"); ev.State != pelotonv1.TaskState_KILLED || ev.Host != "local-1" {
		t.Fatalf("terminal = %+v, want KILLED on local-1", ev)
	}
}

func TestHosts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := mustNew(t, Config{Dir: dir, Hosts: 3})
	machine := machineCapacity(dir)
	hosts := b.Hosts()
	if len(hosts) != 3 {
		t.Fatalf("got %d hosts, want 3", len(hosts))
	}
	for i, h := range hosts {
		name := "local-" + strconv.Itoa(i)
		if h.Name != name || h.Partition != "default" || h.Labels["peloton.io/backend"] != "local" || h.Labels["host"] != name {
			t.Errorf("host %d = %+v", i, h)
		}
		if h.Capacity.MilliCPU != machine.MilliCPU/3 || h.Capacity.MemoryMB != machine.MemoryMB/3 || h.Capacity.DiskMB != machine.DiskMB/3 || h.Capacity.GPU != 0 {
			t.Errorf("host %d capacity = %v, want a third of %v", i, h.Capacity, machine)
		}
	}
	hosts[0].Labels["host"] = "mutated"
	if b.Hosts()[0].Labels["host"] != "local-0" {
		t.Error("Hosts returned a shared labels map")
	}

	explicit := resources.Resources{MilliCPU: 500, MemoryMB: 64}
	b2 := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: explicit})
	if hs := b2.Hosts(); len(hs) != 1 || hs[0].Capacity != explicit {
		t.Errorf("explicit capacity hosts = %+v", hs)
	}
	if b2.Name() != "local" {
		t.Errorf("Name = %q", b2.Name())
	}

	for name, cfg := range map[string]Config{
		"no dir":         {},
		"negative hosts": {Dir: t.TempDir(), Hosts: -1},
		"negative cpu":   {Dir: t.TempDir(), HostCapacity: resources.Resources{MilliCPU: -1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestDefaultHostCapacity(t *testing.T) {
	t.Parallel()
	c := DefaultHostCapacity()
	if c.MilliCPU != int64(runtime.NumCPU())*1000 || c.DiskMB <= 0 || c.GPU != 0 {
		t.Errorf("DefaultHostCapacity = %v", c)
	}
	if runtime.GOOS == "linux" && c.MemoryMB <= 0 {
		t.Errorf("DefaultHostCapacity memory = %d, want > 0 on Linux", c.MemoryMB)
	}
}

func TestMemTotal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for content, want := range map[string]int64{
		"MemTotal:       16318412 kB\nMemFree: 1 kB\n": 15935,
		"MemFree: 1 kB\nMemTotal: 2048 kB\n":           2,
		"MemTotal: lots\n":                             0,
		"":                                             0,
	} {
		p := filepath.Join(dir, "meminfo")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := memTotalMB(p); got != want {
			t.Errorf("memTotalMB(%q) = %d, want %d", content, got, want)
		}
	}
	if got := memTotalMB(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("memTotalMB(missing) = %d", got)
	}
}
