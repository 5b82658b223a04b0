package jobmgr

import (
	"context"
	"errors"
	"fmt"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// A job's runtime record is published as an instance's is (taskrec.go):
// readers load the job's view and never wait; writers take turns (turns.go),
// and the decisions of the writers that queued behind a write go to the
// store together, in one transaction, when it lands.

// jobView is one published state of a job's runtime record.
type jobView struct {
	rt *pelotonv1.JobStatus
	// rev is the store revision rt was written at.
	rev int64
	// unsure says the last write failed in a way that does not tell
	// whether it was applied: the next write reads the record back first.
	unsure bool
}

// view is the job's runtime record as last written. The caller must not
// change it.
func (j *job) view() *jobView { return j.rec.Load() }

// status is the job's runtime as last written. The caller must not
// change it.
func (j *job) status() *pelotonv1.JobStatus { return j.rec.Load().rt }

// publishJob makes v the job's view. Only the writer whose turn it is
// publishes (and newJob, before the job is visible).
func (j *job) publishJob(v *jobView) {
	j.rec.Store(v)
	j.goalKilled.Store(v.rt.GoalState == pelotonv1.JobState_JOB_KILLED)
}

// jobWrite is one change of a job's runtime record, in its queue of writes.
type jobWrite struct {
	// decide changes a copy of the runtime; it may leave it unchanged.
	decide func(rt *pelotonv1.JobStatus) error
	// extra are records to write in the same transaction (a new spec
	// version, an update); a write with extras is stored even if decide
	// changes nothing.
	extra []store.Op
	// inTurn, if set, runs in the write's turn instead, with no write of
	// the job on its way: a decision on the job's published state that
	// must not race with a write (unloading a finished job).
	inTurn func()

	err error
	// rev is the revision the write was stored at (0: nothing stored).
	rev int64
}

// maxJobConflicts bounds how often a change is decided again after the
// job's record changed under it (a write that seemed to fail but was
// applied).
const maxJobConflicts = 4

// writeJob carries out w in its turn and returns its error.
func (rw *recordWriter) writeJob(ctx context.Context, j *job, w *jobWrite) error {
	m := rw.m
	j.writes.take(w, func(batch []*jobWrite) { m.rw.flushJob(batchContext(ctx, len(batch)), j, batch) })
	return w.err
}

// flushJob carries out a batch of writes in order: the changes between two
// inTurn calls go to the store together.
func (rw *recordWriter) flushJob(ctx context.Context, j *job, batch []*jobWrite) {
	m := rw.m
	start := 0
	for i, w := range batch {
		if w.inTurn == nil {
			continue
		}
		m.rw.commitJob(ctx, j, batch[start:i])
		w.inTurn()
		start = i + 1
	}
	m.rw.commitJob(ctx, j, batch[start:])
}

// commitJob applies the changes of ws in order to the job's runtime and
// stores the result with their extra records in one transaction. Should
// that fail with more than one change in it, each is tried alone, so that
// one change's failure is its own.
func (rw *recordWriter) commitJob(ctx context.Context, j *job, ws []*jobWrite) {
	m := rw.m
	if len(ws) == 0 {
		return
	}
	for conflicts := 0; ; conflicts++ {
		fail := func(err error) {
			for _, w := range ws {
				w.err = err
			}
		}
		j.mu.Lock()
		unloaded := j.unloaded
		j.mu.Unlock()
		if unloaded {
			fail(errUnloaded(j.id))
			return
		}
		base := j.view()
		if base.unsure {
			if err := m.rw.resolveJob(ctx, j); err != nil {
				fail(err)
				return
			}
			base = j.view()
		}
		rt, decided, extra := base.rt, []*jobWrite(nil), []store.Op(nil)
		for _, w := range ws {
			next := proto.Clone(rt).(*pelotonv1.JobStatus)
			w.err, w.rev = w.decide(next), 0
			if w.err == nil && proto.Equal(next, rt) && len(w.extra) == 0 {
				continue // nothing to write
			}
			if w.err == nil {
				w.err = checkJobTransition(rt.State, next.State)
			}
			if w.err != nil {
				continue
			}
			rt = next
			decided = append(decided, w)
			extra = append(extra, w.extra...)
		}
		if len(decided) == 0 {
			return
		}
		rev, err := m.rw.putJob(ctx, j, base, rt, extra)
		if err != nil && len(decided) > 1 {
			for _, w := range decided {
				m.rw.commitJob(ctx, j, []*jobWrite{w})
			}
			return
		}
		if errors.Is(err, store.ErrConflict) && len(extra) == 0 && conflicts < maxJobConflicts {
			if err = m.rw.resolveJob(ctx, j); err == nil {
				continue // decide again on the record read back
			}
		}
		if err != nil {
			if !errors.Is(err, errEncode) && !errors.Is(err, store.ErrConflict) {
				j.publishJob(&jobView{rt: base.rt, rev: base.rev, unsure: true})
			}
			fail(err)
			return
		}
		j.publishJob(&jobView{rt: rt, rev: rev})
		m.watch.jobChanged(j.id)
		for _, w := range decided {
			w.rev = rev
		}
		return
	}
}

// putJob stores rt as the job's runtime if the record is still at base's
// revision, with the archive's index entries for the change and extra, in
// one transaction. The caller's cancel does not reach a transaction with
// extra records: a caller giving up mid-write would leave etcd free to
// apply a spec version this process then does not know, and every later
// version would conflict with it; the store's own request timeout bounds
// it.
func (rw *recordWriter) putJob(ctx context.Context, j *job, base *jobView, rt *pelotonv1.JobStatus, extra []store.Op) (int64, error) {
	m := rw.m
	b, err := proto.Marshal(rt)
	if err != nil {
		return 0, fmt.Errorf("jobmgr: %w job %s runtime: %w", errEncode, j.id, err)
	}
	idx, err := m.arch.indexOps(j, base.rt, rt)
	if err != nil {
		return 0, err
	}
	ops := append([]store.Op{store.Put(jobRuntimeKey(j.id), b, base.rev)}, idx...)
	ops = append(ops, extra...)
	if len(extra) > 0 {
		ctx = context.WithoutCancel(ctx)
	}
	rev, err := m.store.Txn(ctx, ops...)
	if err != nil {
		return 0, &storeError{what: fmt.Sprintf("job %s runtime", j.id), err: err}
	}
	metrics.StoreWrites.WithLabelValues("job").Add(float64(1 + len(extra)))
	return rev, nil
}
