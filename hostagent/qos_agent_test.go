package hostagent

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeQoSRuns is a QoSRuns (and, with host set, a HostSource) whose k-th
// reading (from 1) is runs(k) and host(k); like fakeMachine, its samples
// carry their own times, so usage is exact. Kill records the runs killed.
type fakeQoSRuns struct {
	host func(k int) (Sample, error) // nil for a virtual host
	runs func(k int) (map[string]RunInfo, error)

	mu       sync.Mutex
	k        int
	lastRead time.Time // when the latest reading was taken, by the real clock
	kills    []fakeKill
}

type fakeKill struct {
	id        string
	sinceRead time.Duration // from the reading that decided it
}

func (f *fakeQoSRuns) Read(time.Time) (Sample, error) {
	f.mu.Lock()
	f.k++
	k := f.k
	f.mu.Unlock()
	return f.host(k)
}

func (f *fakeQoSRuns) Source() string { return "sim" }

func (f *fakeQoSRuns) RunInfo(time.Time) (map[string]RunInfo, error) {
	f.mu.Lock()
	if f.host == nil {
		f.k++
	}
	k := f.k
	f.lastRead = time.Now()
	f.mu.Unlock()
	return f.runs(k)
}

func (f *fakeQoSRuns) Runs(now time.Time) (map[string]Sample, error) {
	panic("an agent with QoS on must read RunInfo, once per interval, not Runs")
}

func (f *fakeQoSRuns) Kill(id string, _ RunInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, fakeKill{id: id, sinceRead: time.Since(f.lastRead)})
	return nil
}

func (f *fakeQoSRuns) readings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.k
}

func (f *fakeQoSRuns) killed() []fakeKill {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.kills)
}

var (
	_ QoSRuns    = (*fakeQoSRuns)(nil)
	_ HostSource = (*fakeQoSRuns)(nil)
)

// fakeInfo is a run at reading k that has used cores all along.
func fakeInfo(k int, cores float64, revocable bool) RunInfo {
	return RunInfo{Sample: Sample{CPUSeconds: cores * float64(k), MemUsed: 10 * miB, Time: at(k)},
		Revocable: revocable, Started: time.Second}
}

// hotRuns: a revocable run "r" and another "n", a core each: 2 cores on
// qosConfig's 1-core host, hot at every reading.
func hotRuns(k int) (map[string]RunInfo, error) {
	return map[string]RunInfo{"r": fakeInfo(k, 1, true), "n": fakeInfo(k, 1, false)}, nil
}

// qosConfig turns QoS on over cfg: a 1-core host, hot at half a core,
// cooled below 0.3, after 2 hot readings.
func qosConfig(cfg Config, runs QoSRuns) Config {
	cfg.Runs = runs
	cfg.QoS = &QoSPolicy{CPUHigh: 0.5, CPULow: 0.3, Samples: 2}
	cfg.Capacity = Resources{CPU: 1, MemoryMB: 1024}
	return cfg
}

// TestAgentQoSNoKillOnFailedReadings: a host that is hot at every reading
// that succeeds, but whose readings fail every other time, never has two
// hot readings in a row: nothing is killed, nothing revoked.
func TestAgentQoSNoKillOnFailedReadings(t *testing.T) {
	everyOther := func(k int) bool { return k > 1 && k%2 == 1 }
	for _, tt := range []struct {
		name string
		f    *fakeQoSRuns
	}{
		{"runs fail", &fakeQoSRuns{runs: func(k int) (map[string]RunInfo, error) {
			if everyOther(k) {
				return nil, errFake
			}
			return hotRuns(k)
		}}},
		{"host fails", &fakeQoSRuns{
			host: func(k int) (Sample, error) {
				if everyOther(k) {
					return Sample{}, errFake
				}
				return Sample{CPUSeconds: 2 * float64(k), MemUsed: 100 * miB, Time: at(k)}, nil
			},
			runs: hotRuns,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			_, addr := serveAgents(t, rec, "127.0.0.1:0")
			cfg := testConfig(dial(t, addr), &fakeMachine{virtual: tt.f.host == nil})
			if tt.f.host != nil {
				cfg.Source = tt.f
			}
			a, stop := start(t, qosConfig(cfg, tt.f))
			testutil.Eventually(t, 10*time.Second, "20 readings", func() bool { return tt.f.readings() >= 20 })
			stop()
			if k := tt.f.killed(); len(k) != 0 {
				t.Errorf("killed %+v, want none: no two good readings in a row", k)
			}
			if st := a.Stats(); st.QoSKills != 0 || st.Acked == 0 {
				t.Errorf("Stats = %+v, want reports acknowledged and no kill", st)
			}
			for _, r := range rec.reports() {
				if len(r.GetRevoked()) != 0 {
					t.Errorf("report %d revokes %q", r.GetSequence(), r.GetRevoked())
				}
			}
		})
	}
}

