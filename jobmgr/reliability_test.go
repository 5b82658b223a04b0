package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// faultStore is a real store whose writes can be made to fail the ways a
// store outage makes them fail: down (nothing is applied, the call fails),
// or lossy (the write is applied, but the answer is lost, as when etcd
// commits and the connection drops before the reply). taskTxns, when
// positive, fails that many writes of task records (down) and no others.
type faultStore struct {
	store.Store
	mode     atomic.Int32
	taskTxns atomic.Int32
	failed   atomic.Int32
	// refused counts the reads refused while down (a retry reads its
	// record back before it writes again).
	refused atomic.Int32
}

const (
	storeUp int32 = iota
	storeDown
	storeLossy
)

var errOutage = errors.New("test outage: context deadline exceeded")

func (f *faultStore) Get(ctx context.Context, key string) (store.KV, error) {
	if f.mode.Load() == storeDown {
		f.refused.Add(1)
		return store.KV{}, errOutage
	}
	return f.Store.Get(ctx, key)
}

func (f *faultStore) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	switch f.mode.Load() {
	case storeDown:
		f.failed.Add(1)
		return 0, errOutage
	case storeLossy:
		f.failed.Add(1)
		_, err := f.Store.Txn(ctx, ops...)
		if err != nil {
			return 0, err
		}
		return 0, errOutage
	}
	for _, op := range ops {
		if strings.HasPrefix(op.Key, "tasks/") && f.taskTxns.Load() > 0 {
			f.taskTxns.Add(-1)
			f.failed.Add(1)
			return 0, errOutage
		}
	}
	return f.Store.Txn(ctx, ops...)
}

// finish ends a run on its own (as a process exits). With quiet, the
// backend knows but does not report it: the event is lost on the way.
func (s *sandboxes) finish(id string, st pelotonv1.TaskState, quiet bool) {
	s.mu.Lock()
	r := s.runs[id]
	if r == nil || isTerminal(r.last.State) {
		s.mu.Unlock()
		return
	}
	report := s.view.setLocked(id, r, st, "exit")
	s.mu.Unlock()
	if !quiet {
		report()
	}
}

// forget makes the backend lose a run without a word (a node that went
// away with its pods, a backend that lost its state).
func (s *sandboxes) forget(id string) {
	s.mu.Lock()
	delete(s.runs, id)
	s.mu.Unlock()
}

// stray adds a live run nobody launched through this control plane.
func (s *sandboxes) stray(id, host string) {
	s.mu.Lock()
	s.runs[id] = &sandboxRun{host: host, last: hostmgr.TaskEvent{TaskID: id, Host: host, State: pelotonv1.TaskState_RUNNING, Time: time.Now()}}
	s.mu.Unlock()
}

// Runs makes the sandboxes a hostmgr.RunLister.
func (v *sandboxView) Runs() []hostmgr.RunInfo {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	var out []hostmgr.RunInfo
	for id, r := range v.s.runs {
		if !isTerminal(r.last.State) {
			out = append(out, hostmgr.RunInfo{TaskID: id, Host: r.host, Last: r.last,
				Resources: resources.Resources{MilliCPU: 500, MemoryMB: 64}})
		}
	}
	return out
}

var _ hostmgr.RunLister = (*sandboxView)(nil)

// faultProcess is a control plane writing through a faultStore.
type faultProcess struct {
	*process
	fs *faultStore
}

func startFaultProcess(t testing.TB, s *sandboxes, opts Options) *faultProcess {
	t.Helper()
	e, _ := storetest.StartEtcd(t)
	if opts.LostBackoff == 0 {
		opts.LostBackoff = 10 * time.Millisecond
	}
	fs := &faultStore{}
	p := startProcessOn(t, e, s, opts, procConfig{level: slog.LevelError, requestTimeout: 2 * time.Second,
		wrap: func(st store.Store) store.Store { fs.Store = st; return fs }})
	t.Cleanup(func() { fs.mode.Store(storeUp) }) // runs first: the process stops on a working store
	return &faultProcess{process: p, fs: fs}
}

