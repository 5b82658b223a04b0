package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// These tests use the machine's real cgroups, and skip where this process
// may not create them.

// requireCgroups skips the test unless this process can make cgroups with
// memory and cpu controllers.
func requireCgroups(t *testing.T) {
	t.Helper()
	c, err := detectCgroups("/", cgroupParentName(t.TempDir()))
	if err != nil {
		t.Skipf("cgroups not writable here: %v", err)
	}
	c.removeParents()
}

// cgroupBackend is newBackend on a machine with usable cgroups.
func cgroupBackend(t *testing.T) (*Backend, *recorder) {
	t.Helper()
	requireCgroups(t)
	b, rec := newBackend(t)
	if b.cg == nil {
		t.Fatal("cgroups are usable here, but the backend did not detect them")
	}
	return b, rec
}

// runDirs are the directories the run's cgroup has (or had).
func runDirs(b *Backend, taskID string) []string {
	var out []string
	for _, p := range b.cg.parents() {
		out = append(out, filepath.Join(p, taskID))
	}
	return out
}

func checkGone(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the run's cgroup %s is still there after its end (%v)", d, err)
		}
	}
}

func limited(s hostmgr.LaunchSpec, milliCPU, memoryMB int64) hostmgr.LaunchSpec {
	s.Resources = resources.Resources{MilliCPU: milliCPU, MemoryMB: memoryMB}
	return s
}

// TestCgroupHoldsRunFromStart: the run's first instruction already runs in
// its cgroup (cat reads its own cgroups as soon as it runs), in every
// hierarchy, and the cgroup is gone once the run has ended.
func TestCgroupHoldsRunFromStart(t *testing.T) {
	t.Parallel()
	b, rec := cgroupBackend(t)
	s := limited(spec("cg-where-0-1", "cat", "/proc/self/cgroup"), 500, 64)
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal = %+v, want SUCCEEDED", ev)
	}
	out := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDOUT, false)
	suffix := "/" + filepath.Base(b.cg.memory) + "/" + s.TaskID
	wantCtl := []string{"memory", "cpu"}
	if b.cg.version == 2 {
		wantCtl = []string{""}
	}
	for _, ctl := range wantCtl {
		found := false
		for line := range strings.Lines(out) {
			_, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
			ctls, path, _ := strings.Cut(rest, ":")
			if (ctl == "" && ctls == "") || (ctl != "" && strings.Contains(","+ctls+",", ","+ctl+",")) {
				found = strings.HasSuffix(path, suffix)
			}
		}
		if !found {
			t.Errorf("the run was not in its cgroup (...%s) for %q when it ran; /proc/self/cgroup:\n%s", suffix, ctl, out)
		}
	}
	checkGone(t, runDirs(b, s.TaskID))
}

// TestCgroupOOMKilled: a run that uses more than its memory limit is
// killed by the kernel and ends FAILED oom-killed, whether the OOM killer
// ends its main process or a child of it (a shell then exits 137).
func TestCgroupOOMKilled(t *testing.T) {
	t.Parallel()
	b, rec := cgroupBackend(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("cannot find the test binary: %v", err)
	}
	helper := limited(spec("cg-oom-helper-0-1", self), 1000, 32)
	helper.Env = map[string]string{allocHelperEnv: "200"}
	pipe := limited(spec("cg-oom-pipe-0-1", "sh", "-c", "head -c 200m /dev/zero | tail"), 1000, 32)
	for _, s := range []hostmgr.LaunchSpec{helper, pipe} {
		launch(t, b, s)
	}
	for _, s := range []hostmgr.LaunchSpec{helper, pipe} {
		ev := rec.waitTerminal(t, s.TaskID)
		if ev.State != pelotonv1.TaskState_FAILED || ev.Reason != ReasonOOMKilled || ev.ExitCode != 137 {
			t.Errorf("%s ended %v %q (code %d, %q); want FAILED %s with code 137", s.TaskID, ev.State, ev.Reason, ev.ExitCode, ev.Message, ReasonOOMKilled)
		}
		if !strings.Contains(ev.Message, "memory limit 32 MiB exceeded") {
			t.Errorf("%s: message %q, want it to name the limit", s.TaskID, ev.Message)
		}
		if st, err := b.Status(s.TaskID); err != nil || st.Reason != ReasonOOMKilled {
			t.Errorf("Status(%s) = %+v, %v; want the oom-killed end", s.TaskID, st, err)
		}
		checkGone(t, runDirs(b, s.TaskID))
	}
}

