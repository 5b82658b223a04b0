// Package backendtest is the conformance suite of hostmgr backends: one set
// of cases, driven only through hostmgr.Backend and its optional interfaces,
// that every backend (local, sim, kubernetes, and next mesos) runs from its
// own conformance_test.go against real parts (processes, a kube-apiserver
// with kwok nodes). What hostmgr and jobmgr assume of a backend is written
// down here once, as cases that can fail, instead of in per-backend copies.
//
// A backend's test passes a Harness: how to make backends over one shared
// state (a sandbox folder, a namespace with nodes), and the Capabilities it
// has. A capability a backend lacks is declared there, with the reason in
// the backend's test; its cases are skipped saying so, never silently.
//
// The contract the cases pin, beyond what hostmgr.Backend's comments say:
//   - Every event names the run and the host it was launched on and has a
//     time; a run's states never go back (LAUNCHED, RUNNING, one terminal
//     state; RUNNING may repeat to report health), and nothing follows the
//     terminal state.
//   - A command that exits 0 ends SUCCEEDED with exit code 0; one that exits
//     N ends FAILED with exit code N and reason "exit-nonzero".
//   - Kill ends a running run KILLED with reason "killed"; killing it again
//     is a no-op (nil).
//   - Kill, and Status, of a task the backend does not know (never launched,
//     or launched by an instance that did not survive a restart) return an
//     error wrapping hostmgr.ErrUnknownTask and send no event. jobmgr takes
//     that answer as "the run is gone" and records it LOST
//     (unknown-to-backend), so a backend must never give it for a run that
//     may still be running.
//   - After a restart (a new backend instance over the same state), a
//     backend whose runs outlive it reports their true states: a run still
//     running is RUNNING on its host and can be killed, a run that ended
//     before or during the restart has its terminal state. A backend whose
//     runs do not outlive it answers ErrUnknownTask for them.
//   - ApplyPartition puts a host in a partition: Hosts reports it there
//     (and, where hosts carry the peloton.io/partition label, with that
//     label), the other hosts stay where they were, runs on the host go on,
//     applying it again is a no-op, and an unknown host is an error.
//   - Named ports come back in the run's events and Status: a fixed value as
//     asked, the others chosen (non-zero), all different within the run.
//
// The commands the cases launch are in the tiny language that the sim
// backend and kwok's stages also understand (sleep S, true, false,
// exit N, unwrapped from sh -c), so that the local backend runs them for
// real and the others simulate them the same way.
//
// This package is for tests only: no component may import it.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Capabilities are the optional parts of the contract. A backend's test
// sets those it has; for each it leaves false, a comment there says why.
type Capabilities struct {
	// HealthChecks: a run's command health check is run, and its result
	// comes back as the Health of RUNNING events ("true" passes, "false"
	// fails).
	HealthChecks bool
	// Volumes: the backend implements hostmgr.VolumeReleaser, keeps a
	// volume across the runs that use it on a host, and refuses to release
	// one that a running run uses.
	Volumes bool
	// RunsOutliveBackend: closing the backend leaves its runs running, and
	// a new backend over the same state takes them over (kubernetes).
	// Without it, a new backend knows nothing of the old one's runs.
	RunsOutliveBackend bool
	// Partitions: the backend implements hostmgr.PartitionApplier, and a
	// host it was told to put in a partition is reported in it by Hosts.
	Partitions bool
	// AdoptsAfterCrash: runs outlive a crash of the control plane (not a
	// Close), and a new backend over the same state adopts them
	// (Harness.Crash simulates the crash). It reports a run still alive as
	// RUNNING, lists it, can kill it, and reports its end. Every end is
	// the true one, exit code included, whether the run ended while no
	// backend ran or after the new one adopted it: a crash never makes
	// work run twice. A kill asked for before the crash still ends the
	// run at its deadline.
	AdoptsAfterCrash bool
}

