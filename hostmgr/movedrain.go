package hostmgr

import (
	"fmt"
	"time"
)

// A move's drain window (MoveHostDrain): the moving host is offered to no
// placement engine from the start, as any moving host, but its runs are
// not drained until the window ends. A batch run that ends within it
// loses nothing (a drained one is preempted and starts over elsewhere);
// if every run ends, the host moves at once, before the window is out.
// The window's end is in the host's partition record, so a restart keeps
// it; one that finds it passed drains at once.

// MaxMoveDrain bounds a move's drain window.
const MaxMoveDrain = time.Hour

// armDrainWindowLocked opens h's drain window as r says, with a timer for
// its end, or closes it when r has none or it has passed.
func (mt *Maintenance) armDrainWindowLocked(h *host, r partRecord) {
	if r.state != partMoving || r.DrainBy == 0 {
		h.drainBy = time.Time{}
		return
	}
	by := time.UnixMilli(r.DrainBy)
	left := by.Sub(mt.hm.now())
	switch {
	case left <= 0:
		h.drainBy = time.Time{}
	case !h.drainBy.Equal(by): // not armed yet
		h.drainBy = by
		name := h.info.Name
		time.AfterFunc(left, func() { mt.endDrainWindow(name, by) })
	}
}

// endDrainWindow closes the drain window of host name that ends at by
// (unless it was closed or replaced since), and drains the runs still on
// it.
func (mt *Maintenance) endDrainWindow(name string, by time.Time) {
	mt.hm.mu.Lock()
	h := mt.hm.hosts[name]
	if h == nil || !h.drainBy.Equal(by) {
		mt.hm.mu.Unlock()
		return
	}
	h.drainBy = time.Time{}
	var ds []DrainRequest
	if h.move == partMoving && len(h.tasks) > 0 {
		ds = append(ds, DrainRequest{Host: name, TaskIDs: taskIDsLocked(h), Why: drainWhy(h)})
		mt.log.Info("drain window of a partition move ended", "host", name, "to", h.target, "runs", len(h.tasks))
	}
	mt.hm.mu.Unlock()
	mt.publishDrains(ds...)
}

// inDrainWindowLocked says whether host name's move leaves its runs be
// for now.
func (mt *Maintenance) inDrainWindowLocked(name string) bool {
	h := mt.hm.hosts[name]
	return h != nil && !h.drainBy.IsZero()
}

// drainWindowNote says what a move in its drain window waits for.
func drainWindowNote(h *host) string {
	return fmt.Sprintf("moving to partition %s: %d tasks may finish until %s, then the rest are drained",
		h.target, len(h.tasks), h.drainBy.UTC().Format(time.RFC3339))
}
