package jobmgr

import (
	"context"
	"sync"
)

// turns queues the writers of one record behind the one whose write is
// on its way, and hands them their turn together: the first writer
// queued carries out the decisions of every writer queued with it, in
// the order they came, as one write (group commit per record). Its lock
// is held only to queue and to hand over, never across a write, so a
// slow store holds up the record's writers, and never its readers, who
// load the record's published view (taskrec.go, jobrec.go).
type turns[W any] struct {
	mu      sync.Mutex
	writing bool
	queued  []*turn[W]
}

// turn is one writer waiting in a turns queue.
type turn[W any] struct {
	w W
	// ready is closed when the writer's write was carried out by another,
	// or when batch is set: the writer is to carry it out.
	ready chan struct{}
	batch []*turn[W]
}

// take carries out w with flush in w's turn: at once if no write of the
// record is on its way, else after it, together with the writes queued
// meanwhile (flush gets them all, w's first only if it came first). It
// returns once w's write was carried out, by this writer or another.
func (q *turns[W]) take(w W, flush func(batch []W)) {
	me := &turn[W]{w: w}
	q.mu.Lock()
	if q.writing {
		me.ready = make(chan struct{})
		q.queued = append(q.queued, me)
		q.mu.Unlock()
		<-me.ready
		if me.batch == nil {
			return // carried out in the batch before
		}
	} else {
		q.writing = true
		q.mu.Unlock()
		me.batch = []*turn[W]{me}
	}
	ws := make([]W, len(me.batch))
	for i, o := range me.batch {
		ws[i] = o.w
	}
	flush(ws)
	q.mu.Lock()
	next := q.queued
	q.queued = nil
	q.writing = len(next) > 0
	q.mu.Unlock()
	for _, o := range me.batch[1:] {
		close(o.ready)
	}
	if len(next) > 0 {
		// The first writer queued carries out the next batch, so that
		// each writer waits for at most the batch before its own.
		next[0].batch = next
		close(next[0].ready)
	}
}

// waiting is how many writers wait for their turn (tests).
func (q *turns[W]) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}

// batchContext is the context a batch of n writes is carried out with: the
// writer's own when it is alone, else one its cancel does not reach, so
// that a writer that gives up (an API call's deadline) does not fail the
// writes of those queued behind it. The store bounds each round trip.
func batchContext(ctx context.Context, n int) context.Context {
	if n > 1 {
		return context.WithoutCancel(ctx)
	}
	return ctx
}
