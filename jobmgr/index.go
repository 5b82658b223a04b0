package jobmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// The job index keeps recovery and memory bounded by live work. Every job
// has exactly one entry, written in the same transaction as the runtime
// change that puts it there:
//
//	index/live/<id>      a job that has not finished: loaded at start
//	index/finished/<id>  a finished job (SUCCEEDED, FAILED or KILLED): at
//	                     start only this entry is read (the job's summary,
//	                     for lists and the collector); the job itself is
//	                     loaded from its records when someone asks for it
//	index/deleting/<id>  a job whose runtime is gone and whose other records
//	                     are being removed (job delete, the collector); a
//	                     start finishes the removal
//
// A store written before the index existed has none: the first start
// builds it from the runtimes, once (index/version marks it built).
const (
	liveIndexPrefix     = "index/live/"
	finishedIndexPrefix = "index/finished/"
	deletingPrefix      = "index/deleting/"
	indexVersionKey     = "index/version"
	indexVersion        = "1"
)

func liveIndexKey(id string) string     { return liveIndexPrefix + id }
func finishedIndexKey(id string) string { return finishedIndexPrefix + id }
func deletingKey(id string) string      { return deletingPrefix + id }

// indexEntry is the value of a job's index entry.
type indexEntry struct {
	// RequestID is the request id the job was created with, if any: the
	// job is kept live while a retry of that create may still ask for it.
	RequestID string `json:"requestId,omitempty"`
	// Summary is the finished job as a job list shows it (finished entries
	// only): a pelotonv1.Job with its spec summarized.
	Summary []byte `json:"summary,omitempty"`
	// TTLSeconds is the job's spec.ttlSecondsAfterFinished (finished
	// entries only; unset: the cluster's).
	TTLSeconds *uint32 `json:"ttlSeconds,omitempty"`
}

// finishedJob is a finished job that is not in memory: what its index
// entry says.
type finishedJob struct {
	summary   *pelotonv1.Job
	requestID string
	ttl       *uint32
}

// liveIndexOp is the index entry of a job that has not finished.
func liveIndexOp(id, requestID string) (store.Op, error) {
	b, err := json.Marshal(indexEntry{RequestID: requestID})
	if err != nil {
		return store.Op{}, fmt.Errorf("jobmgr: encode the index entry of job %s: %w", id, err)
	}
	return store.Put(liveIndexKey(id), b, store.AnyRevision), nil
}

// finishedIndexOp is the index entry of a finished job: its list row
// (sum, a pelotonv1.Job with its spec summarized), its request id and its
// spec's time to live.
func finishedIndexOp(id, requestID string, sum *pelotonv1.Job, ttl *uint32) (store.Op, error) {
	row, err := proto.Marshal(sum)
	if err != nil {
		return store.Op{}, fmt.Errorf("jobmgr: encode the summary of job %s: %w", id, err)
	}
	b, err := json.Marshal(indexEntry{RequestID: requestID, Summary: row, TTLSeconds: ttl})
	if err != nil {
		return store.Op{}, fmt.Errorf("jobmgr: encode the index entry of job %s: %w", id, err)
	}
	return store.Put(finishedIndexKey(id), b, store.AnyRevision), nil
}

// indexOps are the writes that keep j's index entry true when its runtime
// goes from old to next, for the runtime's own transaction; none when the
// job neither finishes nor comes back. Called in the job's write turn.
func (ar *Archive) indexOps(j *job, old, next *pelotonv1.JobStatus) ([]store.Op, error) {
	was, is := isJobTerminal(old.GetState()), isJobTerminal(next.GetState())
	switch {
	case was == is:
		return nil, nil
	case !is: // restarted: live again
		op, err := liveIndexOp(j.id, j.requestID)
		if err != nil {
			return nil, err
		}
		return []store.Op{store.Delete(finishedIndexKey(j.id), store.AnyRevision), op}, nil
	}
	st := proto.Clone(next).(*pelotonv1.JobStatus)
	st.TaskCounts = map[string]uint32{}
	for s := range j.counts {
		if n := j.counts[s].Load(); n > 0 {
			st.TaskCounts[pelotonv1.TaskState(s).String()] = uint32(n)
		}
	}
	spec := j.spec()
	op, err := finishedIndexOp(j.id, j.requestID, &pelotonv1.Job{Id: j.id, Spec: summarize(spec), Status: st}, spec.TtlSecondsAfterFinished)
	if err != nil {
		return nil, err
	}
	return []store.Op{store.Delete(liveIndexKey(j.id), store.AnyRevision), op}, nil
}

