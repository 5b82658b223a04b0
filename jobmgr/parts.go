package jobmgr

// Manager's work is split into parts, each a type of its own so that no one
// type carries every method of the package. A part holds only a pointer back
// to its Manager: the jobs registry, the store, the queues and every lock
// stay on Manager, and a part's methods take the same locks the same way
// they did as Manager's methods (no part has a lock of its own). A part's
// method starts with m := <part>.m and reads as before.
//
// Manager itself keeps the jobs registry and the API of jobs and tasks
// (create, get, list, kill, restart, delete, logs), the engine's Start and
// Wait, the goroutines it owns (owned.go), and the two calls the wiring makes
// of it (HostsChanged, UnwrittenEvents).

// Updates changes the spec of a job: rolling updates and their driver
// (update.go, update_plan.go), in-place restarts where the backend can patch
// a run (patch.go), and scaling and the list of versions (scale.go).
type Updates struct{ m *Manager }

// Archive moves finished jobs out: the index of finished jobs not in memory
// (index.go) and the collector that archives them into history and removes
// them from the store (collect.go).
type Archive struct{ m *Manager }

// engine is the goal-state engine: recovery of the records at start, the
// workers that drive tasks towards their goal, the event loop, launches,
// preemption (engine.go), task events whose write failed (retry.go) and
// records that cannot be read (quarantine.go).
type engine struct{ m *Manager }

// reconcilers keep what runs in line with what should run: long-running
// jobs and their SLA grants (longrunning.go), DAEMON jobs' hosts
// (daemon.go), drains of hosts in maintenance (drain.go) and the comparison
// with what the backend reports (reconcile.go).
type reconcilers struct{ m *Manager }

// adoption adopts work other clients hand to Peloton through the backend
// (foreign.go); its state is in foreignCtl, nil when the backend has none.
type adoption struct{ m *Manager }

// recordWriter carries out the writes of the records jobmgr publishes (an
// instance's runtime, a job's runtime) in their turns, and reads a record
// back when a write's outcome is not known (taskrec.go, jobrec.go,
// resolve.go). The turns are the records' own (turns.go).
type recordWriter struct{ m *Manager }

// attachParts gives m its parts; New calls it, as must a test that builds a
// Manager by hand.
func attachParts(m *Manager) *Manager {
	m.upd = &Updates{m}
	m.arch = &Archive{m}
	m.eng = &engine{m}
	m.recs = &reconcilers{m}
	m.adopt = &adoption{m}
	m.rw = &recordWriter{m}
	if m.watch == nil {
		m.watch = &Watches{}
	}
	return m
}

// Updates is the part of m that changes jobs' specs (rolling updates,
// scaling).
func (m *Manager) Updates() *Updates { return m.upd }

// Archive is the part of m that moves finished jobs into history.
func (m *Manager) Archive() *Archive { return m.arch }
