package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// An instance's state is published, not locked. Readers (the API, the
// engine's evaluation, reconcile, drains) load the task's current view and
// read it without waiting for anyone: a view once published is never
// changed, only replaced.
//
// Writers take turns per instance, but no lock is held across the store
// write: a writer that finds another's write on its way queues its
// decision and waits; when the write lands, the first writer queued takes
// every decision queued behind it, applies them in order to the state
// just published, and stores the result as one record (group commit per
// instance). So decisions are applied one after another, in the order
// they came, each on the state the one before left, as a lock would have
// them; but the lock is only ever held to queue, and a slow etcd delays
// the writers of the instance it is writing, never its readers. A batch
// of only memory-only (volatile) decisions is published without a write;
// one with any stored decision writes them all along.

// taskView is one published state of an instance.
type taskView struct {
	rt *pelotonv1.TaskStatus
	// rev is the store revision rt was written at (0: no record yet). A
	// volatile change keeps the revision of the record it changed.
	rev int64
	// availableSince is when the current run last became available
	// (running, and healthy if it has a health check); zero while it is not.
	availableSince time.Time
	// streak counts the runs of a long-running instance that ended in a row
	// without staying up for stableRun; it sizes the restart backoff.
	streak uint32
	// blocked counts the launches in a row that the backend refused with
	// hostmgr.ErrLaunchBlocked; it sizes their retry backoff.
	blocked uint32
	// unsure says the last write of this record failed in a way that does
	// not tell whether it was applied (a timeout, the store going away, a
	// conflict): the next write reads the record back first (resolve.go).
	unsure bool
}

// newTask is an instance whose state is rt, stored at rev (0: not yet).
func newTask(rt *pelotonv1.TaskStatus, rev int64) *task {
	t := &task{}
	t.cur.Store(&taskView{rt: rt, rev: rev})
	return t
}

// view is the instance's current state. The caller must not change it.
func (t *task) view() *taskView { return t.cur.Load() }

// status is the instance's current runtime. The caller must not change it.
func (t *task) status() *pelotonv1.TaskStatus { return t.cur.Load().rt }

// snap is the part of a view decisions read.
func (v *taskView) snap() taskSnap {
	return taskSnap{rt: v.rt, streak: v.streak, blocked: v.blocked}
}

// publish makes next the instance's view in place of base, and keeps the
// job's counts in step. Only the writer whose turn it is publishes.
func (t *task) publish(j *job, base, next *taskView) {
	t.cur.Store(next)
	if base.rt.State != next.rt.State {
		j.counts[base.rt.State].Add(-1)
		j.counts[next.rt.State].Add(1)
	}
}

// amend publishes a copy of the current view changed by fn, in memory
// only, in its turn: for the counters that go with a view but are no
// record's.
func (rw *recordWriter) amend(j *job, inst uint32, fn func(v *taskView)) {
	m := rw.m
	_ = m.rw.queueTaskWrite(context.Background(), j, inst, &taskWrite{amend: fn})
}

// taskWrite is one decision about an instance, in the queue of its writes.
type taskWrite struct {
	persist bool
	via     []taskState
	decide  func(prev taskSnap) (taskSnap, error)
	// amend, if set, changes the view's memory-only counters instead.
	amend func(v *taskView)

	err error
	// from and to are the states the decision took the instance between.
	from, to taskState
}

// maxTaskConflicts bounds how often one batch is decided again after the
// record changed under it (a write that seemed to fail but was applied,
// or a record changed by something else than this process's writers).
const maxTaskConflicts = 8

// updateTask applies fn to a copy of an instance's runtime, checks the
// transition against the table, stores it through the group committer
// with compare-and-swap, and keeps the job's counts in step. fn may
// return errSkip to change nothing. fn runs in the writer's turn, and
// again should the record have changed under it: it must only decide.
func (m *Manager) updateTask(ctx context.Context, j *job, inst uint32, fn func(rt *pelotonv1.TaskStatus) error) error {
	return m.applyTask(ctx, j, inst, true, fn)
}

