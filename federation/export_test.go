package federation

// DispatchPasses, RolloutPasses and WorkerPasses are, for the external
// tests (package federation_test), how many passes the dispatcher, the
// rollout loop and a cluster's worker have finished (passes.go).
func (f *Federation) DispatchPasses() uint64             { return f.passes.dispatch.Load() }
func (f *Federation) RolloutPasses() uint64              { return f.passes.rollout.Load() }
func (f *Federation) WorkerPasses(cluster string) uint64 { return f.workerPasses(cluster) }
