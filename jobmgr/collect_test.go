package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/proto"
)

// hookedArchive is a history store whose Put can fail or call a hook.
type hookedArchive struct {
	history.Store
	down atomic.Bool
	puts atomic.Int32
	// refused counts the puts refused while down.
	refused atomic.Int32
	mu      sync.Mutex
	onPut   func()
	putIDs  []string
}

func (h *hookedArchive) Put(ctx context.Context, jobs ...*history.Job) error {
	if h.down.Load() {
		h.refused.Add(1)
		return &history.UnavailableError{Op: "put", Err: errors.New("the test's archive is down")}
	}
	if err := h.Store.Put(ctx, jobs...); err != nil {
		return err
	}
	h.puts.Add(1)
	h.mu.Lock()
	for _, j := range jobs {
		h.putIDs = append(h.putIDs, j.ID)
	}
	hook := h.onPut
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func openArchive(t *testing.T) *hookedArchive {
	t.Helper()
	b, err := history.OpenBolt(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &hookedArchive{Store: b}
}

// collectOpts are a process's options with archive a and finished jobs'
// time to live ttl, passes every few milliseconds.
func collectOpts(a history.Store, ttl time.Duration) Options {
	return Options{LostBackoff: 10 * time.Millisecond, History: a, ClusterName: "c1",
		Collect: CollectOptions{TTL: ttl, Interval: 20 * time.Millisecond}}
}

// runToSuccess creates a batch job of n instances and ends every run with
// success.
func runToSuccess(t *testing.T, p *process, s *sandboxes, spec *pelotonv1.JobSpec) string {
	t.Helper()
	id, err := p.jm.CreateJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every instance running", 30*time.Second, func() (bool, string) {
		ts, err := p.jm.ListTasks(id, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, tk := range ts {
			if tk.Status.State != pelotonv1.TaskState_RUNNING {
				return false, tk.Status.State.String()
			}
		}
		return len(ts) == int(spec.InstanceCount), "no tasks"
	})
	for inst := uint32(0); inst < spec.InstanceCount; inst++ {
		s.finish(resmgr.RunTaskID(id, inst, 1), pelotonv1.TaskState_SUCCEEDED, false)
	}
	return id
}

// keysOf lists the store keys that name job id.
func keysOf(t *testing.T, st store.Store, id string) []string {
	t.Helper()
	kvs, err := st.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		if strings.Contains(kv.Key, id) && !strings.HasPrefix(kv.Key, "requests/") {
			out = append(out, kv.Key)
		}
	}
	return out
}

func withTTL(spec *pelotonv1.JobSpec, seconds uint32) *pelotonv1.JobSpec {
	spec.TtlSecondsAfterFinished = proto.Uint32(seconds)
	return spec
}

// TestFinishedJobsMoveToTheArchive: a finished job whose time to live has
// passed is archived whole (versions, final status, every instance's final
// run) and then leaves the store, every record of it; one whose spec gives
// it longer stays live. Reading it finds nothing live (the API reads the
// archive).
func TestFinishedJobsMoveToTheArchive(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	a := openArchive(t)
	p := startProcessWith(t, e, s, collectOpts(a, 0))
	gone := runToSuccess(t, p, s, sleepers("gone", 3))
	kept := runToSuccess(t, p, s, withTTL(sleepers("kept", 2), 3600))

	waitFor(t, "the job archived and removed", 30*time.Second, func() (bool, string) {
		keys := keysOf(t, p.st, gone)
		return len(keys) == 0, strings.Join(keys, " ")
	})
	if _, err := p.jm.GetJob(gone); err == nil {
		t.Error("a job removed from the store is still found live")
	}
	h, err := a.Get(context.Background(), "c1", gone)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || len(h.Tasks) != 3 || len(h.Versions) != 1 || h.Spec().GetName() != "gone" {
		t.Errorf("archived: state %s, %d tasks, %d versions, spec %v", h.Status.State, len(h.Tasks), len(h.Versions), h.Spec())
	}
	for i, tk := range h.Tasks {
		if tk.GetState() != pelotonv1.TaskState_SUCCEEDED || tk.GetRunId() != 1 || tk.GetHost() == "" {
			t.Errorf("archived instance %d: %v", i, tk)
		}
	}
	// Its tasks ended with the other job's, but the job's own state
	// follows its tasks a moment later.
	waitFor(t, "the job with an hour to live finished and live", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(kept)
		if err != nil {
			return false, err.Error()
		}
		return j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, j.Status.State.String()
	})
	if _, err := a.Get(context.Background(), "c1", kept); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("the job with an hour to live was archived already: %v", err)
	}
	if _, err := p.st.Get(context.Background(), finishedIndexKey(kept)); err != nil {
		t.Errorf("the finished job's index entry: %v", err)
	}
}

