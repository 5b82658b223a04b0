package jobmgr

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
)

// storeRetryBackoff is the first wait before a write that failed is tried
// again; it doubles while writes keep failing, up to storeRetryMax.
const (
	storeRetryBackoff = 200 * time.Millisecond
	storeRetryMax     = time.Second
)

// unwritten holds the events whose write failed, per run, in the order they
// came. While a run has events here, its later events queue behind them, so
// a run's changes are written in order; other runs go on.
type unwritten struct {
	byRun map[string][]hostmgr.TaskEvent
	n     int
	wake  chan struct{}
}

// deliver applies a backend event, or queues it behind the events of its
// run that wait to be written again.
func (en *engine) deliver(ctx context.Context, ev hostmgr.TaskEvent, superseded bool) {
	m := en.m
	m.retryMu.Lock()
	if q, ok := m.retry.byRun[ev.TaskID]; ok {
		m.retry.byRun[ev.TaskID] = append(q, ev)
		m.retry.n++
		metrics.UnwrittenEvents.Set(float64(m.retry.n))
		m.retryMu.Unlock()
		return
	}
	m.retryMu.Unlock()
	if err := m.eng.applyEvent(ctx, ev, superseded, false); err != nil {
		m.log.Warn("could not write a task event; it will be written when the store answers", "task", ev.TaskID, "state", ev.State, "err", err)
		m.retryMu.Lock()
		m.retry.byRun[ev.TaskID] = append(m.retry.byRun[ev.TaskID], ev)
		m.retry.n++
		metrics.UnwrittenEvents.Set(float64(m.retry.n))
		m.retryMu.Unlock()
		select {
		case m.retry.wake <- struct{}{}:
		default:
		}
	}
}

// hasUnwritten reports whether events of run taskID wait to be written.
func (en *engine) hasUnwritten(taskID string) bool {
	m := en.m
	m.retryMu.Lock()
	defer m.retryMu.Unlock()
	_, ok := m.retry.byRun[taskID]
	return ok
}

// retryLoop writes the queued events again, each run's in order, until the
// store takes them. While the store keeps failing it backs off, and one
// failure ends a pass: with the store away, every write would wait out
// its timeout in turn.
func (en *engine) retryLoop(ctx context.Context) {
	m := en.m
	wait := storeRetryBackoff
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.retry.wake:
		case <-timer.C:
		}
		failed := m.eng.retryPass(ctx)
		if failed {
			wait = min(wait*2, storeRetryMax)
		} else {
			wait = storeRetryBackoff
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// retryPass tries every queued run once, many runs at a time (so the group
// committer packs their writes), each run's events in order. It reports
// whether a write failed; after one failure no more runs are started.
func (en *engine) retryPass(ctx context.Context) bool {
	m := en.m
	m.retryMu.Lock()
	runs := make([]string, 0, len(m.retry.byRun))
	for id := range m.retry.byRun {
		runs = append(runs, id)
	}
	m.retryMu.Unlock()
	var failed atomic.Bool
	idx := make([]uint32, len(runs))
	for i := range idx {
		idx[i] = uint32(i)
	}
	_ = parallel(idx, func(i uint32) error {
		id := runs[i]
		for ctx.Err() == nil && !failed.Load() {
			m.retryMu.Lock()
			q := m.retry.byRun[id]
			if len(q) == 0 {
				delete(m.retry.byRun, id)
				m.retryMu.Unlock()
				return nil
			}
			ev := q[0]
			m.retryMu.Unlock()
			if err := m.eng.applyEvent(ctx, ev, false, true); err != nil {
				failed.Store(true)
				return nil
			}
			m.retryMu.Lock()
			m.retry.byRun[id] = m.retry.byRun[id][1:]
			m.retry.n--
			metrics.UnwrittenEvents.Set(float64(m.retry.n))
			m.retryMu.Unlock()
		}
		return nil
	})
	return failed.Load()
}

// UnwrittenEvents is how many task events wait to be written to the store.
func (m *Manager) UnwrittenEvents() int {
	m.retryMu.Lock()
	defer m.retryMu.Unlock()
	return m.retry.n
}