// TestAgentQoSStaleReading: a report over more than a few intervals (the
// agent stalled) is no fresh reading.
func TestAgentQoSStaleReading(t *testing.T) {
	f := &fakeQoSRuns{runs: hotRuns}
	cfg := qosConfig(testConfig(pelotonv1.NewHostAgentServiceClient(nil), &fakeMachine{virtual: true}), f)
	cfg.Interval = time.Second
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		interval time.Duration
		fresh    bool
	}{
		{time.Second, true}, {2 * time.Second, true}, {3 * time.Second, true}, {3*time.Second + 1, false}, {time.Hour, false},
	} {
		if got := a.qosInput(Resources{CPU: 1}, nil, tt.interval).Fresh; got != tt.fresh {
			t.Errorf("a report over %s: fresh %v, want %v", tt.interval, got, tt.fresh)
		}
	}
}

// TestAgentQoSWithoutControlPlane: with no stack to tell, the revocable
// run is killed all the same, once QoSAckWait has passed; every later
// report still names it, until one is acknowledged.
func TestAgentQoSWithoutControlPlane(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now

	f := &fakeQoSRuns{runs: hotRuns}
	cfg := qosConfig(testConfig(dial(t, addr), &fakeMachine{virtual: true}), f)
	cfg.QoSAckWait = 300 * time.Millisecond
	a, stop := start(t, cfg)
	testutil.Eventually(t, 10*time.Second, "the kill", func() bool { return len(f.killed()) > 0 })
	k := f.killed()[0]
	if k.id != "r" {
		t.Errorf("killed %q, want r, the revocable run", k.id)
	}
	if k.sinceRead < cfg.QoSAckWait {
		t.Errorf("killed %s after the reading that decided it, want at least QoSAckWait %s", k.sinceRead, cfg.QoSAckWait)
	}
	st := a.Stats()
	if st.QoSKills != 1 || st.LastQoSKill.IsZero() || st.Acked != 0 {
		t.Errorf("Stats = %+v, want one kill, no ack", st)
	}
	killedIn := st.LastReport.GetSequence()
	testutil.Eventually(t, 10*time.Second, "a report after the kill", func() bool { return a.Stats().LastReport.GetSequence() > killedIn })
	stop()
	if got := a.Stats().LastReport.GetRevoked(); !slices.Equal(got, []string{"r"}) {
		t.Errorf("a later report revokes %q, want [r]: never acknowledged, so named again", got)
	}
	if got := a.Stats().LastReport.GetRevokedResources(); !maps.Equal(got, map[string]string{"r": ResourceCPU}) {
		t.Errorf("the report says the runs were revoked for %v, want r for cpu", got)
	}
	// The fake's r stays "alive" but is not chosen again while found.
	if k := f.killed(); len(k) != 1 {
		t.Errorf("kills %+v, want one", k)
	}
}

