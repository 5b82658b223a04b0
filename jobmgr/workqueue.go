package jobmgr

import (
	"sync"
	"time"
)

// workQueue hands out keys to workers so that one key is processed by at most
// one worker at a time, and repeated Adds of a key waiting in the queue
// coalesce into one evaluation. A key added while it is being processed is
// processed again afterwards, so no change is missed.
type workQueue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	items      []string
	queued     map[string]bool
	processing map[string]bool
	dirty      map[string]bool
	closed     bool
}

func newWorkQueue() *workQueue {
	q := &workQueue{queued: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *workQueue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	if q.queued[key] {
		return
	}
	q.queued[key] = true
	q.items = append(q.items, key)
	q.cond.Signal()
}

// AddAfter adds key once d has passed.
func (q *workQueue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	time.AfterFunc(d, func() { q.Add(key) })
}

// Get blocks for the next key; ok is false once the queue is shut down.
func (q *workQueue) Get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key := q.items[0]
	q.items[0] = ""
	q.items = q.items[1:]
	delete(q.queued, key)
	q.processing[key] = true
	return key, true
}

// Done marks key processed, re-queueing it if it was added meanwhile.
func (q *workQueue) Done(key string) {
	q.mu.Lock()
	delete(q.processing, key)
	again := q.dirty[key]
	delete(q.dirty, key)
	q.mu.Unlock()
	if again {
		q.Add(key)
	}
}

func (q *workQueue) ShutDown() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
