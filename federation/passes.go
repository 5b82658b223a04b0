package federation

import "sync/atomic"

// passCounts counts the passes the federation's loops have finished. No
// decision reads them: they are the witness a test waits for before it
// claims that a loop left something alone (a paused rollout, a job that
// waits for its cluster, a job not yet past its TTL), since "nothing
// happened" only means something once the loop is known to have looked.
type passCounts struct {
	dispatch atomic.Uint64 // dispatchLoop: dispatchPending
	rollout  atomic.Uint64 // rolloutLoop: every rollout moved along, and failover
	archive  atomic.Uint64 // archiveLoop: archivePass
}

// workerPasses is how many passes the worker of the named cluster has
// finished since its registration was loaded or last replaced (0 for a
// cluster not registered).
func (f *Federation) workerPasses(cluster string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.clusters[cluster]; m != nil {
		return m.passes.Load()
	}
	return 0
}
