package jobmgr

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"google.golang.org/protobuf/proto"
)

// The collector moves finished jobs out of the live store. A job whose
// time to live after it finished has passed (spec.ttlSecondsAfterFinished,
// else CollectOptions.TTL) is written to the history store whole (its
// versions, final status, updates and every instance's final run), and
// only once that write has succeeded is it removed from etcd: its
// runtime and index entry in one transaction, with a deleting mark, then
// its other records (index.go). A process killed between the two archives
// the job again at its next start (Put is idempotent: one record), and a
// removal cut short is finished at the next start.
//
// It is paced: a pass every Interval removes at most KeysPerSecond records'
// worth of jobs per second, in batches of PutBatch jobs per archive write,
// so it never competes with launches for the store. It leaves alone a job
// that something still refers to: one with an update that has not ended,
// one created with a request id less than requestRetryWindow ago (a client
// whose create timed out retries within it; a later retry still gets the
// job's id, since the request's record outlives the job in the store, and
// reads the job from the archive), and a part of a federated service (the
// federation removes those itself).

// DefaultFinishedJobTTL is how long a finished job stays in the live store
// when neither its spec nor the cluster says otherwise.
const DefaultFinishedJobTTL = 24 * time.Hour

// CollectOptions tunes the collector.
type CollectOptions struct {
	// TTL is how long a finished job stays in the live store unless its
	// spec says (--finished-job-ttl); 0 moves it out as soon as it has
	// finished.
	TTL time.Duration
	// Interval is the time between passes (default 1s).
	Interval time.Duration
	// KeysPerSecond bounds the records removed per second (default 2,000).
	KeysPerSecond int
	// PutBatch is how many jobs one archive write holds (default 50).
	PutBatch int
}

func (o CollectOptions) withDefaults() CollectOptions {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.KeysPerSecond <= 0 {
		o.KeysPerSecond = 2000
	}
	if o.PutBatch <= 0 {
		o.PutBatch = 50
	}
	return o
}

// requestRetryWindow is how long after its create a job created with a
// request id stays live at least.
const requestRetryWindow = time.Minute

// collectRemovers is how many archived jobs are removed at once.
const collectRemovers = 16

// collectBackoffMax bounds the wait after the archive failed.
const collectBackoffMax = 30 * time.Second

// collectLoop runs passes until ctx ends. Started by Start when the
// manager has a history store.
func (ar *Archive) collectLoop(ctx context.Context) {
	m := ar.m
	wait := m.collect.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		_, err := m.arch.collectPass(ctx)
		if ctx.Err() == nil {
			m.arch.setArchiveError(err)
		}
		switch {
		case err == nil:
			wait = m.collect.Interval
		case ctx.Err() != nil:
			return
		default:
			wait = min(max(wait*2, m.collect.Interval), collectBackoffMax)
			m.log.Warn("collector of finished jobs: the archive did not take them; nothing was removed, retrying", "in", wait, "err", err)
		}
	}
}

// archiveErr is the collector's last archive failure (nil after a pass
// that succeeded).
type archiveErr struct {
	mu  sync.Mutex
	err error
}

func (ar *Archive) setArchiveError(err error) {
	m := ar.m
	m.archiveErr.mu.Lock()
	m.archiveErr.err = err
	m.archiveErr.mu.Unlock()
}

// ArchiveError is why the last pass of the collector could not archive
// finished jobs, or nil: /readyz reports it (degraded).
func (ar *Archive) ArchiveError() error {
	m := ar.m
	m.archiveErr.mu.Lock()
	defer m.archiveErr.mu.Unlock()
	return m.archiveErr.err
}

// collectCandidate is a job whose time to live has passed.
type collectCandidate struct {
	id      string
	expired time.Time
}

