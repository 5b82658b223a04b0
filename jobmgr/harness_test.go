package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"github.com/peloton-sched/peloton/sla"
	"google.golang.org/protobuf/proto"
)

// harness runs a Manager on the in-memory store with recording fakes of
// its two ports and a clock the test moves, so that the task lifecycle,
// updates and drains are tested in milliseconds, with no etcd, no
// resource manager and no backend. The etcd-backed tests in this package
// and the e2e suite cover the same paths with the real parts.
type harness struct {
	t     *testing.T
	jm    *Manager
	hosts *fakeHosts
	res   *fakeResources
	st    *memstore.Store
	stop  func()
	// dead ends the running Manager's access to the store, as its
	// process's death would (crash).
	dead *atomic.Bool
	// afterTxn, if set, is called after each transaction the Manager
	// commits: a test that must crash it at one exact write sets dead.
	afterTxn atomic.Pointer[func()]

	mu  sync.Mutex
	now time.Time
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, st: memstore.New(memstore.Options{}), now: time.Unix(1_000_000, 0)}
	h.start()
	t.Cleanup(func() { h.stop() })
	return h
}

// start runs a Manager on the harness's store, with new fakes.
func (h *harness) start() {
	h.t.Helper()
	h.hosts = newFakeHosts()
	h.startOn(h.hosts)
}

// startOn runs a Manager on the harness's store and backend hosts, with a
// new resource manager.
func (h *harness) startOn(hosts *fakeHosts) {
	h.t.Helper()
	h.hosts, h.res = hosts, newFakeResources()
	h.dead = &atomic.Bool{}
	st := mortalStore{Store: h.st, dead: h.dead, after: &h.afterTxn}
	b := store.NewBatcher(st, store.BatcherOptions{})
	h.jm = New(st, b, h.res, h.hosts, Options{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		SLA:     sla.NewLocal(h.clock),
		Budgets: h.hosts,
	})
	h.jm.now = h.clock
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.jm.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	jm := h.jm
	h.stop = func() {
		cancel()
		jm.Wait()
		_ = b.Close()
	}
}

// restart stops the Manager and starts another on the same store, as a
// control plane that crashed and came back; its backend (the new fake)
// knows none of the runs the old one launched.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

// crash kills the Manager at once, as kill -9 would: from this moment
// nothing it does reaches the store. Another starts on the same store and
// the same backend, whose runs live on (as a real backend's do).
func (h *harness) crash() {
	h.t.Helper()
	h.dead.Store(true)
	h.stop()
	h.startOn(h.hosts)
}

// mortalStore is the store as a process sees it: once dead, every call
// fails and nothing more is written.
type mortalStore struct {
	store.Store
	dead  *atomic.Bool
	after *atomic.Pointer[func()]
}

var errProcessDead = errors.New("the process is dead")

func (s mortalStore) Get(ctx context.Context, key string) (store.KV, error) {
	if s.dead.Load() {
		return store.KV{}, errProcessDead
	}
	return s.Store.Get(ctx, key)
}

func (s mortalStore) List(ctx context.Context, prefix string) ([]store.KV, error) {
	if s.dead.Load() {
		return nil, errProcessDead
	}
	return s.Store.List(ctx, prefix)
}

func (s mortalStore) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	if s.dead.Load() {
		return 0, errProcessDead
	}
	rev, err := s.Store.Txn(ctx, ops...)
	if f := s.after.Load(); f != nil && err == nil {
		(*f)()
	}
	return rev, err
}

// Close leaves the shared store open for the next Manager.
func (s mortalStore) Close() error { return nil }

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// advance moves the clock on and has every job evaluated again, as the
// timers set on the real clock would.
func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
	h.jm.mu.RLock()
	defer h.jm.mu.RUnlock()
	for id := range h.jm.jobs {
		h.jm.queue.Add(id)
	}
}