// updateTaskVolatile is updateTask for changes a restart can re-derive: it
// changes memory only, and the next persisted update writes it along.
func (m *Manager) updateTaskVolatile(j *job, inst uint32, fn func(rt *pelotonv1.TaskStatus) error) error {
	return m.applyTask(context.Background(), j, inst, false, fn)
}

func (m *Manager) applyTask(ctx context.Context, j *job, inst uint32, persist bool, fn func(rt *pelotonv1.TaskStatus) error) error {
	return m.applyTaskVia(ctx, j, inst, persist, nil, fn)
}

// applyTaskVia is applyTask for a write that takes the task through the
// states via on its way to the state fn sets, in one record: each step
// must be in the table, and each is in the task's history. A run patched
// in place ends and its successor is launched this way (patch.go), so
// that no restart can find the one without the other.
func (m *Manager) applyTaskVia(ctx context.Context, j *job, inst uint32, persist bool, via []taskState, fn func(rt *pelotonv1.TaskStatus) error) error {
	return m.writeTask(ctx, j, inst, persist, via, func(prev taskSnap) (taskSnap, error) {
		next := prev
		next.rt = cloneStatus(prev.rt)
		return next, fn(next.rt)
	})
}

// writeTask is applyTaskVia for a decision that makes the next state
// itself: decide gets the current one, which it must not change, and
// returns a new one (never the runtime it got), or errSkip.
func (m *Manager) writeTask(ctx context.Context, j *job, inst uint32, persist bool, via []taskState, decide func(prev taskSnap) (taskSnap, error)) error {
	return m.rw.queueTaskWrite(ctx, j, inst, &taskWrite{persist: persist, via: via, decide: decide})
}

// queueTaskWrite carries out w in its turn: at once if no write of the
// instance is on its way, else after it, with the others queued meanwhile
// (turns.go). The writer whose write is first in a batch carries out the
// whole batch with its own context.
func (rw *recordWriter) queueTaskWrite(ctx context.Context, j *job, inst uint32, w *taskWrite) error {
	m := rw.m
	t := j.task(inst)
	if t == nil {
		return fmt.Errorf("jobmgr: instance %d of job %s has no task yet", inst, j.id)
	}
	t.writes.take(w, func(batch []*taskWrite) { m.rw.flushTask(batchContext(ctx, len(batch)), j, inst, t, batch) })
	return w.err
}

// flushTask applies batch's decisions in order to the instance's view,
// stores the result if any decision is to be stored, publishes it, and
// sets each write's error.
func (rw *recordWriter) flushTask(ctx context.Context, j *job, inst uint32, t *task, batch []*taskWrite) {
	m := rw.m
	for conflicts := 0; ; conflicts++ {
		base := t.cur.Load()
		if base.unsure && anyStored(batch) {
			if err := m.rw.resolveTask(ctx, j, inst, t); err != nil {
				for _, w := range batch {
					w.err = err
				}
				return
			}
			base = t.cur.Load()
		}
		view, decided := m.rw.decideBatch(j, inst, base, batch)
		if view == base {
			return // nothing changes
		}
		if anyStored(decided) {
			rev, err := m.rw.putTask(ctx, j, inst, view.rt, base.rev)
			if errors.Is(err, errEncode) && len(decided) > 1 {
				// One decision's record cannot be encoded: carry them
				// out one by one, so that only it fails.
				for _, w := range batch {
					m.rw.flushTask(ctx, j, inst, t, []*taskWrite{w})
				}
				return
			}
			if errors.Is(err, store.ErrConflict) && conflicts < maxTaskConflicts {
				if err = m.rw.resolveTask(ctx, j, inst, t); err == nil {
					continue // decide again on the record read back
				}
			}
			if err != nil {
				if !errors.Is(err, errEncode) {
					unsure := *base
					unsure.unsure = true
					t.publish(j, base, &unsure)
				}
				for _, w := range decided {
					w.err = err
				}
				return
			}
			view.rev = rev
		}
		t.publish(j, base, view)
		m.watch.taskChanged(j.id, inst)
		for _, w := range decided {
			steps(w.from, w.via, w.to, func(s taskState) { metrics.TaskTransitions.WithLabelValues(s.String()).Inc() })
		}
		return
	}
}

