package local

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
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