// TestAgentQoSMemoryKillsLargestRevocable: a virtual host whose runs hold
// more than its memory's high mark: the agent kills the revocable run
// holding the most (one kill is enough), not the younger smaller one, nor
// the run that is not revocable; its reports name the run revoked for
// memory, and its stats count a memory kill.
func TestAgentQoSMemoryKillsLargestRevocable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // no stack: the reports stay unacknowledged, so each names the revocation

	hold := func(k int, mib uint64, revocable bool, started time.Duration) RunInfo {
		return RunInfo{Sample: Sample{CPUSeconds: 0.01 * float64(k), MemUsed: mib * miB, Time: at(k)}, Revocable: revocable, Started: started}
	}
	// 1000 MiB of 1024: hot at 0.8; below 0.6 (614 MiB) once big's 600 go.
	var f *fakeQoSRuns
	f = &fakeQoSRuns{runs: func(k int) (map[string]RunInfo, error) {
		runs := map[string]RunInfo{
			"big":   hold(k, 600, true, time.Second),
			"small": hold(k, 100, true, 9*time.Second), // the youngest
			"n":     hold(k, 300, false, 5*time.Second),
		}
		for _, kill := range f.killed() {
			delete(runs, kill.id) // gone, and its memory with it
		}
		return runs, nil
	}}
	cfg := testConfig(dial(t, addr), &fakeMachine{virtual: true})
	cfg.Runs = f
	cfg.QoS = &QoSPolicy{MemHigh: 0.8, MemLow: 0.6, Samples: 2}
	cfg.Capacity = Resources{CPU: 1, MemoryMB: 1024}
	cfg.QoSAckWait = 100 * time.Millisecond
	a, stop := start(t, cfg)
	testutil.Eventually(t, 10*time.Second, "the kill", func() bool { return len(f.killed()) > 0 })
	killedIn := a.Stats().LastReport.GetSequence()
	testutil.Eventually(t, 10*time.Second, "a report after the kill", func() bool { return a.Stats().LastReport.GetSequence() > killedIn })
	stop()
	if k := f.killed(); len(k) != 1 || k[0].id != "big" {
		t.Errorf("killed %+v, want big alone", k)
	}
	st := a.Stats()
	if st.QoSKills != 1 || st.QoSMemoryKills != 1 {
		t.Errorf("Stats = %+v, want one kill, for memory", st)
	}
	if got := st.LastReport.GetRevokedResources(); !maps.Equal(got, map[string]string{"big": ResourceMemory}) {
		t.Errorf("the report says the runs were revoked for %v, want big for memory", got)
	}
}

func TestAgentQoSConfig(t *testing.T) {
	client := pelotonv1.NewHostAgentServiceClient(nil)
	f := &fakeQoSRuns{runs: hotRuns}
	tree := newTree(t).file("proc/stat", procStatText(1, 0, 0, 0, 0, 0, 0)).file("proc/meminfo", meminfoText(8*giB, 5*giB))
	reader, err := NewHostReader(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	policy := &QoSPolicy{CPUHigh: 0.9, CPULow: 0.7}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // in the error
		cap  Resources
	}{
		{"virtual with capacity", Config{Host: "h", Virtual: true, Runs: f, Client: client, QoS: policy, Capacity: Resources{CPU: 2, MemoryMB: 10}}, "",
			Resources{CPU: 2, MemoryMB: 10}},
		{"virtual without capacity", Config{Host: "h", Virtual: true, Runs: f, Client: client, QoS: policy}, "config.capacity: required", Resources{}},
		{"capacity from the host reader", Config{Host: "h", Source: reader, Runs: f, Client: client, QoS: policy}, "",
			Resources{CPU: 2, MemoryMB: 8192}},
		{"a source without capacity", Config{Host: "h", Source: f, Runs: f, Client: client, QoS: policy}, "config.capacity: required", Resources{}},
		{"no cpu capacity for a cpu policy", Config{Host: "h", Virtual: true, Runs: f, Client: client, QoS: policy, Capacity: Resources{MemoryMB: 10}},
			"config.capacity.cpu: required", Resources{}},
		{"runs that cannot be killed", Config{Host: "h", Virtual: true, Runs: &fakeMachine{}, Client: client, QoS: policy, Capacity: Resources{CPU: 2}},
			"config.runs: *hostagent.fakeMachine cannot say which runs are revocable", Resources{}},
		{"bad policy", Config{Host: "h", Virtual: true, Runs: f, Client: client, QoS: &QoSPolicy{CPUHigh: 90, CPULow: 70}, Capacity: Resources{CPU: 2}},
			"config.qos.cpuHigh", Resources{}},
		{"negative ack wait", Config{Host: "h", Virtual: true, Runs: f, Client: client, QoS: policy, Capacity: Resources{CPU: 2}, QoSAckWait: -1},
			"qosAckWait must be >= 0", Resources{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.cfg)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("New = %v, want an error with %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.cfg.Capacity != tt.cap || a.cfg.QoSAckWait != DefaultQoSAckWait || a.qos.Samples != DefaultQoSSamples || a.qosRuns == nil {
				t.Errorf("config = %+v, qos %+v; want capacity %+v and the defaults", a.cfg, a.qos, tt.cap)
			}
		})
	}
}

