package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Start loads every job and task from the store, reconciles runs that were
// on hosts with the backend, and starts the engine. It returns once the
// state is loaded; the engine runs until ctx ends.
func (m *Manager) Start(ctx context.Context) error {
	m.runCtx = ctx
	if err := m.eng.recover(ctx); err != nil {
		return err
	}
	if err := m.adopt.startForeign(ctx); err != nil {
		return err
	}
	for i := 0; i < m.workers; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.eng.worker(ctx)
		}()
	}
	for i := 0; i < m.launchers; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.eng.launchLoop(ctx)
		}()
	}
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		m.eng.eventLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.eng.preemptLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.eng.gaugeLoop(ctx)
	}()
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		m.recs.drainLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.eng.retryLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.recs.reconcileLoop(ctx)
	}()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.arch.unloadLoop(ctx)
	}()
	if m.history != nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.arch.collectLoop(ctx)
		}()
	}
	context.AfterFunc(ctx, m.queue.ShutDown)
	m.mu.RLock()
	for id := range m.jobs {
		m.queue.Add(id)
	}
	m.mu.RUnlock()
	return nil
}

// Wait blocks until the engine's goroutines have stopped (after ctx ends),
// with every other goroutine the Manager started (owned.go).
func (m *Manager) Wait() {
	m.wg.Wait()
	m.stopOwned()
}

func (en *engine) recover(ctx context.Context) error {
	m := en.m
	// Jobs with a record in quarantine since an earlier start are held if
	// they cannot be loaded (quarantine.go); so are those whose records
	// are quarantined now. A job whose runtime is in quarantine is held
	// rather than swept as a deleted one.
	quarantined, runtimeGone, err := m.eng.quarantinedJobs(ctx)
	if err != nil {
		return err
	}
	// Only the jobs that have not finished are loaded (index.go), with
	// those a quarantined record holds; finished ones are loaded when
	// someone asks for them.
	live, finished, err := m.arch.loadIndex(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(live)+len(quarantined))
	for id := range live {
		ids = append(ids, id)
	}
	for id := range quarantined {
		if _, ok := live[id]; !ok {
			ids = append(ids, id)
		}
	}
	kvs, tkvs, err := m.arch.listJobRecords(ctx, ids)
	if err != nil {
		return err
	}
	orphans, err := m.eng.loadRecords(ctx, m.jobs, kvs, tkvs, quarantined, runtimeGone)
	if err != nil {
		return err
	}
	for id, req := range live {
		if j := m.jobs[id]; j != nil {
			j.requestID = req
		}
	}
	for id, f := range finished {
		if m.jobs[id] == nil && !m.held[id] {
			m.finished[id] = f
		}
	}
	for id := range orphans {
		if m.jobs[id] == nil && !m.held[id] && m.finished[id] == nil {
			m.log.Info("sweeping records of a deleted job", "job", id)
			m.sweep(ctx, id)
		}
	}
	if err := m.upd.recoverUpdates(ctx); err != nil {
		return err
	}
	return m.eng.recoverRuns(ctx, len(tkvs))
}

// loadRecords decodes the records of jobs (kvs: their job records, tkvs:
// their tasks') into jobs, moving aside those that cannot be decoded
// (quarantine.go). It returns the jobs whose records are orphans: those of
// a deletion cut short.
func (en *engine) loadRecords(ctx context.Context, jobs map[string]*job, kvs, tkvs []store.KV, quarantined, runtimeGone map[string]bool) (map[string]bool, error) {
	m := en.m
	recs, err := m.eng.sortJobRecords(ctx, kvs, quarantined, runtimeGone)
	if err != nil {
		return nil, err
	}
	usedChunks := map[string]bool{}
	versions, err := m.eng.decodeVersions(ctx, recs, usedChunks, quarantined)
	if err != nil {
		return nil, err
	}
	m.eng.assembleJobs(jobs, recs, versions, quarantined, runtimeGone)
	orphans := m.eng.orphanSpecs(ctx, recs, usedChunks)
	if err := m.eng.loadTasks(ctx, jobs, tkvs, orphans); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.status().State != pelotonv1.JobState_JOB_INITIALIZED {
			m.eng.fillTasks(j)
		}
	}
	return orphans, nil
}

// jobRecords are the job records read at start, sorted by kind.
type jobRecords struct {
	// specs are the spec version records by key; chunks the pieces of
	// those split into chunks.
	specs  map[string]store.KV
	chunks specChunks
	// rts are the jobs' runtimes that decode, with their revisions.
	rts map[string]jobRuntimeRec
	// present: the jobs with records; only those can be held.
	present map[string]bool
}

type jobRuntimeRec struct {
	rt  *pelotonv1.JobStatus
	rev int64
}

// sortJobRecords sorts the job records by kind and decodes the runtimes,
// moving aside those that cannot be decoded.
func (en *engine) sortJobRecords(ctx context.Context, kvs []store.KV, quarantined, runtimeGone map[string]bool) (jobRecords, error) {
	m := en.m
	recs := jobRecords{specs: map[string]store.KV{}, chunks: specChunks{}, rts: map[string]jobRuntimeRec{}, present: map[string]bool{}}
	for _, kv := range kvs {
		parts := strings.Split(kv.Key, "/") // jobs, id, runtime | jobs, id, spec, v
		if len(parts) >= 2 {
			recs.present[parts[1]] = true
		}
		switch {
		case len(parts) == 3 && parts[2] == "runtime":
			rt := &pelotonv1.JobStatus{}
			if err := proto.Unmarshal(kv.Value, rt); err != nil {
				if err := m.eng.quarantineRecord(ctx, kv, err); err != nil {
					return jobRecords{}, err
				}
				quarantined[parts[1]], runtimeGone[parts[1]] = true, true
				continue
			}
			recs.rts[parts[1]] = jobRuntimeRec{rt, kv.Revision}
		case len(parts) == 4 && parts[2] == "spec":
			recs.specs[kv.Key] = kv
		case isChunkKey(parts):
			recs.chunks.add(parts, kv.Value)
		}
	}
	return recs, nil
}

// decodeVersions decodes the specs of each job with a runtime: a version
// that cannot be is moved aside (and the job is held if it is the version
// in force, by assembleJobs). Those of a job without a runtime are swept
// or kept as they are (orphanSpecs). usedChunks collects the chunks the
// specs were assembled from.
func (en *engine) decodeVersions(ctx context.Context, recs jobRecords, usedChunks, quarantined map[string]bool) (map[string][]*jobVersion, error) {
	m := en.m
	versions := map[string][]*jobVersion{}
	for key, kv := range recs.specs {
		id := strings.Split(key, "/")[1]
		if recs.rts[id].rt == nil {
			continue
		}
		enc, err := recs.chunks.assemble(key, kv.Value, usedChunks)
		var rec *pelotonv1.JobVersion
		if err == nil {
			rec, err = decodeVersion(enc)
		}
		var jv *jobVersion
		if err == nil {
			jv, err = newJobVersion(rec.Version, rec.Spec, rec.CreateTime.AsTime(), rec.Cause)
		}
		if err != nil {
			if err := m.eng.quarantineRecord(ctx, kv, err); err != nil {
				return nil, err
			}
			quarantined[id] = true
			continue
		}
		versions[id] = append(versions[id], jv)
	}
	return versions, nil
}

