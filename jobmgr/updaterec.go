package jobmgr

import (
	"context"
	"fmt"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// An update's record is published as an instance's is (taskrec.go): the
// API's readers and the driver load it and never wait, and its writers
// (the driver's steps, pause, resume, abort, rollback) take turns
// (turns.go), the changes queued behind a write going to the store
// together when it lands. The driver's memory of an update (baseline,
// done, started, ...) has a lock of its own, never held across a store
// call or a call to the SLA evaluator.

// updateView is one published state of an update's record.
type updateView struct {
	u *pelotonv1.Update
	// rev is the store revision u was written at.
	rev int64
}

// record is the update's record as last written. The caller must not
// change it.
func (u *update) record() *pelotonv1.Update { return u.rec.Load().u }

// snapshot is a copy of the update's record the caller may change.
func (u *update) snapshot() *pelotonv1.Update {
	return proto.Clone(u.record()).(*pelotonv1.Update)
}

// publish makes x, written at rev, the update's record. Only the writer
// whose turn it is publishes (and whoever makes the update, before it is
// visible).
func (u *update) publish(x *pelotonv1.Update, rev int64) {
	u.rec.Store(&updateView{u: x, rev: rev})
}

// targetOf is the version update x rolls out now: the new spec, or the
// copy of the old one while rolling back.
func targetOf(x *pelotonv1.Update) uint64 {
	if x.RollbackVersion != 0 {
		return x.RollbackVersion
	}
	return x.ToVersion
}

// updateWrite is one change of an update's record, in its queue of writes.
type updateWrite struct {
	decide func(x *pelotonv1.Update) error
	err    error
}

// saveUpdate stores u's record after fn changed a copy of it, in its turn;
// the state change must be in the table. fn may leave the copy unchanged
// (nothing is written) or fail (its error is returned, nothing written).
func (up *Updates) saveUpdate(ctx context.Context, u *update, fn func(x *pelotonv1.Update) error) error {
	w := &updateWrite{decide: fn}
	u.writes.take(w, func(batch []*updateWrite) { up.flushUpdate(batchContext(ctx, len(batch)), u, batch) })
	return w.err
}

// flushUpdate applies a batch's changes in order to the update's record
// and stores the result in one write. Should it fail with more than one
// change in it, each is tried alone, so that a failure is its own.
func (up *Updates) flushUpdate(ctx context.Context, u *update, batch []*updateWrite) {
	m := up.m
	base := u.rec.Load()
	x, decided := base.u, []*updateWrite(nil)
	for _, w := range batch {
		next := proto.Clone(x).(*pelotonv1.Update)
		if w.err = w.decide(next); w.err != nil || proto.Equal(next, x) {
			continue
		}
		if err := checkUpdateTransition(x.Status.State, next.Status.State); err != nil {
			w.err = apierr.FailedPrecondition("update %s: %v", x.Id, err)
			continue
		}
		x = next
		decided = append(decided, w)
	}
	if len(decided) == 0 {
		return
	}
	x.Status.UpdateTime = timestamppb.New(m.now())
	rev, err := up.putUpdate(ctx, x, base.rev)
	if err != nil && len(decided) > 1 {
		for _, w := range decided {
			up.flushUpdate(ctx, u, []*updateWrite{w})
		}
		return
	}
	if err != nil {
		decided[0].err = err
		return
	}
	if x.Status.State != base.u.Status.State {
		m.log.Info("update state", "update", x.Id, "job", x.JobId, "from", base.u.Status.State, "to", x.Status.State, "message", x.Status.Message)
	}
	u.publish(x, rev)
}

// putUpdate stores x if its record is still at rev.
func (up *Updates) putUpdate(ctx context.Context, x *pelotonv1.Update, rev int64) (int64, error) {
	b, err := proto.Marshal(x)
	if err != nil {
		return 0, fmt.Errorf("jobmgr: encode update %s: %w", x.Id, err)
	}
	written, err := up.m.store.Txn(ctx, store.Put(updateKey(x.Id), b, rev))
	if err != nil {
		return 0, apierr.Unavailable("store update %s: %v", x.Id, err)
	}
	metrics.StoreWrites.WithLabelValues("update").Inc()
	return written, nil
}