// busyRun starts a run of host: a shell spinning as long as the test
// binary lives, in a process group of its own, with the environment the
// stack gives a run (and env on top). It returns the shell's pid and a
// channel closed when it has exited and been reaped.
func busyRun(t *testing.T, host, task string, env ...string) (int, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `while kill -0 $PPID 2>/dev/null; do :; done`)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PELOTON_TASK_ID=" + task, "PELOTON_HOST=" + host}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("process %d not reaped 10s after SIGKILL", cmd.Process.Pid)
		}
	})
	return cmd.Process.Pid, exited
}

// running reports whether pid is a process and not a zombie.
func running(pid int) bool {
	s := procState(pid)
	return s != 0 && s != 'Z'
}

// survives says whether each of pids is alive and was sent no SIGKILL
// before the call, with no sleep for a signal "to land": it stops each
// with SIGSTOP, waits until it shows stopped or ended, and lets it go on.
// A SIGKILL is queued by the time kill(2) returns, and a process with one
// queued dies rather than stop.
func survives(t *testing.T, pids ...int) bool {
	t.Helper()
	alive := true
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			alive = false
			continue
		}
		var state byte
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("process %d stops or ends", pid), func() bool {
			state = procState(pid)
			return state == 'T' || state == 'Z' || state == 0
		})
		_ = syscall.Kill(pid, syscall.SIGCONT)
		alive = alive && state == 'T'
	}
	return alive
}

