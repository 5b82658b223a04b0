package hostmgr

import (
	"context"
	"sort"
)

// Maintenance a backend schedules (MaintenanceSource). The backend's word
// is kept per host in srcWant, level-triggered: the maintenance loop acts
// on the latest word for each host, and forgets it once acted on or moot;
// a word it cannot act on yet (the host is not known yet, or moves between
// partitions) is tried again. Because the maintenance record says who
// started it (maintRecord.by) and is reloaded at Start, a restarted stack
// completes what the backend started and leaves an operator's alone.

// sourceStep is what to do about a backend's word on a host.
type sourceStep int

const (
	// sourceDone: nothing to do (already so, or an operator's to decide).
	sourceDone sourceStep = iota
	// sourceWait: not now; try again later.
	sourceWait
	// sourceStart: start maintenance, recorded as the backend's.
	sourceStart
	// sourceComplete: complete the backend's maintenance.
	sourceComplete
)

// decideSource is the one decision on a backend's word that host goes down
// (or comes back up): from the host's maintenance state, who started it
// (by, "" for an operator), whether hostmgr knows the host and whether it
// moves between partitions.
func decideSource(down, known, moving bool, state hs, by string) sourceStep {
	switch {
	case !known:
		return sourceWait
	case down && state == hostUp && moving:
		return sourceWait // StartMaintenance refuses a moving host; the move ends
	case down && state == hostUp:
		return sourceStart
	case !down && (state == hostDraining || state == hostDrained) && by != "":
		return sourceComplete
	}
	return sourceDone
}

// onSourceMaintenance is the MaintenanceSource's callback: it records the
// word and wakes the maintenance loop. It never blocks on the store.
func (m *Manager) onSourceMaintenance(host string, down bool) {
	m.srcMu.Lock()
	m.srcWant[host] = down
	m.srcMu.Unlock()
	m.wakeMaint()
}

// wakeIfSourcePending wakes the maintenance loop when a backend's word
// waits to be acted on.
func (m *Manager) wakeIfSourcePending() {
	m.srcMu.Lock()
	n := len(m.srcWant)
	m.srcMu.Unlock()
	if n > 0 {
		m.wakeMaint()
	}
}

// applySourceMaintenance acts on the backend's words. It reports false
// when a word must be tried again later, on a timer.
func (m *Manager) applySourceMaintenance(ctx context.Context) bool {
	m.srcMu.Lock()
	hosts := make([]string, 0, len(m.srcWant))
	want := make(map[string]bool, len(m.srcWant))
	for h, d := range m.srcWant {
		hosts = append(hosts, h)
		want[h] = d
	}
	m.srcMu.Unlock()
	sort.Strings(hosts)
	by := m.backend.Name()
	all := true
	for _, name := range hosts {
		down := want[name]
		m.mu.Lock()
		h := m.hosts[name]
		known := h != nil
		moving := known && h.moving()
		step := decideSource(down, known, moving, m.stateOfLocked(name), m.maint[name].by)
		m.mu.Unlock()
		var err error
		switch step {
		case sourceWait:
			// A host not known yet is looked at again when the backend's
			// hosts change (Start wakes the loop then); without a
			// HostWatcher, and for a move to end, on a timer.
			if _, watched := m.backend.(HostWatcher); moving || !watched {
				all = false
			}
			continue
		case sourceStart:
			_, err = m.changeMaintenance(ctx, []string{name}, hostDraining, by)
		case sourceComplete:
			_, err = m.changeMaintenance(ctx, []string{name}, hostUp, by)
		}
		if err != nil {
			// A concurrent change (an operator's) or the store: the next
			// pass decides again from what then holds.
			m.log.Warn("act on the backend's maintenance schedule; will retry", "host", name, "down", down, "err", err)
			all = false
			continue
		}
		m.srcMu.Lock()
		if d, ok := m.srcWant[name]; ok && d == down {
			delete(m.srcWant, name) // unless the backend said otherwise since
		}
		m.srcMu.Unlock()
	}
	return all
}
