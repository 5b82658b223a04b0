package jobmgr

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Reconciliation compares, every ReconcileEvery, what jobmgr believes runs
// with what the backend reports, and repairs the difference:
//
//   - a run whose end (or start) the backend reports but jobmgr never
//     applied (its event was lost on the way) gets that event now;
//   - a run the backend does not know, seen so in two passes in a row in
//     the same state, is LOST, and the instance runs again;
//   - a run the backend has that jobmgr does not know (the past run of an
//     instance, a run of a deleted job) counts on its host at once and is
//     killed when the next pass still sees it;
//   - first of all, once the substrate answers, the instances a restart
//     found waiting while it was away are verified (unrecorded.go): their
//     runs are adopted or they are queued, and until then those runs are
//     neither strays nor lost.
//
// Two passes, because a pass can look while a change is on its way: a
// launch recorded whose backend call has not returned, an event queued but
// not yet applied. Runs in flight (launch or in-place patch under way) and
// runs with events waiting to be written are skipped altogether.
//
// While the backend's substrate is away (hostmgr.SubstrateReporter) its
// view is as last seen, or empty if it never saw the substrate: a pass
// still applies the ends and starts it reports, but takes no run for lost
// until the substrate answers again.
//
// One pass costs a walk over every task (a lock each) and a Status per
// active run, which the backends answer from memory (local, sim) or an
// informer cache (kubernetes); it yields every reconcileChunk runs, so at
// 100k tasks it takes well under a second of CPU spread over the pass.

const (
	defaultReconcileEvery = 10 * time.Second
	// firstReconcile is when the first pass runs after Start: soon, since
	// a restart is when runs and records most often disagree.
	firstReconcile = 2 * time.Second
	reconcileChunk = 2000
	// strayKillGrace is the grace of the kill of a run jobmgr does not know.
	strayKillGrace = 10 * time.Second
)

type reconciler struct {
	every time.Duration

	mu sync.Mutex
	// inflight counts, per run, the backend calls under way that create it
	// or turn a run into it (Launch, Replace).
	inflight map[string]int
	// unknown: runs the last pass found unknown to the backend, with the
	// state jobmgr had for them then. strays: runs the backend had that
	// jobmgr did not know, at the last pass.
	unknown map[string]taskState
	strays  map[string]bool
}

func newReconciler(every time.Duration) reconciler {
	if every <= 0 {
		every = defaultReconcileEvery
	}
	return reconciler{every: every, inflight: map[string]int{}, unknown: map[string]taskState{}, strays: map[string]bool{}}
}

// stillUnknown keeps in unknown (runs the backend does not know, with
// jobmgr's state for them) only those the last pass also found unknown in the
// same state, and remembers this pass's others for the next.
func (r *reconciler) stillUnknown(unknown map[string]taskState) {
	r.mu.Lock()
	prevUnknown := r.unknown
	r.unknown = map[string]taskState{}
	for id, st := range unknown {
		if prevUnknown[id] != st {
			r.unknown[id] = st
			delete(unknown, id)
		}
	}
	r.mu.Unlock()
}

// begin marks runs as being created by a backend call; the returned
// function ends the mark.
func (r *reconciler) begin(runs ...string) func() {
	r.mu.Lock()
	for _, id := range runs {
		r.inflight[id]++
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		for _, id := range runs {
			if r.inflight[id]--; r.inflight[id] <= 0 {
				delete(r.inflight, id)
			}
		}
		r.mu.Unlock()
	}
}

func (r *reconciler) inFlight(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[id] > 0
}

func (rc *reconcilers) reconcileLoop(ctx context.Context) {
	m := rc.m
	timer := time.NewTimer(firstReconcile)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		m.recs.reconcileOnce(ctx)
		timer.Reset(m.recon.every)
	}
}

