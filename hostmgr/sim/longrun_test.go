package sim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

const (
	healthUnknown = pelotonv1.HealthState_HEALTH_UNKNOWN
	healthy       = pelotonv1.HealthState_HEALTHY
	unhealthy     = pelotonv1.HealthState_UNHEALTHY
)

func check(cmd ...string) *pelotonv1.HealthCheck {
	return &pelotonv1.HealthCheck{Command: cmd}
}

func TestHealthAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hc    *pelotonv1.HealthCheck
		after time.Duration
		want  pelotonv1.HealthState
	}{
		{"true at once", check("true"), 0, healthy},
		{"exit 0 after the delay", &pelotonv1.HealthCheck{Command: []string{"sh", "-c", "exit 0"}, InitialDelaySeconds: 5}, 5 * time.Second, healthy},
		{"unknown commands pass", check("curl", "-f", "localhost"), 0, healthy},
		{"http passes", &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}, InitialDelaySeconds: 2}, 2 * time.Second, healthy},
		{"sleep passes when it ends", check("sleep", "2"), 2 * time.Second, healthy},
		// Defaults: interval 10s, threshold 3; checks at 0, 10, 20.
		{"false fails thrice", check("false"), 20 * time.Second, unhealthy},
		{"exit N", &pelotonv1.HealthCheck{Command: []string{"exit", "2"}, InitialDelaySeconds: 1, IntervalSeconds: 2, FailureThreshold: 2}, 3 * time.Second, unhealthy},
		{"threshold 1", &pelotonv1.HealthCheck{Command: []string{"false"}, FailureThreshold: 1}, 0, unhealthy},
		// A sleep beyond the timeout (default 5s) fails when timed out;
		// checks start every max(interval, timeout): at 0, 10, 20, the
		// third failing at 25.
		{"sleep beyond the timeout", check("sleep", "60"), 25 * time.Second, unhealthy},
		{"timeout longer than interval", &pelotonv1.HealthCheck{Command: []string{"sleep", "9"}, IntervalSeconds: 1, TimeoutSeconds: 3, FailureThreshold: 2}, 6 * time.Second, unhealthy},
		{"huge numbers saturate", &pelotonv1.HealthCheck{Command: []string{"false"}, InitialDelaySeconds: ^uint32(0), IntervalSeconds: ^uint32(0), FailureThreshold: ^uint32(0)}, maxSleep, unhealthy},
	} {
		after, got := healthAfter(tc.hc)
		if after != tc.after || got != tc.want {
			t.Errorf("%s: %s after %s, want %s after %s", tc.name, got, after, tc.want, tc.after)
		}
	}
}

// advanceUntil moves the fake clock forward by step until cond holds,
// bounded by waitTimeout of real time. The scheduler reads the clock and
// then sets its timer; an Advance in between sets the timer late, and a test
// that advanced exactly to a deadline would wait forever. Stepping until the
// outcome is seen avoids that race, and costs no precision: events carry the
// simulated times at which they were due, not the time they were seen.
func advanceUntil(t *testing.T, clock *clockwork.FakeClock, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out advancing the clock until %s", what)
		}
		clock.Advance(step)
		// A yield to the scheduler's goroutine between steps, not a
		// wait for a condition: testutil.Eventually's longer polls would
		// make a run of many steps slow, and the scheduler shows no
		// event per step to wait on (the fake clock's count of waiters is
		// none: the scheduler sets no timer while nothing is due, and a
		// runtime.Gosched instead lets the steps outrun it).
		time.Sleep(time.Millisecond)
	}
}

// hasHealth reports whether the task has reported a health.
func (r *recorder) hasHealth(id string) bool {
	for _, ev := range r.get(id) {
		if ev.Health != healthUnknown {
			return true
		}
	}
	return false
}

func (r *recorder) ended(id string) bool {
	evs := r.get(id)
	return len(evs) > 0 && isTerminal(evs[len(evs)-1].State)
}

// waitHealthEvent waits for the task's RUNNING event that reports its
// health and returns it.
func (r *recorder) waitHealthEvent(t *testing.T, id string) hostmgr.TaskEvent {
	t.Helper()
	evs := r.waitFor(t, id, "a health event", func(evs []hostmgr.TaskEvent) bool { return len(evs) >= 3 })
	if evs[0].State != launched || evs[1].State != running || evs[1].Health != healthUnknown ||
		evs[2].State != running || evs[2].Health == healthUnknown {
		t.Fatalf("task %s: events %+v, want LAUNCHED, RUNNING, RUNNING with health", id, evs)
	}
	return evs[2]
}

