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
func decideSource(down, known, moving bool, state hostState, by string) sourceStep {
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
func (mt *Maintenance) onSourceMaintenance(host string, down bool) {
	mt.srcMu.Lock()
	mt.srcWant[host] = down
	mt.srcMu.Unlock()
	mt.wakeMaint()
}

// wakeIfSourcePending wakes the maintenance loop when a backend's word
// waits to be acted on.
func (mt *Maintenance) wakeIfSourcePending() {
	mt.srcMu.Lock()
	n := len(mt.srcWant)
	mt.srcMu.Unlock()
	if n > 0 {
		mt.wakeMaint()
	}
}

// applySourceMaintenance acts on the backend's words. It reports false
// when a word must be tried again later, on a timer.
func (mt *Maintenance) applySourceMaintenance(ctx context.Context) bool {
	mt.srcMu.Lock()
	hosts := make([]string, 0, len(mt.srcWant))
	want := make(map[string]bool, len(mt.srcWant))
	for h, d := range mt.srcWant {
		hosts = append(hosts, h)
		want[h] = d
	}
	mt.srcMu.Unlock()
	sort.Strings(hosts)
	by := mt.hm.backend.Name()
	all := true
	for _, name := range hosts {
		down := want[name]
		mt.hm.mu.Lock()
		h := mt.hm.hosts[name]
		known := h != nil
		moving := known && h.moving()
		step := decideSource(down, known, moving, mt.stateOfLocked(name), mt.records[name].by)
		mt.hm.mu.Unlock()
		var err error
		switch step {
		case sourceWait:
			// A host not known yet is looked at again when the backend's
			// hosts change (Start wakes the loop then); without a
			// HostWatcher, and for a move to end, on a timer.
			if _, watched := mt.hm.backend.(HostWatcher); moving || !watched {
				all = false
			}
			continue
		case sourceStart:
			_, err = mt.changeMaintenance(ctx, []string{name}, hostDraining, by)
		case sourceComplete:
			_, err = mt.changeMaintenance(ctx, []string{name}, hostUp, by)
		}
		if err != nil {
			// A concurrent change (an operator's) or the store: the next
			// pass decides again from what then holds.
			mt.log.Warn("act on the backend's maintenance schedule; will retry", "host", name, "down", down, "err", err)
			all = false
			continue
		}
		mt.srcMu.Lock()
		if d, ok := mt.srcWant[name]; ok && d == down {
			delete(mt.srcWant, name) // unless the backend said otherwise since
		}
		mt.srcMu.Unlock()
	}
	return all
}
