package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// waitTimeout bounds every wait on a condition. It is generous because the
// race detector on two shared cores is slow; passing tests never reach it.
const waitTimeout = 15 * time.Second

const (
	launched  = pelotonv1.TaskState_LAUNCHED
	running   = pelotonv1.TaskState_RUNNING
	succeeded = pelotonv1.TaskState_SUCCEEDED
	failed    = pelotonv1.TaskState_FAILED
	killed    = pelotonv1.TaskState_KILLED
)

// recorder is a sink that keeps every event per task and lets a test wait
// for a condition on them.
type recorder struct {
	mu     sync.Mutex
	events map[string][]hostmgr.TaskEvent
	total  int
	wake   chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder {
	return &recorder{events: map[string][]hostmgr.TaskEvent{}, wake: make(chan struct{})}
}

func (r *recorder) sink(ev hostmgr.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[ev.TaskID] = append(r.events[ev.TaskID], ev)
	r.total++
	close(r.wake)
	r.wake = make(chan struct{})
}

func (r *recorder) get(id string) []hostmgr.TaskEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hostmgr.TaskEvent(nil), r.events[id]...)
}

// waitFor waits until cond holds for the task's events and returns them.
func (r *recorder) waitFor(t *testing.T, id, what string, cond func([]hostmgr.TaskEvent) bool) []hostmgr.TaskEvent {
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

// waitTerminal waits for the task's terminal event, checks that its events
// are exactly LAUNCHED, RUNNING, terminal with times in order, and returns
// them.
func (r *recorder) waitTerminal(t *testing.T, id string) []hostmgr.TaskEvent {
	t.Helper()
	evs := r.waitFor(t, id, "a terminal event", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && isTerminal(evs[len(evs)-1].State)
	})
	checkLifecycle(t, id, evs)
	return evs
}

func checkLifecycle(t *testing.T, id string, evs []hostmgr.TaskEvent) {
	t.Helper()
	if len(evs) != 3 || evs[0].State != launched || evs[1].State != running || !isTerminal(evs[2].State) {
		t.Fatalf("task %s: events %v, want LAUNCHED, RUNNING, terminal", id, states(evs))
	}
	for i, ev := range evs {
		if ev.TaskID != id || ev.Host == "" || ev.Time.IsZero() {
			t.Fatalf("task %s: event %d = %+v", id, i, ev)
		}
		if i > 0 && ev.Time.Before(evs[i-1].Time) {
			t.Fatalf("task %s: event times go back: %v", id, evs)
		}
	}
}

func isTerminal(s pelotonv1.TaskState) bool {
	return s == succeeded || s == failed || s == killed || s == pelotonv1.TaskState_LOST
}

func states(evs []hostmgr.TaskEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.State.String()
	}
	return out
}

