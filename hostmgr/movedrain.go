package hostmgr

import (
	"fmt"
	"slices"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
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

// maxFinish bounds the runs a move names to finish in its window.
const maxFinish = 10000

// checkDrainWindow names what is wrong with a move's drain window.
func checkDrainWindow(window time.Duration, finish []string) error {
	switch {
	case window < 0 || window > MaxMoveDrain:
		return apierr.Invalid("drain_seconds", "%d: want 0 to %d", int64(window/time.Second), int64(MaxMoveDrain/time.Second))
	case len(finish) > 0 && window == 0:
		return apierr.Invalid("finish_task_ids", "runs to finish need a drain window (drain_seconds)")
	case len(finish) > maxFinish:
		return apierr.Invalid("finish_task_ids", "%d runs: at most %d", len(finish), maxFinish)
	}
	return nil
}

// finishing is the runs of finish that h holds, sorted; the record keeps
// no more. Caller holds hm.mu.
func finishing(h *host, finish []string) []string {
	var out []string
	for _, id := range finish {
		if _, ok := h.tasks[id]; ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// notFinishing is ids less those in finish (sorted); all of ids when
// finish is empty means every run is left to the window: none.
func notFinishing(ids, finish []string) []string {
	if len(finish) == 0 {
		return nil
	}
	var out []string
	for _, id := range ids {
		if _, ok := slices.BinarySearch(finish, id); !ok {
			out = append(out, id)
		}
	}
	return out
}

// armDrainWindowLocked opens h's drain window as r says, with a timer for
// its end, or closes it when r has none or it has passed.
func (mt *Maintenance) armDrainWindowLocked(h *host, r partRecord) {
	if r.state != partMoving || r.DrainBy == 0 {
		h.drainBy, h.finish = time.Time{}, nil
		return
	}
	h.finish = r.Finish
	by := time.UnixMilli(r.DrainBy)
	left := by.Sub(mt.hm.now())
	switch {
	case left <= 0:
		h.drainBy, h.finish = time.Time{}, nil
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
	h.drainBy, h.finish = time.Time{}, nil
	var ds []DrainRequest
	if h.move == partMoving && len(h.tasks) > 0 {
		ds = append(ds, DrainRequest{Host: name, TaskIDs: taskIDsLocked(h), Why: drainWhy(h)})
		mt.log.Info("drain window of a partition move ended", "host", name, "to", h.target, "runs", len(h.tasks))
	}
	mt.hm.mu.Unlock()
	mt.publishDrains(ds...)
}

// drainWindowNote says what a move in its drain window waits for.
func drainWindowNote(h *host) string {
	n := len(h.tasks)
	if len(h.finish) > 0 {
		n = 0
		for _, id := range h.finish {
			if _, ok := h.tasks[id]; ok {
				n++
			}
		}
	}
	return fmt.Sprintf("moving to partition %s: %d tasks may finish until %s, then the rest are drained",
		h.target, n, h.drainBy.UTC().Format(time.RFC3339))
}

// drainNowLocked is the runs of draining host h to drain now: all of them
// but, in a move's drain window, those left to finish in it.
func (mt *Maintenance) drainNowLocked(h *host) []string {
	ids := taskIDsLocked(h)
	if h.drainBy.IsZero() {
		return ids
	}
	return notFinishing(ids, h.finish)
}