func (h *harness) create(spec *pelotonv1.JobSpec) string {
	h.t.Helper()
	id, err := h.jm.CreateJob(context.Background(), spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// placeRun waits for run run of the instance to be queued, places it on
// host, and waits for its launch; it returns the run's task id.
func (h *harness) placeRun(jobID string, inst, run uint32, host string) string {
	h.t.Helper()
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("run %d of %s/%d queued", run, jobID, inst), func() bool {
		return h.res.queuedRun(jobID, inst) == run
	})
	h.res.place(jobID, inst, host)
	id := resmgr.RunTaskID(jobID, inst, run)
	testutil.Eventually(h.t, 10*time.Second, "the launch of "+id, func() bool {
		return len(h.hosts.called("launch "+id+"@"+host)) > 0
	})
	return id
}

func (h *harness) waitTask(jobID string, inst uint32, st pelotonv1.TaskState) *pelotonv1.Task {
	h.t.Helper()
	var last *pelotonv1.Task
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("%s/%d %s", jobID, inst, st), func() error {
		tk, err := h.jm.GetTask(jobID, inst)
		if err != nil {
			return err
		}
		last = tk
		if tk.Status.State != st {
			return fmt.Errorf("it is %s (%s)", tk.Status.State, tk.Status.Message)
		}
		return nil
	})
	return last
}

func (h *harness) waitJob(jobID string, st pelotonv1.JobState) {
	h.t.Helper()
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("job %s %s", jobID, st), func() error {
		j, err := h.jm.GetJob(jobID)
		if err != nil {
			return err
		}
		if j.Status.State != st {
			return fmt.Errorf("it is %s (%s)", j.Status.State, j.Status.Message)
		}
		return nil
	})
}

func batchSpec(n, maxFailures uint32) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: "b", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: maxFailures}}}
}

func serviceSpec(n uint32, image string) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: "s", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"serve"}, Image: image, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}
}

// A batch job's runs are queued, launched where they were placed, and the
// job succeeds once they do; each ended run is given back to both ports.
func TestHarnessBatchJobSucceeds(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(2, 0))
	r0 := h.placeRun(id, 0, 1, "h1")
	r1 := h.placeRun(id, 1, 1, "h2")
	for _, r := range []string{r0, r1} {
		h.hosts.emit(r, taskRunning, 0, "")
	}
	h.waitTask(id, 0, taskRunning)
	for _, r := range []string{r0, r1} {
		h.hosts.emit(r, taskSucceeded, 0, "")
	}
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	for _, r := range []string{r0, r1} {
		if len(h.res.called("release-run "+r)) == 0 || len(h.hosts.called("release "+r)) == 0 {
			t.Errorf("run %s ended but was not given back: resmgr %v, hostmgr %v", r, h.res.called("release-run"), h.hosts.called("release "))
		}
	}
	if n := len(h.hosts.called("launch ")); n != 2 {
		t.Errorf("%d launches for two instances: %v", n, h.hosts.called("launch "))
	}
}

// A failed run runs again, as a new run, up to maxFailures times; the job
// fails with the instance once they are spent.
func TestHarnessFailedRunIsRetriedThenFails(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(1, 1))
	r1 := h.placeRun(id, 0, 1, "h1")
	h.hosts.emit(r1, taskFailed, 1, "")
	h.advance(time.Minute) // past the restart backoff
	r2 := h.placeRun(id, 0, 2, "h1")
	h.hosts.emit(r2, taskFailed, 1, "")
	h.advance(time.Minute)
	h.waitJob(id, pelotonv1.JobState_JOB_FAILED)
	tk := h.waitTask(id, 0, taskFailed)
	if tk.Status.FailureCount != 2 || tk.Status.RunId != 2 {
		t.Errorf("failureCount %d, run %d; want 2, 2", tk.Status.FailureCount, tk.Status.RunId)
	}
	if q := h.res.queuedRun(id, 0); q != 0 {
		t.Errorf("run %d queued after the failures were spent", q)
	}
}