// newStarted returns a started Backend, closed when the test ends.
func newStarted(t *testing.T, cfg Config, sink func(hostmgr.TaskEvent)) *Backend {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// spec builds a launch spec on host sim-00000 (or the given host).
func spec(id string, cmd ...string) hostmgr.LaunchSpec {
	return hostmgr.LaunchSpec{TaskID: id, JobID: "job", Host: "sim-00000", Command: cmd}
}

func launch(t *testing.T, b *Backend, s hostmgr.LaunchSpec) {
	t.Helper()
	if err := b.Launch(context.Background(), s); err != nil {
		t.Fatalf("Launch %s: %v", s.TaskID, err)
	}
}

func TestHostsLabelsRoundRobin(t *testing.T) {
	b, err := New(Config{Hosts: 4, Labels: []string{"zone=a", "zone=b", "zone=c", "rack=r1", " rack = r2 "}})
	if err != nil {
		t.Fatal(err)
	}
	hosts := b.Hosts()
	want := []struct{ name, zone, rack string }{
		{"sim-00000", "a", "r1"}, {"sim-00001", "b", "r2"}, {"sim-00002", "c", "r1"}, {"sim-00003", "a", "r2"},
	}
	if len(hosts) != len(want) {
		t.Fatalf("%d hosts, want %d", len(hosts), len(want))
	}
	for i, w := range want {
		h := hosts[i]
		wantLabels := map[string]string{"zone": w.zone, "rack": w.rack, LabelBackend: "sim"}
		if h.Name != w.name || h.Partition != "default" || fmt.Sprint(h.Labels) != fmt.Sprint(wantLabels) {
			t.Errorf("host %d = %+v, want %s with labels %v in partition default", i, h, w.name, wantLabels)
		}
	}
	hosts[0].Labels["zone"] = "changed"
	if b.Hosts()[0].Labels["zone"] != "a" {
		t.Error("Hosts returned the backend's own label map")
	}
	if b.Name() != "sim" {
		t.Errorf("Name() = %q", b.Name())
	}
}

func TestHostsPartitionAndCapacity(t *testing.T) {
	b, err := New(Config{Hosts: 3, Labels: []string{"peloton.io/partition=batch", "peloton.io/partition=online"},
		HostCapacity: resources.Resources{MilliCPU: 8000, GPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	hosts := b.Hosts()
	for i, want := range []string{"batch", "online", "batch"} {
		if hosts[i].Partition != want || hosts[i].Labels[LabelPartition] != want {
			t.Errorf("host %d: partition %q labels %v, want %q", i, hosts[i].Partition, hosts[i].Labels, want)
		}
		if c := hosts[i].Capacity; c != (resources.Resources{MilliCPU: 8000, MemoryMB: 131072, GPU: 2}) {
			t.Errorf("host %d: capacity %v, want given CPU and GPU, default memory", i, c)
		}
	}

	b, err = New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if hosts := b.Hosts(); len(hosts) != 1 || hosts[0].Capacity != DefaultHostCapacity {
		t.Errorf("zero config: hosts %+v, want one of DefaultHostCapacity", hosts)
	}

	b, err = New(Config{Hosts: 100_001})
	if err != nil {
		t.Fatal(err)
	}
	hosts = b.Hosts()
	if hosts[99_999].Name != "sim-99999" || hosts[100_000].Name != "sim-100000" {
		t.Errorf("names past 5 digits: %s, %s", hosts[99_999].Name, hosts[100_000].Name)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Hosts: -1}, "config.hosts"},
		{Config{HostCapacity: resources.Resources{MemoryMB: -1}}, "config.hostCapacity"},
		{Config{Labels: []string{"zone=a", "zone"}}, `config.labels[1]: "zone"`},
		{Config{Labels: []string{"=a"}}, `config.labels[0]: "=a"`},
		{Config{Labels: []string{""}}, `config.labels[0]: ""`},
		{Config{Labels: []string{"a b=c"}}, `config.labels[0]: "a b=c"`},
		{Config{Labels: []string{"peloton.io/backend=x"}}, `"peloton.io/backend=x"`},
		{Config{Labels: []string{"peloton.io/partition="}}, `"peloton.io/partition="`},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestInterpret(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want outcome
	}{
		{[]string{"sleep", "0"}, outcome{0, succeeded, 0}},
		{[]string{"sleep", "0.5"}, outcome{500 * time.Millisecond, succeeded, 0}},
		{[]string{"/bin/sleep", "30"}, outcome{30 * time.Second, succeeded, 0}},
		{[]string{"sleep", "2m"}, outcome{2 * time.Minute, succeeded, 0}},
		{[]string{"sleep", "1e300"}, outcome{maxSleep, succeeded, 0}},
		{[]string{"true"}, outcome{0, succeeded, 0}},
		{[]string{"false"}, outcome{0, failed, 1}},
		{[]string{"/bin/sh", "-c", "exit 3"}, outcome{0, failed, 3}},
		{[]string{"sh", "-c", "  sleep   0.1 "}, outcome{100 * time.Millisecond, succeeded, 0}},
		{[]string{"bash", "-c", "false", "arg0"}, outcome{0, failed, 1}},
		{[]string{"sh", "-c", "exit 0"}, outcome{0, succeeded, 0}},
		{[]string{"sh", "-c", ""}, outcome{0, succeeded, 0}},
		// Malformed or unknown: succeed at once.
		{[]string{"sleep", "-1"}, outcome{0, succeeded, 0}},
		{[]string{"sleep", "soon"}, outcome{0, succeeded, 0}},
		{[]string{"sleep", "NaN"}, outcome{0, succeeded, 0}},
		{[]string{"sleep", "1", "2"}, outcome{0, succeeded, 0}},
		{[]string{"exit", "x"}, outcome{0, succeeded, 0}},
		{[]string{"echo", "false"}, outcome{0, succeeded, 0}},
		{[]string{"python3", "-c", "sleep 5"}, outcome{0, succeeded, 0}},
		{[]string{"sh", "-c", "sleep 5; exit 1"}, outcome{0, succeeded, 0}},
	} {
		if got := interpret(tc.argv); got != tc.want {
			t.Errorf("interpret(%q) = %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}

// TestCommands runs each form of command through the backend and checks its
// events: lifecycle order, terminal state, exit code, reason, and the
// simulated duration (exact: a sleep ends at its deadline).
func TestCommands(t *testing.T) {
	rec := newRecorder()
	b := newStarted(t, Config{Hosts: 2}, rec.sink)
	cases := []struct {
		argv     []string
		state    pelotonv1.TaskState
		exitCode int32
		reason   string
		took     time.Duration
	}{
		{[]string{"sleep", "0"}, succeeded, 0, "exit-zero", 0},
		{[]string{"sleep", "0.2"}, succeeded, 0, "exit-zero", 200 * time.Millisecond},
		{[]string{"true"}, succeeded, 0, "exit-zero", 0},
		{[]string{"false"}, failed, 1, "exit-nonzero", 0},
		{[]string{"exit", "3"}, failed, 3, "exit-nonzero", 0},
		{[]string{"/bin/sh", "-c", "sleep 0.1"}, succeeded, 0, "exit-zero", 100 * time.Millisecond},
		{[]string{"./my-server", "--port", "80"}, succeeded, 0, "exit-zero", 0},
	}
	for i, c := range cases {
		s := spec(fmt.Sprintf("cmd-%d", i), c.argv...)
		s.Host = "sim-00001"
		launch(t, b, s)
	}
	for i, c := range cases {
		id := fmt.Sprintf("cmd-%d", i)
		evs := rec.waitTerminal(t, id)
		last := evs[2]
		if last.State != c.state || last.ExitCode != c.exitCode || last.Reason != c.reason || last.Host != "sim-00001" {
			t.Errorf("%q: terminal event %+v, want %s exit %d reason %s", c.argv, last, c.state, c.exitCode, c.reason)
		}
		if took := last.Time.Sub(evs[1].Time); took != c.took {
			t.Errorf("%q: ran %s, want %s", c.argv, took, c.took)
		}
	}
}

// TestEventOrderPerTask launches a mix of commands over many hosts, with a
// sink that calls back into the backend, and checks every task's events.
func TestEventOrderPerTask(t *testing.T) {
	rec := newRecorder()
	var b *Backend
	var statusErrs atomic.Int32
	b = newStarted(t, Config{Hosts: 10}, func(ev hostmgr.TaskEvent) {
		// Re-entrant calls must not deadlock.
		if _, err := b.Status(ev.TaskID); err != nil {
			statusErrs.Add(1)
		}
		rec.sink(ev)
	})
	cmds := [][]string{{"sleep", "0"}, {"sleep", "0.05"}, {"false"}, {"sh", "-c", "sleep 0.01"}, {"true"}}
	const n = 500
	for i := range n {
		s := spec(fmt.Sprintf("t-%d", i), cmds[i%len(cmds)]...)
		s.Host = hostName(i % 10)
		launch(t, b, s)
	}
	for i := range n {
		rec.waitTerminal(t, fmt.Sprintf("t-%d", i))
	}
	if e := statusErrs.Load(); e != 0 {
		t.Errorf("Status from the sink failed %d times", e)
	}
}

func TestLaunchRejects(t *testing.T) {
	b, err := New(Config{Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Launch(context.Background(), spec("early", "true")); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Errorf("Launch before Start = %v", err)
	}
	if err := b.Start(context.Background(), nil); err == nil {
		t.Error("Start with a nil sink succeeded")
	}
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Start(context.Background(), rec.sink); err == nil {
		t.Error("second Start succeeded")
	}
	launch(t, b, spec("dup", "true"))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		spec hostmgr.LaunchSpec
		want string
	}{
		{context.Background(), spec("dup", "true"), "spec.taskId: task already launched"},
		{context.Background(), spec("", "true"), "spec.taskId"},
		{context.Background(), spec("nocmd"), "spec.command"},
		{context.Background(), hostmgr.LaunchSpec{TaskID: "x", Host: "local-0", Command: []string{"true"}}, `spec.host: "local-0"`},
		{cancelled, spec("cancelled", "true"), "context canceled"},
	} {
		if err := b.Launch(tc.ctx, tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Launch(%+v) = %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
	for _, id := range []string{"nocmd", "x", "cancelled"} {
		if _, err := b.Status(id); !errors.Is(err, hostmgr.ErrUnknownTask) {
			t.Errorf("rejected %s left something behind: %v", id, err)
		}
	}
}

// TestKillSleepingTask uses a fake clock so that "the killed task never
// finishes on its own" is checked without waiting on real time.
func TestKillSleepingTask(t *testing.T) {
	clock := clockwork.NewFakeClock()
	rec := newRecorder()
	b := newStarted(t, Config{Clock: clock}, rec.sink)
	launch(t, b, spec("victim", "sleep", "30"))
	launch(t, b, spec("witness", "sh", "-c", "sleep 60"))
	rec.waitFor(t, "victim", "RUNNING", func(evs []hostmgr.TaskEvent) bool { return len(evs) == 2 })
	if ev, err := b.Status("victim"); err != nil || ev.State != running {
		t.Fatalf("Status(victim) = %+v, %v; want RUNNING", ev, err)
	}

	clock.Advance(10 * time.Second)
	if err := b.Kill(context.Background(), "victim", time.Minute); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	evs := rec.waitTerminal(t, "victim")
	if last := evs[2]; last.State != killed || last.Reason != "killed" || last.ExitCode != 0 {
		t.Errorf("killed task's terminal event %+v", last)
	}
	if got := evs[2].Time.Sub(evs[1].Time); got != 10*time.Second {
		t.Errorf("killed after %s of simulated time, want 10s", got)
	}
	if err := b.Kill(context.Background(), "victim", 0); err != nil {
		t.Errorf("Kill of a finished task = %v, want nil", err)
	}

	// Past both deadlines: only the witness ends; its event comes after any
	// stray one for the victim would have, since all events share one queue.
	clock.Advance(time.Minute)
	rec.waitTerminal(t, "witness")
	if evs := rec.get("victim"); len(evs) != 3 {
		t.Errorf("victim events after its deadline passed: %v", states(evs))
	}
	if ev, err := b.Status("victim"); err != nil || ev.State != killed {
		t.Errorf("Status(victim) = %+v, %v; want KILLED", ev, err)
	}
}

func TestStatusAndUnknownTasks(t *testing.T) {
	rec := newRecorder()
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.maxFinished = 3
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	// Status and Kill of a task never launched are the conformance suite's
	// (KillUnknownTask); runs forgotten after maxFinished are this backend's.
	ctx := context.Background()
	if _, err := b.Logs(ctx, "nope", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false}); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("Logs(unknown) = %v", err)
	}

	for i := range 5 {
		launch(t, b, spec(fmt.Sprintf("f-%d", i), "exit", fmt.Sprint(i)))
	}
	for i := range 5 {
		rec.waitTerminal(t, fmt.Sprintf("f-%d", i))
	}
	// The three most recent are remembered; the two oldest are forgotten.
	for i := range 5 {
		id := fmt.Sprintf("f-%d", i)
		ev, err := b.Status(id)
		if i < 2 {
			if !errors.Is(err, hostmgr.ErrUnknownTask) {
				t.Errorf("Status(%s) = %+v, %v; want ErrUnknownTask once forgotten", id, ev, err)
			}
			if _, err := b.Logs(ctx, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false}); !errors.Is(err, hostmgr.ErrUnknownTask) {
				t.Errorf("Logs(%s) = %v; want ErrUnknownTask once forgotten", id, err)
			}
			if err := b.Kill(ctx, id, 0); !errors.Is(err, hostmgr.ErrUnknownTask) {
				t.Errorf("Kill(%s) = %v; want ErrUnknownTask once forgotten", id, err)
			}
			continue
		}
		if want := rec.get(id)[2]; err != nil || !reflect.DeepEqual(ev, want) {
			t.Errorf("Status(%s) = %+v, %v; want the last event %+v", id, ev, err, want)
		}
	}
}

func readAll(t *testing.T, rc io.ReadCloser) string {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read logs: %v", err)
	}
	return string(b)
}

func TestLogs(t *testing.T) {
	clock := clockwork.NewFakeClock()
	rec := newRecorder()
	b := newStarted(t, Config{Hosts: 3, Clock: clock}, rec.sink)
	ctx := context.Background()
	s := spec("ok", "/bin/sh", "-c", "sleep 0")
	s.Host = "sim-00002"
	launch(t, b, s)
	launch(t, b, spec("bad", "exit", "3"))
	rec.waitTerminal(t, "ok")
	rec.waitTerminal(t, "bad")

	out, err := b.Logs(ctx, "ok", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, out), "sim: /bin/sh -c \"sleep 0\" on sim-00002\nsim: succeeded (exit 0)\n"; got != want {
		t.Errorf("stdout of ok = %q, want %q", got, want)
	}
	out, err = b.Logs(ctx, "bad", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, out), "sim: exit 3 on sim-00000\nsim: failed (exit 3)\n"; got != want {
		t.Errorf("stdout of bad (follow, finished) = %q, want %q", got, want)
	}
	errOut, err := b.Logs(ctx, "bad", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDERR, Follow: false})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, errOut); got != "" {
		t.Errorf("stderr = %q, want empty", got)
	}
	if _, err := b.Logs(ctx, "ok", hostmgr.LogOptions{Stream: pelotonv1.LogStream(99), Follow: false}); err == nil || !strings.Contains(err.Error(), "stream") {
		t.Errorf("Logs with a bad stream = %v", err)
	}

	// A running task: without follow, the first line; with follow, the
	// first line, then the outcome once the task ends.
	launch(t, b, spec("long", "sleep", "30"))
	out, err = b.Logs(ctx, "long", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, out); got != "sim: sleep 30 on sim-00000\n" {
		t.Errorf("stdout of a running task = %q", got)
	}
	follow, err := b.Logs(ctx, "long", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	followErr, err := b.Logs(ctx, "long", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDERR, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100)
	n, err := follow.Read(first)
	if err != nil || string(first[:n]) != "sim: sleep 30 on sim-00000\n" {
		t.Fatalf("first read of a follower = %q, %v", first[:n], err)
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 2)
	for _, rc := range []io.ReadCloser{follow, followErr} {
		go func() {
			b, err := io.ReadAll(rc)
			done <- result{string(b), err}
		}()
	}
	clock.Advance(30 * time.Second)
	for range 2 {
		select {
		case r := <-done:
			if r.err != nil || (r.out != "sim: succeeded (exit 0)\n" && r.out != "") {
				t.Errorf("follower rest = %q, %v", r.out, r.err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("follower did not end with the task")
		}
	}
	follow.Close()
	followErr.Close()

	// A follower ends when its ctx does, or when it is closed.
	launch(t, b, spec("longer", "sleep", "300"))
	cctx, cancel := context.WithCancel(ctx)
	follow, err = b.Logs(cctx, "longer", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		b, err := io.ReadAll(follow)
		done <- result{string(b), err}
	}()
	cancel()
	select {
	case r := <-done:
		if r.err != nil || r.out != "sim: sleep 300 on sim-00000\n" {
			t.Errorf("follower after cancel = %q, %v", r.out, r.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("follower did not end with its ctx")
	}
	follow, err = b.Logs(ctx, "longer", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDERR, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := follow.Read(make([]byte, 10))
		done <- result{"", err}
	}()
	follow.Close()
	select {
	case r := <-done:
		if r.err == nil {
			t.Error("Read of a closed follower returned no error")
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close did not wake a waiting Read")
	}
}

// TestCloseStopsDelivery checks that Close returns with its goroutines gone,
// so that no event can follow, and that running tasks are dropped.
func TestCloseStopsDelivery(t *testing.T) {
	clock := clockwork.NewFakeClock()
	rec := newRecorder()
	b, err := New(Config{Hosts: 2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		launch(t, b, spec(fmt.Sprintf("c-%d", i), "sleep", "1"))
	}
	rec.waitFor(t, "c-99", "RUNNING", func(evs []hostmgr.TaskEvent) bool { return len(evs) == 2 })
	follow, err := b.Logs(context.Background(), "c-0", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, ch := range map[string]chan struct{}{"scheduler": b.schedRun, "delivery": b.delivRun} {
		select {
		case <-ch:
		default:
			t.Errorf("%s goroutine still running after Close", name)
		}
	}
	rec.mu.Lock()
	total := rec.total
	rec.mu.Unlock()
	if total != 200 {
		t.Errorf("%d events before Close, want 200 (LAUNCHED and RUNNING of each)", total)
	}
	clock.Advance(time.Hour)
	if got := readAll(t, follow); got != "sim: sleep 1 on sim-00000\n" {
		t.Errorf("follower across Close = %q", got)
	}
	if err := b.Launch(context.Background(), spec("late", "true")); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Launch after Close = %v", err)
	}
	if err := b.Kill(context.Background(), "c-1", 0); err != nil {
		t.Errorf("Kill after Close = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := b.Start(context.Background(), rec.sink); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// TestCloseBoundedWithBlockedSink checks that a sink no one drains cannot
// hang Close.
func TestCloseBoundedWithBlockedSink(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.closeWait = 50 * time.Millisecond
	if err := b.Start(context.Background(), func(hostmgr.TaskEvent) {
		if calls.Add(1) == 1 {
			close(entered)
		}
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	launch(t, b, spec("stuck", "true"))
	<-entered
	err = b.Close()
	if err == nil || !strings.Contains(err.Error(), "blocked in the sink") {
		t.Errorf("Close with a blocked sink = %v", err)
	}
	if err2 := b.Close(); err2 != err {
		t.Errorf("second Close = %v, want the same %v", err2, err)
	}
	close(release)
	select {
	case <-b.delivRun:
	case <-time.After(waitTimeout):
		t.Fatal("delivery goroutine did not stop once the sink returned")
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("sink called %d times, want 1: nothing after Close", c)
	}
}

// counter is a cheap sink for scale: counts per state, and signals once a
// target is reached.
type counter struct {
	byState [32]atomic.Int64
	total   atomic.Int64
	target  int64
	done    chan struct{}
}

func newCounter(target int64) *counter { return &counter{target: target, done: make(chan struct{})} }

func (c *counter) sink(ev hostmgr.TaskEvent) {
	c.byState[ev.State%32].Add(1)
	if c.total.Add(1) == c.target {
		close(c.done)
	}
}

// TestScale launches 50,000 instant tasks over 5,000 hosts and receives all
// 150,000 events. It asserts counts only: timing belongs to BenchmarkLaunch.
func TestScale(t *testing.T) {
	const hosts, tasks = 5000, 50_000
	c := newCounter(3 * tasks)
	b := newStarted(t, Config{Hosts: hosts, Labels: []string{"zone=a", "zone=b", "zone=c"}}, c.sink)
	if got := len(b.Hosts()); got != hosts {
		t.Fatalf("%d hosts", got)
	}
	ctx := context.Background()
	cmd := []string{"sleep", "0"}
	for i := range tasks {
		s := hostmgr.LaunchSpec{TaskID: fmt.Sprintf("scale-%d", i), Host: hostName(i % hosts), Command: cmd}
		if err := b.Launch(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("received %d of %d events", c.total.Load(), 3*tasks)
	}
	for _, st := range []pelotonv1.TaskState{launched, running, succeeded} {
		if got := c.byState[st].Load(); got != tasks {
			t.Errorf("%d %s events, want %d", got, st, tasks)
		}
	}
	if ev, err := b.Status("scale-49999"); err != nil || ev.State != succeeded {
		t.Errorf("Status of the last task = %+v, %v", ev, err)
	}
}

// BenchmarkLaunch measures launch and completion of instant tasks: b.N
// sleep-0 tasks over 5,000 hosts, timed until their last event arrives.
func BenchmarkLaunch(bm *testing.B) {
	const hosts = 5000
	c := newCounter(3 * int64(bm.N))
	b, err := New(Config{Hosts: hosts, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		bm.Fatal(err)
	}
	if err := b.Start(context.Background(), c.sink); err != nil {
		bm.Fatal(err)
	}
	defer b.Close()
	ids := make([]string, bm.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d", i)
	}
	ctx := context.Background()
	cmd := []string{"sleep", "0"}
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := range bm.N {
		if err := b.Launch(ctx, hostmgr.LaunchSpec{TaskID: ids[i], Host: b.hosts[i%hosts].Name, Command: cmd}); err != nil {
			bm.Fatal(err)
		}
	}
	<-c.done
	bm.StopTimer()
	bm.ReportMetric(float64(bm.N)/bm.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkLaunchSleeping measures launch of tasks that stay running, which
// exercises the heap: b.N tasks of 1h, launched until the last RUNNING.
func BenchmarkLaunchSleeping(bm *testing.B) {
	const hosts = 5000
	c := newCounter(2 * int64(bm.N))
	b, err := New(Config{Hosts: hosts, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		bm.Fatal(err)
	}
	if err := b.Start(context.Background(), c.sink); err != nil {
		bm.Fatal(err)
	}
	defer b.Close()
	ids := make([]string, bm.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d", i)
	}
	ctx := context.Background()
	cmd := []string{"sh", "-c", "sleep 3600"}
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := range bm.N {
		if err := b.Launch(ctx, hostmgr.LaunchSpec{TaskID: ids[i], Host: b.hosts[i%hosts].Name, Command: cmd}); err != nil {
			bm.Fatal(err)
		}
	}
	<-c.done
	bm.StopTimer()
	bm.ReportMetric(float64(bm.N)/bm.Elapsed().Seconds(), "tasks/s")
}