func sleepers(name string, n uint32) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}}
}

// waitStates waits until every instance of job id is in state want.
func (p *faultProcess) waitStates(t *testing.T, id string, want pelotonv1.TaskState, within time.Duration) {
	t.Helper()
	waitFor(t, "every instance "+want.String(), within, func() (bool, string) {
		ts, err := p.jm.ListTasks(id, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, tk := range ts {
			if tk.Status.State != want {
				return false, tasksOf(t, p.jm, id)
			}
		}
		return len(ts) > 0, tasksOf(t, p.jm, id)
	})
}

// stored reads every task record of a job from the store itself.
func (p *faultProcess) stored(t *testing.T, id string) map[uint32]*pelotonv1.TaskStatus {
	t.Helper()
	kvs, err := p.st.List(context.Background(), taskPrefix(id))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]*pelotonv1.TaskStatus{}
	for _, kv := range kvs {
		var inst uint32
		if _, err := fmt.Sscanf(strings.TrimPrefix(kv.Key, taskPrefix(id)), "%d", &inst); err != nil {
			t.Fatal(err)
		}
		rt := &pelotonv1.TaskStatus{}
		if err := proto.Unmarshal(kv.Value, rt); err != nil {
			t.Fatal(err)
		}
		out[inst] = rt
	}
	return out
}

// TestEventsDuringAStoreOutageAreWrittenAfterIt: runs that end while the
// store refuses writes (down) or applies them without answering (lossy)
// are recorded once it answers again, in memory and in the store, without
// a restart, and nothing runs twice.
func TestEventsDuringAStoreOutageAreWrittenAfterIt(t *testing.T) {
	for _, mode := range []int32{storeDown, storeLossy} {
		t.Run(map[int32]string{storeDown: "down", storeLossy: "lossy"}[mode], func(t *testing.T) {
			s := newSandboxes(2)
			p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
			const n = 6
			id, err := p.jm.CreateJob(context.Background(), sleepers("outage", n))
			if err != nil {
				t.Fatal(err)
			}
			p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 30*time.Second)
			p.fs.mode.Store(mode)
			for inst := uint32(0); inst < n; inst++ {
				s.finish(resmgr.RunTaskID(id, inst, 1), pelotonv1.TaskState_SUCCEEDED, false)
			}
			waitFor(t, "the writes of the ended runs to fail", 10*time.Second, func() (bool, string) {
				return p.fs.failed.Load() >= 1, fmt.Sprintf("%d failed writes", p.fs.failed.Load())
			})
			// The retries run during the outage: with the store down they
			// fail too (at the read-back before the write); with writes
			// applied but reported failed, they read the records back and
			// find them written after all.
			first := p.fs.refused.Load()
			waitFor(t, "retries during the outage", 10*time.Second, func() (bool, string) {
				refused, queued := p.fs.refused.Load(), p.jm.UnwrittenEvents()
				if mode == storeDown {
					return refused >= first+3, fmt.Sprintf("%d refused read-backs", refused-first)
				}
				return queued == 0, fmt.Sprintf("%d events queued", queued)
			})
			p.fs.mode.Store(storeUp)
			p.waitStates(t, id, pelotonv1.TaskState_SUCCEEDED, 30*time.Second)
			waitFor(t, "the job to succeed", 30*time.Second, func() (bool, string) {
				j, err := p.jm.GetJob(id)
				if err != nil {
					return false, err.Error()
				}
				return j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, j.Status.State.String()
			})
			recs := p.stored(t, id)
			for inst := uint32(0); inst < n; inst++ {
				if rt := recs[inst]; rt.GetState() != pelotonv1.TaskState_SUCCEEDED || rt.GetRunId() != 1 {
					t.Errorf("instance %d stored as %v run %d, want SUCCEEDED run 1", inst, rt.GetState(), rt.GetRunId())
				}
			}
			if launches, _ := s.counts(); launches != n {
				t.Errorf("%d launches for %d instances: something ran twice", launches, n)
			}
		})
	}
}