func TestHealthReportedOnceOnTime(t *testing.T) {
	clock := clockwork.NewFakeClock()
	rec := newRecorder()
	b := newStarted(t, Config{Clock: clock}, rec.sink)
	start := clock.Now()
	withCheck := func(id string, cmd []string, hc *pelotonv1.HealthCheck) hostmgr.LaunchSpec {
		s := spec(id, cmd...)
		s.HealthCheck = hc
		return s
	}
	cases := []struct {
		spec  hostmgr.LaunchSpec
		after time.Duration
		want  pelotonv1.HealthState
	}{
		{withCheck("at-once", []string{"sleep", "3600"}, check("true")), 0, healthy},
		{withCheck("delayed", []string{"sleep", "3600"}, &pelotonv1.HealthCheck{Command: []string{"true"}, InitialDelaySeconds: 5}), 5 * time.Second, healthy},
		{withCheck("failing", []string{"sleep", "3600"}, &pelotonv1.HealthCheck{Command: []string{"false"}, IntervalSeconds: 1, FailureThreshold: 3}), 2 * time.Second, unhealthy},
	}
	for _, c := range cases {
		launch(t, b, c.spec)
	}
	// A run that ends, or is killed, before its check is due reports no health.
	launch(t, b, withCheck("short", []string{"sleep", "1"}, &pelotonv1.HealthCheck{Command: []string{"true"}, InitialDelaySeconds: 5}))
	launch(t, b, withCheck("killed", []string{"sleep", "3600"}, &pelotonv1.HealthCheck{Command: []string{"true"}, InitialDelaySeconds: 5}))
	launch(t, b, withCheck("instant", []string{"true"}, check("true")))
	rec.waitHealthEvent(t, "at-once")
	if err := b.Kill(context.Background(), "killed", 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, "killed")
	rec.waitTerminal(t, "instant")
	advanceUntil(t, clock, time.Second, "every health is reported", func() bool {
		return rec.hasHealth("delayed") && rec.hasHealth("failing") && rec.ended("short")
	})
	for _, c := range cases {
		ev := rec.waitHealthEvent(t, c.spec.TaskID)
		if ev.Health != c.want || !ev.Time.Equal(start.Add(c.after)) {
			t.Errorf("%s: %s at +%s, want %s at +%s", c.spec.TaskID, ev.Health, ev.Time.Sub(start), c.want, c.after)
		}
		if st, err := b.Status(c.spec.TaskID); err != nil || st.Health != c.want || st.State != running {
			t.Errorf("%s: Status %+v, %v; want RUNNING and %s", c.spec.TaskID, st, err, c.want)
		}
	}
	rec.waitTerminal(t, "short")
	// Reported once: an hour on, nothing more but the ends.
	advanceUntil(t, clock, time.Minute, "every run ends", func() bool {
		return rec.ended("at-once") && rec.ended("delayed") && rec.ended("failing")
	})
	for _, c := range cases {
		evs := rec.waitFor(t, c.spec.TaskID, "the end", func(evs []hostmgr.TaskEvent) bool {
			return isTerminal(evs[len(evs)-1].State)
		})
		if len(evs) != 4 || evs[3].State != succeeded || evs[3].Health != healthUnknown {
			t.Errorf("%s: events %v, want LAUNCHED, RUNNING, RUNNING(health), SUCCEEDED", c.spec.TaskID, states(evs))
		}
	}
}

func TestPorts(t *testing.T) {
	rec := newRecorder()
	b := newStarted(t, Config{Hosts: 2}, rec.sink)
	withPorts := func(id, host string, ports ...hostmgr.Port) hostmgr.LaunchSpec {
		s := spec(id, "sleep", "3600")
		s.Host, s.Ports = host, ports
		return s
	}
	cases := []struct {
		spec hostmgr.LaunchSpec
		want map[string]uint32
	}{
		{withPorts("a", "sim-00000", hostmgr.Port{Name: "http"}, hostmgr.Port{Name: "admin"}), map[string]uint32{"http": 31000, "admin": 31001}},
		// A fixed port is held first, so the chosen one goes around it.
		{withPorts("b", "sim-00000", hostmgr.Port{Name: "http"}, hostmgr.Port{Name: "fixed", Value: 31002}), map[string]uint32{"http": 31003, "fixed": 31002}},
		// Another host has its own numbers.
		{withPorts("c", "sim-00001", hostmgr.Port{Name: "http"}), map[string]uint32{"http": 31000}},
	}
	for _, c := range cases {
		launch(t, b, c.spec)
	}
	for _, c := range cases {
		evs := rec.waitFor(t, c.spec.TaskID, "RUNNING", func(evs []hostmgr.TaskEvent) bool { return len(evs) == 2 })
		for _, ev := range evs {
			if fmt.Sprint(ev.Ports) != fmt.Sprint(c.want) {
				t.Errorf("%s: %s event ports %v, want %v", c.spec.TaskID, ev.State, ev.Ports, c.want)
			}
		}
		if st, _ := b.Status(c.spec.TaskID); fmt.Sprint(st.Ports) != fmt.Sprint(c.want) {
			t.Errorf("%s: Status ports %v, want %v", c.spec.TaskID, st.Ports, c.want)
		}
	}
	// Ports of an ended run are free again.
	if err := b.Kill(context.Background(), "a", 0); err != nil {
		t.Fatal(err)
	}
	if evs := rec.waitTerminal(t, "a"); fmt.Sprint(evs[2].Ports) != fmt.Sprint(cases[0].want) {
		t.Errorf("terminal event ports %v", evs[2].Ports)
	}
	launch(t, b, withPorts("d", "sim-00000", hostmgr.Port{Name: "x"}, hostmgr.Port{Name: "y"}, hostmgr.Port{Name: "z"}))
	if st, _ := b.Status("d"); fmt.Sprint(st.Ports) != fmt.Sprint(map[string]uint32{"x": 31000, "y": 31001, "z": 31004}) {
		t.Errorf("ports after a release: %v", st.Ports)
	}
	for _, id := range []string{"b", "c", "d"} {
		if err := b.Kill(context.Background(), id, 0); err != nil {
			t.Fatal(err)
		}
		rec.waitTerminal(t, id)
	}
	b.mu.Lock()
	left := len(b.hostPorts)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("ports still held on %d hosts after every run ended", left)
	}
}