// assembleJobs makes the jobs whose runtime and spec version in force
// decoded, and holds those present whose records did not.
func (en *engine) assembleJobs(jobs map[string]*job, recs jobRecords, versions map[string][]*jobVersion, quarantined, runtimeGone map[string]bool) {
	m := en.m
	for id, r := range recs.rts {
		var cur *jobVersion
		for _, jv := range versions[id] {
			if jv.version == r.rt.SpecVersion {
				cur = jv
			}
		}
		if cur == nil {
			if quarantined[id] { // present: it has a runtime
				m.eng.hold(id)
				continue
			}
			m.log.Error("job has no spec; skipping", "job", id, "version", r.rt.SpecVersion)
			continue
		}
		j := newJob(id, cur, r.rt, r.rev)
		for _, jv := range versions[id] {
			if jv != cur {
				j.addVersion(jv, false)
			}
		}
		jobs[id] = j
	}
	for id := range runtimeGone {
		if jobs[id] == nil && !m.eng.isHeld(id) && recs.present[id] {
			m.eng.hold(id)
		}
	}
}

// orphanSpecs returns the jobs whose specs have no runtime: a deletion
// cut short. Chunks of a spec no record names (a create or an update
// whose record was never written) are deleted, or count their job as an
// orphan when it has no runtime.
func (en *engine) orphanSpecs(ctx context.Context, recs jobRecords, usedChunks map[string]bool) map[string]bool {
	m := en.m
	orphans := map[string]bool{}
	for key := range recs.specs {
		if id := strings.Split(key, "/")[1]; recs.rts[id].rt == nil {
			orphans[id] = true
		}
	}
	for _, key := range recs.chunks.unused(usedChunks) {
		if id := strings.Split(key, "/")[1]; recs.rts[id].rt == nil {
			orphans[id] = true
			continue
		}
		if _, err := m.store.Txn(ctx, store.Delete(key, store.AnyRevision)); err != nil {
			m.log.Warn("delete a chunk of a spec that was never stored", "key", key, "err", err)
		}
	}
	return orphans
}

// loadTasks decodes the task records into their jobs, moving aside those
// that cannot be decoded; a task record of no loaded job (or of an
// instance beyond any job's) counts its job among the orphans.
func (en *engine) loadTasks(ctx context.Context, jobs map[string]*job, tkvs []store.KV, orphans map[string]bool) error {
	m := en.m
	for _, kv := range tkvs {
		parts := strings.Split(kv.Key, "/")
		if len(parts) != 3 {
			continue
		}
		j := jobs[parts[1]]
		inst, err := strconv.ParseUint(parts[2], 10, 32)
		if j == nil || err != nil || inst >= MaxInstances {
			orphans[parts[1]] = true
			continue
		}
		rt := &pelotonv1.TaskStatus{}
		if err := proto.Unmarshal(kv.Value, rt); err != nil {
			var rev int64
			rt, rev, err = m.eng.quarantineTask(ctx, j, uint32(inst), kv, err)
			if err != nil {
				return err
			}
			if rt == nil {
				continue // left without a record: fillTasks makes it again
			}
			kv.Revision = rev
		}
		if rt.SpecVersion == 0 {
			rt.SpecVersion = 1
		}
		// Before the job is visible to anyone. An instance beyond the
		// instance count is one a scale-down was removing, or a daemon's.
		ts := j.tasks()
		if int(inst) >= len(ts) {
			grown := make([]*task, inst+1)
			copy(grown, ts)
			j.taskSlice.Store(&grown)
			ts = grown
		}
		t := newTask(rt, kv.Revision)
		if available(rt, j.version(rt.SpecVersion).hasHealthCheck(uint32(inst))) {
			t.view().availableSince = m.now() // not yet published to anyone
		}
		ts[inst] = t
		j.counts[rt.State].Add(1)
	}
	return nil
}

// recoverHold is how a run of j found at a restart takes its room on its
// host again: a revocable job's runs hold slack, not capacity.
func (en *engine) recoverHold(j *job) func(taskID, host string, r resources.Resources) {
	if j.spec().GetSla().GetRevocable() {
		return en.m.hm.RecoverRevocable
	}
	return en.m.hm.Recover
}