// TestLaunchNotRecordedQueuesAgain: when the write that records a launch
// fails, the instance is not launched and goes back to the queue; it runs
// once the store takes writes (before, it stayed PENDING with nothing
// queued).
func TestLaunchNotRecordedQueuesAgain(t *testing.T) {
	s := newSandboxes(2)
	p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
	p.fs.taskTxns.Store(3)
	id, err := p.jm.CreateJob(context.Background(), sleepers("relaunch", 4))
	if err != nil {
		t.Fatal(err)
	}
	p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 30*time.Second)
	if p.fs.failed.Load() == 0 {
		t.Fatal("no launch record failed: the test tested nothing")
	}
	if launches, _ := s.counts(); launches != 4 {
		t.Errorf("%d launches for 4 instances", launches)
	}
}

// TestLaunchOfARunIDTheBackendHolds: a launch the backend refuses because
// it holds a run of that ID already fails nothing. A run that ended there
// (the past of an instance a scale-down removed) has used the ID up: the
// instance runs at once under the next ID, no failure counted. A live run
// on the same host is this run launched already: it goes on as it is.
func TestLaunchOfARunIDTheBackendHolds(t *testing.T) {
	s := newSandboxes(2)
	hold := make(chan struct{})
	s.hold = hold
	p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
	spec := sleepers("taken", 2)
	spec.DefaultSpec.RestartPolicy = &pelotonv1.RestartPolicy{MaxFailures: 0}
	id, err := p.jm.CreateJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both launches waiting", 10*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFlight == 2, fmt.Sprintf("%d waiting", s.inFlight)
	})
	s.mu.Lock()
	s.taken = map[string]pelotonv1.TaskState{
		resmgr.RunTaskID(id, 0, 1): pelotonv1.TaskState_SUCCEEDED,
		resmgr.RunTaskID(id, 1, 1): pelotonv1.TaskState_RUNNING,
	}
	s.hold = nil
	s.mu.Unlock()
	close(hold)
	p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 20*time.Second)
	ts, err := p.jm.ListTasks(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	for inst, want := range []uint32{2, 1} {
		st := ts[inst].Status
		if st.RunId != want || st.FailureCount != 0 {
			t.Errorf("instance %d: run %d with %d failures, want run %d with none: %v", inst, st.RunId, st.FailureCount, want, st)
		}
	}
	if launches, _ := s.counts(); launches != 1 {
		t.Errorf("%d launches accepted, want 1 (instance 0's second run)", launches)
	}
}

// TestScaleBackUpWhileStopping: a service scaled down and up again before
// the instances the scale-down stops have ended gets them back, each on a
// new run, instead of leaving them stopped for good within its count.
func TestScaleBackUpWhileStopping(t *testing.T) {
	s := newSandboxes(2)
	p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
	spec := sleepers("svc", 3)
	spec.Type = pelotonv1.JobType_SERVICE
	id, err := p.jm.CreateJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 20*time.Second)
	s.mu.Lock()
	s.holdKills = true
	s.mu.Unlock()
	if _, err := p.jm.upd.ScaleJob(context.Background(), id, 1, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "instances 1 and 2 stopping", 10*time.Second, func() (bool, string) {
		ts, _ := p.jm.ListTasks(id, nil)
		n := 0
		for _, tk := range ts {
			if tk.Status.State == pelotonv1.TaskState_KILLING {
				n++
			}
		}
		return n == 2, tasksOf(t, p.jm, id)
	})
	if _, err := p.jm.upd.ScaleJob(context.Background(), id, 3, nil, 0); err != nil {
		t.Fatal(err)
	}
	s.releaseKills()
	waitFor(t, "three instances running again", 20*time.Second, func() (bool, string) {
		ts, _ := p.jm.ListTasks(id, nil)
		n := 0
		for _, tk := range ts {
			if tk.Status.State == pelotonv1.TaskState_RUNNING && (tk.InstanceId == 0 || tk.Status.RunId > 1) {
				n++
			}
		}
		return len(ts) == 3 && n == 3, tasksOf(t, p.jm, id)
	})
}

