package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// storeError is a write of a task or job record that failed. Whether the
// store applied it is not known: a timeout or a lost connection may come
// after etcd committed the write, and a write sent to a paused etcd may be
// applied when it resumes. The record is marked unsure, and its next write
// reads it back first (resolveTask, resolveJob), so that an applied write
// is taken as the truth instead of making every later compare-and-swap of
// the record fail.
type storeError struct {
	what string
	err  error
}

func (e *storeError) Error() string { return "store " + e.what + ": " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// isStoreError reports whether err is a failed write of a record (as
// opposed to a refused change: errSkip, an illegal transition, a check).
func isStoreError(err error) bool {
	var se *storeError
	return errors.As(err, &se)
}

// resolveTimeout bounds one read-back of an unsure record.
const resolveTimeout = 5 * time.Second

// resolveTask reads back an instance's record and publishes it when it
// is not the one in memory: after a write that may have been applied
// (unsure), or one whose compare found the record changed. The caller
// is the writer whose turn it is.
func (rw *recordWriter) resolveTask(ctx context.Context, j *job, inst uint32, t *task) error {
	m := rw.m
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	kv, err := m.store.Get(rctx, taskKey(j.id, inst))
	switch {
	case errors.Is(err, store.ErrNotFound):
		kv = store.KV{}
	case err != nil:
		return &storeError{what: fmt.Sprintf("task %s/%d (reading back an unsure write)", j.id, inst), err: err}
	}
	var rt *pelotonv1.TaskStatus
	if kv.Revision != 0 {
		rt = &pelotonv1.TaskStatus{}
		if err := proto.Unmarshal(kv.Value, rt); err != nil {
			return fmt.Errorf("jobmgr: decode %s: %w", kv.Key, err)
		}
		if rt.SpecVersion == 0 {
			rt.SpecVersion = 1
		}
	}
	base := t.cur.Load()
	next := *base
	next.unsure = false
	switch {
	case kv.Revision == base.rev:
		// The failed write was not applied; memory is the record.
	case kv.Revision == 0:
		// Only a deletion removes a record, and only a scale-down or a
		// job deletion deletes; neither fails ambiguously here. Treat it
		// as not yet written.
		next.rev = 0
	default:
		m.log.Info("a task record changed under this write; taking it", "job", j.id, "instance", inst,
			"state", rt.State, "run", rt.RunId, "was", base.rt.State)
		next.rt, next.rev = rt, kv.Revision
		next.availableSince = time.Time{}
		if available(rt, j.version(rt.SpecVersion).hasHealthCheck(inst)) {
			next.availableSince = base.availableSince
			if next.availableSince.IsZero() {
				next.availableSince = m.now()
			}
		}
	}
	t.publish(j, base, &next)
	m.watch.taskChanged(j.id, inst)
	return nil
}

// resolveJob is resolveTask for the job's runtime record. The caller is
// the writer whose turn it is.
func (rw *recordWriter) resolveJob(ctx context.Context, j *job) error {
	m := rw.m
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	kv, err := m.store.Get(rctx, jobRuntimeKey(j.id))
	if err != nil {
		return &storeError{what: fmt.Sprintf("job %s runtime (reading back an unsure write)", j.id), err: err}
	}
	base := j.view()
	if kv.Revision == base.rev {
		j.publishJob(&jobView{rt: base.rt, rev: base.rev})
		return nil
	}
	rt := &pelotonv1.JobStatus{}
	if err := proto.Unmarshal(kv.Value, rt); err != nil {
		return fmt.Errorf("jobmgr: decode %s: %w", kv.Key, err)
	}
	m.log.Info("a job write that seemed to fail was applied; taking it", "job", j.id, "state", rt.State)
	j.publishJob(&jobView{rt: rt, rev: kv.Revision})
	m.watch.jobChanged(j.id)
	return nil
}

// unsureCreate is the error of a create whose transaction failed without
// saying whether etcd applied it; settleCreate undoes or keeps it if it did.
type unsureCreate struct{ error }

func (u unsureCreate) Unwrap() error { return u.error }

// settleWithin bounds how long settleCreate keeps trying; settleLate is how
// long after etcd first answers it looks again, for a write that a paused
// etcd applies when it resumes.
const (
	settleWithin = 10 * time.Minute
	settleLate   = 10 * time.Second
)

// settleCreate settles a create that failed ambiguously, once the store
// answers, and again settleLate later. With keep nil, it deletes whatever
// of ops was applied, so the create leaves nothing, as its caller was
// told (the job was never in memory: nothing else refers to it).
// Otherwise a create that was applied (all or nothing: its runtime is
// there) is kept: keep(rev) hands the job to the engine.
func (m *Manager) settleCreate(id string, ops []store.Op, keep func(rev int64) bool) {
	m.spawn(func(ctx context.Context) {
		deadline := time.Now().Add(settleWithin)
		wait := storeRetryBackoff
		checks := 0
		for checks < 2 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			var err error
			if keep == nil {
				err = m.undoCreate(ctx, ops)
			} else {
				var rev int64
				rev, err = appliedCreate(ctx, m.store, id)
				if rev != 0 {
					if keep(rev) {
						m.log.Warn("a job create the store did not answer was applied; the job is kept (a retry under its request id answers with it)", "job", id)
					}
					return
				}
			}
			if err != nil {
				wait = min(wait*2, storeRetryMax)
				continue
			}
			checks++
			wait = settleLate
		}
		if checks < 2 {
			m.log.Error("could not settle a job create the store did not answer; a restart will", "job", id)
		}
	})
}

// appliedCreate is the revision of job id's runtime if the store has it
// (its create was applied, whole), or 0.
func appliedCreate(ctx context.Context, st store.Store, id string) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	kv, err := st.Get(rctx, jobRuntimeKey(id))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	return kv.Revision, err
}

// undoCreate deletes the keys of ops that exist.
func (m *Manager) undoCreate(ctx context.Context, ops []store.Op) error {
	var dels []store.Op
	for _, op := range ops {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		kv, err := m.store.Get(rctx, op.Key)
		cancel()
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return err
		}
		dels = append(dels, store.Delete(kv.Key, kv.Revision))
	}
	if len(dels) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	if _, err := m.store.Txn(rctx, dels...); err != nil {
		return err
	}
	m.log.Warn("a job create that failed was applied by the store later; removed it", "keys", len(dels))
	return nil
}