// recoverRuns re-queues the pending work of the jobs loaded at start and
// re-reserves what their running work holds, then reconciles their runs
// with the backend. tasks is how many task records were read.
func (en *engine) recoverRuns(ctx context.Context, tasks int) error {
	m := en.m
	// Re-queue pending work and re-reserve what running work holds.
	var lost []hostmgr.TaskEvent
	type rekill struct {
		j    *job
		inst uint32
		id   string
	}
	// Runs that were being stopped when the process died, and still run.
	var stopping []rekill
	// A backend whose substrate is away cannot know runs it has not seen
	// yet (a kubernetes backend lists pods once the apiserver answers):
	// such runs are left to reconciliation, which waits for the substrate.
	reachable, deferred := m.hm.Substrate().Reachable, 0
	for _, j := range m.jobs {
		var pending []uint32
		for inst, t := range j.tasks() {
			if t == nil {
				continue
			}
			rt := t.status()
			switch {
			case rt.State == taskInitialized || rt.State == taskPending:
				// Its launch may have happened and not been written
				// (unrecorded.go).
				ev, adopted, queue := m.eng.recoverWaiting(j, uint32(inst), rt, reachable)
				if adopted {
					lost = append(lost, ev)
				} else if queue && !waitsForGang(m, j, uint32(inst)) {
					pending = append(pending, uint32(inst))
				}
			case isActive(rt.State):
				runID := resmgr.RunTaskID(j.id, uint32(inst), rt.RunId)
				r := j.resourcesOf(uint32(inst))
				recoverHold := m.eng.recoverHold(j)
				if rt.RestartInPlace && rt.DesiredRunId > rt.RunId {
					// Its room was already moved to the run that follows.
					recoverHold(resmgr.RunTaskID(j.id, uint32(inst), rt.DesiredRunId), rt.Host, r)
				} else {
					recoverHold(runID, rt.Host, r)
				}
				m.rm.Recover(m.eng.rmTask(j, uint32(inst), rt.RunId))
				if ev, err := m.hm.Status(runID); err == nil {
					lost = append(lost, ev)
					if !isTerminal(ev.State) && (rt.State == taskKilling || rt.State == taskPreempting) {
						stopping = append(stopping, rekill{j, uint32(inst), runID})
					}
				} else if !reachable {
					deferred++
				} else if resumed, stale := m.upd.resumePatch(ctx, j, uint32(inst), rt); !resumed {
					if stale != "" {
						stopping = append(stopping, rekill{j, uint32(inst), stale})
					}
					lost = append(lost, hostmgr.TaskEvent{TaskID: runID, Host: rt.Host, State: taskLost, Reason: "unknown-to-backend",
						Message: "the run was not found after a restart of the control plane", Time: m.now()})
				}
			}
		}
		if len(pending) > 0 {
			if err := m.rm.Enqueue(m.eng.gangsFor(j, pending)...); err != nil {
				return fmt.Errorf("jobmgr: re-queue job %s: %w", j.id, err)
			}
		}
	}
	m.log.Info("recovered state", "jobs", len(m.jobs), "finished", len(m.finished), "held", len(m.held), "tasks", tasks, "reconciled", len(lost))
	if deferred > 0 {
		s := m.hm.Substrate()
		m.log.Warn("runs the backend does not know yet are kept until its substrate answers, then reconciled",
			"runs", deferred, "substrate", s.Name, "reason", s.Reason)
	}
	m.eng.handleEvents(ctx, lost)
	for _, k := range stopping {
		m.eng.killRun(ctx, k.j, k.inst, k.id, m.killGrace(k.j, k.inst))
	}
	// Before any drain or preemption can ask (they start after recovery):
	// the evaluator may start empty, and every instance down now, lost runs
	// included, must count from the start. Concurrently, since each job's
	// calls wait on the evaluator, which may be remote; a job whose report
	// fails here is reported by its evaluation, and until then the
	// evaluator grants nothing for it (it does not know the job).
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		if isLongRunning(j.typ) {
			jobs = append(jobs, j)
		}
	}
	idx := make([]uint32, len(jobs))
	for i := range idx {
		idx[i] = uint32(i)
	}
	_ = parallel(idx, func(i uint32) error {
		m.recs.reportAvailability(ctx, jobs[i])
		return nil
	})
	return nil
}

// rmTask is the resmgr view of run `run` of instance inst.
func (en *engine) rmTask(j *job, inst, run uint32) *resmgr.Task {
	v := j.runVersion(inst)
	sla := v.spec.Sla
	prev, bound := j.hosts(inst)
	return &resmgr.Task{JobID: j.id, Instance: inst, RunID: run, Pool: j.pool,
		Priority: sla.GetPriority(), Preemptible: isPreemptible(j.typ, sla), Revocable: sla.GetRevocable(),
		Resources: v.resourcesOf(inst), Strategy: strategyOf(v.spec, inst), Placement: placementOf(v.spec, inst),
		PrevHost: prev, BoundHost: bound}
}

// isPreemptible: work is preemptible unless the spec says otherwise, but
// STATEFUL instances, tied to their volumes, never are.
func isPreemptible(t pelotonv1.JobType, sla *pelotonv1.SlaSpec) bool {
	if t == pelotonv1.JobType_STATEFUL {
		return false
	}
	return sla == nil || sla.Preemptible == nil || *sla.Preemptible
}

func (en *engine) worker(ctx context.Context) {
	m := en.m
	for {
		id, shutdown := m.queue.Get()
		if shutdown {
			return
		}
		if ctx.Err() != nil {
			// The queue hands out what is left after ShutDown; the engine
			// is stopping, and the next leader evaluates every job anyway.
			m.queue.Done(id)
			return
		}
		if err := m.eng.evaluateJob(ctx, id); err != nil && ctx.Err() == nil {
			m.log.Warn("job evaluation failed; retrying", "job", id, "err", err)
			m.queue.AddAfter(id, time.Second)
		}
		m.queue.Done(id)
	}
}

// parallel runs fn for each instance with bounded concurrency, so that the
// group committer sees many writes at once. It returns the first error.
func parallel(insts []uint32, fn func(uint32) error) error {
	const width = 256
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, width)
	)
	for _, inst := range insts {
		sem <- struct{}{}
		wg.Add(1)
		go func(inst uint32) {
			defer func() { <-sem; wg.Done() }()
			if err := fn(inst); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(inst)
	}
	wg.Wait()
	return first
}

// evaluateJob drives one job towards its goal: create missing tasks, kill
// everything if the goal is KILLED, carry on the restarts of gangs a
// member's failure broke (gangrun.go), enqueue initialized instances, and
// derive the job's state from its tasks.
func (en *engine) evaluateJob(ctx context.Context, id string) error {
	m := en.m
	m.mu.RLock()
	j := m.jobs[id]
	m.mu.RUnlock()
	if j == nil {
		return nil // deleted
	}
	if err := m.eng.createTasks(ctx, j); err != nil {
		return err
	}
	if err := m.upd.reconcileCount(ctx, j); err != nil {
		return err
	}
	if err := m.recs.reconcileDaemon(ctx, j); err != nil {
		return err
	}
	if j.goalKilled.Load() {
		var live []uint32
		for inst, t := range j.tasks() {
			if t == nil {
				continue // a removed instance (holes.go)
			}
			tv := t.view()
			if !isTerminal(tv.rt.State) && (tv.rt.State != taskKilling || tv.rt.GoalState != taskKilled) {
				live = append(live, uint32(inst))
			}
		}
		if err := parallel(live, func(inst uint32) error { return m.killInstance(ctx, j, inst, "job-cancelled") }); err != nil {
			return err
		}
	} else {
		if err := m.eng.restartGangs(ctx, j); err != nil {
			return err
		}
		if err := m.eng.enqueueInitialized(ctx, j); err != nil {
			return err
		}
	}
	if isLongRunning(j.typ) {
		held, grantsAgain := m.recs.reportAvailability(ctx, j)
		again, err := m.upd.driveUpdate(ctx, j)
		if err != nil {
			return err
		}
		if held && (again == 0 || again > grantRenewEvery) {
			again = grantRenewEvery
		}
		if grantsAgain > 0 && (again == 0 || grantsAgain < again) {
			again = grantsAgain
		}
		if again > 0 {
			m.queue.AddAfter(j.id, again)
		}
	}
	return m.eng.updateJobState(ctx, j)
}

