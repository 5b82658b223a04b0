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
	if err := m.recover(ctx); err != nil {
		return err
	}
	for i := 0; i < m.workers; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.worker(ctx)
		}()
	}
	for i := 0; i < m.launchers; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.launchLoop(ctx)
		}()
	}
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		m.eventLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.preemptLoop(ctx)
	}()
	go func() {
		defer m.wg.Done()
		m.gaugeLoop(ctx)
	}()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.drainLoop(ctx)
	}()
	context.AfterFunc(ctx, m.queue.ShutDown)
	m.mu.RLock()
	for id := range m.jobs {
		m.queue.Add(id)
	}
	m.mu.RUnlock()
	return nil
}

// Wait blocks until the engine's goroutines have stopped (after ctx ends).
func (m *Manager) Wait() { m.wg.Wait() }

func (m *Manager) recover(ctx context.Context) error {
	kvs, err := m.store.List(ctx, "jobs/")
	if err != nil {
		return fmt.Errorf("jobmgr: load jobs: %w", err)
	}
	specs := map[string][]byte{}
	type rtRec struct {
		rt  *pelotonv1.JobStatus
		rev int64
	}
	rts := map[string]rtRec{}
	for _, kv := range kvs {
		parts := strings.Split(kv.Key, "/") // jobs, id, runtime | jobs, id, spec, v
		switch {
		case len(parts) == 3 && parts[2] == "runtime":
			rt := &pelotonv1.JobStatus{}
			if err := proto.Unmarshal(kv.Value, rt); err != nil {
				return fmt.Errorf("jobmgr: decode %s: %w", kv.Key, err)
			}
			rts[parts[1]] = rtRec{rt, kv.Revision}
		case len(parts) == 4 && parts[2] == "spec":
			specs[kv.Key] = kv.Value
		}
	}
	for id, r := range rts {
		b, ok := specs[jobSpecKey(id, r.rt.SpecVersion)]
		if !ok {
			m.log.Error("job has no spec; skipping", "job", id, "version", r.rt.SpecVersion)
			continue
		}
		spec, err := decodeSpec(b)
		if err != nil {
			return fmt.Errorf("jobmgr: job %s: %w", id, err)
		}
		j, err := newJob(id, spec, r.rt, r.rev)
		if err != nil {
			return fmt.Errorf("jobmgr: job %s: %w", id, err)
		}
		m.jobs[id] = j
	}
	// Specs whose job runtime is gone belong to a deletion that was cut short.
	orphans := map[string]bool{}
	for key := range specs {
		if id := strings.Split(key, "/")[1]; rts[id].rt == nil {
			orphans[id] = true
		}
	}
	tkvs, err := m.store.List(ctx, "tasks/")
	if err != nil {
		return fmt.Errorf("jobmgr: load tasks: %w", err)
	}
	for _, kv := range tkvs {
		parts := strings.Split(kv.Key, "/")
		if len(parts) != 3 {
			continue
		}
		j := m.jobs[parts[1]]
		inst, err := strconv.ParseUint(parts[2], 10, 32)
		if j == nil || err != nil || inst >= uint64(len(j.tasks())) {
			orphans[parts[1]] = true
			continue
		}
		rt := &pelotonv1.TaskStatus{}
		if err := proto.Unmarshal(kv.Value, rt); err != nil {
			return fmt.Errorf("jobmgr: decode %s: %w", kv.Key, err)
		}
		j.tasks()[inst] = &task{rt: rt, rev: kv.Revision} // before the job is visible to anyone
		j.counts[rt.State].Add(1)
	}
	for id := range orphans {
		if m.jobs[id] == nil {
			m.log.Info("sweeping records of a deleted job", "job", id)
			m.sweep(ctx, id)
		}
	}
	for _, j := range m.jobs {
		if j.rt.State != pelotonv1.JobState_JOB_INITIALIZED {
			m.fillTasks(j)
		}
	}
	// Re-queue pending work and re-reserve what running work holds.
	var lost []hostmgr.TaskEvent
	type rekill struct {
		j    *job
		inst uint32
		id   string
	}
	// Runs that were being stopped when the process died, and still run.
	var stopping []rekill
	for _, j := range m.jobs {
		var pending []uint32
		for inst, t := range j.tasks() {
			if t == nil {
				continue
			}
			switch {
			case t.rt.State == stPending:
				pending = append(pending, uint32(inst))
			case isActive(t.rt.State):
				runID := resmgr.RunTaskID(j.id, uint32(inst), t.rt.RunId)
				r := j.resourcesOf(uint32(inst))
				m.hm.Recover(runID, t.rt.Host, r)
				m.rm.Recover(m.rmTask(j, uint32(inst), t.rt.RunId))
				if ev, err := m.hm.Status(runID); err == nil {
					lost = append(lost, ev)
					if !isTerminal(ev.State) && (t.rt.State == stKilling || t.rt.State == stPreempting) {
						stopping = append(stopping, rekill{j, uint32(inst), runID})
					}
				} else {
					lost = append(lost, hostmgr.TaskEvent{TaskID: runID, Host: t.rt.Host, State: stLost, Reason: "unknown-to-backend",
						Message: "the run was not found after a restart of the control plane", Time: m.now()})
				}
			}
		}
		if len(pending) > 0 {
			if err := m.rm.Enqueue(m.gangsFor(j, pending)...); err != nil {
				return fmt.Errorf("jobmgr: re-queue job %s: %w", j.id, err)
			}
		}
	}
	m.log.Info("recovered state", "jobs", len(m.jobs), "tasks", len(tkvs), "reconciled", len(lost))
	for _, ev := range lost {
		m.handleEvent(ctx, ev)
	}
	for _, k := range stopping {
		m.killRun(ctx, k.j, k.inst, k.id, m.killGrace(k.j, k.inst))
	}
	return nil
}

