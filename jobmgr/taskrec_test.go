package jobmgr

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// recordManager is a Manager with only what writes task records: a job of
// n instances, all RUNNING and unstored, on an in-memory store.
func recordManager(t *testing.T, n uint32, st store.Store) (*Manager, *job) {
	t.Helper()
	spec := &pelotonv1.JobSpec{Name: "rec", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"x"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}
	jv, err := newJobVersion(1, spec, time.Now(), "created")
	if err != nil {
		t.Fatal(err)
	}
	bt := store.NewBatcher(st, store.BatcherOptions{})
	t.Cleanup(func() { _ = bt.Close() })
	m := attachParts(&Manager{store: st, batcher: bt, now: time.Now, log: slog.Default()})
	jrt := &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_RUNNING}
	b, err := proto.Marshal(jrt)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := st.Txn(context.Background(), store.Put(jobRuntimeKey("rec"), b, store.MustNotExist))
	if err != nil {
		t.Fatal(err)
	}
	j := newJob("rec", jv, jrt, rev)
	m.eng.fillTasks(j)
	for i := range n {
		setRun(j, i, taskRunning, 1, time.Time{})
	}
	return m, j
}

// Writers of one instance that race never lose a write, whether they
// store it or change memory only, and what is stored is what memory
// says: every stored write counts one failure, every memory-only one
// bumps the desired run, and the counts per state stay whole.
func TestRacingTaskWritersLoseNothing(t *testing.T) {
	st := memstore.New(memstore.Options{})
	m, j := recordManager(t, 1, st)
	ctx := context.Background()
	const stored, volatile, each = 6, 3, 40
	var wg sync.WaitGroup
	errs := make(chan error, (stored+volatile)*each)
	for w := range stored + volatile {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var err error
				if w < stored {
					err = m.updateTask(ctx, j, 0, func(rt *pelotonv1.TaskStatus) error {
						rt.FailureCount++
						return nil
					})
				} else {
					err = m.updateTaskVolatile(j, 0, func(rt *pelotonv1.TaskStatus) error {
						rt.DesiredRunId++
						return nil
					})
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("write: %v", err)
	}
	v := j.task(0).view()
	if v.rt.FailureCount != stored*each || v.rt.DesiredRunId != volatile*each {
		t.Errorf("memory: failureCount %d, desiredRunId %d; want %d, %d", v.rt.FailureCount, v.rt.DesiredRunId, stored*each, volatile*each)
	}
	kv, err := st.Get(ctx, taskKey(j.id, 0))
	if err != nil {
		t.Fatal(err)
	}
	var rec pelotonv1.TaskStatus
	if err := proto.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.FailureCount != stored*each || kv.Revision != v.rev {
		t.Errorf("store: failureCount %d at rev %d; memory is at rev %d with %d", rec.FailureCount, kv.Revision, v.rev, v.rt.FailureCount)
	}
	if n := j.counts[taskRunning].Load(); n != 1 {
		t.Errorf("running count %d, want 1", n)
	}
}

// A record changed behind the manager's back (a write that timed out but
// was applied, another process) is read back and decided on: the write
// that finds it changed is neither lost nor failed.
func TestTaskWriteTakesARecordChangedUnderIt(t *testing.T) {
	st := memstore.New(memstore.Options{})
	m, j := recordManager(t, 1, st)
	ctx := context.Background()
	if err := m.updateTask(ctx, j, 0, func(rt *pelotonv1.TaskStatus) error { rt.FailureCount = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	// Someone else writes failure 5 over it.
	rec := cloneStatus(j.task(0).status())
	rec.FailureCount = 5
	b, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(ctx, store.Put(taskKey(j.id, 0), b, j.task(0).view().rev)); err != nil {
		t.Fatal(err)
	}
	if err := m.updateTask(ctx, j, 0, func(rt *pelotonv1.TaskStatus) error { rt.FailureCount++; return nil }); err != nil {
		t.Fatalf("write over a record changed under it: %v", err)
	}
	if got := j.task(0).status().FailureCount; got != 6 {
		t.Errorf("failureCount %d, want 6 (the record read back, then the write)", got)
	}
	if v := j.task(0).view(); v.unsure {
		t.Error("the view is still unsure after the read-back")
	}
}

// A reader is never held up by a write on its way to the store, and the
// writers that queue behind it share one store write.
func TestTaskReaderDoesNotWaitForAWrite(t *testing.T) {
	st := &stallingStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	m, j := recordManager(t, 1, st)
	st.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		done <- m.updateTask(context.Background(), j, 0, func(rt *pelotonv1.TaskStatus) error { rt.Message = "slow"; return nil })
	}()
	<-st.entered // the write is in the store call
	if got := j.task(0).status().Message; got == "slow" {
		t.Errorf("a reader saw %q before the write was stored", got)
	}
	// Writers that come meanwhile queue behind it, and their decisions go
	// to the store together, as one record, in the order they came.
	const queued = 3
	errs := make(chan error, queued)
	for i := range queued {
		go func() {
			errs <- m.updateTask(context.Background(), j, 0, func(rt *pelotonv1.TaskStatus) error {
				rt.FailureCount++
				rt.Message += fmt.Sprint(i)
				return nil
			})
		}()
		testutil.Eventually(t, 10*time.Second, "the write queued", func() bool { return j.task(0).writes.waiting() == i+1 })
	}
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range queued {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	v := j.task(0).view()
	if v.rt.Message != "slow012" || v.rt.FailureCount != queued {
		t.Errorf("after the writes: message %q, failureCount %d; want %q, %d", v.rt.Message, v.rt.FailureCount, "slow012", queued)
	}
	if n := st.txns.Load(); n != 2 {
		t.Errorf("%d store writes for one write and %d queued behind it; want 2", n, queued)
	}
}

// stallingStore holds its first Txn after armed is set until release is
// closed, and counts the Txns from then on.
type stallingStore struct {
	store.Store
	armed   atomic.Bool
	once    sync.Once
	txns    atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s *stallingStore) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	if !s.armed.Load() {
		return s.Store.Txn(ctx, ops...)
	}
	s.txns.Add(1)
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	return s.Store.Txn(ctx, ops...)
}

// The job's runtime record follows the same rules: racing writers lose
// nothing, and a reader does not wait for a write on its way.
func TestRacingJobWritersLoseNothing(t *testing.T) {
	st := &stallingStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	m, j := recordManager(t, 1, st)
	st.armed.Store(true)
	ctx := context.Background()
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				errs <- m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
					rt.Message += "x"
					return nil
				})
			}
		}()
	}
	<-st.entered // the first write is in the store call
	if got := j.status().Message; got != "" {
		t.Errorf("a reader saw %q before the first write was stored", got)
	}
	// The other writers queue behind it; on a busy machine they may not
	// have started yet when the first write stalls.
	testutil.Eventually(t, 10*time.Second, "the other writers queued", func() bool { return j.writes.waiting() == writers-1 })
	close(st.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("write: %v", err)
		}
	}
	rec := j.view()
	if len(rec.rt.Message) != writers*each {
		t.Errorf("memory: %d changes, want %d", len(rec.rt.Message), writers*each)
	}
	kv, err := st.Get(ctx, jobRuntimeKey(j.id))
	if err != nil {
		t.Fatal(err)
	}
	var stored pelotonv1.JobStatus
	if err := proto.Unmarshal(kv.Value, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Message != rec.rt.Message || kv.Revision != rec.rev {
		t.Errorf("store: %d changes at rev %d; memory %d at rev %d", len(stored.Message), kv.Revision, len(rec.rt.Message), rec.rev)
	}
	if n := st.txns.Load(); n >= writers*each {
		t.Errorf("%d store writes for %d changes: the writers that queued did not share theirs", n, writers*each)
	}
}