// Harness is what a backend's conformance test gives the suite.
type Harness struct {
	Caps Capabilities
	// Setup prepares one case's state (a sandbox folder; a namespace and
	// nodes of its own) and returns a function that makes a new, unstarted
	// backend over that state each time it is called. The suite starts and
	// closes the backends it makes; the second one of a case stands for
	// the backend after a restart of the control plane. Setup and the
	// function it returns fail the test on error.
	Setup func(t *testing.T) (newBackend func() hostmgr.Backend)
	// Crash, with AdoptsAfterCrash, drops a started backend the way a
	// kill -9 of the control plane would: its runs go on, and it reports,
	// records and signals nothing more.
	Crash func(hostmgr.Backend)
	// Timeout bounds each wait for an event (default 30s). It is generous:
	// passing tests never reach it, and no case asserts a duration.
	Timeout time.Duration
}

// Run runs every case of the suite, each as a parallel subtest with its
// own state.
func Run(t *testing.T, h Harness) {
	if h.Timeout == 0 {
		h.Timeout = 30 * time.Second
	}
	cases := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"HostsAppear", testHostsAppear},
		{"RunSucceeds", testRunSucceeds},
		{"RunFailsWithExitCode", testRunFails},
		{"Kill", testKill},
		{"KillUnknownTask", testKillUnknown},
		{"EventsAfterRestart", testRestart},
		{"Ports", testPorts},
		{"HealthChecks", testHealthChecks},
		{"Volumes", testVolumes},
		{"PartitionChanges", testPartitionChanges},
		{"RunsListed", testRunsListed},
		{"AdoptAfterCrash", testAdoptAfterCrash},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h)
		})
	}
}

// instance is one started backend of a case and the events it sent.
type instance struct {
	t       *testing.T
	h       Harness
	b       hostmgr.Backend
	mu      sync.Mutex
	events  map[string][]hostmgr.TaskEvent
	wake    chan struct{} // closed and replaced on every event
	closeMu sync.Mutex
	closed  bool
}

// start makes a backend with newBackend, starts it with a recording sink,
// and closes it when the test ends (unless the case closed it already).
func start(t *testing.T, h Harness, newBackend func() hostmgr.Backend) *instance {
	t.Helper()
	in := &instance{t: t, h: h, b: newBackend(), events: map[string][]hostmgr.TaskEvent{}, wake: make(chan struct{})}
	// The backend's context lives as long as the backend, as hostmgr's
	// does; it ends after Close (cleanups run last-registered first).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := in.b.Start(ctx, in.sink); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := in.close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return in
}

func (in *instance) close() error {
	in.closeMu.Lock()
	defer in.closeMu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	return in.b.Close()
}

func (in *instance) sink(ev hostmgr.TaskEvent) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.events[ev.TaskID] = append(in.events[ev.TaskID], ev)
	close(in.wake)
	in.wake = make(chan struct{})
}

func (in *instance) of(id string) []hostmgr.TaskEvent {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]hostmgr.TaskEvent(nil), in.events[id]...)
}

// waitFor waits until cond holds for the run's events and returns them.
func (in *instance) waitFor(id, what string, cond func([]hostmgr.TaskEvent) bool) []hostmgr.TaskEvent {
	in.t.Helper()
	deadline := time.NewTimer(in.h.Timeout)
	defer deadline.Stop()
	for {
		in.mu.Lock()
		evs := append([]hostmgr.TaskEvent(nil), in.events[id]...)
		wake := in.wake
		in.mu.Unlock()
		if cond(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-deadline.C:
			in.t.Fatalf("run %s: no %s within %s; events so far: %s", id, what, in.h.Timeout, states(evs))
		}
	}
}

// waitState waits for an event of the run in state s.
func (in *instance) waitState(id string, s pelotonv1.TaskState) []hostmgr.TaskEvent {
	in.t.Helper()
	return in.waitFor(id, s.String(), func(evs []hostmgr.TaskEvent) bool {
		for _, ev := range evs {
			if ev.State == s {
				return true
			}
		}
		return false
	})
}