// TestNothingLeavesTheStoreWhileTheArchiveIsDown: a job is removed only
// after its archive write succeeded.
func TestNothingLeavesTheStoreWhileTheArchiveIsDown(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	a := openArchive(t)
	a.down.Store(true)
	p := startProcessWith(t, e, s, collectOpts(a, 0))
	id := runToSuccess(t, p, s, sleepers("waits", 2))
	waitFor(t, "the job finished", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(id)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, "not finished"
	})
	refusedBefore := a.refused.Load()
	waitFor(t, "passes that find the archive down", 30*time.Second, func() (bool, string) {
		n := a.refused.Load() - refusedBefore
		return n >= 2, fmt.Sprintf("%d refused puts", n)
	})
	if _, err := p.jm.GetJob(id); err != nil {
		t.Fatalf("removed while the archive was down: %v", err)
	}
	a.down.Store(false)
	waitFor(t, "the job archived and removed", 30*time.Second, func() (bool, string) {
		keys := keysOf(t, p.st, id)
		return len(keys) == 0, strings.Join(keys, " ")
	})
	if _, err := a.Get(context.Background(), "c1", id); err != nil {
		t.Fatal(err)
	}
}

// TestACollectorCutShortArchivesOnceAndLosesNothing: a process that dies
// after a job was archived and before it was removed leaves the job live;
// the next one archives it again (one record) and removes it.
func TestACollectorCutShortArchivesOnceAndLosesNothing(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	a := openArchive(t)
	var p *process
	crashed := make(chan struct{})
	a.onPut = func() {
		select {
		case <-crashed:
		default:
			close(crashed)
			p.crash() // before the removal: nothing more reaches the store
		}
	}
	a.down.Store(true) // until the job has finished
	p = startProcessWith(t, e, s, collectOpts(a, 0))
	id := runToSuccess(t, p, s, sleepers("twice", 2))
	waitFor(t, "the job finished", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(id)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, "not finished"
	})
	a.down.Store(false)
	<-crashed
	p.jm.Wait()
	if _, err := p.st.Get(context.Background(), jobRuntimeKey(id)); err != nil {
		t.Fatalf("the job's runtime after a crash between archive and removal: %v", err)
	}
	a.mu.Lock()
	a.onPut = nil
	a.mu.Unlock()
	p2 := startProcessWith(t, e, s, collectOpts(a, 0))
	waitFor(t, "the job archived and removed", 30*time.Second, func() (bool, string) {
		keys := keysOf(t, p2.st, id)
		return len(keys) == 0, strings.Join(keys, " ")
	})
	js, _, err := a.List(context.Background(), history.Filter{Cluster: "c1"}, 0, "")
	if err != nil || len(js) != 1 || js[0].Id != id {
		t.Errorf("the archive holds %v (%v), want job %s once", js, err, id)
	}
}

// TestStartLoadsOnlyLiveJobs: a restart loads the jobs that have not
// finished; finished ones are listed from their index entries and loaded
// when asked for, and can still be restarted and deleted.
func TestStartLoadsOnlyLiveJobs(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	p := startProcess(t, e, s) // no archive: finished jobs stay
	done := runToSuccess(t, p, s, sleepers("done", 2))
	again := runToSuccess(t, p, s, sleepers("again", 1))
	gone := runToSuccess(t, p, s, sleepers("gone", 1))
	live, err := p.jm.CreateJob(context.Background(), sleepers("live", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three jobs finished", 30*time.Second, func() (bool, string) {
		js, _ := p.jm.ListJobs("", []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED}, "")
		return len(js) == 3, "fewer"
	})
	p.crash()
	p.jm.Wait()

	p2 := startProcess(t, e, s)
	p2.jm.mu.RLock()
	inMemory, finished := len(p2.jm.jobs), len(p2.jm.finished)
	p2.jm.mu.RUnlock()
	if inMemory != 1 || finished != 3 {
		t.Fatalf("after a restart: %d jobs in memory, %d finished known by their index; want 1 and 3", inMemory, finished)
	}
	js, err := p2.jm.ListJobs("", nil, "")
	if err != nil || len(js) != 4 {
		t.Fatalf("list after a restart: %d jobs (%v), want 4", len(js), err)
	}
	for _, j := range js {
		if j.Id == done && (j.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || j.Status.TaskCounts["SUCCEEDED"] != 2 || j.Spec.GetName() != "done") {
			t.Errorf("a finished job as listed from its index entry: %v", j)
		}
	}
	j, err := p2.jm.GetJob(done)
	if err != nil || j.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || j.Spec.DefaultSpec == nil {
		t.Fatalf("a finished job loaded on demand: %v, %v", j, err)
	}
	if ts, err := p2.jm.ListTasks(done, nil); err != nil || len(ts) != 2 {
		t.Fatalf("its tasks: %v, %v", ts, err)
	}
	if err := p2.jm.RestartJob(context.Background(), again, []uint32{0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted job runs", 30*time.Second, func() (bool, string) {
		j, err := p2.jm.GetJob(again)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_RUNNING, tasksOf(t, p2.jm, again)
	})
	if _, err := p2.st.Get(context.Background(), liveIndexKey(again)); err != nil {
		t.Errorf("a restarted job is live again, but its live index entry: %v", err)
	}
	if _, err := p2.st.Get(context.Background(), finishedIndexKey(again)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a restarted job still has a finished index entry: %v", err)
	}
	if err := p2.jm.DeleteJob(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(t, p2.st, gone); len(keys) > 0 {
		t.Errorf("records of a deleted job: %v", keys)
	}
	if _, err := p2.jm.GetJob(live); err != nil {
		t.Error(err)
	}
}