// createTasks gives every instance that has no task yet its first run, in
// memory only. An instance without a record in the store is by definition
// INITIALIZED on run 1, so writing that record would cost an etcd write per
// task and tell a restarted process nothing it could not infer; the first
// real write (LAUNCHED) creates the record, guarded by MustNotExist.
func (en *engine) createTasks(ctx context.Context, j *job) error {
	m := en.m
	rec := j.view()
	initializing := rec.rt.State == pelotonv1.JobState_JOB_INITIALIZED
	if !initializing {
		return nil
	}
	m.eng.fillTasks(j)
	return m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		if rt.State == pelotonv1.JobState_JOB_INITIALIZED {
			rt.State = pelotonv1.JobState_JOB_PENDING
		}
		return nil
	})
}

// fillTasks creates the in-memory task of every instance that has none. It
// publishes a new slice rather than writing the visible one, which API
// calls read concurrently.
func (en *engine) fillTasks(j *job) {
	m := en.m
	now := timestamppb.New(m.now())
	cur := j.tasks()
	next := make([]*task, len(cur))
	copy(next, cur)
	added := int32(0)
	ver := j.current().version
	// Above every run an instance removed by a scale-down had: the
	// backends remember ended runs by id.
	rec := j.view()
	first := rec.rt.RemovedRunId + 1
	cv := j.current()
	for inst, t := range next {
		if t == nil && !cv.holes[uint32(inst)] {
			next[inst] = newTask(&pelotonv1.TaskStatus{State: taskInitialized, GoalState: m.taskGoal(j), RunId: first, SpecVersion: ver, UpdateTime: now}, 0)
			added++
		}
	}
	if added > 0 {
		j.counts[taskInitialized].Add(added)
		j.taskSlice.Store(&next)
	}
}

// enqueueInitialized moves INITIALIZED instances to PENDING and hands them to
// resmgr. An instance in backoff is left for a later evaluation.
func (en *engine) enqueueInitialized(ctx context.Context, j *job) error {
	m := en.m
	if j.counts[taskInitialized].Load() == 0 || m.unverified.waits(j.id) {
		return nil // none, or the backend must be asked first (unrecorded.go)
	}
	ready, wait := readyToQueue(m, j, m.now())
	if wait > 0 {
		m.queue.AddAfter(j.id, wait)
	}
	// sla.maximumRunningInstances: start no more than the room left; the
	// rest stay INITIALIZED until running instances end (each end wakes
	// this evaluation again).
	if limit := j.spec().GetSla().GetMaximumRunningInstances(); limit > 0 {
		room := int(limit) - int(j.activeCount())
		if room <= 0 {
			ready = nil
		} else if len(ready) > room {
			ready = trimToRoom(m, j, ready, room)
		}
	}
	var mu sync.Mutex
	var moved []uint32
	err := parallel(ready, func(inst uint32) error {
		// PENDING is not written: after a restart an INITIALIZED instance is
		// queued exactly like a PENDING one, so the write would buy nothing.
		err := m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
			if rt.State != taskInitialized {
				return errSkip
			}
			rt.State = taskPending
			return nil
		})
		if errors.Is(err, errSkip) {
			return nil
		}
		if err == nil {
			mu.Lock()
			moved = append(moved, inst)
			mu.Unlock()
		}
		return err
	})
	if len(moved) > 0 {
		sort.Slice(moved, func(a, b int) bool { return moved[a] < moved[b] })
		if eerr := m.rm.Enqueue(m.eng.gangsFor(j, moved)...); eerr != nil {
			// Back to INITIALIZED, so the retried evaluation queues them again.
			for _, inst := range moved {
				_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
					if rt.State != taskPending {
						return errSkip
					}
					rt.State = taskInitialized
					return nil
				})
			}
			return eerr
		}
	}
	return err
}

// updateJobState derives the job's state from its instances' states.
func (en *engine) updateJobState(ctx context.Context, j *job) error {
	m := en.m
	n := j.liveTasks() // the holes (holes.go) are no instances
	c := func(s taskState) int32 { return j.counts[s].Load() }
	terminal := c(taskSucceeded) + c(taskFailed) + c(taskLost) + c(taskKilled) + c(taskPreempted)
	active := c(taskLaunching) + c(taskLaunched) + c(taskStarting) + c(taskRunning) + c(taskKilling) + c(taskPreempting)
	// nextState is the state the counts give a job whose runtime is rt; ok
	// is false while the job is INITIALIZED (its tasks are being created).
	nextState := func(rt *pelotonv1.JobStatus) (next jobState, ok bool) {
		if rt.State == pelotonv1.JobState_JOB_INITIALIZED {
			return rt.State, false
		}
		killed := rt.GoalState == pelotonv1.JobState_JOB_KILLED
		switch {
		case isLongRunning(j.typ) && !killed:
			// Kept running until cancelled, even while every instance is
			// stopped: a restart or an update brings them back.
			if active > 0 || terminal > 0 {
				return pelotonv1.JobState_JOB_RUNNING, true
			}
			return pelotonv1.JobState_JOB_PENDING, true
		case terminal == n && c(taskSucceeded) == n:
			return pelotonv1.JobState_JOB_SUCCEEDED, true
		case terminal == n && killed:
			return pelotonv1.JobState_JOB_KILLED, true
		case terminal == n && c(taskFailed) > 0:
			return pelotonv1.JobState_JOB_FAILED, true
		case terminal == n:
			return pelotonv1.JobState_JOB_KILLED, true
		case killed:
			return pelotonv1.JobState_JOB_KILLING, true
		case active > 0 || terminal > 0:
			return pelotonv1.JobState_JOB_RUNNING, true
		}
		return pelotonv1.JobState_JOB_PENDING, true
	}
	// Most evaluations change nothing: they end here, without copying
	// the runtime (an unsure one is read back first, below).
	rec := j.view()
	next, ok := nextState(rec.rt)
	same := (!ok || next == rec.rt.State) && !rec.unsure
	if same {
		return nil
	}
	return m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		next, ok := nextState(rt)
		if !ok || next == rt.State {
			return nil
		}
		now := timestamppb.New(m.now())
		if next == pelotonv1.JobState_JOB_RUNNING && rt.StartTime == nil {
			rt.StartTime = now
		}
		if !isJobTerminal(next) {
			rt.CompletionTime = nil // a foreign job whose group sent more work
		}
		if isJobTerminal(next) {
			rt.CompletionTime = now
			if next == pelotonv1.JobState_JOB_FAILED {
				rt.Message = m.eng.failureSummary(j)
			}
		}
		rt.State = next
		return nil
	})
}

func (en *engine) failureSummary(j *job) string {
	var failed []string
	for inst, t := range j.tasks() {
		if t == nil {
			continue // a removed instance (holes.go)
		}
		tv := t.view()
		if tv.rt.State == taskFailed {
			failed = append(failed, fmt.Sprintf("instance %d (%s)", inst, tv.rt.Message))
		}
		if len(failed) == 3 {
			failed = append(failed, "...")
			break
		}
	}
	return "failed: " + strings.Join(failed, ", ")
}

