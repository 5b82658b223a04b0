package jobmgr

import (
	"context"
	"time"
)

// Goroutines the Manager starts for work that outlives the call that asked
// for it (an image prefetch, a retry later, a removal from the evaluator)
// belong to it like the engine's loops: they run on the engine's context
// and Wait waits for them. Once the engine has stopped, no more start.

// spawn runs fn in a goroutine the Manager owns, on the engine's context
// (the background one before Start). It returns false, running nothing,
// once the engine's context has ended or Wait has been called.
func (m *Manager) spawn(fn func(ctx context.Context)) bool {
	ctx := m.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	m.ownMu.Lock()
	defer m.ownMu.Unlock()
	if m.ownStopped || ctx.Err() != nil {
		return false
	}
	m.own.Add(1)
	go func() {
		defer m.own.Done()
		fn(ctx)
	}()
	return true
}

// after runs fn in a goroutine the Manager owns once delay has passed, if
// the engine still runs then. A Manager never started runs nothing.
func (m *Manager) after(delay time.Duration, fn func(ctx context.Context)) {
	if m.runCtx == nil {
		return
	}
	m.spawn(func(ctx context.Context) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			fn(ctx)
		}
	})
}

// stopOwned lets no more owned goroutines start and waits for those
// running.
func (m *Manager) stopOwned() {
	m.ownMu.Lock()
	m.ownStopped = true
	m.ownMu.Unlock()
	m.own.Wait()
}
