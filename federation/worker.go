package federation

import (
	"context"
	"time"
)

// startWorkerLocked starts the goroutine that looks after one cluster:
// every CheckEvery (or when nudged) it checks the cluster, records its
// health, brings its pools to their desired state and carries out the
// federated jobs' business with it. Everything it sends the cluster has a
// deadline of CallTimeout, so a hung cluster holds up this worker alone.
// Caller holds mu.
func (f *Federation) startWorkerLocked(m *member) {
	ctx, cancel := context.WithCancel(f.ctx)
	m.cancel = cancel
	name := m.rec.Name
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.runWorker(ctx, name, m)
	}()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.Jobs().runSender(ctx, name, m)
	}()
}

// stopWorkerLocked stops a cluster's worker (it ends at its next wait or
// call). Caller holds mu.
func (f *Federation) stopWorkerLocked(m *member) {
	if m.cancel != nil {
		m.cancel()
	}
}

func (f *Federation) runWorker(ctx context.Context, name string, m *member) {
	since := f.opts.Now()
	t := time.NewTicker(f.opts.CheckEvery)
	defer t.Stop()
	for {
		f.workOnce(ctx, name, m, since)
		m.passes.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
	}
}

// workOnce is one pass of a cluster's worker.
func (f *Federation) workOnce(ctx context.Context, name string, m *member, since time.Time) {
	f.mu.Lock()
	if f.clusters[name] != m {
		f.mu.Unlock()
		return // deregistered or replaced: a new worker looks after it
	}
	cli, current, lastSeen := m.cli, m.rec.Health, m.lastSeen
	f.mu.Unlock()

	obs := f.probe(ctx, cli)
	if ctx.Err() != nil {
		return
	}
	now := f.opts.Now()
	health, why := nextHealth(healthInput{current: current, obs: obs, lastSeen: lastSeen, since: since, now: now},
		f.opts.SlowAfter, f.opts.UnreachableAfter)
	f.mu.Lock()
	if obs.answered {
		m.observe(obs, now)
	} else {
		m.message = obs.err
	}
	f.mu.Unlock()
	if health != current {
		f.setHealth(ctx, name, m, health, why)
	}
	if !obs.answered || obs.err != "" {
		return
	}
	f.Pools().syncPools(ctx, name, m)
	f.Jobs().syncJobs(ctx, name, m)
	f.Services().syncServices(ctx, name, m)
}
