package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestReusedPidIsNotAdopted: a record whose pid now names another process
// (a different start time) is an ended run: reported LOST ended-unobserved,
// not listed, and that process is never signalled.
func TestReusedPidIsNotAdopted(t *testing.T) {
	dir := t.TempDir()
	stranger := exec.Command("sleep", "3600")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	ticks, err := procStartTicks(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	first := mustNew(t, Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	const id = "reused-0-1"
	// The record an earlier control plane left for a run whose pid the
	// stranger has since been given.
	if err := first.storeRecord(&runRecord{TaskID: id, JobID: "reused", Run: 1, Host: "local-0", Pid: stranger.Process.Pid,
		StartTicks: ticks - 1, Command: []string{"sleep", "3600"}, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder()
	if err := first.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	st, err := first.Status(id)
	if err != nil || st.State != pelotonv1.TaskState_LOST || st.Reason != hostmgr.ReasonUnobservedEnd {
		t.Fatalf("Status of a run whose pid was reused = %+v, %v; want LOST %s", st, err, hostmgr.ReasonUnobservedEnd)
	}
	for _, r := range first.Runs() {
		if r.TaskID == id {
			t.Fatalf("Runs lists the run whose pid was reused: %+v", r)
		}
	}
	if err := first.Kill(context.Background(), id, 0); err != nil {
		t.Fatalf("Kill of an ended run: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := procStartTicks(stranger.Process.Pid); err != nil || got != ticks {
		t.Fatalf("the stranger is gone (%v, %v)", got, err)
	}
	// A later restart says the same.
	second := mustNew(t, Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	if err := second.Start(context.Background(), newRecorder().sink); err != nil {
		t.Fatal(err)
	}
	if st, err := second.Status(id); err != nil || st.State != pelotonv1.TaskState_LOST {
		t.Fatalf("Status after a second restart = %+v, %v; want LOST", st, err)
	}
}

// TestRunRecordedAsStartingIsAdopted: a control plane that died between
// recording a run and recording its process leaves a record naming no
// process; the next one finds the process by its environment and adopts
// it, and stops a process no record names (it could not be told from a
// run that is over), so that the run the job manager starts next never
// overlaps it. Processes of another directory are left alone.
func TestRunRecordedAsStartingIsAdopted(t *testing.T) {
	dir := t.TempDir()
	start := func(id, sandboxDir string) *exec.Cmd {
		c := exec.Command("sleep", "3600")
		c.Env = []string{"PELOTON_TASK_ID=" + id, "PELOTON_SANDBOX=" + sandboxDir + "/" + id}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // runs lead their group
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill() })
		return c
	}
	starting := start("starting-0-1", dir)
	unrecorded := start("unrec-0-1", dir)
	other := start("starting-0-1", t.TempDir())
	unrecordedDied := make(chan error, 1)
	go func() { unrecordedDied <- unrecorded.Wait() }()

	b := mustNew(t, Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	if err := b.storeRecord(&runRecord{TaskID: "starting-0-1", JobID: "starting", Run: 1, Host: "local-0",
		Command: []string{"sleep", "3600"}, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Status("starting-0-1"); err != nil || st.State != pelotonv1.TaskState_RUNNING {
		t.Fatalf("the run recorded as starting: %+v, %v; want it adopted RUNNING", st, err)
	}
	select {
	case <-unrecordedDied:
	case <-time.After(10 * time.Second):
		t.Fatal("the process no record names still runs after Start")
	}
	if _, err := procStartTicks(other.Process.Pid); err != nil {
		t.Fatalf("a process of another backend's directory was stopped: %v", err)
	}
	// Its end is reported, as for any adopted run.
	_ = starting.Process.Kill()
	_ = starting.Wait()
	testutil.Eventually(t, 10*time.Second, "the adopted run's end reported", func() bool {
		st, _ := b.Status("starting-0-1")
		return st.State == pelotonv1.TaskState_LOST
	})
}

// TestStraysAreStoppedLikeAKill: a process of a run no record accounts for
// is sent SIGTERM first, so it can note its end, and SIGKILL only if it
// is still there after the grace; Start returns once both are gone.
func TestStraysAreStoppedLikeAKill(t *testing.T) {
	dir := t.TempDir()
	noted := filepath.Join(t.TempDir(), "noted")
	start := func(id, script string) *exec.Cmd {
		c := exec.Command("sh", "-c", script)
		c.Env = []string{"PELOTON_TASK_ID=" + id, "PELOTON_SANDBOX=" + dir + "/" + id, "NOTED=" + noted}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill() })
		return c
	}
	polite := start("polite-0-1", `trap 'echo end > "$NOTED"; exit 143' TERM; sleep 3600 & wait $!`)
	stubborn := start("stubborn-0-1", `trap '' TERM; while :; do sleep 0.05; done`)
	ended := func(c *exec.Cmd) chan error {
		ch := make(chan error, 1)
		go func() { ch <- c.Wait() }()
		return ch
	}
	politeEnded, stubbornEnded := ended(polite), ended(stubborn)
	b := mustNew(t, Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	// Both shells have set their traps once they show their children.
	testutil.Eventually(t, 10*time.Second, "the strays' traps set", func() bool {
		runs := b.runProcs().runs
		return len(runs["polite-0-1"]) > 1 && len(runs["stubborn-0-1"]) > 1
	})
	if err := b.Start(context.Background(), newRecorder().sink); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"polite": politeEnded, "stubborn": stubbornEnded} {
		select {
		case err := <-ch:
			ws, _ := err.(*exec.ExitError)
			if name == "stubborn" && (ws == nil || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL) {
				t.Errorf("the stray that ignores SIGTERM ended %v; want SIGKILL", err)
			}
		case <-time.After(time.Second):
			t.Fatalf("the %s stray still runs after Start returned", name)
		}
	}
	if data, err := os.ReadFile(noted); err != nil || string(data) != "end\n" {
		t.Errorf("the stray that traps SIGTERM did not note its end: %q, %v", data, err)
	}
}

// TestRunOfASlowSupervisorIsAdopted: a control plane that died while a
// run's supervisor had not started the run yet leaves a record naming the
// supervisor and no process; the next one waits for the supervisor to
// start the run and adopts it, rather than report it LOST while the
// supervisor goes on to start it unwatched.
func TestRunOfASlowSupervisorIsAdopted(t *testing.T) {
	dir := t.TempDir()
	const id = "slow-0-1"
	b := mustNew(t, Config{Dir: dir, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	// The supervisor: a process of the supervisor's environment that
	// starts the run, in a group of its own, a second from now.
	sup := exec.Command("sh", "-c", `sleep 1; env -u `+supervise.SupervisorEnv+` PELOTON_SANDBOX="$SANDBOX" setsid sleep 3600 & wait`)
	sup.Env = []string{supervise.SupervisorEnv + "=" + b.statusPath(id), "SANDBOX=" + filepath.Join(dir, id), "PATH=" + os.Getenv("PATH")}
	sup.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("pkill", "-9", "-s", strconv.Itoa(sup.Process.Pid)).Run()
		_ = sup.Process.Kill()
		_ = sup.Wait()
	})
	ticks, err := procStartTicks(sup.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.storeRecord(&runRecord{TaskID: id, JobID: "slow", Run: 1, Host: "local-0", Command: []string{"sleep", "3600"},
		Supervisor: &recordSupervisor{Pid: sup.Process.Pid, StartTicks: ticks}, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), newRecorder().sink); err != nil {
		t.Fatal(err)
	}
	st, err := b.Status(id)
	if err != nil || st.State != pelotonv1.TaskState_RUNNING {
		t.Fatalf("the run of a slow supervisor: %+v, %v; want it adopted RUNNING", st, err)
	}
	if leader, _, ok := runLeader(b.runProcs().runs[id]); !ok {
		t.Fatal("the adopted run's process is gone")
	} else if task, _ := b.lookup(id); task.pgid != leader {
		t.Errorf("adopted with pid %d; the run's process is %d", task.pgid, leader)
	}
}
