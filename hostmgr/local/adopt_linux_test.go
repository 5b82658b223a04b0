package local

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
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