func (m *Manager) rmTask(j *job, inst, run uint32) *resmgr.Task {
	sla := j.spec.Sla
	return &resmgr.Task{JobID: j.id, Instance: inst, RunID: run, Pool: j.spec.Pool,
		Priority: sla.GetPriority(), Preemptible: isPreemptible(sla), Revocable: sla.GetRevocable(),
		Resources: j.resourcesOf(inst), Strategy: strategyOf(j.spec, inst), Placement: placementOf(j.spec, inst),
		PrevHost: j.previousHost(inst)}
}

// isPreemptible: batch work is preemptible unless the spec says otherwise.
func isPreemptible(sla *pelotonv1.SlaSpec) bool {
	return sla == nil || sla.Preemptible == nil || *sla.Preemptible
}

// gangsFor groups instances into gangs. The first minimumRunningInstances
// instances are a gang: while none of them holds a host they are queued
// together (all that are in insts); once the gang runs, a member that starts
// again (after a failure) joins it alone. Every other instance is a gang of one.
func (m *Manager) gangsFor(j *job, insts []uint32) []*resmgr.Gang {
	k := j.gangSize()
	gangRunning := k > 1 && m.gangActive(j, false)
	var gang []*resmgr.Task
	var out []*resmgr.Gang
	for _, inst := range insts {
		tk := j.tasks()[inst]
		tk.mu.Lock()
		run := tk.rt.RunId
		tk.mu.Unlock()
		t := m.rmTask(j, inst, run)
		if inst < k && !gangRunning {
			gang = append(gang, t)
			continue
		}
		out = append(out, resmgr.NewGang(t))
	}
	if len(gang) > 0 {
		out = append(out, resmgr.NewGang(gang...))
	}
	return out
}

// gangActive reports whether any gang member holds a host; with stopping,
// only members that are being stopped (preempted, killed for a restart) count.
func (m *Manager) gangActive(j *job, stopping bool) bool {
	for inst := uint32(0); inst < j.gangSize() && inst < uint32(len(j.tasks())); inst++ {
		t := j.tasks()[inst]
		if t == nil {
			continue
		}
		t.mu.Lock()
		st := t.rt.State
		t.mu.Unlock()
		if stopping && (st == stPreempting || st == stKilling) {
			return true
		}
		if !stopping && isActive(st) {
			return true
		}
	}
	return false
}

