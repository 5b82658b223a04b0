package kubernetes

import "sync"

// fifo hands items to one consumer goroutine, in the order they were
// pushed. push never blocks, so informer handlers (and code holding the
// backend's lock) can queue without waiting on the consumer.
type fifo[T any] struct {
	mu    sync.Mutex
	items []T
	kick  chan struct{} // capacity 1: the consumer has work
}

func newFifo[T any]() *fifo[T] { return &fifo[T]{kick: make(chan struct{}, 1)} }

func (q *fifo[T]) push(v T) {
	q.mu.Lock()
	if len(q.items) == 0 {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
}

// drop forgets what is queued.
func (q *fifo[T]) drop() {
	q.mu.Lock()
	q.items = nil
	q.mu.Unlock()
}

// run passes queued items to fn until stop is closed, checking stop
// between items so that a slow fn does not hold up shutdown by more than
// one item.
func (q *fifo[T]) run(stop <-chan struct{}, fn func(T)) {
	var batch []T
	var zero T
	for {
		select {
		case <-stop:
			return
		case <-q.kick:
		}
		q.mu.Lock()
		batch, q.items = q.items, batch[:0]
		q.mu.Unlock()
		for i := range batch {
			select {
			case <-stop:
				return
			default:
			}
			fn(batch[i])
			batch[i] = zero
		}
	}
}