// removalOps remove a job's runtime (at revision rev) and its index entry,
// and mark its other records for removal (finishRemoval), in one
// transaction: the job vanishes at once.
func removalOps(id string, rev int64) []store.Op {
	return []store.Op{store.Delete(jobRuntimeKey(id), rev), store.Delete(finishedIndexKey(id), store.AnyRevision),
		store.Delete(liveIndexKey(id), store.AnyRevision), store.Put(deletingKey(id), nil, store.AnyRevision)}
}

// finishRemoval removes the records of a job whose runtime is gone, tells
// the backend the job's output may go, then removes its deleting mark. A
// failure leaves the mark for the next start.
func (ar *Archive) finishRemoval(ctx context.Context, id string) {
	m := ar.m
	if m.sweep(ctx, id) {
		// The job has left the live store: the backend may drop its
		// runs' output and records, as its retention says (before the
		// mark goes, so that a crash in between calls it again).
		if err := m.hm.RemoveJobOutput(ctx, id); err != nil {
			m.log.Warn("remove the output of the job's runs", "job", id, "err", err)
		}
		if _, err := m.store.Txn(ctx, store.Delete(deletingKey(id), store.AnyRevision)); err != nil {
			m.log.Warn("clear the deleting mark of a removed job", "job", id, "err", err)
		}
	}
}

// loadIndex returns the jobs recovery loads (those not finished), the
// finished ones (from their index entries), and finishes removals a
// previous process left. It builds the index first if the store has none.
func (ar *Archive) loadIndex(ctx context.Context) (live map[string]string, finished map[string]*finishedJob, err error) {
	m := ar.m
	if _, err := m.store.Get(ctx, indexVersionKey); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, fmt.Errorf("jobmgr: read the job index: %w", err)
		}
		if err := m.arch.buildIndex(ctx); err != nil {
			return nil, nil, err
		}
	}
	kvs, err := m.store.List(ctx, "index/")
	if err != nil {
		return nil, nil, fmt.Errorf("jobmgr: load the job index: %w", err)
	}
	live, finished = map[string]string{}, map[string]*finishedJob{}
	var deleting []string
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, liveIndexPrefix):
			var e indexEntry
			_ = json.Unmarshal(kv.Value, &e) // an entry without a request id says enough
			live[strings.TrimPrefix(kv.Key, liveIndexPrefix)] = e.RequestID
		case strings.HasPrefix(kv.Key, finishedIndexPrefix):
			id := strings.TrimPrefix(kv.Key, finishedIndexPrefix)
			var e indexEntry
			sum := &pelotonv1.Job{}
			err := json.Unmarshal(kv.Value, &e)
			if err == nil {
				err = proto.Unmarshal(e.Summary, sum)
			}
			if err != nil || sum.GetStatus() == nil {
				// The runtime says it all: the job is loaded as a live one
				// and its entry written again when it is next evaluated.
				m.log.Warn("a finished job's index entry cannot be read; loading the job", "job", id, "err", err)
				live[id] = ""
				continue
			}
			sum.Status.Version = uint64(kv.Revision)
			finished[id] = &finishedJob{summary: sum, requestID: e.RequestID, ttl: e.TTLSeconds}
		case strings.HasPrefix(kv.Key, deletingPrefix):
			deleting = append(deleting, strings.TrimPrefix(kv.Key, deletingPrefix))
		}
	}
	for _, id := range deleting {
		m.log.Info("finishing the removal of a job", "job", id)
		m.arch.finishRemoval(ctx, id)
	}
	return live, finished, nil
}