// eventShards is how many goroutines apply backend events. Events of one run
// always go to the same shard, so they apply in order; different runs apply
// concurrently, which lets the group committer pack their writes together.
const eventShards = 128

// eventLoop fans backend events out to the shards.
func (en *engine) eventLoop(ctx context.Context) {
	m := en.m
	var shards [eventShards]chan hostmgr.TaskEvent
	var wg sync.WaitGroup
	for i := range shards {
		shards[i] = make(chan hostmgr.TaskEvent, 256)
		wg.Add(1)
		go func(ch chan hostmgr.TaskEvent) {
			defer wg.Done()
			batch := make([]hostmgr.TaskEvent, 0, 64)
			for ev := range ch {
				// Take what else is already queued, to see which events a
				// later one of the same run supersedes.
				batch = append(batch[:0], ev)
			drain:
				for len(batch) < cap(batch) {
					select {
					case e, ok := <-ch:
						if !ok {
							break drain
						}
						batch = append(batch, e)
					default:
						break drain
					}
				}
				for i, e := range batch {
					superseded := false
					for _, later := range batch[i+1:] {
						if later.TaskID == e.TaskID {
							superseded = true
							break
						}
					}
					m.eng.deliver(ctx, e, superseded)
				}
			}
		}(shards[i])
	}
	defer func() {
		for _, ch := range shards {
			close(ch)
		}
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-m.hm.Events():
			select {
			case shards[shardOf(ev.TaskID)] <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// shardOf hashes a task ID (FNV-1a) onto a shard.
func shardOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % eventShards)
}

// handleEvents handles events of distinct runs as the event loop would:
// each shard's in order, the shards at once. A start that finds thousands
// of runs lost (a backend whose runs did not survive) writes them in
// batches rather than one after another.
func (en *engine) handleEvents(ctx context.Context, evs []hostmgr.TaskEvent) {
	m := en.m
	var shards [eventShards][]hostmgr.TaskEvent
	for _, ev := range evs {
		i := shardOf(ev.TaskID)
		shards[i] = append(shards[i], ev)
	}
	var wg sync.WaitGroup
	for _, shard := range shards {
		if len(shard) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ev := range shard {
				m.eng.handleEvent(ctx, ev)
			}
		}()
	}
	wg.Wait()
}

// handleEvent applies one run's state change to its instance (or queues
// it behind earlier ones of its run still to be written, see deliver).
func (en *engine) handleEvent(ctx context.Context, ev hostmgr.TaskEvent) {
	m := en.m
	m.eng.deliver(ctx, ev, false)
}

// applyEvent applies one event. superseded says a later event of the same
// run is already queued: a RUNNING event is then applied in memory only, and
// the later event's write carries it (a restart would learn nothing from
// the RUNNING record that the next one does not tell). For short tasks this
// saves one of the two writes a batch task costs (the launch is not
// written: unrecorded.go). retried says an earlier
// attempt failed to write it, and may have been applied by the store after
// all. It returns the error of a write that failed (a *storeError): the
// caller queues the event to be applied again.
func (en *engine) applyEvent(ctx context.Context, ev hostmgr.TaskEvent, superseded, retried bool) error {
	m := en.m
	// Events from hostmgr are clean already; those jobmgr makes of a
	// backend's errors (launch-failed, run-id-taken) carry the backend's
	// words, which may not be valid UTF-8.
	ev = hostmgr.CleanEvent(ev)
	jobID, inst, run, ok := parseTaskID(ev.TaskID)
	if !ok {
		m.log.Warn("event for a task ID that is not ours", "task", ev.TaskID)
		return nil
	}
	m.mu.RLock()
	j := m.jobs[jobID]
	m.mu.RUnlock()
	if j == nil || j.task(inst) == nil {
		return nil // the job was deleted
	}
	foreign := m.adopt.isForeign(j)
	f := eventFacts{
		jobType:     j.typ,
		foreign:     foreign,
		lostBackoff: m.lostBackoff,
		// A revocable run its host's QoS controller killed ends KILLED,
		// and runs again as preempted work does.
		revoked: isTerminal(ev.State) && ev.State != taskSucceeded && !foreign && j.spec().GetSla().GetRevocable() && m.hm.Revoked(ev.TaskID),
	}
	if isTerminal(ev.State) {
		f.gang = gangFactsOf(j, inst)
	}
	persist, via := eventWrite(ev, f, superseded)
	var fx eventEffects
	err := m.writeTask(ctx, j, inst, persist, via, func(prev taskSnap) (taskSnap, error) {
		// The facts of the run's spec version, and the decision, with the
		// task's counters, which go with the record.
		v := j.version(prev.rt.SpecVersion)
		f.restart, f.grace = v.sharedTaskSpec(inst).GetRestartPolicy(), graceOf(v, inst)
		var next taskSnap
		next, fx = decideEvent(prev, ev, f)
		if fx.skip {
			return taskSnap{}, errSkip
		}
		return next, nil
	})
	if errors.Is(err, errSkip) {
		if retried && isTerminal(ev.State) {
			// The failed attempt may have been applied after all (the read
			// back found it): what follows a run's end must still happen.
			// Both releases are no-ops for a run that holds nothing.
			m.hm.ReleaseTask(ev.TaskID)
			m.rm.ReleaseRun(jobID, inst, run)
			m.queue.Add(jobID)
		}
		return nil
	}
	if err != nil {
		if isStoreError(err) {
			return err
		}
		m.log.Error("apply task event", "task", ev.TaskID, "state", ev.State, "err", err)
		return nil
	}
	if ev.State == taskPreempted {
		metrics.Preemptions.WithLabelValues(metrics.PreemptEvicted).Inc()
	}
	m.eng.applyEffects(ctx, j, inst, ev, fx)
	m.queue.Add(jobID)
	return nil
}