// anyStored reports whether any of ws is to be stored.
func anyStored(ws []*taskWrite) bool {
	for _, w := range ws {
		if w.persist {
			return true
		}
	}
	return false
}

// decideBatch applies each write's decision to the view the one before
// left, starting from base; a decision that fails (errSkip, a transition
// not in the table) gets its error and changes nothing. It returns the
// last view (base itself if nothing changed) and the decisions taken.
func (rw *recordWriter) decideBatch(j *job, inst uint32, base *taskView, batch []*taskWrite) (*taskView, []*taskWrite) {
	m := rw.m
	view := base
	var decided []*taskWrite
	for _, w := range batch {
		w.err = nil
		if w.amend != nil {
			next := *view
			w.amend(&next)
			view = &next
			continue
		}
		next, err := m.rw.decideTask(j, inst, view, w.via, w.decide)
		if err != nil {
			w.err = err
			continue
		}
		w.from, w.to = view.rt.State, next.rt.State
		view = next
		decided = append(decided, w)
	}
	return view, decided
}

// errEncode marks a record that could not be encoded: the record's fault
// (a string that is not UTF-8), not the store's.
var errEncode = errors.New("encode")

// putTask stores rt as the instance's record if the record is still at
// rev (0: there is none yet), and returns the revision written.
func (rw *recordWriter) putTask(ctx context.Context, j *job, inst uint32, rt *pelotonv1.TaskStatus, rev int64) (int64, error) {
	m := rw.m
	b, err := proto.Marshal(rt)
	if err != nil {
		// Nothing was written, memory stays as it was, and it is no
		// storeError, since writing again fails the same way.
		return 0, fmt.Errorf("jobmgr: %w task %s/%d: %w", errEncode, j.id, inst, err)
	}
	written, err := m.batcher.Write(ctx, store.Put(taskKey(j.id, inst), b, rev))
	if err != nil {
		return 0, &storeError{what: fmt.Sprintf("task %s/%d", j.id, inst), err: err}
	}
	metrics.StoreWrites.WithLabelValues("task").Inc()
	return written, nil
}

// decideTask makes the view that follows base: decide's state, the path
// to it checked against the table and kept in the history, and the time
// the run became available. The view keeps base's revision.
func (rw *recordWriter) decideTask(j *job, inst uint32, base *taskView, via []taskState, decide func(prev taskSnap) (taskSnap, error)) (*taskView, error) {
	m := rw.m
	next, err := decide(base.snap())
	if err != nil {
		return nil, err
	}
	rt := next.rt
	if err := checkPath(base.rt.State, via, rt.State); err != nil {
		return nil, err
	}
	rt.UpdateTime = timestamppb.New(m.now())
	steps(base.rt.State, via, rt.State, func(s taskState) {
		run, reason := rt.RunId, rt.Reason
		if isTerminal(s) && s != rt.State {
			// The end of the run a new one replaces.
			run, reason = base.rt.RunId, next.endReason
		}
		rt.History = append(rt.History, &pelotonv1.TaskTransition{State: s, RunId: run, Time: rt.UpdateTime, Reason: reason})
	})
	if n := len(rt.History); n > maxHistory {
		rt.History = append(rt.History[:0:0], rt.History[n-maxHistory:]...)
	}
	v := &taskView{rt: rt, rev: base.rev, streak: next.streak, blocked: next.blocked}
	if available(rt, j.version(rt.SpecVersion).hasHealthCheck(inst)) {
		v.availableSince = base.availableSince
		if v.availableSince.IsZero() {
			v.availableSince = rt.UpdateTime.AsTime()
		}
	}
	return v, nil
}