// TestTheIndexIsBuiltForAStoreWithout: a store written before the index
// existed gets one at the first start.
func TestTheIndexIsBuiltForAStoreWithout(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	p := startProcess(t, e, s)
	done := runToSuccess(t, p, s, sleepers("done", 2))
	live, err := p.jm.CreateJob(context.Background(), sleepers("live", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job finished", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(done)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, "not finished"
	})
	p.crash()
	p.jm.Wait()
	kvs, err := p.st.List(context.Background(), "index/")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if _, err := p.st.Txn(context.Background(), store.Delete(kv.Key, store.AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	p2 := startProcess(t, e, s)
	p2.jm.mu.RLock()
	_, liveLoaded := p2.jm.jobs[live]
	_, doneKnown := p2.jm.finished[done]
	p2.jm.mu.RUnlock()
	if !liveLoaded || !doneKnown {
		t.Fatalf("after building the index: live job loaded %v, finished job indexed %v", liveLoaded, doneKnown)
	}
	if j, err := p2.jm.GetJob(done); err != nil || j.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Fatalf("%v, %v", j, err)
	}
}

// TestJobsSomethingRefersToStayLive: a job created with a request id stays
// live while a retry of its create may ask for it.
func TestJobsSomethingRefersToStayLive(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	a := openArchive(t)
	p := startProcessWith(t, e, s, collectOpts(a, 0))
	spec := sleepers("requested", 1)
	r, err := requestid.New(requestid.Job, "req-1", &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.jm.CreateJobOnce(context.Background(), spec, r)
	if err != nil {
		t.Fatal(err)
	}
	plain := runToSuccess(t, p, s, sleepers("plain", 1))
	waitFor(t, "the requested job running", 30*time.Second, func() (bool, string) {
		ts, _ := p.jm.ListTasks(id, nil)
		return len(ts) == 1 && ts[0].Status.State == pelotonv1.TaskState_RUNNING, "not yet"
	})
	s.finish(resmgr.RunTaskID(id, 0, 1), pelotonv1.TaskState_SUCCEEDED, false)
	waitFor(t, "the plain job archived", 30*time.Second, func() (bool, string) {
		_, err := p.jm.GetJob(plain)
		return err != nil, "still live"
	})
	if j, err := p.jm.GetJob(id); err != nil || j.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Fatalf("a job a retry of its create may ask for: %v, %v", j, err)
	}
	if again, err := p.jm.CreateJobOnce(context.Background(), spec, r); err != nil || again != id {
		t.Errorf("the retry: %s, %v; want %s", again, err, id)
	}
}

// TestFinishedJobsLeaveMemory: a finished job nobody touched for a while
// leaves memory (its row stays for lists) and is loaded again when asked
// for; a writer still holding the old copy cannot write through it.
func TestFinishedJobsLeaveMemory(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	p := startProcess(t, e, s)
	id := runToSuccess(t, p, s, sleepers("done", 2))
	live, err := p.jm.CreateJob(context.Background(), sleepers("live", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job finished", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(id)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, "not finished"
	})
	p.jm.mu.RLock()
	old := p.jm.jobs[id]
	p.jm.mu.RUnlock()
	if n := p.jm.arch.unloadFinished(time.Now()); n != 0 {
		t.Fatalf("%d jobs unloaded right after they finished", n)
	}
	if n := p.jm.arch.unloadFinished(time.Now().Add(2 * unloadAfter)); n != 1 {
		t.Fatalf("%d jobs unloaded, want the finished one", n)
	}
	p.jm.mu.RLock()
	_, inMemory := p.jm.jobs[id]
	_, liveInMemory := p.jm.jobs[live]
	p.jm.mu.RUnlock()
	if inMemory || !liveInMemory {
		t.Fatalf("after unloading: finished job in memory %v, live job %v", inMemory, liveInMemory)
	}
	js, err := p.jm.ListJobs("", []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED}, "")
	if err != nil || len(js) != 1 || js[0].Id != id || js[0].Status.TaskCounts["SUCCEEDED"] != 2 {
		t.Fatalf("list after unloading: %v, %v", js, err)
	}
	err = p.jm.updateJobRuntime(context.Background(), old, func(rt *pelotonv1.JobStatus) error {
		rt.Message = "through a stale copy"
		return nil
	})
	if err == nil {
		t.Fatal("a write through the copy of an unloaded job was taken")
	}
	if err := p.jm.RestartJob(context.Background(), id, []uint32{1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reloaded job restarted", 30*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(id)
		return err == nil && j.Status.State == pelotonv1.JobState_JOB_RUNNING, tasksOf(t, p.jm, id)
	})
}