// waitEnd waits for the run's terminal event, checks the run's events
// against the contract, and returns the terminal one.
func (in *instance) waitEnd(spec hostmgr.LaunchSpec) hostmgr.TaskEvent {
	in.t.Helper()
	evs := in.waitFor(spec.TaskID, "terminal event", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && terminal(evs[len(evs)-1].State)
	})
	checkEvents(in.t, spec, evs)
	return evs[len(evs)-1]
}

func (in *instance) launch(spec hostmgr.LaunchSpec) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), in.h.Timeout)
	defer cancel()
	if err := in.b.Launch(ctx, spec); err != nil {
		in.t.Fatalf("Launch %s: %v", spec.TaskID, err)
	}
}

func (in *instance) kill(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), in.h.Timeout)
	defer cancel()
	return in.b.Kill(ctx, id, time.Second)
}

// host is the first host the backend reports; every case launches there.
func (in *instance) host() string {
	in.t.Helper()
	hs := in.b.Hosts()
	if len(hs) == 0 {
		in.t.Fatal("the backend reports no hosts")
	}
	return hs[0].Name
}

// spec is a run of instance 0, run 1, of job "conform-<name>" on host.
func spec(name, host string, cmd ...string) hostmgr.LaunchSpec {
	job := "conform-" + name
	return hostmgr.LaunchSpec{TaskID: job + "-0-1", JobID: job, InstanceID: 0, RunID: 1, Host: host, Command: cmd,
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 64}, KillGrace: time.Second}
}

func terminal(s pelotonv1.TaskState) bool {
	switch s {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST,
		pelotonv1.TaskState_PREEMPTED:
		return true
	}
	return false
}

// rank orders a run's states; a run's events never go to a lower rank.
func rank(s pelotonv1.TaskState) int {
	switch s {
	case pelotonv1.TaskState_LAUNCHED:
		return 1
	case pelotonv1.TaskState_RUNNING:
		return 2
	}
	if terminal(s) {
		return 3
	}
	return 0
}

func states(evs []hostmgr.TaskEvent) string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.State.String())
	}
	return "[" + strings.Join(s, " ") + "]"
}

// checkEvents checks one run's events against the contract: each names
// the run and its host and has a time; states never go back; exactly one
// terminal event, the last.
func checkEvents(t *testing.T, spec hostmgr.LaunchSpec, evs []hostmgr.TaskEvent) {
	t.Helper()
	prev := 0
	for i, ev := range evs {
		if ev.TaskID != spec.TaskID || ev.Host != spec.Host || ev.Time.IsZero() {
			t.Errorf("run %s: event %d = %+v, want its task ID, host %s and a time", spec.TaskID, i, ev, spec.Host)
		}
		r := rank(ev.State)
		if r == 0 || r < prev || (r == 3 && prev == 3) {
			t.Fatalf("run %s: events %s: states go back, repeat the end, or are not a run's", spec.TaskID, states(evs))
		}
		prev = r
	}
	if len(evs) == 0 || !terminal(evs[len(evs)-1].State) {
		t.Fatalf("run %s: events %s, want them to end in a terminal state", spec.TaskID, states(evs))
	}
}

func testHostsAppear(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	if in.b.Name() == "" {
		t.Error("Name is empty")
	}
	hs := in.b.Hosts()
	if len(hs) == 0 {
		t.Fatal("no hosts after Start")
	}
	seen := map[string]bool{}
	for _, hi := range hs {
		if hi.Name == "" || seen[hi.Name] {
			t.Errorf("host %+v: empty or repeated name", hi)
		}
		seen[hi.Name] = true
		if hi.Partition == "" {
			t.Errorf("host %s: no partition", hi.Name)
		}
		if hi.Capacity.MilliCPU <= 0 || hi.Capacity.MemoryMB <= 0 {
			t.Errorf("host %s: capacity %v, want CPU and memory", hi.Name, hi.Capacity)
		}
	}
}