// TestCgroupKillIsNotOOM: a run the backend kills ends KILLED, even when
// the OOM killer has killed one of its processes before.
func TestCgroupKillIsNotOOM(t *testing.T) {
	t.Parallel()
	b, rec := cgroupBackend(t)
	s := limited(spec("cg-kill-0-1", "sh", "-c", "head -c 200m /dev/zero | tail; sleep 100"), 1000, 32)
	launch(t, b, s)
	rec.waitState(t, s.TaskID, pelotonv1.TaskState_RUNNING)
	tk, _ := b.lookup(s.TaskID)
	testutil.Eventually(t, waitTimeout, "the OOM killer kills the run's tail", func() bool { return tk.cg.readMemEnd().oomKills > 0 })
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_KILLED || ev.Reason != "killed" {
		t.Fatalf("terminal = %+v, want KILLED killed", ev)
	}
	checkGone(t, runDirs(b, s.TaskID))
}

// TestCgroupCPUQuota: a busy loop limited to 0.2 cores uses well under one
// core. The bound is loose: the machine is shared, and this is a check that
// the quota is there, not a measure of it.
func TestCgroupCPUQuota(t *testing.T) {
	t.Parallel()
	b, rec := cgroupBackend(t)
	s := limited(spec("cg-cpu-0-1", "sh", "-c", "while :; do :; done"), 200, 0)
	launch(t, b, s)
	rec.waitState(t, s.TaskID, pelotonv1.TaskState_RUNNING)
	dirs, ok := b.RunCgroup(s.TaskID)
	if !ok || dirs.Version != b.cg.version || dirs.Memory != filepath.Join(b.cg.memory, s.TaskID) {
		t.Fatalf("RunCgroup = %+v, %v; want the run's cgroup", dirs, ok)
	}
	tk, _ := b.lookup(s.TaskID)
	if dirs.CPU == "" {
		t.Log("no cpuacct hierarchy: usage not measured, only throttling")
	} else {
		usage := func() time.Duration {
			if dirs.Version == 2 {
				return time.Duration(readKeyed(filepath.Join(dirs.CPU, "cpu.stat"), "usage_usec")) * time.Microsecond
			}
			return time.Duration(readInt(filepath.Join(dirs.CPU, "cpuacct.usage")))
		}
		// Measure over five of the quota's periods (100 ms each), as
		// the kernel counts them, and until the loop has run at all.
		periods := func() int64 { return readKeyed(filepath.Join(tk.cg.cpu, "cpu.stat"), "nr_periods") }
		u0, w0, p0 := usage(), time.Now(), periods()
		var u1 time.Duration
		var w1 time.Time
		testutil.Eventually(t, waitTimeout, "five quota periods with some use", func() error {
			p1 := periods()
			u1, w1 = usage(), time.Now()
			if p1 < p0+5 || u1 <= u0 {
				return fmt.Errorf("%d periods, %s used", p1-p0, u1-u0)
			}
			return nil
		})
		cores := float64(u1-u0) / float64(w1.Sub(w0))
		t.Logf("a busy loop with a quota of 0.2 cores used %.2f cores", cores)
		if cores <= 0 || cores >= 0.5 {
			t.Errorf("the busy loop used %.2f cores over %s; want more than 0 (it runs in its cgroup) and well under 1 (throttled)", cores, w1.Sub(w0))
		}
	}
	testutil.Eventually(t, waitTimeout, "the busy loop throttled", func() bool {
		return readKeyed(filepath.Join(tk.cg.cpu, "cpu.stat"), "nr_throttled") > 0
	})
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_KILLED || ev.Reason != "killed" {
		t.Fatalf("terminal = %+v, want KILLED killed", ev)
	}
	if _, ok := b.RunCgroup(s.TaskID); ok {
		t.Error("RunCgroup still answers for a run that ended")
	}
	checkGone(t, runDirs(b, s.TaskID))
}

// TestCgroupKillsWhatLeftTheGroup: a process that left the run's process
// group is out of reach of the group kill, but not of its cgroup: it is
// killed when the run's main process ends.
func TestCgroupKillsWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	b, rec := cgroupBackend(t)
	s := spec("cg-setsid-0-1", "sh", "-c", `setsid sleep 100 & echo $! > child.pid`)
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal = %+v, want SUCCEEDED", ev)
	}
	waitGone(t, readPid(t, filepath.Join(b.dir, s.TaskID, "child.pid")))
	checkGone(t, runDirs(b, s.TaskID))
}

