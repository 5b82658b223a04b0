package jobmgr

import "k8s.io/client-go/util/workqueue"

// newWorkQueue returns the queue of job IDs the engine's workers evaluate.
// client-go's delaying queue gives exactly what the engine relies on:
//   - one evaluation per job at a time: a key handed out by Get is not
//     handed out again until Done;
//   - coalescing: Adds of a key that waits in the queue are one evaluation;
//   - nothing missed: a key added while it is being evaluated is queued
//     again by Done;
//   - delayed adds (AddAfter) for retries and backoff, dropped once the
//     queue is shut down, so no timer outlives the engine.
//
// After ShutDown, Get still hands out the keys left in the queue; the
// worker stops at once instead, since its context has ended by then (see
// worker). workqueue_test.go pins these properties.
func newWorkQueue() workqueue.TypedDelayingInterface[string] {
	// No name: the queue's metrics stay off (they would go to client-go's
	// global provider, not to Peloton's registry).
	return workqueue.NewTypedDelayingQueue[string]()
}