// A launch the backend refuses as blocked is no failure: the instance
// waits out a backoff and runs again, and the next launch goes through.
func TestHarnessBlockedLaunchIsRetried(t *testing.T) {
	h := newHarness(t)
	refused := 0
	h.hosts.launchErr = func(_ context.Context, spec hostmgr.LaunchSpec) error {
		if refused == 0 {
			refused++
			return fmt.Errorf("%w: no room for the pod yet", hostmgr.ErrLaunchBlocked)
		}
		return nil
	}
	id := h.create(batchSpec(1, 0))
	h.placeRun(id, 0, 1, "h1")
	h.waitTask(id, 0, taskInitialized)
	h.advance(time.Minute)
	r2 := h.placeRun(id, 0, 2, "h1")
	h.hosts.emit(r2, taskSucceeded, 0, "")
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	tk := h.waitTask(id, 0, taskSucceeded)
	if tk.Status.FailureCount != 0 {
		t.Errorf("a blocked launch counted %d failures", tk.Status.FailureCount)
	}
}

// Cancelling a job kills its runs, with a grace period, and the job ends
// KILLED once the backend says they ended.
func TestHarnessCancelKillsRuns(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(2, 0))
	runs := []string{h.placeRun(id, 0, 1, "h1"), h.placeRun(id, 1, 1, "h1")}
	for _, r := range runs {
		h.hosts.emit(r, taskRunning, 0, "")
	}
	h.waitTask(id, 1, taskRunning)
	if err := h.jm.CancelJob(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	h.waitJob(id, pelotonv1.JobState_JOB_KILLED)
	for _, r := range runs {
		if len(h.hosts.called("kill "+r)) != 1 {
			t.Errorf("run %s: kills %v", r, h.hosts.called("kill "))
		}
	}
}

// A rolling update replaces a service's instances batch by batch: never
// more than batchSize of them stopped at once (the job's SLA would allow
// more), each next batch only once the one before runs the new spec and
// has stayed available.
func TestHarnessRollingUpdateGoesBatchByBatch(t *testing.T) {
	h := newHarness(t)
	spec := serviceSpec(4, "img:1")
	spec.Sla = &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3}
	id := h.create(spec)
	for inst := range uint32(4) {
		r := h.placeRun(id, inst, 1, fmt.Sprintf("h%d", inst))
		h.hosts.emit(r, taskRunning, 0, "")
		h.waitTask(id, inst, taskRunning)
	}
	h.advance(time.Minute) // every instance has been available long enough
	next := serviceSpec(4, "img:2")
	next.Sla = spec.Sla
	up, err := h.jm.Updates().CreateUpdate(context.Background(), id, next, &pelotonv1.UpdateSpec{BatchSize: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for batch := range 2 {
		want := 2 * (batch + 1)
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("batch %d stops two instances", batch), func() bool {
			return len(h.hosts.called("kill ")) >= want
		})
		kills := h.hosts.called("kill ")
		var relaunched []string
		for _, k := range kills[want-2 : want] {
			_, inst, run, ok := parseTaskID(k[len("kill "):])
			if !ok {
				t.Fatalf("killed %q", k)
			}
			relaunched = append(relaunched, h.placeRun(id, inst, run+1, fmt.Sprintf("h%d", inst)))
		}
		if kills := h.hosts.called("kill "); len(kills) != want {
			t.Fatalf("batch %d: %d instances stopped before it ran again (batch size 2): %v", batch, len(kills), kills)
		}
		for _, r := range relaunched {
			h.hosts.mu.Lock()
			image := h.hosts.runs[r].spec.Image
			h.hosts.mu.Unlock()
			if image != "img:2" {
				t.Errorf("run %s launched on image %q", r, image)
			}
			h.hosts.emit(r, taskRunning, 0, "")
		}
		for _, r := range relaunched {
			_, inst, _, _ := parseTaskID(r)
			h.waitTask(id, inst, taskRunning)
		}
		h.advance(time.Minute) // past minReadySeconds: the next batch may go
	}
	testutil.Eventually(t, 10*time.Second, "the update succeeds", func() error {
		got, err := h.jm.Updates().GetUpdate(up.Id)
		if err != nil {
			return err
		}
		if got.Status.State != updateSucceeded {
			h.advance(time.Second)
			return fmt.Errorf("it is %s (%s)", got.Status.State, got.Status.Message)
		}
		return nil
	})
	if kills := h.hosts.called("kill "); len(kills) != 4 {
		t.Errorf("kills %v, want one per instance", kills)
	}
}