func TestLongRunningLaunchRejects(t *testing.T) {
	rec := newRecorder()
	b := newStarted(t, Config{Hosts: 2}, rec.sink)
	holder := spec("holder", "sleep", "3600")
	holder.Volume = &hostmgr.Volume{ID: "job-0"}
	launch(t, b, holder)
	for _, tc := range []struct {
		name string
		edit func(s *hostmgr.LaunchSpec)
		want string
	}{
		{"port without name", func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Value: 1}} }, "spec.ports[0].name"},
		{"port named twice", func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Name: "a"}, {Name: "A"}} }, "spec.ports[1].name"},
		{"port too large", func(s *hostmgr.LaunchSpec) { s.Ports = []hostmgr.Port{{Name: "a", Value: 65536}} }, "spec.ports[0].value"},
		{"check with neither", func(s *hostmgr.LaunchSpec) { s.HealthCheck = &pelotonv1.HealthCheck{} }, "spec.healthCheck"},
		{"http port unknown", func(s *hostmgr.LaunchSpec) {
			s.HealthCheck = &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}}
		}, "spec.healthCheck.http.port"},
		{"volume id", func(s *hostmgr.LaunchSpec) { s.Volume = &hostmgr.Volume{ID: "a/b"} }, "spec.volume.id"},
		{"volume in use", func(s *hostmgr.LaunchSpec) { s.Volume = &hostmgr.Volume{ID: "job-0"} }, "in use by run holder"},
	} {
		s := spec("bad", "sleep", "1")
		tc.edit(&s)
		if err := b.Launch(context.Background(), s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Launch = %v, want an error naming %s", tc.name, err, tc.want)
		}
		if _, err := b.Status("bad"); err == nil {
			t.Fatalf("%s: a refused launch left its task behind", tc.name)
		}
	}
	b.mu.Lock()
	left := len(b.hostPorts)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("refused launches left ports held on %d hosts", left)
	}
}