// TestCgroupOfAdoptedRun: a run adopted after a crash of the control plane
// keeps its cgroup, which the new backend reports and removes at its end;
// and nothing of the backends' cgroups is left once both are closed.
func TestCgroupOfAdoptedRun(t *testing.T) {
	t.Parallel()
	requireCgroups(t)
	dir := t.TempDir()
	var parents []string
	t.Cleanup(func() { checkGone(t, parents) }) // after both backends' Close
	cfg := Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}}
	first := mustNew(t, cfg)
	rec1 := newRecorder()
	if err := first.Start(context.Background(), rec1.sink); err != nil {
		t.Fatal(err)
	}
	parents = first.cg.parents()
	s := limited(spec("cg-adopt-0-1", "sleep", "100"), 100, 32)
	launch(t, first, s)
	rec1.waitState(t, s.TaskID, pelotonv1.TaskState_RUNNING)
	before, ok := first.RunCgroup(s.TaskID)
	if !ok {
		t.Fatal("no cgroup for the run")
	}
	first.detach()

	second := mustNew(t, cfg)
	rec2 := newRecorder()
	if err := second.Start(context.Background(), rec2.sink); err != nil {
		t.Fatal(err)
	}
	if after, ok := second.RunCgroup(s.TaskID); !ok || after != before {
		t.Fatalf("RunCgroup after adoption = %+v, %v; want %+v", after, ok, before)
	}
	tk, _ := second.lookup(s.TaskID)
	tk.mu.Lock()
	pid := tk.pgid
	tk.mu.Unlock()
	pids, err := os.ReadFile(filepath.Join(before.Memory, "cgroup.procs"))
	if err != nil || !strings.Contains(string(pids), strconv.Itoa(pid)) {
		t.Fatalf("the adopted run's process is not in its cgroup: %q, %v", pids, err)
	}
	if err := second.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	// An adopted run reports only its end to the new backend's sink.
	evs := rec2.waitFor(t, s.TaskID, "a terminal event", func(evs []hostmgr.TaskEvent) bool {
		return len(evs) > 0 && terminal(evs[len(evs)-1].State)
	})
	if ev := evs[len(evs)-1]; ev.State != pelotonv1.TaskState_KILLED {
		t.Fatalf("terminal = %+v, want KILLED", ev)
	}
	checkGone(t, runDirs(second, s.TaskID))
}

// TestCgroupV2CloneInto starts a process straight into a v2 cgroup and
// removes the cgroup with it, through the unified hierarchy even where it
// has no controllers (a hybrid machine): placement and removal need none.
func TestCgroupV2CloneInto(t *testing.T) {
	t.Parallel()
	mi, err1 := os.ReadFile("/proc/self/mountinfo")
	pc, err2 := os.ReadFile("/proc/self/cgroup")
	if err1 != nil || err2 != nil {
		t.Skipf("cgroups not writable here: %v %v", err1, err2)
	}
	own, _, ok := ownDir("/", parseMountinfo(string(mi)), parseProcCgroup(string(pc)), "cgroup2", "")
	if !ok {
		t.Skip("cgroups not writable here: no cgroup v2 hierarchy")
	}
	parent := filepath.Join(own, cgroupParentName(t.TempDir()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("cgroups not writable here: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(parent) })
	dir := filepath.Join(parent, "v2-0-1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := &runCgroup{version: 2, memory: dir, cpu: dir, cpuacct: dir}
	t.Cleanup(func() { _ = rc.remove() })
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	p, err := rc.startProcess("/bin/sleep", []string{"sleep", "100"},
		&os.ProcAttr{Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setpgid: true}})
	if err != nil {
		if errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EPERM) {
			// The no-internal-process rule (our cgroup is not the root)
			// or a policy forbids it here; not what this test is about.
			t.Skipf("cgroups not writable here: clone into %s: %v", dir, err)
		}
		t.Fatalf("start in %s: %v", dir, err)
	}
	got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.Pid))
	want := "0::" + strings.TrimPrefix(dir, own)
	if err != nil || !slices.Contains(strings.Split(strings.TrimSpace(string(got)), "\n"), want) {
		t.Errorf("the process is not in %s: %q, %v", dir, got, err)
	}
	if err := rc.remove(); err != nil {
		t.Errorf("remove: %v", err)
	}
	if st, err := p.Wait(); err != nil || !st.Sys().(syscall.WaitStatus).Signaled() {
		t.Errorf("the process in the removed cgroup ended %v, %v; want killed", st, err)
	}
	checkGone(t, []string{dir})
}

// TestCgroupsUsable: where cgroups are usable, the probe says so and
// removes the parent cgroup it made to find out.
func TestCgroupsUsable(t *testing.T) {
	requireCgroups(t)
	name := cgroupParentName(t.TempDir())
	c, err := detectCgroups("/", name) // where the probe's parent goes
	if err != nil {
		t.Fatal(err)
	}
	c.removeParents()
	if err := cgroupsUsable(name); err != nil {
		t.Fatalf("cgroupsUsable = %v, where a backend makes its cgroups", err)
	}
	for _, d := range c.parents() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the probe's cgroup %s is still there (%v)", d, err)
		}
	}
	if err := CgroupsUsable(); err != nil {
		t.Errorf("CgroupsUsable = %v", err)
	}
}