// A drain of a host moves the service instance on it: its run is killed
// (the SLA grants it: the other instance runs), and it runs again
// elsewhere; the instance on the other host is left alone.
func TestHarnessDrainMovesAServiceInstance(t *testing.T) {
	h := newHarness(t)
	id := h.create(serviceSpec(2, "img:1"))
	r0 := h.placeRun(id, 0, 1, "h0")
	r1 := h.placeRun(id, 1, 1, "h1")
	for _, r := range []string{r0, r1} {
		h.hosts.emit(r, taskRunning, 0, "")
	}
	h.waitTask(id, 1, taskRunning)
	h.advance(time.Minute)
	h.hosts.mu.Lock()
	h.hosts.draining["h0"] = true
	h.hosts.mu.Unlock()
	h.hosts.drains <- []hostmgr.DrainRequest{{Host: "h0", TaskIDs: []string{r0}}}
	testutil.Eventually(t, 10*time.Second, "the drained run is killed", func() bool {
		return len(h.hosts.called("kill "+r0)) == 1
	})
	r := h.placeRun(id, 0, 2, "h2")
	h.hosts.emit(r, taskRunning, 0, "")
	if tk := h.waitTask(id, 0, taskRunning); tk.Status.Host != "h2" {
		t.Errorf("instance 0 runs on %s, want h2", tk.Status.Host)
	}
	if kills := h.hosts.called("kill "); !slices.Equal(kills, []string{"kill " + r0}) {
		t.Errorf("kills %v; only the drained host's run should go", kills)
	}
}

// A run the backend no longer knows after a restart of the control plane
// is LOST, and its history says why; the run that replaces it starts with
// no exit code of the run before.
func TestHarnessRunLostAcrossARestartSaysWhy(t *testing.T) {
	h := newHarness(t)
	id := h.create(serviceSpec(1, "img:1"))
	r1 := h.placeRun(id, 0, 1, "h1")
	h.hosts.emit(r1, taskRunning, 0, "")
	h.waitTask(id, 0, taskRunning)
	h.restart()
	h.advance(time.Minute) // past the restart backoff
	r2 := h.placeRun(id, 0, 2, "h1")
	h.hosts.emit(r2, taskRunning, 0, "")
	tk := h.waitTask(id, 0, taskRunning)
	var lost *pelotonv1.TaskTransition
	for _, tr := range tk.Status.History {
		if tr.State == taskLost {
			lost = tr
		}
	}
	if lost == nil || lost.RunId != 1 || lost.Reason != "unknown-to-backend" {
		t.Errorf("history %v: want run 1 LOST, unknown-to-backend", tk.Status.History)
	}
}

// A service instance's run that was killed (exit 143) and restarted shows
// the exit code while the next run waits, and not once that run runs.
func TestHarnessNewRunHasNoExitCodeOfTheOldOne(t *testing.T) {
	h := newHarness(t)
	id := h.create(serviceSpec(1, "img:1"))
	r1 := h.placeRun(id, 0, 1, "h1")
	h.hosts.emit(r1, taskRunning, 0, "")
	h.waitTask(id, 0, taskRunning)
	h.hosts.emit(r1, taskKilled, 143, "")
	if tk := h.waitTask(id, 0, taskInitialized); tk.Status.ExitCode != 143 {
		t.Errorf("waiting to restart: exit code %d, want the killed run's 143", tk.Status.ExitCode)
	}
	h.advance(time.Minute)
	r2 := h.placeRun(id, 0, 2, "h1")
	h.hosts.emit(r2, taskRunning, 0, "")
	if tk := h.waitTask(id, 0, taskRunning); tk.Status.ExitCode != 0 {
		t.Errorf("run 2 runs with exit code %d, the run before's", tk.Status.ExitCode)
	}
}

// storedTask is the instance's record as the store holds it.
func (h *harness) storedTask(jobID string, inst uint32) *pelotonv1.TaskStatus {
	h.t.Helper()
	kv, err := h.st.Get(context.Background(), taskKey(jobID, inst))
	if err != nil {
		h.t.Fatal(err)
	}
	rt := &pelotonv1.TaskStatus{}
	if err := proto.Unmarshal(kv.Value, rt); err != nil {
		h.t.Fatal(err)
	}
	return rt
}
