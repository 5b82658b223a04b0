package jobmgr

import (
	"context"
	"errors"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// A launch costs no write: the instance is LAUNCHED on its host at once,
// and its record is first written by its run's first event.
func TestLaunchIsWrittenWithTheRunsFirstEvent(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(1, 0))
	r1 := h.placeRun(id, 0, 1, "h1")
	if tk := h.waitTask(id, 0, taskLaunched); tk.Status.Host != "h1" {
		t.Errorf("launched on %q, want h1", tk.Status.Host)
	}
	if _, err := h.st.Get(context.Background(), taskKey(id, 0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the launch wrote the task record (%v); it should wait for the run's first event", err)
	}
	h.hosts.emit(r1, taskRunning, 0, "")
	h.waitTask(id, 0, taskRunning)
	rec := h.storedTask(id, 0)
	if rec.State != taskRunning || rec.Host != "h1" || rec.RunId != 1 {
		t.Errorf("stored %s on %q run %d; want RUNNING on h1, run 1", rec.State, rec.Host, rec.RunId)
	}
	var states []taskState
	for _, tr := range rec.History {
		states = append(states, tr.State)
	}
	if len(states) < 2 || states[len(states)-2] != taskLaunched {
		t.Errorf("stored history %v: the launch should be in it, before RUNNING", states)
	}
}

// A crash after the backend started a run and before anything was written
// of it: the next Manager finds the store saying the instance waits, asks
// the backend, adopts the run where it runs (its room held again) and
// never launches it again; the run's end is then the instance's.
func TestCrashAfterTheLaunchAdoptsTheRun(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(2, 0))
	r0 := h.placeRun(id, 0, 1, "h1")
	r1 := h.placeRun(id, 1, 1, "h2")
	h.hosts.emit(r1, taskSucceeded, 0, "") // it ends while no stack watches
	h.crash()

	tk := h.waitTask(id, 0, taskLaunched)
	if tk.Status.Host != "h1" || tk.Status.RunId != 1 {
		t.Errorf("adopted on %q as run %d; want h1, run 1", tk.Status.Host, tk.Status.RunId)
	}
	h.waitTask(id, 1, taskSucceeded)
	if got := h.hosts.called("recover " + r0 + "@h1"); len(got) != 1 {
		t.Errorf("hostmgr holds of the adopted run: %v", h.hosts.called("recover "))
	}
	if got := h.res.called("recover " + r0); len(got) != 1 {
		t.Errorf("resmgr recovers: %v", h.res.called("recover "))
	}
	h.hosts.emit(r0, taskSucceeded, 0, "")
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	if launches := h.hosts.called("launch "); len(launches) != 2 {
		t.Errorf("launches %v; want one per instance", launches)
	}
	if q := h.res.called("enqueue "); len(q) != 0 {
		t.Errorf("queued again after the crash: %v", q)
	}
}

// A crash after the launch was decided and before the backend took it: the
// backend knows no such run, so the instance queues again under the same
// run ID and runs once.
func TestCrashBeforeTheBackendLaunchRunsItOnce(t *testing.T) {
	h := newHarness(t)
	h.hosts.launchErr = func(ctx context.Context, spec hostmgr.LaunchSpec) error {
		if spec.Host != "h1" {
			return nil
		}
		<-ctx.Done() // the process dies with the call on its way
		return ctx.Err()
	}
	id := h.create(batchSpec(1, 0))
	h.placeRun(id, 0, 1, "h1")
	h.crash()

	r := h.placeRun(id, 0, 1, "h2")
	h.hosts.emit(r, taskSucceeded, 0, "")
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	h.hosts.mu.Lock()
	runs := len(h.hosts.runs)
	h.hosts.mu.Unlock()
	if runs != 1 {
		t.Errorf("the backend started %d runs; want 1", runs)
	}
	if tk := h.waitTask(id, 0, taskSucceeded); tk.Status.RunId != 1 || tk.Status.Host != "h2" {
		t.Errorf("ended as run %d on %q; want run 1 on h2", tk.Status.RunId, tk.Status.Host)
	}
}

// A restart while the backend's substrate is away: the backend cannot say
// whether the waiting instance's run started, so nothing of the job is
// queued, the instance says why it waits, and reconciliation neither
// kills the run as a stray nor takes it for lost. Once the substrate
// answers, the run is adopted.
func TestRestartWhileTheSubstrateIsAwayWaitsToAsk(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(1, 0))
	r1 := h.placeRun(id, 0, 1, "h1")
	h.hosts.away.Store(true)
	h.crash()

	ctx := context.Background()
	if err := h.jm.eng.evaluateJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	tk := h.waitTask(id, 0, taskInitialized)
	if want := waitingMessage("fake", 1); tk.Status.Message != want {
		t.Errorf("message %q, want %q", tk.Status.Message, want)
	}
	for range 3 { // strays are killed on their second pass
		h.jm.recs.reconcileOnce(ctx)
	}
	if q := h.res.called("enqueue "); len(q) != 0 {
		t.Fatalf("queued while the backend could not tell: %v", q)
	}
	if k := h.hosts.called("kill "); len(k) != 0 {
		t.Fatalf("killed while the backend could not tell: %v", k)
	}

	h.hosts.away.Store(false)
	h.jm.recs.reconcileOnce(ctx)
	if tk := h.waitTask(id, 0, taskLaunched); tk.Status.Host != "h1" || tk.Status.Message != "" {
		t.Errorf("adopted on %q with message %q; want h1 and none", tk.Status.Host, tk.Status.Message)
	}
	h.hosts.emit(r1, taskSucceeded, 0, "")
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	if q, k := h.res.called("enqueue "), h.hosts.called("kill "); len(q) != 0 || len(k) != 0 {
		t.Errorf("queued %v, killed %v; want neither", q, k)
	}
}

// The same restart where the run had not started: once the substrate
// answers, the instance queues and runs under its run ID.
func TestRestartWhileTheSubstrateIsAwayThenQueues(t *testing.T) {
	h := newHarness(t)
	h.hosts.launchErr = func(ctx context.Context, spec hostmgr.LaunchSpec) error {
		if spec.Host != "h1" {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	id := h.create(batchSpec(1, 0))
	h.placeRun(id, 0, 1, "h1")
	h.hosts.away.Store(true)
	h.crash()
	if err := h.jm.eng.evaluateJob(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if q := h.res.called("enqueue "); len(q) != 0 {
		t.Fatalf("queued while the backend could not tell: %v", q)
	}
	h.hosts.away.Store(false)
	h.jm.recs.reconcileOnce(context.Background())
	r := h.placeRun(id, 0, 1, "h2")
	if r != resmgr.RunTaskID(id, 0, 1) {
		t.Fatalf("run %s", r)
	}
	if tk := h.waitTask(id, 0, taskLaunched); tk.Status.Message != "" {
		t.Errorf("message %q after the wait", tk.Status.Message)
	}
}