func (m *Manager) worker(ctx context.Context) {
	for {
		id, ok := m.queue.Get()
		if !ok {
			return
		}
		if err := m.evaluateJob(ctx, id); err != nil && ctx.Err() == nil {
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
// everything if the goal is KILLED, enqueue initialized instances, and derive
// the job's state from its tasks.
func (m *Manager) evaluateJob(ctx context.Context, id string) error {
	m.mu.RLock()
	j := m.jobs[id]
	m.mu.RUnlock()
	if j == nil {
		return nil // deleted
	}
	if err := m.createTasks(ctx, j); err != nil {
		return err
	}
	if j.goalKilled.Load() {
		var live []uint32
		for inst, t := range j.tasks() {
			t.mu.Lock()
			if !isTerminal(t.rt.State) && (t.rt.State != stKilling || t.rt.GoalState != stKilled) {
				live = append(live, uint32(inst))
			}
			t.mu.Unlock()
		}
		if err := parallel(live, func(inst uint32) error { return m.killInstance(ctx, j, inst, "job-cancelled") }); err != nil {
			return err
		}
	} else if err := m.enqueueInitialized(ctx, j); err != nil {
		return err
	}
	return m.updateJobState(ctx, j)
}

// createTasks gives every instance that has no task yet its first run, in
// memory only. An instance without a record in the store is by definition
// INITIALIZED on run 1, so writing that record would cost an etcd write per
// task and tell a restarted process nothing it could not infer; the first
// real write (LAUNCHED) creates the record, guarded by MustNotExist.
func (m *Manager) createTasks(ctx context.Context, j *job) error {
	j.mu.Lock()
	initializing := j.rt.State == pelotonv1.JobState_JOB_INITIALIZED
	j.mu.Unlock()
	if !initializing {
		return nil
	}
	m.fillTasks(j)
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
func (m *Manager) fillTasks(j *job) {
	now := timestamppb.New(m.now())
	cur := j.tasks()
	next := make([]*task, len(cur))
	copy(next, cur)
	added := int32(0)
	for inst, t := range next {
		if t == nil {
			next[inst] = &task{rt: &pelotonv1.TaskStatus{State: stInitialized, GoalState: m.taskGoal(j), RunId: 1, UpdateTime: now}}
			added++
		}
	}
	if added > 0 {
		j.counts[stInitialized].Add(added)
		j.taskSlice.Store(&next)
	}
}

// enqueueInitialized moves INITIALIZED instances to PENDING and hands them to
// resmgr. An instance in backoff is left for a later evaluation.
func (m *Manager) enqueueInitialized(ctx context.Context, j *job) error {
	if j.counts[stInitialized].Load() == 0 {
		return nil
	}
	now := m.now()
	var ready []uint32
	var wait time.Duration
	// Gang members wait while any of them is still being stopped, so that a
	// preempted gang queues again as a whole, never piecemeal.
	holdGang := j.gangSize() > 1 && m.gangActive(j, true)
	for inst, t := range j.tasks() {
		if holdGang && uint32(inst) < j.gangSize() {
			continue
		}
		t.mu.Lock()
		if t.rt.State == stInitialized && t.rt.GoalState != stKilled {
			if d := t.notBefore.Sub(now); d > 0 {
				if wait == 0 || d < wait {
					wait = d
				}
			} else {
				ready = append(ready, uint32(inst))
			}
		}
		t.mu.Unlock()
	}
	if wait > 0 {
		m.queue.AddAfter(j.id, wait)
	}
	// sla.maximumRunningInstances: start no more than the room left; the
	// rest stay INITIALIZED until running instances end (each end wakes
	// this evaluation again).
	if limit := j.spec.GetSla().GetMaximumRunningInstances(); limit > 0 {
		room := int(limit) - int(j.activeCount())
		if room <= 0 {
			ready = nil
		} else if len(ready) > room {
			ready = ready[:room]
		}
	}
	var mu sync.Mutex
	var moved []uint32
	err := parallel(ready, func(inst uint32) error {
		// PENDING is not written: after a restart an INITIALIZED instance is
		// queued exactly like a PENDING one, so the write would buy nothing.
		err := m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
			if rt.State != stInitialized {
				return errSkip
			}
			rt.State = stPending
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
		if eerr := m.rm.Enqueue(m.gangsFor(j, moved)...); eerr != nil {
			// Back to INITIALIZED, so the retried evaluation queues them again.
			for _, inst := range moved {
				_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
					if rt.State != stPending {
						return errSkip
					}
					rt.State = stInitialized
					return nil
				})
			}
			return eerr
		}
	}
	return err
}

// updateJobState derives the job's state from its instances' states.
func (m *Manager) updateJobState(ctx context.Context, j *job) error {
	n := int32(len(j.tasks()))
	c := func(s ts) int32 { return j.counts[s].Load() }
	terminal := c(stSucceeded) + c(stFailed) + c(stLost) + c(stKilled)
	active := c(stLaunching) + c(stLaunched) + c(stStarting) + c(stRunning) + c(stKilling) + c(stPreempting)
	return m.updateJobRuntime(ctx, j, func(rt *pelotonv1.JobStatus) error {
		if rt.State == pelotonv1.JobState_JOB_INITIALIZED {
			return nil
		}
		killed := rt.GoalState == pelotonv1.JobState_JOB_KILLED
		var next js
		switch {
		case terminal == n && c(stSucceeded) == n:
			next = pelotonv1.JobState_JOB_SUCCEEDED
		case terminal == n && killed:
			next = pelotonv1.JobState_JOB_KILLED
		case terminal == n && c(stFailed) > 0:
			next = pelotonv1.JobState_JOB_FAILED
		case terminal == n:
			next = pelotonv1.JobState_JOB_KILLED
		case killed:
			next = pelotonv1.JobState_JOB_KILLING
		case active > 0 || terminal > 0:
			next = pelotonv1.JobState_JOB_RUNNING
		default:
			next = pelotonv1.JobState_JOB_PENDING
		}
		if next == rt.State {
			return nil
		}
		now := timestamppb.New(m.now())
		if next == pelotonv1.JobState_JOB_RUNNING && rt.StartTime == nil {
			rt.StartTime = now
		}
		if isJobTerminal(next) {
			rt.CompletionTime = now
			if next == pelotonv1.JobState_JOB_FAILED {
				rt.Message = m.failureSummary(j)
			}
		}
		rt.State = next
		return nil
	})
}

func (m *Manager) failureSummary(j *job) string {
	var failed []string
	for inst, t := range j.tasks() {
		t.mu.Lock()
		if t.rt.State == stFailed {
			failed = append(failed, fmt.Sprintf("instance %d (%s)", inst, t.rt.Message))
		}
		t.mu.Unlock()
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
func (m *Manager) eventLoop(ctx context.Context) {
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
					m.applyEvent(ctx, e, superseded)
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

// handleEvent applies one run's state change to its instance.
func (m *Manager) handleEvent(ctx context.Context, ev hostmgr.TaskEvent) {
	m.applyEvent(ctx, ev, false)
}

// applyEvent applies one event. superseded says a later event of the same
// run is already queued: a RUNNING event is then applied in memory only, and
// the later event's write carries it (a restart would learn nothing from
// the RUNNING record that the next one does not tell). For short tasks this
// saves one of the three writes a batch task costs.
func (m *Manager) applyEvent(ctx context.Context, ev hostmgr.TaskEvent, superseded bool) {
	jobID, inst, run, ok := parseTaskID(ev.TaskID)
	if !ok {
		m.log.Warn("event for a task ID that is not ours", "task", ev.TaskID)
		return
	}
	m.mu.RLock()
	j := m.jobs[jobID]
	m.mu.RUnlock()
	if j == nil || inst >= uint32(len(j.tasks())) || j.tasks()[inst] == nil {
		return // the job was deleted
	}
	var (
		release bool
		backoff time.Duration
	)
	persist := !(superseded && ev.State == stRunning)
	err := m.applyTask(ctx, j, inst, persist, func(rt *pelotonv1.TaskStatus) error {
		if rt.RunId != run {
			return errSkip // an old run's late event
		}
		now := timestamppb.New(ev.Time)
		switch ev.State {
		case stLaunched:
			return errSkip // written when the launch was issued
		case stRunning:
			if rt.State != stLaunched && rt.State != stLaunching && rt.State != stStarting {
				return errSkip
			}
			rt.State, rt.StartTime = stRunning, now
			return nil
		}
		if isTerminal(rt.State) || rt.State == stInitialized || rt.State == stPending {
			return errSkip
		}
		release = true
		rt.ExitCode, rt.CompletionTime = ev.ExitCode, now
		killedByUs := rt.State == stKilling || rt.GoalState == stKilled
		switch {
		case rt.State == stPreempting && ev.State != stSucceeded && rt.GoalState != stKilled:
			// Preempted: the instance waits for capacity again, with no failure counted.
			newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was preempted (%s); pending again", run, rt.Reason))
		case rt.DesiredRunId > rt.RunId:
			// A restart: the old run is over, start the new one.
			newRun(rt, rt.DesiredRunId, fmt.Sprintf("run %d ended (%s); restarting", run, ev.State))

		case ev.State == stSucceeded:
			rt.State, rt.Reason, rt.Message = stSucceeded, "exit-zero", ""
		case killedByUs:
			rt.State = stKilled
			if rt.Reason == "" {
				rt.Reason = "killed"
			}
			rt.Message = ev.Message
		case ev.State == stLost:
			newRun(rt, rt.RunId+1, fmt.Sprintf("run %d was lost (%s); running again", run, ev.Reason))
			backoff = m.lostBackoff
		default: // FAILED, or KILLED by someone other than us
			rt.FailureCount++
			max := instanceSpec(j.spec, inst).GetRestartPolicy().GetMaxFailures()
			msg := ev.Message
			if msg == "" {
				msg = fmt.Sprintf("%s: exit code %d", ev.Reason, ev.ExitCode)
			}
			if rt.FailureCount <= max {
				newRun(rt, rt.RunId+1, fmt.Sprintf("run %d failed (%s); retry %d of %d", run, msg, rt.FailureCount, max))
				rt.ExitCode = ev.ExitCode

			} else {
				rt.State, rt.Reason = stFailed, ev.Reason
				rt.Message = fmt.Sprintf("run %d failed (%s); %d failures, restartPolicy.maxFailures is %d", run, msg, rt.FailureCount, max)
			}
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return
	}
	if err != nil {
		m.log.Error("apply task event", "task", ev.TaskID, "state", ev.State, "err", err)
		return
	}
	if release {
		// hostmgr frees a run's host when the backend reports its end; events
		// made up here (a run lost across a restart) must free it too.
		m.hm.ReleaseTask(ev.TaskID)
		m.rm.Release(jobID, inst)
	}
	if backoff > 0 {
		t := j.tasks()[inst]
		t.mu.Lock()
		t.notBefore = m.now().Add(backoff)
		t.mu.Unlock()
	}

	m.queue.Add(jobID)
}

// launchLoop turns placements into launches.
func (m *Manager) launchLoop(ctx context.Context) {
	for ctx.Err() == nil {
		for _, p := range m.rm.GetPlacements(ctx, 64) {
			m.launch(ctx, p)
		}
	}
}

// launch records a placed run as LAUNCHED on its host, then starts it. The
// record comes first so that a crash between the two is seen at restart as a
// launched run the backend does not know, and run again.
func (m *Manager) launch(ctx context.Context, p resmgr.Placement) {
	runID := p.Task.RunTaskID()
	m.mu.RLock()
	j := m.jobs[p.Task.JobID]
	m.mu.RUnlock()
	if j == nil {
		m.hm.ReleaseTask(runID)
		return
	}
	inst := p.Task.Instance
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		if rt.State != stPending || rt.RunId != p.Task.RunID || rt.GoalState == stKilled {
			return errSkip
		}
		rt.State, rt.Host, rt.Reason, rt.Message = stLaunched, p.Host, "", ""
		return nil
	})
	if err != nil {
		if !errors.Is(err, errSkip) {
			m.log.Error("record launch", "task", runID, "err", err)
		}
		m.hm.ReleaseTask(runID)
		m.rm.Release(j.id, inst)
		m.queue.Add(j.id)
		return
	}
	m.rm.MarkRunning(j.id, inst)
	spec := instanceSpec(j.spec, inst)
	env := make(map[string]string, len(spec.Env))
	for k, v := range spec.Env {
		env[k] = v
	}
	ls := hostmgr.LaunchSpec{TaskID: runID, JobID: j.id, InstanceID: inst, RunID: p.Task.RunID, Host: p.Host,
		Command: spec.Command, Env: env, Image: spec.Image, Resources: p.Task.Resources}
	if err := m.hm.Launch(ctx, ls); err != nil {
		m.handleEvent(ctx, hostmgr.TaskEvent{TaskID: runID, Host: p.Host, State: stFailed, Reason: "launch-failed", Message: err.Error(), Time: m.now()})
	}
	m.queue.Add(j.id)
}

// gaugeLoop publishes job and task counts by state.
func (m *Manager) gaugeLoop(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var jobs [8]int
		var tasks [16]int
		m.mu.RLock()
		for _, j := range m.jobs {
			j.mu.Lock()
			jobs[j.rt.State]++
			j.mu.Unlock()
			for s := range j.counts {
				tasks[s] += int(j.counts[s].Load())
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
func (m *Manager) preemptLoop(ctx context.Context) {
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
			m.preempt(ctx, vs[i])
			return nil
		})
	}
}

// preempt moves a victim's run to PREEMPTING and kills it; when the kill
// lands, handleEvent starts a new run that queues again.
func (m *Manager) preempt(ctx context.Context, v resmgr.Victim) {
	m.mu.RLock()
	j := m.jobs[v.Task.JobID]
	m.mu.RUnlock()
	if j == nil {
		return
	}
	inst := v.Task.Instance
	var kill string
	err := m.updateTask(ctx, j, inst, func(rt *pelotonv1.TaskStatus) error {
		if rt.RunId != v.Task.RunID || !isActive(rt.State) || rt.State == stKilling || rt.State == stPreempting {
			return errSkip // it ended or is being stopped anyway
		}
		rt.State, rt.Reason, rt.Message = stPreempting, "preempted-"+v.Reason, v.Detail
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
	m.killRun(ctx, j, inst, kill, m.killGrace(j, inst))
}