// buildIndex writes the index of a store that has none, from the jobs'
// runtimes: once, the first start after an upgrade.
func (ar *Archive) buildIndex(ctx context.Context) error {
	m := ar.m
	kvs, err := m.store.List(ctx, "jobs/")
	if err != nil {
		return fmt.Errorf("jobmgr: load jobs to index them: %w", err)
	}
	var ops []store.Op
	n := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := m.store.Txn(ctx, ops...); err != nil {
			return fmt.Errorf("jobmgr: write the job index: %w", err)
		}
		ops = ops[:0]
		return nil
	}
	specs := map[string]*pelotonv1.JobSpec{}
	rts := map[string]*pelotonv1.JobStatus{}
	for _, kv := range kvs {
		parts := strings.Split(kv.Key, "/")
		switch {
		case len(parts) == 3 && parts[2] == "runtime":
			rt := &pelotonv1.JobStatus{}
			if proto.Unmarshal(kv.Value, rt) != nil {
				rt.State = pelotonv1.JobState_JOB_RUNNING // recovery decides (quarantine)
			}
			rts[parts[1]] = rt
		case len(parts) == 4 && parts[2] == "spec":
			if rec, err := decodeVersion(kv.Value); err == nil {
				specs[fmt.Sprintf("%s/%d", parts[1], rec.Version)] = rec.Spec
			}
		}
	}
	for id, rt := range rts {
		// A finished job's row has no task counts: its tasks are not read
		// here. One whose spec is not at hand (chunked) is indexed as a
		// live one and loaded at start.
		spec := specs[fmt.Sprintf("%s/%d", id, rt.SpecVersion)]
		var op store.Op
		var err error
		if isJobTerminal(rt.State) && spec != nil {
			op, err = finishedIndexOp(id, "", &pelotonv1.Job{Id: id, Spec: summarize(spec), Status: rt}, spec.TtlSecondsAfterFinished)
		} else {
			op, err = liveIndexOp(id, "")
		}
		if err != nil {
			return err
		}
		ops = append(ops, op)
		n++
		if len(ops) >= m.store.MaxTxnOps() {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if _, err := m.store.Txn(ctx, store.Put(indexVersionKey, []byte(indexVersion), store.AnyRevision)); err != nil {
		return fmt.Errorf("jobmgr: mark the job index built: %w", err)
	}
	if n > 0 {
		m.log.Info("built the job index of a store written before it existed", "jobs", n)
	}
	return nil
}

// listJobRecords reads the records of the given jobs: their job records
// and their tasks' records, a few jobs at a time.
func (ar *Archive) listJobRecords(ctx context.Context, ids []string) (kvs, tkvs []store.KV, err error) {
	m := ar.m
	const readers = 16
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			jk, err := m.store.List(ctx, jobPrefix(id))
			var tk []store.KV
			if err == nil {
				tk, err = m.store.List(ctx, taskPrefix(id))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("jobmgr: load job %s: %w", id, err)
				}
				return
			}
			kvs = append(kvs, jk...)
			tkvs = append(tkvs, tk...)
		}(id)
	}
	wg.Wait()
	return kvs, tkvs, first
}

// loadFinishedTimeout bounds the reads of a finished job loaded on demand.
const loadFinishedTimeout = 10 * time.Second

