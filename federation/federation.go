// Package federation is Peloton's global control plane over many cluster
// stacks: the registry of clusters and their health, the global pool tree
// split into each cluster's pools (kept there as desired state and repaired
// when it drifts), the dispatch of BATCH jobs to one cluster each, and
// federated services: one SERVICE job spec run in several clusters, each
// cluster's part kept as desired state (services.go).
//
// It talks to cluster stacks only through their public API, with the one
// shared client (cluster/client); it imports no component of a stack
// (jobmgr, hostmgr, placement) and uses resmgr only for the pure rules of a
// pool path and spec and its division of capacity among pools, so that a
// global pool is refused in the same words as a cluster pool and its
// global fair share (fairshare.go) is divided as a cluster's pools are. Everything it must not forget is in etcd under its own
// prefix (/peloton/federation/), and it is rebuilt from there at start.
//
// Each cluster has one worker goroutine, and every remote call a worker
// makes has its own deadline: a cluster that hangs stalls its own worker and
// nothing else. The decisions - a cluster's health from its checks, the
// split of the pool tree, which cluster takes a job - are pure functions
// (health.go, the split package, dispatch.go) over a snapshot; the workers read
// state, call them and apply the result.
//
// Federation is the facade that wiring builds: it owns the lifecycle, the
// cluster registry and its workers, and the archive of its objects. The
// rest is reached through named parts, each a type of its own: Pools (the
// global pool tree and its split), Jobs (batch dispatch), Services
// (federated services, rollouts, failover) and SLA (the global SLA
// evaluator). Parts, not one type, so that each reads as one concern and a
// caller names the one it uses; named rather than embedded, since embedding
// would still put every method on Federation. The parts share the
// Federation's state and its one lock: each decides from the clusters'
// members in the same critical section as its own state.
package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
)

// Prefix is the etcd prefix of every key of the federation, beside the
// clusters' own (/peloton/clusters/<name>/).
const Prefix = store.DefaultPrefix + "federation/"