// An update's record too: readers do not wait for a write on its way, and
// the changes queued behind it are stored together, in order.
func TestUpdateRecordWritesInTurns(t *testing.T) {
	st := &stallingStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	m, j := recordManager(t, 2, st)
	ctx := context.Background()
	x := m.upd.newUpdateRecord("u1", j.id, &pelotonv1.UpdateSpec{BatchSize: 1}, 1, 2, []uint32{0, 1}, "update").record()
	b, err := proto.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := st.Txn(ctx, store.Put(updateKey(x.Id), b, store.MustNotExist))
	if err != nil {
		t.Fatal(err)
	}
	u := newUpdate(x, rev)
	st.armed.Store(true)
	done := make(chan error, 3)
	go func() {
		done <- m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error { x.Status.Message = "step"; return nil })
	}()
	<-st.entered
	if got := u.record().Status.Message; got == "step" {
		t.Errorf("a reader saw %q before it was stored", got)
	}
	go func() {
		done <- m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
			x.Status.State, x.Status.PausedFrom, x.Status.Message = updatePaused, x.Status.State, "paused by user"
			return nil
		})
	}()
	testutil.Eventually(t, 10*time.Second, "the pause queued", func() bool { return u.writes.waiting() == 1 })
	go func() {
		// Decided on the paused record: a resume, in order after the pause.
		done <- m.upd.saveUpdate(ctx, u, func(x *pelotonv1.Update) error {
			if x.Status.State != updatePaused {
				return fmt.Errorf("resume decided on %s, not on the pause before it", x.Status.State)
			}
			x.Status.State, x.Status.PausedFrom, x.Status.Message = x.Status.PausedFrom, 0, "resumed by user"
			return nil
		})
	}()
	testutil.Eventually(t, 10*time.Second, "the resume queued", func() bool { return u.writes.waiting() == 2 })
	close(st.release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := u.record()
	if got.Status.State != updateRollingForward || got.Status.Message != "resumed by user" {
		t.Errorf("record: %s %q", got.Status.State, got.Status.Message)
	}
	if n := st.txns.Load(); n != 2 {
		t.Errorf("%d store writes for a write and two queued behind it; want 2", n)
	}
	kv, err := st.Get(ctx, updateKey(x.Id))
	if err != nil || kv.Revision != u.rec.Load().rev {
		t.Errorf("stored at %d, memory at %d (%v)", kv.Revision, u.rec.Load().rev, err)
	}
}