// TestReconcileRepairsWhatTheBackendSaysOtherwise: a run's end the backend
// knows but never reported is applied; a run the backend lost is LOST
// after two passes and runs again; a run jobmgr does not know counts on
// its host and is killed on the second pass.
func TestReconcileRepairsWhatTheBackendSaysOtherwise(t *testing.T) {
	s := newSandboxes(1)
	p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
	ctx := context.Background()
	id, err := p.jm.CreateJob(ctx, sleepers("recon", 3))
	if err != nil {
		t.Fatal(err)
	}
	p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 30*time.Second)
	run := func(inst uint32) string { return resmgr.RunTaskID(id, inst, 1) }
	s.finish(run(0), pelotonv1.TaskState_SUCCEEDED, true)
	s.forget(run(1))
	stray := resmgr.RunTaskID(id, 2, 7)
	s.stray(stray, "h0")
	allocated := func() float64 { return p.hm.ListHosts()[0].GetAllocated().GetCpu() }
	before := allocated()

	missed, lost, strays := p.jm.recs.reconcileOnce(ctx)
	if missed != 1 || lost != 0 || strays != 0 {
		t.Fatalf("first pass repaired missed=%d lost=%d strays=%d, want 1 0 0", missed, lost, strays)
	}
	if got := allocated(); got != before-0.5+0.5 {
		// instance 0's end freed 0.5; the stray took 0.5.
		t.Fatalf("allocated cpu %v after the first pass, want %v", got, before)
	}
	if st, _ := p.jm.GetTask(id, 0); st.Status.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("instance 0 is %v, want SUCCEEDED (its end was missed)", st.Status.State)
	}
	if st, _ := p.jm.GetTask(id, 1); st.Status.State != pelotonv1.TaskState_RUNNING || st.Status.RunId != 1 {
		t.Fatalf("instance 1 is %v run %d after one pass; one sighting must not be enough", st.Status.State, st.Status.RunId)
	}
	if ev, _ := s.view.Status(stray); ev.State != pelotonv1.TaskState_RUNNING {
		t.Fatalf("the stray was stopped on its first sighting: %v", ev.State)
	}

	_, lost, strays = p.jm.recs.reconcileOnce(ctx)
	if lost != 1 || strays != 1 {
		t.Fatalf("second pass repaired lost=%d strays=%d, want 1 1", lost, strays)
	}
	if ev, _ := s.view.Status(stray); ev.State != pelotonv1.TaskState_KILLED {
		t.Fatalf("the stray is %v after the second pass, want KILLED", ev.State)
	}
	waitFor(t, "instance 1 running again as run 2", 30*time.Second, func() (bool, string) {
		st, _ := p.jm.GetTask(id, 1)
		return st.Status.State == pelotonv1.TaskState_RUNNING && st.Status.RunId == 2, tasksOf(t, p.jm, id)
	})
	st, _ := p.jm.GetTask(id, 1)
	var sawLost bool
	for _, h := range st.Status.History {
		sawLost = sawLost || (h.State == pelotonv1.TaskState_LOST && h.RunId == 1)
	}
	if !sawLost {
		t.Errorf("instance 1's history has no LOST for run 1: %v", st.Status.History)
	}
	if got := allocated(); got != 1.0 {
		t.Errorf("allocated cpu %v at the end, want 1 (instances 1 and 2; the stray freed)", got)
	}
}

// TestReconcileLeavesRunsInFlightAlone: a launch the backend has not
// finished (recorded, backend call under way) is not declared lost.
func TestReconcileLeavesRunsInFlightAlone(t *testing.T) {
	s := newSandboxes(1)
	hold := make(chan struct{})
	s.hold = hold
	p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
	ctx := context.Background()
	id, err := p.jm.CreateJob(ctx, sleepers("inflight", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the launch to be under way", 30*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFlight == 1, tasksOf(t, p.jm, id)
	})
	for range 2 {
		if _, lost, _ := p.jm.recs.reconcileOnce(ctx); lost != 0 {
			t.Fatalf("a launch under way was declared lost")
		}
	}
	close(hold)
	p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 30*time.Second)
}

