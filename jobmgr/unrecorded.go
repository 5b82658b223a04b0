package jobmgr

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Launches are not written. engine.launch marks a placed run LAUNCHED in
// memory and starts it; the run's first event (RUNNING, or its end) writes
// the record, launch and all. A batch task so costs one write from queue to
// end, not two.
//
// The price is paid at a restart. The store may then show an instance as
// waiting (INITIALIZED, or PENDING in records of older versions) whose run
// the backend started just before the crash. Its run ID is the one the
// record names (run IDs are made, never drawn), so the backend is asked for
// that run before the instance is queued again:
//
//   - a run the backend knows is adopted: the instance is LAUNCHED on the
//     run's host, the room it holds is taken again in hostmgr and resmgr,
//     and the backend's state of it (running, or how it ended while no
//     stack watched) is applied like any event;
//   - a run the backend does not know never started: the instance queues
//     as it would have, under the same run ID;
//   - while the backend's substrate is away the backend cannot tell, so
//     the instance's job queues nothing until it answers; reconciliation
//     asks again at each pass (reconcile.go) and keeps its hands off those
//     runs meanwhile, so none is killed as a stray nor launched twice.
//
// A run ID the backend already holds is refused at launch in any case
// (hostmgr.ErrAlreadyLaunched), which is the second guard.

// unverified are the waiting instances, by job, whose current run the
// backend could not be asked about at the last restart (its substrate was
// away): instance → run.
type unverified struct {
	mu    sync.Mutex
	byJob map[string]map[uint32]uint32
}

// waits reports whether job id has instances to verify; its evaluation
// then queues none of its instances.
func (u *unverified) waits(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.byJob[id]) > 0
}

// holds reports whether run taskID is one still to verify.
func (u *unverified) holds(taskID string) bool {
	jobID, inst, run, ok := parseTaskID(taskID)
	if !ok {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	r, found := u.byJob[jobID][inst]
	return found && r == run
}

func (u *unverified) add(jobID string, inst, run uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byJob == nil {
		u.byJob = map[string]map[uint32]uint32{}
	}
	if u.byJob[jobID] == nil {
		u.byJob[jobID] = map[uint32]uint32{}
	}
	u.byJob[jobID][inst] = run
}

// take removes and returns every instance to verify.
func (u *unverified) take() map[string]map[uint32]uint32 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.byJob
	u.byJob = nil
	return out
}

// restore puts back what take returned and could not be verified.
func (u *unverified) restore(jobID string, insts map[uint32]uint32) {
	for inst, run := range insts {
		u.add(jobID, inst, run)
	}
}

// waitingMessage is the message of an instance whose run the backend must
// be asked about before it runs.
func waitingMessage(substrate string, run uint32) string {
	return fmt.Sprintf("waiting for %s to answer: run %d may have started before the control plane restarted", substrate, run)
}

// recoverWaiting is recovery's step for a waiting instance (see above). It
// returns the backend's event of the instance's current run if the run was
// adopted (the caller applies it), and queue=true if the instance should
// be queued now (a PENDING record; an INITIALIZED one is queued by its
// job's evaluation).
func (en *engine) recoverWaiting(j *job, inst uint32, rt *pelotonv1.TaskStatus, reachable bool) (ev hostmgr.TaskEvent, adopted, queue bool) {
	m := en.m
	runID := resmgr.RunTaskID(j.id, inst, rt.RunId)
	ev, err := m.hm.Status(runID)
	switch {
	case err == nil:
		return ev, m.eng.adoptRun(j, inst, rt.RunId, ev), false
	case !reachable || !errors.Is(err, hostmgr.ErrUnknownTask):
		// It cannot tell yet: back to INITIALIZED (so that the evaluation,
		// not recovery, queues it once it is verified), saying why it waits.
		msg := waitingMessage(m.hm.Substrate().Name, rt.RunId)
		_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
			rt.State, rt.Message = taskInitialized, msg
			return nil
		})
		m.unverified.add(j.id, inst, rt.RunId)
		return ev, false, false
	}
	return ev, false, rt.State == taskPending
}

// adoptRun makes run `run` of a waiting instance, which the backend reports
// in ev, the instance's LAUNCHED run on ev.Host, holding its room in hostmgr
// and resmgr again. It returns false, changing nothing, if the instance has
// moved on (it was killed, or is no longer waiting on that run): the run is
// then a stray, which reconciliation stops.
func (en *engine) adoptRun(j *job, inst, run uint32, ev hostmgr.TaskEvent) bool {
	m := en.m
	var via []taskState
	if t := j.task(inst); t != nil && t.status().State == taskInitialized {
		via = []taskState{taskPending}
	}
	err := m.applyTaskVia(context.Background(), j, inst, false, via, func(rt *pelotonv1.TaskStatus) error {
		if (rt.State != taskInitialized && rt.State != taskPending) || rt.RunId != run || rt.GoalState == taskKilled {
			return errSkip
		}
		rt.State, rt.Host, rt.Reason, rt.Message = taskLaunched, ev.Host, "", ""
		if rt.SpecVersion == 0 {
			rt.SpecVersion = j.current().version
		}
		return nil
	})
	if err != nil {
		return false
	}
	runID := resmgr.RunTaskID(j.id, inst, run)
	m.eng.recoverHold(j)(runID, ev.Host, j.resourcesOf(inst))
	m.rm.Release(j.id, inst) // should it have been queued
	m.rm.Recover(m.eng.rmTask(j, inst, run))
	m.rm.MarkRunning(j.id, inst)
	metrics.Reconciled.WithLabelValues(metrics.ReconciledAdopted).Inc()
	m.log.Info("adopted a run launched before the restart and never recorded", "task", runID, "host", ev.Host, "state", ev.State)
	return true
}

// verifyWaiting asks the backend, now that its substrate answers, about the
// instances recovery could not verify (see above), adopts the runs it
// knows, and has their jobs evaluated again, which queues the others.
func (en *engine) verifyWaiting(ctx context.Context) (adopted int) {
	m := en.m
	waiting := m.unverified.take()
	if len(waiting) == 0 {
		return 0
	}
	ids := make([]string, 0, len(waiting))
	for id := range waiting {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m.mu.RLock()
		j := m.jobs[id]
		m.mu.RUnlock()
		if j == nil {
			continue
		}
		var evs []hostmgr.TaskEvent
		left := map[uint32]uint32{}
		for inst, run := range waiting[id] {
			ev, err := m.hm.Status(resmgr.RunTaskID(id, inst, run))
			switch {
			case err == nil:
				if m.eng.adoptRun(j, inst, run, ev) {
					evs = append(evs, ev)
					adopted++
				}
			case errors.Is(err, hostmgr.ErrUnknownTask):
				msg := waitingMessage(m.hm.Substrate().Name, run)
				_ = m.updateTaskVolatile(j, inst, func(rt *pelotonv1.TaskStatus) error {
					if rt.Message != msg {
						return errSkip
					}
					rt.Message = ""
					return nil
				})
			default:
				left[inst] = run
			}
		}
		m.unverified.restore(id, left)
		m.eng.handleEvents(ctx, evs)
		m.queue.Add(id)
	}
	if adopted > 0 {
		m.log.Info("the backend answered: runs launched before the restart adopted, the other waiting instances queued", "adopted", adopted)
	}
	return adopted
}
