package jobmgr

import (
	"context"
	"log/slog"
	"fmt"
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
	b := store.NewBatcher(st, store.BatcherOptions{})
	t.Cleanup(func() { _ = b.Close() })
	m := attachParts(&Manager{store: st, batcher: b, now: time.Now, log: slog.Default()})
	j := newJob("rec", jv, &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_RUNNING}, 1)
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
	b, _ := proto.Marshal(rec)
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
		testutil.Eventually(t, 10*time.Second, "the write queued", func() bool {
			j.task(0).writes.mu.Lock()
			defer j.task(0).writes.mu.Unlock()
			return len(j.task(0).writes.queued) == i+1
		})
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

// stallingStore holds its first Txn until release is closed.
type stallingStore struct {
	store.Store
	once    sync.Once
	txns    atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s *stallingStore) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	s.txns.Add(1)
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	return s.Store.Txn(ctx, ops...)
}