// TestCreateDuringAnOutageLeavesNothing: a create that fails because the
// store does not answer is Unavailable, and leaves no job, even when the
// store applied the write but its answer was lost (the job appears in etcd,
// and would be found by the next restart, unless it is removed).
func TestCreateDuringAnOutageLeavesNothing(t *testing.T) {
	for _, mode := range []int32{storeDown, storeLossy} {
		t.Run(map[int32]string{storeDown: "down", storeLossy: "lossy"}[mode], func(t *testing.T) {
			s := newSandboxes(1)
			p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
			p.fs.mode.Store(mode)
			_, err := p.jm.CreateJob(context.Background(), sleepers("ghost", 2))
			if code := apierrCode(err); code != "Unavailable" {
				t.Fatalf("create during an outage: %v (code %s), want Unavailable", err, code)
			}
			p.fs.mode.Store(storeUp)
			waitFor(t, "no job left in the store", 30*time.Second, func() (bool, string) {
				kvs, err := p.st.List(context.Background(), "jobs/")
				if err != nil {
					return false, err.Error()
				}
				return len(kvs) == 0, fmt.Sprintf("%d job keys", len(kvs))
			})
			if js, _ := p.jm.ListJobs("", nil, ""); len(js) != 0 {
				t.Fatalf("%d jobs listed after a failed create", len(js))
			}
		})
	}
}

func apierrCode(err error) string { return status.Code(err).String() }

// TestCreateWithRequestIDDuringAnOutage: a create under a request id that
// the store does not answer is Unavailable and asks for a retry under the
// same id. If the store had not applied it, the retry creates the job; if
// it had (the answer was lost), the job is kept, not removed (a retry may
// have been answered with it already), and the retry answers with it: one
// job either way, and it runs.
func TestCreateWithRequestIDDuringAnOutage(t *testing.T) {
	for _, mode := range []int32{storeDown, storeLossy} {
		t.Run(map[int32]string{storeDown: "down", storeLossy: "lossy"}[mode], func(t *testing.T) {
			s := newSandboxes(1)
			p := startFaultProcess(t, s, Options{ReconcileEvery: time.Hour})
			spec := sleepers("once", 2)
			r, err := requestid.New(requestid.Job, "r-outage", &pelotonv1.CreateJobRequest{Spec: spec, RequestId: "r-outage"})
			if err != nil {
				t.Fatal(err)
			}
			p.fs.mode.Store(mode)
			_, err = p.jm.CreateJobOnce(context.Background(), spec, r)
			if code := apierrCode(err); code != "Unavailable" || !strings.Contains(err.Error(), "retry with the same request id") {
				t.Fatalf("create during an outage: %v (code %s), want Unavailable asking for a retry under the id", err, code)
			}
			p.fs.mode.Store(storeUp)
			id, err := p.jm.CreateJobOnce(context.Background(), spec, r)
			if err != nil {
				t.Fatalf("the retry: %v", err)
			}
			p.waitStates(t, id, pelotonv1.TaskState_RUNNING, 30*time.Second)
			if again, err := p.jm.CreateJobOnce(context.Background(), spec, r); err != nil || again != id {
				t.Fatalf("a second retry: %q, %v; want %q", again, err, id)
			}
			time.Sleep(time.Second) // a settle that would remove the job has run by now
			if js, _ := p.jm.ListJobs("", nil, "once"); len(js) != 1 || js[0].Id != id {
				t.Fatalf("jobs named once: %v; want %s alone", js, id)
			}
			if _, err := p.st.Get(context.Background(), jobRuntimeKey(id)); err != nil {
				t.Fatalf("the job's runtime in the store: %v", err)
			}
		})
	}
}