func testRunSucceeds(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	s := spec("ok", in.host(), "sleep", "1")
	in.launch(s)
	end := in.waitEnd(s)
	evs := in.of(s.TaskID)
	if evs[0].State != pelotonv1.TaskState_LAUNCHED {
		t.Errorf("events %s, want LAUNCHED first", states(evs))
	}
	sawRunning := false
	for _, ev := range evs {
		sawRunning = sawRunning || ev.State == pelotonv1.TaskState_RUNNING
	}
	if !sawRunning || end.State != pelotonv1.TaskState_SUCCEEDED || end.ExitCode != 0 {
		t.Fatalf("events %s ending %+v, want LAUNCHED, RUNNING, SUCCEEDED with exit code 0", states(evs), end)
	}
	if st, err := in.b.Status(s.TaskID); err != nil || st.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status = %+v, %v; want SUCCEEDED", st, err)
	}
	// A task ID is one run forever: launching it again is refused.
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	if err := in.b.Launch(ctx, s); err == nil {
		t.Error("a second Launch of the same task ID succeeded")
	}
}

func testRunFails(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	s := spec("fail", in.host(), "sh", "-c", "exit 3")
	in.launch(s)
	end := in.waitEnd(s)
	if end.State != pelotonv1.TaskState_FAILED || end.ExitCode != 3 || end.Reason != "exit-nonzero" {
		t.Fatalf("end %+v, want FAILED, exit code 3, reason exit-nonzero", end)
	}
	if st, err := in.b.Status(s.TaskID); err != nil || st.State != pelotonv1.TaskState_FAILED || st.ExitCode != 3 {
		t.Errorf("Status = %+v, %v; want FAILED with exit code 3", st, err)
	}
}

func testKill(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	s := spec("kill", in.host(), "sleep", "3600")
	in.launch(s)
	in.waitState(s.TaskID, pelotonv1.TaskState_RUNNING)
	if err := in.kill(s.TaskID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if end := in.waitEnd(s); end.State != pelotonv1.TaskState_KILLED || end.Reason != "killed" {
		t.Fatalf("end %+v, want KILLED, reason killed", end)
	}
	if st, err := in.b.Status(s.TaskID); err != nil || st.State != pelotonv1.TaskState_KILLED {
		t.Errorf("Status = %+v, %v; want KILLED", st, err)
	}
	if err := in.kill(s.TaskID); err != nil {
		t.Errorf("Kill of a finished run = %v, want nil", err)
	}
}

func testKillUnknown(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	const id = "conform-never-0-1"
	if err := in.kill(id); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("Kill of an unknown task = %v, want ErrUnknownTask", err)
	}
	if st, err := in.b.Status(id); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("Status of an unknown task = %+v, %v; want ErrUnknownTask", st, err)
	}
	// A run launched afterwards ends with its own events only: the unknown
	// task got none in the meantime (events of one sink are in order).
	s := spec("after-unknown", in.host(), "true")
	in.launch(s)
	in.waitEnd(s)
	if evs := in.of(id); len(evs) != 0 {
		t.Errorf("the unknown task got events %s", states(evs))
	}
}