// Options tunes a Federation. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// CheckEvery is how often each cluster is health-checked (default 1s).
	CheckEvery time.Duration
	// CallTimeout bounds every call to a cluster (default 2s).
	CallTimeout time.Duration
	// SlowAfter: a check answered slower than this makes the cluster
	// DEGRADED (default 1s).
	SlowAfter time.Duration
	// UnreachableAfter: a cluster that has answered no check for this long
	// is UNREACHABLE (default 5s).
	UnreachableAfter time.Duration
	// Dial opens a client of a cluster's API (default client.New with
	// CallTimeout).
	Dial func(endpoint string) (*client.Client, error)
	// ClusterCredentials are the TLS files and token of the default Dial:
	// how the federation proves itself to the clusters (mutual TLS).
	ClusterCredentials client.Options
	// Now is the clock (default time.Now); tests move it. Every time the
	// federation records or decides on comes from it; only how long a
	// call to a cluster or the store took (latency metrics, a check's
	// slowness) is measured on the wall clock, as the call's deadline is.
	Now func() time.Time
	// JobRetention is how long a federated job is kept after it is done
	// (default 7 days); older ones are deleted by an hourly sweep. Only
	// without History: with it, done jobs go to the archive instead.
	JobRetention time.Duration

	// History, if set, is the archive the federation keeps its history in
	// (archive.go): done jobs go there after FinishedJobTTL and deleted
	// services when they leave etcd, and reads of objects no longer in
	// etcd are answered from it. nil: no archive; done jobs are deleted
	// after JobRetention, as before. The federation does not close it.
	History history.Store
	// HistoryName is the name its records are under in History (default
	// DefaultHistoryName).
	HistoryName string
	// FinishedJobTTL is how long a done federated job stays in etcd
	// before it is archived (default 24h; with History).
	FinishedJobTTL time.Duration
	// ArchiveEvery paces the collector (default 1m): one bounded pass
	// each time.
	ArchiveEvery time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Second
	}
	if o.SlowAfter <= 0 {
		o.SlowAfter = time.Second
	}
	if o.UnreachableAfter <= 0 {
		o.UnreachableAfter = 5 * time.Second
	}
	if o.Dial == nil {
		timeout := o.CallTimeout
		o.Dial = func(endpoint string) (*client.Client, error) {
			opts := o.ClusterCredentials
			opts.Timeout, opts.MaxMsgBytes = timeout, 64<<20
			return client.New(endpoint, opts)
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.JobRetention <= 0 {
		o.JobRetention = 7 * 24 * time.Hour
	}
	if o.HistoryName == "" {
		o.HistoryName = DefaultHistoryName
	}
	if o.FinishedJobTTL <= 0 {
		o.FinishedJobTTL = DefaultFinishedJobTTL
	}
	if o.ArchiveEvery <= 0 {
		o.ArchiveEvery = defaultArchiveEvery
	}
	return o
}

// Federation is the global control plane's state and its workers. Create
// it with New, then Start it; every method is safe for concurrent use.
type Federation struct {
	st store.Store
	// batch packs the many small writes of job records (dispatch steps
	// of concurrent jobs) into few etcd transactions (group commit).
	batch *store.Batcher
	opts  Options
	log   *slog.Logger

	mu       sync.Mutex
	clusters map[string]*member
	pools    map[string]*globalPool
	jobs     map[string]*fedJob
	services map[string]*fedService
	sla      globalSLA
	// split is the last split of the pool tree (recomputed on every change
	// of the tree or of the clusters' membership in it).
	split split.Result
	// splitOf is the set of clusters (with capacities) split was made for.
	splitOf map[string]resources.Resources

	ctx       context.Context // the workers' context, set by Start
	startedAt time.Time
	stop      context.CancelFunc
	// wg counts every goroutine the federation starts (workers, loops and
	// the background writes of goLocked); Close waits for it.
	wg sync.WaitGroup
	// closed is set by Close, under mu, before it waits: goLocked starts
	// nothing after it, so no goroutine is added to wg once Close waits.
	closed bool
	kick   chan struct{} // wakes the dispatcher
	// rolloutKick wakes the rollout loop.
	rolloutKick chan struct{}
	started     bool
	passes      passCounts

	// The named parts (see the package doc); each holds this Federation.
	jobsPart     *Jobs
	poolsPart    *Pools
	servicesPart *Services
	slaPart      *SLA
}

// The parts below have no state or lock of their own: their maps (pools,
// jobs, services, sla) stay on the Federation under its one mu, with the
// cluster registry's. Each part decides from the clusters' members (health,
// cordon, the pools seen there) in the same critical section as its own
// state, and a change in the registry (a cluster that comes, goes or is
// away) re-splits the pools under the same lock, so one lock is one
// critical section, not a convenience. The SLA evaluator reads the
// services' parts the same way.

// Jobs is the dispatch of BATCH jobs, one cluster each (jobs.go): the API
// of federated jobs, the dispatcher and each cluster worker's pass over
// its jobs.
type Jobs struct{ f *Federation }

// Pools is the global pool tree, its split among the clusters and the
// keeping of each cluster's pools as desired state (pools.go).
type Pools struct{ f *Federation }

// Services is federated services (services.go), their rollouts
// (serviceupdate.go) and failover of their parts (failover.go).
type Services struct{ f *Federation }

// SLA is the global SLA evaluator of federated services (globalsla.go):
// disruption requests of the clusters judged against a service's whole
// budget.
type SLA struct{ f *Federation }

// Jobs is the federation's dispatch of BATCH jobs.
func (f *Federation) Jobs() *Jobs { return f.jobsPart }

// Pools is the federation's global pool tree and its split.
func (f *Federation) Pools() *Pools { return f.poolsPart }

// Services is the federation's federated services and their rollouts.
func (f *Federation) Services() *Services { return f.servicesPart }

// SLA is the federation's global SLA evaluator.
func (f *Federation) SLA() *SLA { return f.slaPart }

// New makes a federation over st, a store opened on Prefix.
func New(st store.Store, opts Options) *Federation {
	opts = opts.withDefaults()
	f := &Federation{
		st:       st,
		batch:    store.NewBatcher(st, store.BatcherOptions{}),
		opts:     opts,
		log:      opts.Logger.With("component", "federation"),
		clusters: map[string]*member{},
		pools:    map[string]*globalPool{},
		jobs:     map[string]*fedJob{},
		services: map[string]*fedService{},
		kick:     make(chan struct{}, 1),

		rolloutKick: make(chan struct{}, 1),
	}
	f.jobsPart, f.poolsPart = &Jobs{f}, &Pools{f}
	f.servicesPart, f.slaPart = &Services{f}, &SLA{f}
	return f
}

// Start loads the registry, the global pools and the federated jobs from
// the store and starts a worker per cluster and the dispatcher. It returns
// once everything is loaded.
func (f *Federation) Start(ctx context.Context) error {
	f.mu.Lock()
	if f.started {
		f.mu.Unlock()
		return errors.New("federation: started twice")
	}
	f.started = true
	f.startedAt = f.opts.Now()
	f.ctx, f.stop = context.WithCancel(context.WithoutCancel(ctx))
	f.mu.Unlock()
	if err := f.loadClusters(ctx); err != nil {
		return fmt.Errorf("load clusters: %w", err)
	}
	if err := f.Pools().loadPools(ctx); err != nil {
		return fmt.Errorf("load pools: %w", err)
	}
	if err := f.Jobs().loadJobs(ctx); err != nil {
		return fmt.Errorf("load jobs: %w", err)
	}
	if err := f.Services().loadServices(ctx); err != nil {
		return fmt.Errorf("load services: %w", err)
	}
	if err := f.SLA().loadGrants(ctx); err != nil {
		return fmt.Errorf("load SLA grants: %w", err)
	}
	f.mu.Lock()
	f.Pools().resplitLocked()
	for _, m := range f.clusters {
		f.startWorkerLocked(m)
	}
	f.mu.Unlock()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.Jobs().dispatchLoop(f.ctx) }()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.Services().rolloutLoop(f.ctx) }()
	if f.opts.History != nil {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.archiveLoop(f.ctx) }()
	}
	f.kickDispatch()
	return nil
}

// Close stops every worker and waits for them. Nothing is lost: whatever
// a worker was doing is redone from the store by the next Start.
func (f *Federation) Close() {
	f.mu.Lock()
	f.closed = true
	stop := f.stop
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
	f.wg.Wait()
	_ = f.batch.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.clusters {
		if m.cli != nil {
			_ = m.cli.Close()
		}
	}
}

// goLocked runs fn on a goroutine of its own that Close cancels (fn's
// context is the federation's) and waits for. It starts nothing before
// Start or once Close has begun: what fn would have written is then redone
// from the store by the next Start. Caller holds mu.
func (f *Federation) goLocked(fn func(ctx context.Context)) {
	if f.closed || f.ctx == nil {
		return
	}
	ctx := f.ctx
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn(ctx)
	}()
}

// nudgeAll wakes every cluster's worker, e.g. after the pool tree changed,
// so the change reaches the clusters now rather than at the next check.
// Caller holds mu.
func (f *Federation) nudgeAllLocked() {
	for _, m := range f.clusters {
		m.nudge()
	}
}

func (f *Federation) kickDispatch() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}