// reconcileOnce is one pass (see above). It returns what it repaired.
func (rc *reconcilers) reconcileOnce(ctx context.Context) (missed, lost, strays int) {
	m := rc.m
	start := time.Now()
	reachable := m.hm.Substrate().Reachable
	if reachable {
		m.eng.verifyWaiting(ctx)
	}
	m.mu.RLock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.RUnlock()

	known := map[string]bool{}
	unknown := map[string]taskState{}
	var fixes []hostmgr.TaskEvent
	walked := 0
	for _, j := range jobs {
		foreign := m.adopt.isForeign(j)
		for inst, t := range j.tasks() {
			if t == nil {
				continue
			}
			if walked++; walked%reconcileChunk == 0 {
				if ctx.Err() != nil {
					return
				}
				// Hand the core to the engine's ready goroutines (no lock
				// is held here); a sleep would only add a delay per chunk.
				runtime.Gosched()
			}
			tv := t.view()
			st, run, health := tv.rt.State, tv.rt.RunId, tv.rt.Health
			if !isActive(st) {
				continue
			}
			runID := resmgr.RunTaskID(j.id, uint32(inst), run)
			known[runID] = true
			// Foreign runs are pods another client owns; foreign.go
			// follows them.
			if foreign || st == taskLaunching || m.recon.inFlight(runID) || m.eng.hasUnwritten(runID) {
				continue
			}
			ev, err := m.hm.Status(runID)
			switch {
			case errors.Is(err, hostmgr.ErrUnknownTask):
				if reachable {
					unknown[runID] = st
				}
			case err != nil:
			case isTerminal(ev.State):
				fixes = append(fixes, ev)
			case ev.State == taskRunning && (st == taskLaunched || st == taskStarting || (st == taskRunning && ev.Health != health)):
				fixes = append(fixes, ev)
			}
		}
	}
	for _, ev := range fixes {
		m.log.Info("reconciliation: applying a run's state the backend reports and jobmgr missed", "task", ev.TaskID, "state", ev.State)
		metrics.Reconciled.WithLabelValues("missed-event").Inc()
		m.eng.handleEvent(ctx, ev)
		missed++
	}

	m.recon.stillUnknown(unknown)
	for id := range unknown {
		m.log.Warn("reconciliation: the backend does not know a run jobmgr believes active; it is lost", "task", id)
		metrics.Reconciled.WithLabelValues("lost").Inc()
		m.eng.handleEvent(ctx, unknownToBackend(id, "", "the backend does not know this run (found by reconciliation)", m.now()))
		lost++
	}

	seen := map[string]bool{}
	for _, r := range m.hm.Runs() {
		if known[r.TaskID] || isTerminal(r.Last.State) || m.recon.inFlight(r.TaskID) || m.unverified.holds(r.TaskID) {
			continue
		}
		if _, _, _, ours := parseTaskID(r.TaskID); !ours {
			continue
		}
		seen[r.TaskID] = true
		// It takes room on its host while it runs, whoever knows it. Its
		// end frees it (hostmgr releases on the backend's event); if it
		// ended before the hold was taken, no event comes: free it here.
		m.hm.Recover(r.TaskID, r.Host, r.Resources)
		if ev, err := m.hm.Status(r.TaskID); err != nil || isTerminal(ev.State) {
			m.hm.ReleaseTask(r.TaskID)
			continue
		}
		if jobID, _, _, _ := parseTaskID(r.TaskID); m.eng.isHeld(jobID) {
			// Its job cannot be loaded (a record of it is in quarantine):
			// the run holds its room and is left to a person.
			continue
		}
		m.recon.mu.Lock()
		again := m.recon.strays[r.TaskID]
		m.recon.mu.Unlock()
		if !again {
			continue
		}
		m.log.Warn("reconciliation: killing a run jobmgr does not know", "task", r.TaskID, "host", r.Host)
		metrics.Reconciled.WithLabelValues("stray").Inc()
		if err := m.hm.Kill(ctx, r.TaskID, strayKillGrace); err != nil && !errors.Is(err, hostmgr.ErrUnknownTask) {
			m.log.Warn("reconciliation: kill of an unknown run failed; trying again next pass", "task", r.TaskID, "err", err)
		}
		strays++
	}
	m.recon.mu.Lock()
	m.recon.strays = seen
	m.recon.mu.Unlock()
	metrics.ReconcileSeconds.Set(time.Since(start).Seconds())
	return missed, lost, strays
}

// unknownToBackend is the event of a run the backend does not know.
func unknownToBackend(id, host, msg string, at time.Time) hostmgr.TaskEvent {
	return hostmgr.TaskEvent{TaskID: id, Host: host, State: pelotonv1.TaskState_LOST, Reason: "unknown-to-backend", Message: msg, Time: at}
}