// loadFinished loads a finished job that is not in memory from its
// records, for whoever asks for it; nil when it is not a finished job this
// process knows (or it was removed meanwhile).
func (ar *Archive) loadFinished(id string) (*job, error) {
	m := ar.m
	m.mu.RLock()
	_, known := m.finished[id]
	m.mu.RUnlock()
	if !known {
		return nil, nil
	}
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	m.mu.RLock()
	j, loaded := m.jobs[id]
	m.mu.RUnlock()
	if loaded {
		return j, nil
	}
	parent := m.runCtx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, loadFinishedTimeout)
	defer cancel()
	kvs, tkvs, err := m.arch.listJobRecords(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	jobs := map[string]*job{}
	if _, err := m.eng.loadRecords(ctx, jobs, kvs, tkvs, map[string]bool{}, map[string]bool{}); err != nil {
		return nil, err
	}
	j = jobs[id]
	if j == nil {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, still := m.finished[id]; !still {
		return nil, nil // removed meanwhile
	}
	j.requestID = m.finished[id].requestID
	j.loadedAt = m.now()
	delete(m.finished, id)
	m.jobs[id] = j
	return j, nil
}

// unloadAfter is how long a finished job stays in memory after it
// finished, or after it was loaded on demand, before only its index row
// is kept.
const unloadAfter = time.Minute

// unloadEvery is how often finished jobs are unloaded.
const unloadEvery = 10 * time.Second

// unloadLoop keeps memory bounded by live work: finished jobs nobody
// touched for unloadAfter leave memory (their rows stay, and they are
// loaded again when asked for), as if the process had restarted.
func (ar *Archive) unloadLoop(ctx context.Context) {
	m := ar.m
	t := time.NewTicker(unloadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.arch.unloadFinished(m.now())
	}
}

// unloadFinished unloads the finished jobs that are due; it returns how
// many it unloaded.
func (ar *Archive) unloadFinished(now time.Time) int {
	m := ar.m
	m.mu.RLock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.RUnlock()
	n := 0
	for _, j := range jobs {
		rec := j.view()
		j.mu.Lock()
		loadedAt := j.loadedAt
		j.mu.Unlock()
		due := isJobTerminal(rec.rt.State) && !rec.unsure && now.Sub(finishedTime(rec.rt)) >= unloadAfter && now.Sub(loadedAt) >= unloadAfter
		if !due || m.upd.activeUpdate(j.id) != nil || m.adopt.isForeign(j) {
			continue
		}
		quiet := true
		for _, t := range j.tasks() {
			if t == nil {
				continue
			}
			tv := t.view()
			if !isTerminal(tv.rt.State) {
				quiet = false
			}
			if !quiet {
				break
			}
		}
		if !quiet {
			continue
		}
		row := m.jobProto(j)
		row.Spec = summarize(row.Spec)
		f := &finishedJob{summary: row, requestID: j.requestID, ttl: j.spec().TtlSecondsAfterFinished}
		// In the job's write turn, so that no write of it is on its way:
		// one landing after the job left memory would be lost to it.
		_ = m.rw.writeJob(context.Background(), j, &jobWrite{inTurn: func() {
			rec := j.view()
			m.mu.Lock()
			defer m.mu.Unlock()
			j.mu.Lock()
			defer j.mu.Unlock()
			// Unchanged since the row was made, and still this process's copy.
			if m.jobs[j.id] == j && uint64(rec.rev) == row.Status.Version && isJobTerminal(rec.rt.State) && !rec.unsure {
				j.unloaded = true
				delete(m.jobs, j.id)
				m.finished[j.id] = f
				n++
			}
		}})
	}
	return n
}

// finishedSummaries returns the rows of the finished jobs not in memory
// that keep selects (copies the caller may change).
func (ar *Archive) finishedSummaries(keep func(*pelotonv1.Job) bool) []*pelotonv1.Job {
	m := ar.m
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*pelotonv1.Job
	for _, f := range m.finished {
		if keep(f.summary) {
			out = append(out, proto.Clone(f.summary).(*pelotonv1.Job))
		}
	}
	return out
}

// finishedTime is a summary's completion time for the collector (its
// create time if it has none).
func finishedTime(st *pelotonv1.JobStatus) time.Time {
	if t := st.GetCompletionTime(); t != nil {
		return t.AsTime()
	}
	return st.GetCreateTime().AsTime()
}