func TestVolumes(t *testing.T) {
	rec := newRecorder()
	b := newStarted(t, Config{Hosts: 2}, rec.sink)
	ctx := context.Background()
	s := spec("v-1", "sleep", "3600")
	s.Volume = &hostmgr.Volume{ID: "job-0", SizeMB: 100}
	launch(t, b, s)
	other := s
	other.TaskID, other.Host = "v-other", "sim-00001"
	launch(t, b, other) // the same ID on another host is another volume
	if got := b.Volumes("sim-00000"); fmt.Sprint(got) != "[job-0]" {
		t.Errorf("Volumes = %v", got)
	}
	if err := b.ReleaseVolume(ctx, "sim-00000", "job-0"); err == nil || !strings.Contains(err.Error(), "in use by run v-1") {
		t.Errorf("ReleaseVolume of a volume in use = %v", err)
	}
	for _, id := range []string{"v-1", "v-other"} {
		if err := b.Kill(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
		rec.waitTerminal(t, id)
	}
	// The volume outlives its run: the next run of the instance finds it.
	if got := b.Volumes("sim-00000"); fmt.Sprint(got) != "[job-0]" {
		t.Errorf("Volumes after the run ended = %v", got)
	}
	s.TaskID = "v-2"
	launch(t, b, s)
	if err := b.Kill(ctx, "v-2", 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, "v-2")

	for _, tc := range []struct{ host, id, want string }{
		{"sim-00009", "job-0", "host"},
		{"sim-00000", "", "volumeId"},
		{"sim-00000", "../x", "volumeId"},
	} {
		if err := b.ReleaseVolume(ctx, tc.host, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReleaseVolume(%q, %q) = %v, want an error naming %s", tc.host, tc.id, err, tc.want)
		}
	}
	for range 2 { // the second time it is already gone, which is fine
		if err := b.ReleaseVolume(ctx, "sim-00000", "job-0"); err != nil {
			t.Errorf("ReleaseVolume = %v", err)
		}
	}
	if got := b.Volumes("sim-00000"); len(got) != 0 {
		t.Errorf("Volumes after release = %v", got)
	}
	if got := b.Volumes("sim-00001"); fmt.Sprint(got) != "[job-0]" {
		t.Errorf("the other host's volume = %v, want it kept", got)
	}
}

// TestScaleHealth launches 50,000 health-checked tasks with ports over
// 5,000 hosts and checks that each reports HEALTHY exactly once when its
// delay has passed. It asserts counts only; cost is BenchmarkLaunchHealthChecked's.
func TestScaleHealth(t *testing.T) {
	const hosts, tasks = 5000, 50_000
	clock := clockwork.NewFakeClock()
	var healthEvents, runningEvents atomic.Int64
	allRunning, allHealthy := make(chan struct{}), make(chan struct{})
	b := newStarted(t, Config{Hosts: hosts, Clock: clock, Logger: slog.New(slog.DiscardHandler)}, func(ev hostmgr.TaskEvent) {
		switch {
		case ev.State == running && ev.Health == healthy:
			if healthEvents.Add(1) == tasks {
				close(allHealthy)
			}
		case ev.State == running:
			if runningEvents.Add(1) == tasks {
				close(allRunning)
			}
		}
	})
	ctx := context.Background()
	hc := &pelotonv1.HealthCheck{Command: []string{"true"}, InitialDelaySeconds: 30}
	ports := []hostmgr.Port{{Name: "http"}}
	for i := range tasks {
		s := hostmgr.LaunchSpec{TaskID: fmt.Sprintf("svc-%d", i), Host: hostName(i % hosts),
			Command: []string{"sleep", "3600"}, Ports: ports, HealthCheck: hc}
		if err := b.Launch(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-allRunning:
	case <-time.After(60 * time.Second):
		t.Fatalf("RUNNING: %d of %d", runningEvents.Load(), tasks)
	}
	if n := healthEvents.Load(); n != 0 {
		t.Fatalf("%d health events before the initial delay", n)
	}
	// All are due at the same instant: once one is reported, the scheduler
	// is past it and reports the rest without more time passing.
	advanceUntil(t, clock, time.Second, "a run is HEALTHY", func() bool { return healthEvents.Load() > 0 })
	select {
	case <-allHealthy:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d HEALTHY", healthEvents.Load(), tasks)
	}
	if st, err := b.Status("svc-49999"); err != nil || st.Health != healthy || st.Ports["http"] != 31009 {
		t.Errorf("Status of the last task = %+v, %v; want HEALTHY on port 31009 (the tenth on its host)", st, err)
	}
	b.mu.Lock()
	queued := len(b.health)
	b.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d health reports still queued", queued)
	}
}

// BenchmarkLaunchHealthChecked measures launch of long-running tasks with a
// port and a health check: b.N tasks, timed until the last one's HEALTHY
// event arrives.
func BenchmarkLaunchHealthChecked(bm *testing.B) {
	const hosts = 5000
	var n atomic.Int64
	done := make(chan struct{})
	target := int64(bm.N)
	b, err := New(Config{Hosts: hosts, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		bm.Fatal(err)
	}
	if err := b.Start(context.Background(), func(ev hostmgr.TaskEvent) {
		if ev.Health == healthy && n.Add(1) == target {
			close(done)
		}
	}); err != nil {
		bm.Fatal(err)
	}
	defer b.Close()
	ids := make([]string, bm.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d", i)
	}
	ctx := context.Background()
	cmd := []string{"sleep", "3600"}
	hc := &pelotonv1.HealthCheck{Command: []string{"true"}}
	ports := []hostmgr.Port{{Name: "http"}}
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := range bm.N {
		s := hostmgr.LaunchSpec{TaskID: ids[i], Host: b.hosts[i%hosts].Name, Command: cmd, Ports: ports, HealthCheck: hc}
		if err := b.Launch(ctx, s); err != nil {
			bm.Fatal(err)
		}
	}
	<-done
	bm.StopTimer()
	bm.ReportMetric(float64(bm.N)/bm.Elapsed().Seconds(), "tasks/s")
}