func testRestart(t *testing.T, h Harness) {
	newBackend := h.Setup(t)
	old := start(t, h, newBackend)
	host := old.host()
	done := spec("done", host, "true")
	ending := spec("ending", host, "sleep", "2")
	live := spec("live", host, "sleep", "3600")
	old.launch(done)
	old.waitEnd(done)
	old.launch(ending)
	old.launch(live)
	old.waitState(ending.TaskID, pelotonv1.TaskState_RUNNING)
	old.waitState(live.TaskID, pelotonv1.TaskState_RUNNING)
	if err := old.close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	in := start(t, h, newBackend)
	if !h.Caps.RunsOutliveBackend {
		// Close ended every run: the new backend knows nothing of them, or
		// knows how they ended (local remembers ends on disk); never that
		// they run.
		for _, id := range []string{done.TaskID, ending.TaskID, live.TaskID} {
			if st, err := in.b.Status(id); !errors.Is(err, hostmgr.ErrUnknownTask) && (err != nil || !terminal(st.State)) {
				t.Errorf("Status(%s) after a restart = %+v, %v; want ErrUnknownTask or its end (its runs do not outlive Close)", id, st, err)
			}
		}
		if err := in.kill(live.TaskID); err != nil && !errors.Is(err, hostmgr.ErrUnknownTask) {
			t.Errorf("Kill of the old backend's run = %v, want ErrUnknownTask or a no-op", err)
		}
		if evs := in.of(live.TaskID); len(evs) != 0 {
			t.Errorf("the old backend's run got events from the new one: %s", states(evs))
		}
		return
	}

	if st, err := in.b.Status(done.TaskID); err != nil || st.State != pelotonv1.TaskState_SUCCEEDED || st.Host != host {
		t.Errorf("Status of a run that ended before the restart = %+v, %v; want SUCCEEDED on %s", st, err, host)
	}
	if st, err := in.b.Status(live.TaskID); err != nil || st.State != pelotonv1.TaskState_RUNNING || st.Host != host {
		t.Fatalf("Status of a running run after the restart = %+v, %v; want RUNNING on %s", st, err, host)
	}
	// The run that ends across the restart: the new backend finds out.
	testutil.Eventually(t, h.Timeout, "Status of a run that ends across the restart SUCCEEDED", func() error {
		st, err := in.b.Status(ending.TaskID)
		if err == nil && st.State == pelotonv1.TaskState_SUCCEEDED {
			return nil
		}
		if err != nil || st.State != pelotonv1.TaskState_RUNNING {
			t.Fatalf("Status of a run that ends across the restart = %+v, %v; want RUNNING, then SUCCEEDED", st, err)
		}
		return fmt.Errorf("still %s", st.State)
	})
	// The new backend can stop the old one's run, and says so in its events.
	if err := in.kill(live.TaskID); err != nil {
		t.Fatalf("Kill of a run adopted after the restart: %v", err)
	}
	evs := in.waitState(live.TaskID, pelotonv1.TaskState_KILLED)
	if last := evs[len(evs)-1]; last.State != pelotonv1.TaskState_KILLED || last.Host != host {
		t.Errorf("events of the adopted run after Kill = %s, want them to end KILLED on %s", states(evs), host)
	}
}

func testPorts(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	fixed := freePort(t)
	s := spec("ports", in.host(), "sleep", "3600")
	s.Ports = []hostmgr.Port{{Name: "http"}, {Name: "admin", Value: fixed}, {Name: "grpc"}}
	in.launch(s)
	evs := in.waitState(s.TaskID, pelotonv1.TaskState_RUNNING)
	check := func(what string, ports map[string]uint32) {
		t.Helper()
		used := map[uint32]string{}
		for _, p := range s.Ports {
			v := ports[p.Name]
			if v == 0 || p.Value != 0 && v != p.Value || used[v] != "" {
				t.Errorf("%s: ports %v; want %v, the zero ones chosen, all different", what, ports, s.Ports)
				return
			}
			used[v] = p.Name
		}
	}
	for _, ev := range evs {
		check(ev.State.String()+" event", ev.Ports)
	}
	st, err := in.b.Status(s.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	check("Status", st.Ports)
	if err := in.kill(s.TaskID); err != nil {
		t.Fatal(err)
	}
	check("terminal event", in.waitEnd(s).Ports)
}

// freePort is a port nothing on this machine listens on now, for the fixed
// port of a run (the local backend binds it for real).
func freePort(t *testing.T) uint32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port)
}