// applyEffects carries out what decideEvent asked for once its decision is
// written: the kill of an unhealthy run, the backoff, the release of an
// ended run (or the launch of its successor in place).
func (en *engine) applyEffects(ctx context.Context, j *job, inst uint32, ev hostmgr.TaskEvent, fx eventEffects) {
	m := en.m
	_, _, run, _ := parseTaskID(ev.TaskID)
	if fx.kill != "" {
		m.log.Info("restarting an unhealthy instance", "job", j.id, "instance", inst)
		m.eng.killRun(ctx, j, inst, fx.kill, fx.grace)
	}
	if fx.backoff > 0 {
		j.task(inst).notBefore.Store(m.now().Add(fx.backoff).UnixNano())
		m.queue.AddAfter(j.id, fx.backoff)
	}
	if !fx.release {
		return
	}
	if fx.inPlace != "" && fx.heldFor != "" && m.eng.launchInPlace(ctx, j, inst, fx.heldFor, fx.inPlace) {
		return
	}
	if fx.heldFor != "" {
		m.hm.ReleaseTask(fx.heldFor) // the room kept for an in-place run that will not come
		if fx.inPlace != "" {
			metrics.Restarts.WithLabelValues("placed").Inc() // in place was asked but not possible
		}
	}
	// hostmgr frees a run's host when the backend reports its end; events
	// made up here (a run lost across a restart) must free it too.
	m.hm.ReleaseTask(ev.TaskID)
	// Only this run: the next may already be queued by another worker
	// (a launch refused and retried quickly), and must stay queued.
	m.rm.ReleaseRun(j.id, inst, run)
}

// launchInPlace starts the new run of an instance restarted in place on
// host, where the room of its previous run was moved to it (held, see
// restartOnto) when the old run was stopped: resmgr's allocation moves to
// the new run and it is launched with no placement. It returns false,
// changing nothing, when the host cannot take it (it left service, or the
// hold is not there or not the size the new spec needs); the run is then
// queued like any other.
func (en *engine) launchInPlace(ctx context.Context, j *job, inst uint32, held, host string) bool {
	m := en.m
	t := j.task(inst)
	tv := t.view()
	run, v := tv.rt.RunId, j.version(tv.rt.SpecVersion)
	newRun := resmgr.RunTaskID(j.id, inst, run)
	if newRun != held || !m.hm.HostUp(host) || !m.hm.HoldsExactly(held, v.resourcesOf(inst)) {
		return false
	}
	err := m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
		if rt.State != taskInitialized || rt.RunId != run {
			return errSkip
		}
		rt.State = taskPending
		return nil
	})
	if err != nil {
		m.hm.ReleaseTask(newRun)
		m.rm.Release(j.id, inst)
		return false
	}
	rt := m.eng.rmTask(j, inst, run)
	m.rm.Release(j.id, inst)
	m.rm.Recover(rt)
	metrics.Restarts.WithLabelValues("in-place").Inc()
	m.eng.launch(ctx, resmgr.Placement{Task: rt, Host: host})
	return true
}

// launchLoop turns placements into launches, one at a time: the placement
// engine hands over placements in batches of thousands, and a launcher
// that took more than one would launch them in turn, each waiting on the
// backend, while other launchers idle. One each spreads every batch over
// all of them.
func (en *engine) launchLoop(ctx context.Context) {
	m := en.m
	for ctx.Err() == nil {
		for _, p := range m.rm.GetPlacements(ctx, 1) {
			m.eng.launch(ctx, p)
		}
	}
}

// launch marks a placed run LAUNCHED on its host, then starts it. The mark
// is in memory only: the run's first event writes it along, and a restart
// asks the backend about a run the store shows waiting (unrecorded.go). A
// stateful instance's first launch on a host is written before the backend
// is asked, since its volume lives there from then on whatever the backend
// remembers; so is a foreign job's, whose pods another client owns.
func (en *engine) launch(ctx context.Context, p resmgr.Placement) {
	m := en.m
	runID := p.Task.RunTaskID()
	m.mu.RLock()
	j := m.jobs[p.Task.JobID]
	m.mu.RUnlock()
	if j == nil {
		m.hm.ReleaseTask(runID)
		return
	}
	inst := p.Task.Instance
	var ver uint64
	persist := m.adopt.isForeign(j)
	if t := j.task(inst); j.typ == pelotonv1.JobType_STATEFUL && t != nil && t.status().BoundHost != p.Host {
		persist = true
	}
	err := m.applyTask(ctx, j, inst, persist, func(rt *pelotonv1.TaskStatus) error {
		if rt.State != taskPending || rt.RunId != p.Task.RunID || rt.GoalState == taskKilled {
			return errSkip
		}
		if rt.BoundHost != "" && rt.BoundHost != p.Host {
			return errSkip // placed against an older binding; it queues again
		}
		rt.State, rt.Host, rt.Reason, rt.Message = taskLaunched, p.Host, "", ""
		rt.Health, rt.Ports = pelotonv1.HealthState_HEALTH_UNKNOWN, nil
		rt.ExitCode = 0 // the run before's, shown while this one waited
		if j.typ == pelotonv1.JobType_STATEFUL {
			rt.BoundHost = p.Host // its volume lives here from now on
		}
		if rt.SpecVersion == 0 {
			rt.SpecVersion = j.current().version
		}
		ver = rt.SpecVersion
		return nil
	})
	if err != nil {
		m.hm.ReleaseTask(runID)
		m.rm.Release(j.id, inst)
		if errors.Is(err, errSkip) {
			m.queue.Add(j.id)
			return
		}
		// Not recorded, so not launched: the instance goes back to
		// INITIALIZED, which the next evaluation queues again (it left
		// resmgr with the placement; PENDING would strand it there).
		m.log.Warn("could not record a launch; the instance queues again", "task", runID, "err", err)
		_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
			if rt.State != taskPending || rt.RunId != p.Task.RunID {
				return errSkip
			}
			rt.State = taskInitialized
			return nil
		})
		m.queue.AddAfter(j.id, storeRetryBackoff)
		return
	}
	m.rm.MarkRunning(j.id, inst)
	ls := m.eng.launchSpec(j, inst, p.Task.RunID, p.Host, j.version(ver), p.Task.Resources)
	ls.Gang = p.Task.Gang
	if p.Peers != nil {
		// Placed with its gang: the peers' hosts are this placement's,
		// not their runs' before it.
		setGangEnv(ls.Env, j, j.version(ver), inst, p.Host, p.Peers)
	}
	if m.adopt.isForeign(j) {
		// Bind the pod the instance stands for; never create one.
		ls.Foreign, err = m.adopt.foreignRef(j, inst)
	}
	if err == nil {
		done := m.recon.begin(runID)
		err = m.hm.Launch(ctx, ls)
		done()
	}
	if err != nil && errors.Is(err, hostmgr.ErrAlreadyLaunched) && !m.adopt.isForeign(j) {
		m.eng.launchTaken(ctx, j, runID, p.Host, err)
		m.queue.Add(j.id)
		return
	}
	if err != nil {
		if m.adopt.isForeign(j) && m.foreign != nil {
			m.foreign.launchFailed(instKey{j.id, inst}) // its pod, if still there, gets another instance
		}
		ev := hostmgr.TaskEvent{TaskID: runID, Host: p.Host, State: taskFailed, Reason: "launch-failed", Message: err.Error(), Time: m.now()}
		if errors.Is(err, hostmgr.ErrLaunchBlocked) && !m.adopt.isForeign(j) {
			// Not the run's failure: see the launch-blocked case of handleEvent.
			ev.State, ev.Reason = taskLost, hostmgr.ReasonLaunchBlocked
		}
		m.eng.handleEvent(ctx, ev)
	} else if t := j.task(inst); t != nil {
		m.rw.amend(j, inst, func(v *taskView) { v.blocked = 0 })
	}
	m.queue.Add(j.id)
}