// collectPass archives and removes the jobs whose time has come, up to one
// interval's budget. It returns how many it removed.
func (ar *Archive) collectPass(ctx context.Context) (int, error) {
	m := ar.m
	now := m.now()
	budget := max(1, int(float64(m.collect.KeysPerSecond)*m.collect.Interval.Seconds()))
	cands := m.arch.collectCandidates(now)
	removed := 0
	for len(cands) > 0 && budget > 0 {
		var batch []*job
		var archive []*history.Job
		for len(cands) > 0 && len(batch) < m.collect.PutBatch && budget > 0 {
			c := cands[0]
			cands = cands[1:]
			j, err := m.getJob(c.id)
			if err != nil || j == nil {
				continue // deleted meanwhile, or held
			}
			h, ok := m.arch.archiveRecord(j, now)
			if !ok {
				continue
			}
			batch = append(batch, j)
			archive = append(archive, h)
			budget -= 2 + len(h.Tasks) + len(h.Versions) + len(h.Updates)
		}
		if len(batch) == 0 {
			break
		}
		if err := m.history.Put(ctx, archive...); err != nil {
			metrics.JobsCollectFailures.Inc()
			return removed, err
		}
		metrics.JobsArchived.Add(float64(len(archive)))
		// A removal is a few round trips to the store; several at once
		// share the batcher's commits.
		var wg sync.WaitGroup
		var n atomic.Int32
		sem := make(chan struct{}, collectRemovers)
		for i, j := range batch {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if m.arch.removeArchived(ctx, j, archive[i]) {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		removed += int(n.Load())
	}
	return removed, nil
}

// collectCandidates are the finished jobs whose time to live has passed by
// now, those that expired first first.
func (ar *Archive) collectCandidates(now time.Time) []collectCandidate {
	m := ar.m
	var out []collectCandidate
	due := func(completed time.Time, ttl *uint32) (time.Time, bool) {
		d := m.collect.TTL
		if ttl != nil {
			d = time.Duration(*ttl) * time.Second
		}
		at := completed.Add(d)
		return at, !at.After(now)
	}
	m.mu.RLock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	for id, f := range m.finished {
		// What archiveRecord would hold the job for, known without
		// loading it.
		if _, fed := f.summary.GetSpec().GetLabels()[sla.GroupLabel]; fed ||
			(f.requestID != "" && now.Before(f.summary.GetStatus().GetCreateTime().AsTime().Add(requestRetryWindow))) {
			continue
		}
		if at, ok := due(finishedTime(f.summary.GetStatus()), f.ttl); ok {
			out = append(out, collectCandidate{id, at})
		}
	}
	m.mu.RUnlock()
	for _, j := range jobs {
		rec := j.view()
		st := rec.rt
		terminal := isJobTerminal(st.GetState()) && !rec.unsure
		j.mu.Lock()
		notBefore := j.collectNotBefore
		j.mu.Unlock()
		if !terminal || now.Before(notBefore) {
			continue
		}
		if at, ok := due(finishedTime(st), j.spec().TtlSecondsAfterFinished); ok {
			out = append(out, collectCandidate{j.id, at})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].expired.Equal(out[b].expired) {
			return out[a].expired.Before(out[b].expired)
		}
		return out[a].id < out[b].id
	})
	return out
}

// collectRecheck is how long the collector leaves a job alone that
// something still refers to before it looks again.
const collectRecheck = time.Minute

// archiveRecord is j as the archive keeps it, or false when j must stay
// live for now: it is not finished (an instance still runs), an update of
// it has not ended, a retry of its create may still ask for it, or it is
// a federated service's part.
func (ar *Archive) archiveRecord(j *job, now time.Time) (*history.Job, bool) {
	m := ar.m
	hold := func(why string) (*history.Job, bool) {
		m.log.Debug("collector leaves a finished job live", "job", j.id, "why", why)
		j.mu.Lock()
		j.collectNotBefore = now.Add(collectRecheck)
		j.mu.Unlock()
		return nil, false
	}
	if u := m.upd.activeUpdate(j.id); u != nil {
		return hold("update " + u.snapshot().Id + " has not ended")
	}
	if _, ok := j.spec().GetLabels()[sla.GroupLabel]; ok {
		return hold("a federated service's part: the federation removes it")
	}
	p := m.jobProto(j)
	if !isJobTerminal(p.Status.State) {
		return nil, false
	}
	if j.requestID != "" && now.Before(p.Status.GetCreateTime().AsTime().Add(requestRetryWindow)) {
		return hold("a retry of its create (request id " + j.requestID + ") may still ask for it")
	}
	h := &history.Job{Cluster: m.cluster, ID: j.id, Versions: j.history(), Status: p.Status, ArchiveTime: now}
	for _, t := range j.tasks() {
		if t == nil {
			h.Tasks = append(h.Tasks, nil)
			continue
		}
		tv := t.view()
		rt := proto.Clone(tv.rt).(*pelotonv1.TaskStatus)
		if isActive(rt.State) {
			return hold("an instance still runs")
		}
		h.Tasks = append(h.Tasks, rt)
	}
	m.mu.RLock()
	for _, u := range m.updates {
		if s := u.snapshot(); s.JobId == j.id {
			h.Updates = append(h.Updates, s)
		}
	}
	m.mu.RUnlock()
	sort.Slice(h.Updates, func(a, b int) bool {
		return h.Updates[a].GetStatus().GetCreateTime().AsTime().Before(h.Updates[b].GetStatus().GetCreateTime().AsTime())
	})
	return h, true
}

// removeArchived removes an archived job from the live store, unless it
// changed since it was archived (restarted: it stays, and is archived
// again when it finishes again).
func (ar *Archive) removeArchived(ctx context.Context, j *job, h *history.Job) bool {
	m := ar.m
	rec := j.view()
	rev, state := rec.rev, rec.rt.State
	if uint64(rev) != h.Status.GetVersion() || !isJobTerminal(state) {
		return false
	}
	if _, err := m.store.Txn(ctx, removalOps(j.id, rev)...); err != nil {
		if !errors.Is(err, store.ErrConflict) {
			m.log.Warn("remove an archived job from the store", "job", j.id, "err", err)
			return false
		}
		// Deleted by a user while it was being archived: the delete
		// cleared the archive before this put landed, so the copy goes.
		if _, gerr := m.store.Get(ctx, jobRuntimeKey(j.id)); errors.Is(gerr, store.ErrNotFound) {
			if derr := m.history.Delete(ctx, m.cluster, j.id); derr != nil && !errors.Is(derr, history.ErrNotFound) {
				m.log.Warn("drop the archived copy of a job deleted while it was archived", "job", j.id, "err", derr)
			}
		}
		return false
	}
	m.forget(ctx, j)
	metrics.JobsCollected.Inc()
	m.log.Debug("finished job archived and removed from the store", "job", j.id)
	return true
}