func testHealthChecks(t *testing.T, h Harness) {
	if !h.Caps.HealthChecks {
		t.Skip("the backend declares no health checks (Capabilities.HealthChecks)")
	}
	in := start(t, h, h.Setup(t))
	host := in.host()
	good := spec("healthy", host, "sleep", "3600")
	good.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"true"}, IntervalSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}
	bad := spec("unhealthy", host, "sleep", "3600")
	bad.HealthCheck = &pelotonv1.HealthCheck{Command: []string{"false"}, IntervalSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}
	in.launch(good)
	in.launch(bad)
	health := func(want pelotonv1.HealthState) func([]hostmgr.TaskEvent) bool {
		return func(evs []hostmgr.TaskEvent) bool {
			for _, ev := range evs {
				if ev.State == pelotonv1.TaskState_RUNNING && ev.Health == want {
					return true
				}
			}
			return false
		}
	}
	in.waitFor(good.TaskID, "RUNNING event that says HEALTHY", health(pelotonv1.HealthState_HEALTHY))
	in.waitFor(bad.TaskID, "RUNNING event that says UNHEALTHY", health(pelotonv1.HealthState_UNHEALTHY))
	if evs := in.of(good.TaskID); health(pelotonv1.HealthState_UNHEALTHY)(evs) {
		t.Errorf("a run whose check passes was reported UNHEALTHY: %+v", evs)
	}
	for _, s := range []hostmgr.LaunchSpec{good, bad} {
		if err := in.kill(s.TaskID); err != nil {
			t.Fatal(err)
		}
		in.waitEnd(s)
	}
}