// launchTaken handles a launch the backend refused because it holds a run
// of that ID already. Neither case is the run's failure. A live run on the
// host it was placed on is this very run, launched already (the backend's
// state is applied to it). Otherwise the ID is used up, by a run that
// ended (an instance a scale-down removed had it) or that lives elsewhere
// (reconciliation stops that one as a stray): the run is LOST with
// ReasonRunIDTaken and the instance runs again under the next ID at once.
func (en *engine) launchTaken(ctx context.Context, j *job, runID, host string, err error) {
	m := en.m
	ev, serr := m.hm.Status(runID)
	if serr == nil && !isTerminal(ev.State) && ev.Host == host {
		m.log.Warn("the backend runs this run already; it goes on", "task", runID, "host", host)
		m.eng.handleEvent(ctx, ev)
		return
	}
	m.log.Warn("the backend used this run's id for another run; the instance runs under the next id", "task", runID,
		"placed", host, "held", ev.State, "on", ev.Host, "since", ev.Time, "err", err)
	m.eng.handleEvent(ctx, hostmgr.TaskEvent{TaskID: runID, Host: host, State: taskLost, Reason: hostmgr.ReasonRunIDTaken,
		Message: "the backend already had a run with this id: " + err.Error(), Time: m.now()})
}

// launchBlockedBackoff is the wait before the n-th retry in a row of a
// launch the backend refused with hostmgr.ErrLaunchBlocked: from base,
// doubling, at most a minute, so a fixed namespace is noticed soon and an
// unfixed one costs little.
func launchBlockedBackoff(base time.Duration, n uint32) time.Duration {
	d := base
	for i := uint32(1); i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// The environment a revocable run gets, besides the backend's own.
const (
	EnvRevocable = "PELOTON_REVOCABLE"
	EnvPriority  = "PELOTON_PRIORITY"
)

// The environment a run whose spec has metrics gets: where the host agent
// reads its latency (hostagent/runs.go). The port is named, not numbered:
// the backend picks the number, and sets it in the port's own variable
// (hostmgr.PortEnvName). EnvMetricsHost, the address the run listens on,
// is the backend's to set (the kubernetes backend sets the pod's IP); the
// agent takes 127.0.0.1 without it.
const (
	EnvMetricsPort      = "PELOTON_METRICS_PORT"
	EnvMetricsPath      = "PELOTON_METRICS_PATH"
	EnvMetricsHistogram = "PELOTON_METRICS_HISTOGRAM"
	EnvMetricsHost      = "PELOTON_METRICS_HOST"
)

// The environment a run of a self-scaling job (spec.selfScale) gets: its
// job's token, valid for GetJob, ScaleJob and CancelJob of that job only,
// until the job ends; the daemon's gRPC address (what the CLI's --server
// takes) and its REST base URL.
const (
	EnvJobToken = "PELOTON_JOB_TOKEN"
	EnvServer   = "PELOTON_SERVER"
	EnvAPI      = "PELOTON_API"
)

// launchSpec is launchSpec with, for a self-scaling job, its token and the
// daemon's addresses in the environment (Options.SelfScaleEnv): they are
// the stack's alone, whatever the spec's env says.
func (en *engine) launchSpec(j *job, inst, run uint32, host string, v *jobVersion, r resources.Resources) hostmgr.LaunchSpec {
	m := en.m
	ls := launchSpec(j, inst, run, host, v, r)
	for _, k := range []string{EnvJobToken, EnvServer, EnvAPI} {
		delete(ls.Env, k)
	}
	if v.spec.GetSelfScale() != nil && m.selfScaleEnv != nil {
		for k, val := range m.selfScaleEnv(j.id) {
			ls.Env[k] = val
		}
	}
	return ls
}

// launchSpec is what the backend needs to run run `run` of instance inst
// on host, on version v with resources r.
func launchSpec(j *job, inst, run uint32, host string, v *jobVersion, r resources.Resources) hostmgr.LaunchSpec {
	spec := v.sharedTaskSpec(inst)
	env := make(map[string]string, len(spec.Env))
	for k, v := range spec.Env {
		env[k] = v
	}
	// The host agent's QoS controller finds revocable runs, and which to
	// kill first, by these (hostagent/qos.go).
	delete(env, EnvRevocable)
	if sla := v.spec.GetSla(); sla.GetRevocable() {
		env[EnvRevocable], env[EnvPriority] = "true", strconv.FormatUint(uint64(sla.GetPriority()), 10)
	}
	// The agent scrapes what these say, so they are the stack's alone: a
	// user's own would point the agent at a port or host of their choice,
	// and a run without metrics must not look as if it had some.
	for _, k := range []string{EnvMetricsPort, EnvMetricsPath, EnvMetricsHistogram, EnvMetricsHost} {
		delete(env, k)
	}
	if m := spec.GetMetrics(); m != nil {
		path := m.GetPath()
		if path == "" {
			path = DefaultMetricsPath
		}
		env[EnvMetricsPort], env[EnvMetricsPath], env[EnvMetricsHistogram] = m.GetPort(), path, m.GetLatencyHistogram()
	}
	setGangEnv(env, j, v, inst, host, nil)
	ls := hostmgr.LaunchSpec{TaskID: resmgr.RunTaskID(j.id, inst, run), JobID: j.id, InstanceID: inst, RunID: run, Host: host,
		Command: spec.Command, Env: env, Image: spec.Image, Resources: r, Pool: j.pool,
		HealthCheck: spec.HealthCheck, KillGrace: graceOf(v, inst), Tolerations: spec.GetPlacement().GetTolerations()}
	for _, port := range spec.Ports {
		ls.Ports = append(ls.Ports, hostmgr.Port{Name: port.Name, Value: port.Value})
	}
	if b, ok := disruptionBudget(j, v.spec); ok {
		ls.Budget = &b
	}
	if vol := spec.Volume; vol != nil && j.typ == pelotonv1.JobType_STATEFUL {
		ls.Volume = &hostmgr.Volume{ID: volumeID(j.id, inst), SizeMB: int64(vol.SizeMb), MountPath: vol.MountPath}
	}
	return ls
}

// disruptionBudget is what the backend holds others' disruptions of a
// SERVICE or STATEFUL job's runs to (hostmgr.DisruptionBudget): the budget
// the SLA evaluator has for it (budgetOf: for a federated part, its share),
// out of the instances spec s asks for. Batch jobs and daemons have none.
func disruptionBudget(j *job, s *pelotonv1.JobSpec) (hostmgr.DisruptionBudget, bool) {
	if j.typ != pelotonv1.JobType_SERVICE && j.typ != pelotonv1.JobType_STATEFUL {
		return hostmgr.DisruptionBudget{}, false
	}
	return hostmgr.DisruptionBudget{Instances: s.GetInstanceCount(), MaxUnavailable: budgetOf(s)}, true
}

// volumeID names instance inst's persistent volume; it outlives runs.
func volumeID(jobID string, inst uint32) string { return fmt.Sprintf("%s-%d", jobID, inst) }

// gaugeLoop publishes job and task counts by state.
func (en *engine) gaugeLoop(ctx context.Context) {
	m := en.m
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.HostsChanged()
		var jobs [8]int
		var tasks [numTaskStates]int
		m.mu.RLock()
		for _, j := range m.jobs {
			rec := j.view()
			jobs[rec.rt.State]++
			for s := range j.counts {
				tasks[s] += int(j.counts[s].Load())
			}
		}
		for _, f := range m.finished {
			jobs[f.summary.GetStatus().GetState()]++
			for s, n := range f.summary.GetStatus().GetTaskCounts() {
				tasks[pelotonv1.TaskState_value[s]] += int(n)
			}
		}
		m.mu.RUnlock()
		for s, n := range jobs {
			if s > 0 {
				metrics.JobsByState.WithLabelValues(pelotonv1.JobState(s).String()).Set(float64(n))
			}
		}
		for s, n := range tasks {
			if s > 0 {
				metrics.TasksByState.WithLabelValues(pelotonv1.TaskState(s).String()).Set(float64(n))
			}
		}
	}
}

