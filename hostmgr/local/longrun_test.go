package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Tests of what long-running jobs need from the local backend: ports,
// health checks and persistent volumes. Health checks in these tests run
// every second with no initial delay; every wait is bounded by waitTimeout.

const (
	healthUnknown = pelotonv1.HealthState_HEALTH_UNKNOWN
	healthy       = pelotonv1.HealthState_HEALTHY
	unhealthy     = pelotonv1.HealthState_UNHEALTHY
)

// healthOf lists the Health of the task's RUNNING events, in order.
func healthOf(evs []hostmgr.TaskEvent) []pelotonv1.HealthState {
	var out []pelotonv1.HealthState
	for _, ev := range evs {
		if ev.State == pelotonv1.TaskState_RUNNING {
			out = append(out, ev.Health)
		}
	}
	return out
}

// waitHealth waits until the task's RUNNING events have reported exactly
// the given sequence of health states (after the first RUNNING, which is
// always HEALTH_UNKNOWN).
func (r *recorder) waitHealth(t *testing.T, id string, want ...pelotonv1.HealthState) []hostmgr.TaskEvent {
	t.Helper()
	want = append([]pelotonv1.HealthState{healthUnknown}, want...)
	return r.waitFor(t, id, fmt.Sprint("health ", want), func(evs []hostmgr.TaskEvent) bool {
		got := healthOf(evs)
		if len(got) > len(want) || (len(evs) > 0 && terminal(evs[len(evs)-1].State)) {
			t.Fatalf("task %s: health %v, want %v (events %v)", id, got, want, states(evs))
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// every1s is a health check run every second from the start, with the
// given threshold.
func every1s(threshold uint32, cmd ...string) *pelotonv1.HealthCheck {
	return &pelotonv1.HealthCheck{Command: cmd, IntervalSeconds: 1, TimeoutSeconds: 5, FailureThreshold: threshold}
}

func TestPortsAssignedUniqueAndInEnv(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	ids := []string{"ports-1", "ports-2", "ports-3"}
	for _, id := range ids {
		s := spec(id, "sh", "-c", `echo "$PELOTON_PORT_HTTP $PELOTON_PORT_ADMIN_API $PELOTON_PORT_FIXED"; exec sleep 100`)
		s.Ports = []hostmgr.Port{{Name: "http"}, {Name: "admin-api"}, {Name: "fixed", Value: 40999}}
		launch(t, b, s)
	}
	seen := map[uint32]string{}
	for _, id := range ids {
		rec.waitState(t, id, pelotonv1.TaskState_RUNNING)
		st, err := b.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		p := st.Ports
		if len(p) != 3 || p["fixed"] != 40999 || p["http"] == 0 || p["admin-api"] == 0 || p["http"] == p["admin-api"] {
			t.Fatalf("%s: Status ports = %v, want http and admin-api chosen and distinct, fixed 40999", id, p)
		}
		for _, name := range []string{"http", "admin-api"} {
			if other, dup := seen[p[name]]; dup {
				t.Errorf("%s: port %s=%d was also given to the live run %s", id, name, p[name], other)
			}
			seen[p[name]] = id
		}
		out := strings.TrimSpace(string(waitFile(t, filepath.Join(b.dir, id, "stdout"))))
		if want := fmt.Sprintf("%d %d 40999", p["http"], p["admin-api"]); out != want {
			t.Errorf("%s: PELOTON_PORT_* in the task = %q, want %q", id, out, want)
		}
	}
	for _, id := range ids {
		if err := b.Kill(context.Background(), id, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		rec.waitTerminal(t, id)
		evs := rec.get(id)
		for _, ev := range evs {
			if fmt.Sprint(ev.Ports) != fmt.Sprint(evs[0].Ports) || len(ev.Ports) != 3 {
				t.Errorf("%s: %s event has ports %v, want %v on every event", id, ev.State, ev.Ports, evs[0].Ports)
			}
		}
	}
	// The terminal event is sent after the ports are given back, so a run
	// launched on it may have them.
	b.mu.Lock()
	left := len(b.portUse)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d ports still reserved after every run ended", left)
	}
}

func TestLongRunningLaunchErrors(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	vol := &hostmgr.Volume{ID: "job1-7"}
	holder := spec("holder", "sleep", "100")
	holder.Volume = vol
	launch(t, b, holder)

	bad := []struct {
		name string
		edit func(s *hostmgr.LaunchSpec)
		want string
	}{
		{"reserved task ID", func(s *hostmgr.LaunchSpec) { s.TaskID = "volumes" }, "spec.taskId"},
		{"port without name", func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Value: 80}} }, "spec.ports[0].name"},
		{"port too large", func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Name: "a", Value: 70000}} }, "spec.ports[0].value"},
		{"same variable", func(s *hostmgr.LaunchSpec) {
			s.Ports = []hostmgr.Port{{Name: "a-b"}, {Name: "A_B"}}
		}, "PELOTON_PORT_A_B"},
		{"check with neither", func(s *hostmgr.LaunchSpec) { s.HealthCheck = &pelotonv1.HealthCheck{} }, "spec.healthCheck"},
		{"check with both", func(s *hostmgr.LaunchSpec) {
			s.Ports = []hostmgr.Port{{Name: "http"}}
			s.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"true"}, Http: &pelotonv1.HttpProbe{Port: "http"}}
		}, "spec.healthCheck"},
		{"http port unknown", func(s *hostmgr.LaunchSpec) {
			s.HealthCheck = &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}}
		}, "spec.healthCheck.http.port"},
		{"http path relative", func(s *hostmgr.LaunchSpec) {
			s.Ports = []hostmgr.Port{{Name: "http"}}
			s.HealthCheck = &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http", Path: "health"}}
		}, "spec.healthCheck.http.path"},
		{"volume dot-dot", func(s *hostmgr.LaunchSpec) { s.Volume = &hostmgr.Volume{ID: ".."} }, "spec.volume.id"},
		{"volume with slash", func(s *hostmgr.LaunchSpec) { s.Volume = &hostmgr.Volume{ID: "../../etc"} }, "spec.volume.id"},
		{"volume empty", func(s *hostmgr.LaunchSpec) { s.Volume = &hostmgr.Volume{} }, "spec.volume.id"},
		{"volume in use", func(s *hostmgr.LaunchSpec) { s.Volume = vol }, "in use by run holder"},
	}
	for i, tc := range bad {
		s := spec(fmt.Sprintf("bad-%d", i), "true")
		tc.edit(&s)
		err := b.Launch(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Launch = %v, want an error naming %s", tc.name, err, tc.want)
			continue
		}
		if _, err := os.Stat(filepath.Join(b.dir, s.TaskID)); !os.IsNotExist(err) && s.TaskID != "volumes" {
			t.Errorf("%s: refused launch left its sandbox behind", tc.name)
		}
	}
	// The same volume ID on another host is another volume.
	b2 := mustNew(t, Config{Dir: t.TempDir(), Hosts: 2})
	if err := b2.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	for i, host := range []string{"local-0", "local-1"} {
		s := spec(fmt.Sprintf("on-host-%d", i), "sleep", "100")
		s.Host, s.Volume = host, vol
		launch(t, b2, s)
	}
	for _, id := range []string{"holder", "on-host-0", "on-host-1"} {
		bk := b2
		if id == "holder" {
			bk = b
		}
		if err := bk.Kill(context.Background(), id, 0); err != nil {
			t.Fatal(err)
		}
		rec.waitTerminal(t, id)
	}
	// Once its holder has ended, the volume is free for the next run.
	next := spec("holder-next", "true")
	next.Volume = vol
	launch(t, b, next)
	rec.waitTerminal(t, "holder-next")
}

func TestVolumeKeptAcrossRunsAndRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := newRecorder()
	b1 := mustNew(t, Config{Dir: dir})
	if err := b1.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	vol := &hostmgr.Volume{ID: "job1-7", SizeMB: 16, MountPath: "/data"}
	run := func(b *Backend, id, script string) string {
		t.Helper()
		s := spec(id, "sh", "-c", script)
		s.Volume = vol
		launch(t, b, s)
		if ev := rec.waitTerminal(t, id); ev.State != pelotonv1.TaskState_SUCCEEDED {
			t.Fatalf("%s: terminal %+v, stderr %q", id, ev, readLogs(t, b, id, pelotonv1.LogStream_STDERR, false))
		}
		return readLogs(t, b, id, pelotonv1.LogStream_STDOUT, false)
	}
	path := filepath.Join(b1.dir, "volumes", "local-0", "job1-7")
	if got := run(b1, "job1-7-1", `echo "$PELOTON_VOLUME"; echo first > "$PELOTON_VOLUME/data"`); got != path+"\n" {
		t.Errorf("PELOTON_VOLUME = %q, want %q", got, path)
	}
	if got := run(b1, "job1-7-2", `cat "$PELOTON_VOLUME/data"; echo second >> "$PELOTON_VOLUME/data"`); got != "first\n" {
		t.Errorf("second run read %q from the volume, want what the first wrote", got)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	// A new control plane on the same directory finds the volume as it was.
	b2 := mustNew(t, Config{Dir: dir})
	if err := b2.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	if got := run(b2, "job1-7-3", `cat "$PELOTON_VOLUME/data"`); got != "first\nsecond\n" {
		t.Errorf("run after a restart read %q from the volume", got)
	}

	ctx := context.Background()
	for _, tc := range []struct{ host, id, want string }{
		{"local-0", "..", "volumeId"},
		{"local-0", "a/b", "volumeId"},
		{"local-0", "", "volumeId"},
		{"local-3", "job1-7", "host"},
	} {
		if err := b2.ReleaseVolume(ctx, tc.host, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReleaseVolume(%q, %q) = %v, want an error naming %s", tc.host, tc.id, err, tc.want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("volume gone after refused releases: %v", err)
	}
	if err := b2.ReleaseVolume(ctx, "local-0", "job1-7"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("volume still on disk after ReleaseVolume: %v", err)
	}
	if err := b2.ReleaseVolume(ctx, "local-0", "job1-7"); err != nil {
		t.Errorf("second ReleaseVolume = %v, want nil (already released)", err)
	}
	if got := run(b2, "job1-7-4", `ls -A "$PELOTON_VOLUME"`); got != "" {
		t.Errorf("a released volume came back with %q", got)
	}
}

func TestReleaseVolumeInUse(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("user", "sleep", "100")
	s.Volume = &hostmgr.Volume{ID: "v"}
	launch(t, b, s)
	rec.waitState(t, "user", pelotonv1.TaskState_RUNNING)
	ctx := context.Background()
	if err := b.ReleaseVolume(ctx, "local-0", "v"); err == nil || !strings.Contains(err.Error(), "in use by run user") {
		t.Errorf("ReleaseVolume of a volume in use = %v", err)
	}
	if err := b.Kill(ctx, "user", 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, "user")
	if err := b.ReleaseVolume(ctx, "local-0", "v"); err != nil {
		t.Errorf("ReleaseVolume after its run ended = %v", err)
	}
}

func TestHealthCommandPasses(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("passes", "sleep", "100")
	s.Ports = []hostmgr.Port{{Name: "http"}}
	s.HealthCheck = every1s(3, "true")
	launch(t, b, s)
	evs := rec.waitHealth(t, s.TaskID, healthy)
	last := evs[len(evs)-1]
	if last.State != pelotonv1.TaskState_RUNNING || last.Ports["http"] == 0 {
		t.Errorf("health event %+v, want RUNNING with the run's ports", last)
	}
	if st, err := b.Status(s.TaskID); err != nil || st.Health != healthy {
		t.Errorf("Status = %+v, %v; want HEALTHY", st, err)
	}
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
	// A check that keeps passing is reported once, not every second.
	if got := healthOf(rec.get(s.TaskID)); fmt.Sprint(got) != fmt.Sprint([]pelotonv1.HealthState{healthUnknown, healthy}) {
		t.Errorf("health events %v, want one change to HEALTHY", got)
	}
}

// TestHealthCommandTransitions drives a check from passing to failing and
// back through a file the test controls, and checks that the check runs in
// the sandbox with the run's environment.
func TestHealthCommandTransitions(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	flag := filepath.Join(t.TempDir(), "healthy")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec("flaps", "sleep", "100")
	s.Env = map[string]string{"FLAG": flag}
	s.Ports = []hostmgr.Port{{Name: "http"}}
	s.Volume = &hostmgr.Volume{ID: "flaps"}
	s.HealthCheck = every1s(2, "sh", "-c",
		`test -e "$FLAG" && test -e stdout && test "$PELOTON_PORT_HTTP" -gt 0 && test -d "$PELOTON_VOLUME" && test "$PELOTON_TASK_ID" = flaps`)
	launch(t, b, s)
	rec.waitHealth(t, s.TaskID, healthy)

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	evs := rec.waitHealth(t, s.TaskID, healthy, unhealthy)
	if ev := evs[len(evs)-1]; ev.Reason != "health-check-failed" || !strings.Contains(ev.Message, "2 ") {
		t.Errorf("UNHEALTHY event reason %q message %q, want the fixed reason and the count", ev.Reason, ev.Message)
	}
	if st, err := b.Status(s.TaskID); err != nil || st.Health != unhealthy || st.State != pelotonv1.TaskState_RUNNING {
		t.Errorf("Status = %+v, %v; want RUNNING and UNHEALTHY", st, err)
	}

	// The backend reports; it does not kill. A pass makes it healthy again.
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec.waitHealth(t, s.TaskID, healthy, unhealthy, healthy)
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_KILLED {
		t.Errorf("terminal %+v, want KILLED", ev)
	}
}

func TestHealthNeverPassing(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("never", "sleep", "100")
	s.HealthCheck = every1s(2, "sh", "-c", "echo not ready; exit 3")
	launch(t, b, s)
	evs := rec.waitHealth(t, s.TaskID, unhealthy)
	if msg := evs[len(evs)-1].Message; !strings.Contains(msg, "not ready") || !strings.Contains(msg, "3") {
		t.Errorf("UNHEALTHY message %q, want the check's output and exit code", msg)
	}
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
}

// TestHealthCheckTimeout checks that a check that hangs fails after its
// timeout and that its whole process group is killed.
func TestHealthCheckTimeout(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("slowcheck", "sleep", "100")
	s.HealthCheck = every1s(1, "sh", "-c", `sleep 100 & echo $! > check.pid; wait`)
	s.HealthCheck.TimeoutSeconds = 1
	launch(t, b, s)
	evs := rec.waitHealth(t, s.TaskID, unhealthy)
	if msg := evs[len(evs)-1].Message; !strings.Contains(msg, "timed out") {
		t.Errorf("UNHEALTHY message %q, want a timeout", msg)
	}
	waitGone(t, readPid(t, filepath.Join(b.dir, s.TaskID, "check.pid")))
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
}

// TestKillAndCloseStopHealthChecks checks that a check still running when
// its run is killed, or the backend closed, is killed with it.
func TestKillAndCloseStopHealthChecks(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	long := func(id string) hostmgr.LaunchSpec {
		s := spec(id, "sleep", "100")
		s.HealthCheck = every1s(3, "sh", "-c", `sleep 100 & echo $! > check.pid; wait`)
		s.HealthCheck.TimeoutSeconds = 600
		return s
	}
	launch(t, b, long("killed"))
	launch(t, b, long("closed"))
	killedCheck := readPid(t, filepath.Join(b.dir, "killed", "check.pid"))
	closedCheck := readPid(t, filepath.Join(b.dir, "closed", "check.pid"))

	if err := b.Kill(context.Background(), "killed", 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, "killed")
	waitGone(t, killedCheck)

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns once the run's last event is delivered, which is after
	// its health check has been stopped.
	if evs := rec.get("closed"); len(evs) == 0 || evs[len(evs)-1].State != pelotonv1.TaskState_LOST {
		t.Errorf("closed: events %v, want ending in LOST (a shutdown)", states(evs))
	}
	waitGone(t, closedCheck)
}

func TestHealthHTTP(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary to serve HTTP: %v", err)
	}
	b, rec := newBackend(t)
	server := func(id, path string, threshold uint32) hostmgr.LaunchSpec {
		s := spec(id, self)
		s.Env = map[string]string{httpHelperEnv: "1"}
		s.Ports = []hostmgr.Port{{Name: "http"}}
		s.HealthCheck = &pelotonv1.HealthCheck{
			Http:            &pelotonv1.HttpProbe{Port: "HTTP", Path: path},
			IntervalSeconds: 1, TimeoutSeconds: 5, FailureThreshold: threshold,
		}
		return s
	}
	// The helper takes a moment to listen; a threshold of 5 keeps those
	// first refused connections from counting as an unhealthy server.
	ok := server("http-ok", "", 5)
	moved := server("http-moved", "/moved", 5) // a 302 to a 500: healthy unless followed
	broken := server("http-broken", "/broken", 2)
	nobody := spec("http-nobody", "sleep", "100")
	nobody.Ports = []hostmgr.Port{{Name: "http"}}
	nobody.HealthCheck = &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}, IntervalSeconds: 1, FailureThreshold: 1}
	for _, s := range []hostmgr.LaunchSpec{ok, moved, broken, nobody} {
		launch(t, b, s)
	}
	rec.waitHealth(t, ok.TaskID, healthy)
	rec.waitHealth(t, moved.TaskID, healthy)
	// The broken server may or may not have answered before it became
	// unhealthy; what matters is that it ends up UNHEALTHY.
	rec.waitFor(t, broken.TaskID, "UNHEALTHY", func(evs []hostmgr.TaskEvent) bool {
		return evs[len(evs)-1].Health == unhealthy
	})
	evs := rec.waitHealth(t, nobody.TaskID, unhealthy)
	if msg := evs[len(evs)-1].Message; !strings.Contains(msg, "refused") {
		t.Errorf("UNHEALTHY message %q, want the connection error", msg)
	}
	for _, s := range []hostmgr.LaunchSpec{ok, moved, broken, nobody} {
		if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
			t.Fatal(err)
		}
		rec.waitTerminal(t, s.TaskID)
	}
}

func TestHealthTracker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		threshold uint32
		results   string // p = pass, f = fail
		want      string // the health after each result: ? unknown, H, U
		changes   int
	}{
		{3, "p", "H", 1},
		{3, "pppp", "HHHH", 1},
		{3, "ff", "??", 0},
		{3, "fff", "??U", 1},
		{3, "ffp", "??H", 1},
		{3, "pffpfff", "HHHHHHU", 2},
		{2, "pffp", "HHUH", 3},
		{1, "pfpf", "HUHU", 4},
	} {
		tr := healthTracker{threshold: tc.threshold}
		var got strings.Builder
		changes := 0
		for _, r := range tc.results {
			if tr.observe(r == 'p') {
				changes++
			}
			got.WriteByte(map[pelotonv1.HealthState]byte{healthUnknown: '?', healthy: 'H', unhealthy: 'U'}[tr.state])
		}
		if got.String() != tc.want || changes != tc.changes {
			t.Errorf("threshold %d, results %s: health %s with %d changes, want %s with %d",
				tc.threshold, tc.results, got.String(), changes, tc.want, tc.changes)
		}
	}
}