func testVolumes(t *testing.T, h Harness) {
	if !h.Caps.Volumes {
		t.Skip("the backend declares no volume support in this harness (Capabilities.Volumes)")
	}
	in := start(t, h, h.Setup(t))
	vr, ok := in.b.(hostmgr.VolumeReleaser)
	if !ok {
		t.Fatal("Capabilities.Volumes is set, but the backend is no hostmgr.VolumeReleaser")
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	host := in.host()
	vol := &hostmgr.Volume{ID: "conform-vol-0", SizeMB: 10, MountPath: "/data"}
	first := spec("vol", host, "sleep", "3600")
	first.Volume = vol
	in.launch(first)
	in.waitState(first.TaskID, pelotonv1.TaskState_RUNNING)
	if err := vr.ReleaseVolume(ctx, host, vol.ID); err == nil {
		t.Error("ReleaseVolume of a volume a running run uses succeeded")
	}
	// While it is in use, another run cannot take it.
	other := spec("vol-other", host, "sleep", "3600")
	other.Volume = vol
	if err := in.b.Launch(ctx, other); err == nil {
		t.Error("a second run took a volume in use")
	}
	if err := in.kill(first.TaskID); err != nil {
		t.Fatal(err)
	}
	in.waitEnd(first)
	// The next run of the instance finds it.
	next := spec("vol", host, "sleep", "3600")
	next.TaskID, next.RunID, next.Volume = "conform-vol-0-2", 2, vol
	in.launch(next)
	in.waitState(next.TaskID, pelotonv1.TaskState_RUNNING)
	if err := in.kill(next.TaskID); err != nil {
		t.Fatal(err)
	}
	in.waitEnd(next)
	for i := range 2 { // the second time it is already gone, which is fine
		if err := vr.ReleaseVolume(ctx, host, vol.ID); err != nil {
			t.Errorf("ReleaseVolume (%d) = %v", i+1, err)
		}
	}
}

// partitionLabel is the label in which backends that report labels (sim,
// kubernetes) carry a host's partition.
const partitionLabel = "peloton.io/partition"

func testPartitionChanges(t *testing.T, h Harness) {
	if !h.Caps.Partitions {
		t.Skip("the backend keeps no partitions of its own (Capabilities.Partitions)")
	}
	in := start(t, h, h.Setup(t))
	pa, ok := in.b.(hostmgr.PartitionApplier)
	if !ok {
		t.Fatal("Capabilities.Partitions is set, but the backend is no hostmgr.PartitionApplier")
	}
	hs := in.b.Hosts()
	if len(hs) < 2 {
		t.Fatalf("%d hosts; the case needs two", len(hs))
	}
	moved, kept := hs[len(hs)-1], hs[0]
	target := "conformance-" + moved.Partition
	s := spec("stays", moved.Name, "sleep", "3600")
	in.launch(s)
	in.waitState(s.TaskID, pelotonv1.TaskState_RUNNING)

	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	for i := 0; i < 2; i++ { // the second time must be a no-op
		if err := pa.ApplyPartition(ctx, moved.Name, target); err != nil {
			t.Fatalf("ApplyPartition(%s, %s) #%d: %v", moved.Name, target, i+1, err)
		}
	}
	// Backends that watch their hosts (kubernetes) report the change once
	// it comes back to them; wait for it, bounded.
	byName := func() map[string]hostmgr.HostInfo {
		out := map[string]hostmgr.HostInfo{}
		for _, hi := range in.b.Hosts() {
			out[hi.Name] = hi
		}
		return out
	}
	testutil.Eventually(t, h.Timeout, fmt.Sprintf("host %s reported in partition %q after ApplyPartition", moved.Name, target), func() error {
		if p := byName()[moved.Name].Partition; p != target {
			return fmt.Errorf("reported in partition %q", p)
		}
		return nil
	})
	now := byName()
	if l, has := now[moved.Name].Labels[partitionLabel]; has && l != target {
		t.Errorf("host %s: label %s=%q, want %q", moved.Name, partitionLabel, l, target)
	}
	if now[kept.Name].Partition != kept.Partition {
		t.Errorf("host %s: partition %q, want it left at %q", kept.Name, now[kept.Name].Partition, kept.Partition)
	}
	if evs := in.of(s.TaskID); terminal(evs[len(evs)-1].State) {
		t.Errorf("run on the moved host ended: %s", states(evs))
	}
	if err := pa.ApplyPartition(ctx, "no-such-host", target); err == nil {
		t.Error("ApplyPartition of an unknown host succeeded")
	}
	if err := in.kill(s.TaskID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	in.waitEnd(s)
}

// testRunsListed: every backend lists the runs it holds (hostmgr.RunLister),
// with host and resources, and not once they ended. jobmgr's
// reconciliation kills the runs it does not know from this list.
func testRunsListed(t *testing.T, h Harness) {
	in := start(t, h, h.Setup(t))
	rl, ok := in.b.(hostmgr.RunLister)
	if !ok {
		t.Fatalf("%T does not implement hostmgr.RunLister", in.b)
	}
	s := spec("listed", in.host(), "sleep", "3600")
	in.launch(s)
	in.waitState(s.TaskID, pelotonv1.TaskState_RUNNING)
	found := false
	for _, r := range rl.Runs() {
		if r.TaskID != s.TaskID {
			continue
		}
		found = true
		if r.Host != s.Host || r.Resources != s.Resources || r.Last.State != pelotonv1.TaskState_RUNNING {
			t.Errorf("Runs lists %+v; want host %s, resources %v, RUNNING", r, s.Host, s.Resources)
		}
	}
	if !found {
		t.Fatalf("Runs does not list the running run %s", s.TaskID)
	}
	if err := in.kill(s.TaskID); err != nil {
		t.Fatal(err)
	}
	in.waitEnd(s)
	for _, r := range rl.Runs() {
		if r.TaskID == s.TaskID {
			t.Errorf("Runs still lists %s after it ended: %+v", s.TaskID, r)
		}
	}
}

// testAdoptAfterCrash: after a crash of the control plane, a new backend
// knows the old one's runs: one that ended before the crash keeps its end;
// one that ended while no backend ran and one that ends after the new
// backend started keep their true ends (exit codes included); a run killed
// with a grace period just before the crash is killed at its deadline all
// the same (while no backend runs) and reported KILLED; and one still
// running is RUNNING, listed, and can be killed.
func testAdoptAfterCrash(t *testing.T, h Harness) {
	if !h.Caps.AdoptsAfterCrash {
		t.Skip("the backend's runs do not outlive a crash of the control plane, or it has no way to simulate one (see its conformance test)")
	}
	newBackend := h.Setup(t)
	old := start(t, h, newBackend)
	host := old.host()
	done := spec("crash-done", host, "true")
	gap := spec("crash-gap", host, "sleep", "1")
	gapFail := spec("crash-gap-fail", host, "sh", "-c", "sleep 1; exit 3")
	ending := spec("crash-ending", host, "sh", "-c", "sleep 4; exit 5")
	killing := spec("crash-killing", host, "sh", "-c", "trap '' TERM; while :; do sleep 1; done")
	live := spec("crash-live", host, "sleep", "3600")
	old.launch(done)
	old.waitEnd(done)
	for _, s := range []hostmgr.LaunchSpec{gap, gapFail, ending, killing, live} {
		old.launch(s)
		old.waitState(s.TaskID, pelotonv1.TaskState_RUNNING)
	}
	// The run ignores SIGTERM: only the SIGKILL at the deadline, due
	// while no backend runs, ends it.
	if err := old.b.Kill(context.Background(), killing.TaskID, time.Second); err != nil {
		t.Fatal(err)
	}
	old.closeMu.Lock()
	old.closed = true // crashed: nothing is left to close
	old.closeMu.Unlock()
	h.Crash(old.b)
	// The gap: runs end while no backend runs, so nothing runs that could
	// say when; its length is the scenario.
	time.Sleep(2 * time.Second)

	in := start(t, h, newBackend)
	if st, err := in.b.Status(done.TaskID); err != nil || st.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status of a run that ended before the crash = %+v, %v; want SUCCEEDED", st, err)
	}
	if st, err := in.b.Status(gap.TaskID); err != nil || st.State != pelotonv1.TaskState_SUCCEEDED || st.ExitCode != 0 {
		t.Errorf("Status of a run that succeeded while no backend ran = %+v, %v; want SUCCEEDED", st, err)
	}
	if st, err := in.b.Status(gapFail.TaskID); err != nil || st.State != pelotonv1.TaskState_FAILED || st.ExitCode != 3 {
		t.Errorf("Status of a run that exited 3 while no backend ran = %+v, %v; want FAILED with exit code 3", st, err)
	}
	if st, err := in.b.Status(killing.TaskID); err != nil || st.State != pelotonv1.TaskState_KILLED {
		t.Errorf("Status of a run killed with a 1s grace period just before the crash = %+v, %v; want KILLED", st, err)
	}
	if st, err := in.b.Status(live.TaskID); err != nil || st.State != pelotonv1.TaskState_RUNNING || st.Host != host {
		t.Fatalf("Status of a live run after the crash = %+v, %v; want RUNNING on %s", st, err, host)
	}
	listed := map[string]hostmgr.RunInfo{}
	for _, r := range in.b.(hostmgr.RunLister).Runs() {
		listed[r.TaskID] = r
	}
	if r, ok := listed[live.TaskID]; !ok || r.Host != host || r.Resources != live.Resources {
		t.Errorf("Runs after the crash lists %+v for %s; want it on %s with %v", r, live.TaskID, host, live.Resources)
	}
	if _, ok := listed[gap.TaskID]; ok {
		t.Errorf("Runs lists %s, which ended", gap.TaskID)
	}
	if err := in.b.Launch(context.Background(), live); err == nil {
		t.Errorf("a second Launch of the adopted run %s was accepted: two live runs of one task", live.TaskID)
	}
	end := in.waitFor(ending.TaskID, "the end of a run adopted while it ran", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && terminal(evs[len(evs)-1].State)
	})
	if last := end[len(end)-1]; last.State != pelotonv1.TaskState_FAILED || last.ExitCode != 5 || last.Host != host {
		t.Errorf("end of an adopted run that exited 5 = %+v; want FAILED with exit code 5 on %s", last, host)
	}
	if err := in.kill(live.TaskID); err != nil {
		t.Fatalf("Kill of an adopted run: %v", err)
	}
	evs := in.waitState(live.TaskID, pelotonv1.TaskState_KILLED)
	if last := evs[len(evs)-1]; last.Host != host {
		t.Errorf("KILLED event of the adopted run on %q, want %s", last.Host, host)
	}
}