// preemptLoop carries out resmgr's preemption decisions.
func (en *engine) preemptLoop(ctx context.Context) {
	m := en.m
	for ctx.Err() == nil {
		// Victims of one decision are stopped concurrently so the group
		// committer packs their PREEMPTING writes; one at a time, each
		// waited for its own etcd round trip (~400 victims/s).
		vs := m.rm.GetPreemptions(ctx)
		idx := make([]uint32, len(vs))
		for i := range idx {
			idx[i] = uint32(i)
		}
		_ = parallel(idx, func(i uint32) error {
			if m.eng.mayPreempt(ctx, vs[i]) {
				m.eng.preempt(ctx, vs[i])
			}
			return nil
		})
	}
}

// mayPreempt asks the SLA evaluator before a long-running instance is
// preempted; a refused victim keeps running, and resmgr, which sees it
// still holding its resources, chooses again in a later round. STATEFUL
// instances are never preempted (resmgr never picks them: they are not
// preemptible).
func (en *engine) mayPreempt(ctx context.Context, v resmgr.Victim) bool {
	m := en.m
	m.mu.RLock()
	j := m.jobs[v.Task.JobID]
	m.mu.RUnlock()
	if j == nil || !isLongRunning(j.typ) {
		return true
	}
	if j.typ == pelotonv1.JobType_STATEFUL {
		return false
	}
	if err := m.recs.disrupt(ctx, j, v.Task.Instance, "preempt", "preempted: "+v.Reason, defaultMinReady); err != nil {
		m.log.Info("preemption not granted by the SLA evaluator", "job", j.id, "instance", v.Task.Instance, "err", err)
		return false
	}
	return true
}

// preempt moves a victim's run to PREEMPTING and kills it; when the kill
// lands, handleEvent starts a new run that queues again.
func (en *engine) preempt(ctx context.Context, v resmgr.Victim) {
	m := en.m
	m.mu.RLock()
	j := m.jobs[v.Task.JobID]
	m.mu.RUnlock()
	if j == nil {
		return
	}
	inst := v.Task.Instance
	var kill string
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		if rt.RunId != v.Task.RunID || !isActive(rt.State) || rt.State == taskKilling || rt.State == taskPreempting {
			return errSkip // it ended or is being stopped anyway
		}
		rt.State, rt.Reason, rt.Message = taskPreempting, "preempted-"+v.Reason, v.Detail
		kill = resmgr.RunTaskID(j.id, inst, rt.RunId)
		return nil
	})
	if err != nil {
		if !errors.Is(err, errSkip) {
			m.log.Error("record preemption", "job", j.id, "instance", inst, "err", err)
		}
		return
	}
	m.log.Info("preempting", "job", j.id, "instance", inst, "reason", v.Reason)
	m.eng.killRun(ctx, j, inst, kill, m.killGrace(j, inst))
}

// killDecided ends a task write that may have decided to stop a run:
// err errSkip (nothing to change) is no error, another err is returned, and
// a run the write chose to stop (kill, its task id; "" for none) is killed
// with grace once the write is done.
func (en *engine) killDecided(ctx context.Context, j *job, inst uint32, kill string, grace time.Duration, err error) error {
	switch {
	case errors.Is(err, errSkip):
		return nil
	case err != nil:
		return err
	case kill != "":
		en.killRun(ctx, j, inst, kill, grace)
	}
	return nil
}

// killRun asks the backend to stop a run. A run the backend does not know
// (it vanished with a restart) is reported as lost, which ends it.
func (en *engine) killRun(ctx context.Context, j *job, inst uint32, taskID string, grace time.Duration) {
	m := en.m
	m.eng.killRunAttempt(ctx, j, inst, taskID, grace, 1)
}

// maxKillAttempts bounds kill retries of one run (about ten minutes with the
// back-off below); a run still not killed by then is killed again after the
// next restart, when its KILLING state is reconciled.
const maxKillAttempts = 20

func (en *engine) killRunAttempt(ctx context.Context, j *job, inst uint32, taskID string, grace time.Duration, attempt int) {
	m := en.m
	err := m.hm.Kill(ctx, taskID, grace)
	if errors.Is(err, hostmgr.ErrUnknownTask) {
		m.eng.handleEvent(ctx, hostmgr.TaskEvent{TaskID: taskID, State: taskLost, Reason: "unknown-to-backend", Message: "the backend no longer knows this run", Time: m.now()})
		return
	}
	if err == nil {
		return
	}
	if attempt >= maxKillAttempts {
		m.log.Error("kill failed; giving up until the next restart", "task", taskID, "attempts", attempt, "err", err)
		return
	}
	delay := min(time.Second<<min(attempt-1, 6), time.Minute)
	m.log.Warn("kill failed; will retry", "task", taskID, "in", delay, "err", err)
	m.after(delay, func(ctx context.Context) {
		m.eng.killRunAttempt(ctx, j, inst, taskID, grace, attempt+1)
	})
}