// procState is the state letter of /proc/<pid>/stat, 0 if it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestAgentQoSKillsRevocableRun runs the controller on real processes: two
// busy runs on a virtual host of one core, one of them revocable. The
// revocable one is killed, after the report naming it reached the stack;
// the other is not.
func TestAgentQoSKillsRevocableRun(t *testing.T) {
	needProc(t)
	host := fmt.Sprintf("qos-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	revPid, revExited := busyRun(t, host, "j-rev-1", "PELOTON_REVOCABLE=true", "PELOTON_PRIORITY=0")
	otherPid, otherExited := busyRun(t, host, "j-other-1")

	// The stack takes its time to acknowledge the first revocation, and
	// checks, just before it does, that the run is still alive: the agent
	// must wait for the ack (QoSAckWait is far longer) before it kills.
	var mu sync.Mutex
	var revokedAt time.Time
	var aliveWhenRevoked bool
	var revocations int
	rec := newRecorder()
	rec.onReport = func(r *pelotonv1.UsageReport) {
		if !slices.Contains(r.GetRevoked(), "j-rev-1") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		revocations++
		if revocations == 1 {
			revokedAt = time.Now()
			// The slow stack: a delay injected into the fake, not a
			// wait. A kill that did not wait for the ack would land in
			// it; no event shows an agent blocked in its wait instead.
			time.Sleep(300 * time.Millisecond)
			aliveWhenRevoked = running(revPid)
		}
		if slices.Contains(r.GetRevoked(), "j-other-1") {
			t.Errorf("report %d revokes the run that is not revocable", r.GetSequence())
		}
	}
	_, addr := serveAgents(t, rec, "127.0.0.1:0")
	a, stop := start(t, Config{
		Host: host, Virtual: true, Runs: &EnvRuns{Host: host}, Client: dial(t, addr),
		Interval: 200 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		QoS:        &QoSPolicy{CPUHigh: 0.5, CPULow: 0.3, Samples: 2},
		Capacity:   Resources{CPU: 1, MemoryMB: math.MaxInt32},
		QoSAckWait: 5 * time.Second,
	})

	select {
	case <-revExited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the revocable run is still running after 10s; stats %+v", a.Stats())
	}
	diedBy := time.Now()
	mu.Lock()
	if revocations == 0 || !aliveWhenRevoked || revokedAt.After(diedBy) {
		t.Errorf("revocation reports %d, the first at %v, the run alive until its ack: %v; want it before the run died (by %v)",
			revocations, revokedAt, aliveWhenRevoked, diedBy)
	}
	mu.Unlock()

	// A few more intervals: the host is still hot (the other run spins),
	// but nothing revocable is left to kill.
	after := rec.lastTaken()
	testutil.Eventually(t, 10*time.Second, "three more reports", func() bool { return rec.lastTaken() >= after+3 })
	stop()
	select {
	case <-otherExited:
		t.Fatal("the run that is not revocable was killed")
	default:
	}
	if !running(otherPid) {
		t.Fatal("the run that is not revocable is not running")
	}
	st := a.Stats()
	if st.QoSKills != 1 || st.LastQoSKill.IsZero() {
		t.Errorf("Stats = %+v, want one QoS kill", st)
	}
	if got := st.LastReport.GetRevoked(); len(got) != 0 {
		t.Errorf("the last report revokes %q, want none: the revocation was acknowledged", got)
	}
	if _, ok := st.LastReport.GetRuns()["j-other-1"]; !ok {
		t.Errorf("the last report's runs %v lack j-other-1", st.LastReport.GetRuns())
	}
}

// TestEnvRunsKill: a run's processes die, and its group with them, a
// process its scan did not find included; a pid whose process is not the
// one scanned is left alone; a proc root that is not ours refuses.
func TestEnvRunsKill(t *testing.T) {
	needProc(t)
	host := fmt.Sprintf("kill-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	// The root's child scrubs its environment: the scan misses it, the
	// group does not. sleep bounds everything.
	cmd := exec.Command("sh", "-c", `env -i sleep 30 & echo $!; wait`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PELOTON_TASK_ID=j-0-1", "PELOTON_HOST=" + host, "PELOTON_REVOCABLE=true"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, cmd)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var hidden int
	select {
	case s := <-line:
		if hidden, err = strconv.Atoi(strings.TrimSpace(s)); err != nil {
			t.Fatalf("child's pid: %q: %v", s, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not print its child's pid in 10s")
	}
	root := cmd.Process.Pid
	// Until it execs sleep, the child still has the run's environment.
	testutil.Eventually(t, 10*time.Second, "the child to exec sleep", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", hidden))
		return err == nil && strings.HasPrefix(string(b), "sleep\x00")
	})

	e := &EnvRuns{Host: host}
	infos, err := e.RunInfo(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	info, ok := infos["j-0-1"]
	if !ok || len(info.Procs) != 1 || info.Procs[0].PID != root || !info.Procs[0].GroupLeader || !info.Revocable {
		t.Fatalf("RunInfo = %+v, want j-0-1: the root only (%d), leading its group, revocable", infos, root)
	}

	other := info
	other.Procs = []RunProc{info.Procs[0]}
	other.Procs[0].Started += 10 * time.Millisecond // a later process with the same pid
	if err := e.Kill("j-0-1", other); err != nil {
		t.Fatal(err)
	}
	fixture := &EnvRuns{ProcRoot: runsFixture(t).path("proc"), Host: host}
	if err := fixture.Kill("j-0-1", info); err == nil || !strings.Contains(err.Error(), "another pid namespace") {
		t.Errorf("Kill through a fixture's proc = %v, want a refusal", err)
	}
	if !survives(t, root, hidden) {
		t.Fatal("a process was killed that was not the run's as scanned")
	}

	if err := e.Kill("j-0-1", info); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the root and its hidden child dead", func() bool { return !running(root) && !running(hidden) })
	if err := e.Kill("j-0-1", info); err != nil {
		t.Errorf("Kill of a run gone = %v, want nil", err)
	}
}
