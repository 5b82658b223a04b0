package bench

// The federation scenario measures the federation control plane (package
// federation) over real cluster stacks, all in this process: cluster.Run on
// the sim backend, one per cluster, with distinct cluster names on one
// shared embedded etcd, and one federation on the same etcd (under
// federation.Prefix) serving its gRPC API on a loopback port; with --etcds
// N > 1, the federation has an etcd of its own and the stacks share the
// other N-1 (N = clusters+1 gives each its own, as in production). The bench
// talks to the federation through that API (ClusterService,
// FederatedPoolService, FederatedJobService) and to the clusters through
// theirs, both with cluster/client, as a user would. It has three phases,
// each skipped when its size is 0:
//
//  1. Registry scale (--registry-clusters, --registry-window): start N
//     cluster stacks, measure the whole process's CPU (getrusage) over one
//     window with the clusters alone, then start the federation, register
//     every cluster, wait until all are READY, and measure the same window
//     again. The federation's share is the difference (its goroutines cannot
//     be told apart from the clusters' in one process). Its memory is the
//     process's VmRSS after less before the federation, each read after a
//     forced GC that gives free memory back. Goal: < 5% of a core and
//     < 300 MiB for 100 clusters.
//  2. Pool propagation (--clusters, --pool-changes): global pool changes
//     (creates, then updates, of four global pools), one at a time: each is
//     timed from the call until every cluster's own pool (GetPool on the
//     cluster's API, polled every 5 ms) holds the part the federation says
//     it should. Goal: p99 < 500 ms.
//  3. Dispatch (--jobs, --concurrency): BATCH federated jobs of one `sleep 1`
//     task, created with bounded concurrency, timed from the first create
//     until every job is in a cluster (its cluster job id set), and for a
//     sample of 50 the time from create to the first task RUNNING (the
//     cluster's GetJob task counts). Goal: >= 500 jobs/s.
//  4. Global fair share (--fair-share-window, --fair-share-task): two
//     global pools with equal shares, one flooding; the other's share of
//     the dispatched work over time (see fedfairshare.go). Goal: within
//     10 % of its entitlement after 60 s.
//  5. Services (--services, --service-budget, --service-toleration): a
//     federated service created, rolled out and failed over (see
//     fedservices.go). Goals: no budget violation; failover < 10 s at
//     10,000 instances.
//
// Reproduce with:
//
//	peloton bench federation --registry-clusters 100 --registry-window 30s --clusters 10 --pool-changes 100 --jobs 2000
//	peloton bench federation --registry-clusters 0 --pool-changes 0 --jobs 0 --clusters 3 --services 10000
//	peloton bench federation --registry-clusters 0 --pool-changes 0 --jobs 0 --services 0 --clusters 10 --fair-share-window 60s
//
// The numbers depend on the machine and on everything sharing this
// process: every stack, etcd and the federation compete for the same cores.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"github.com/peloton-sched/peloton/sla/fed"
)

// ScenarioFederation measures the federation: registry cost, pool
// propagation and job dispatch over many in-process cluster stacks.
const ScenarioFederation = "federation"

var federationFigures = []string{
	"registryClusters", "registryStartSec", "registryReadyMs", "registryBaselineCpuPctOfCore", "registryCpuPctOfCore", "registryRssMiB",
	"propagationP50Ms", "propagationP99Ms", "propagationMaxMs",
	"createJobsPerSec", "dispatchJobsPerSec", "createToRunningP50Ms", "createToRunningP99Ms",
	"serviceCreateToRunningSec", "serviceRolloutSec", "serviceBudgetViolations", "serviceMaxUnavailable", "serviceFailoverSec",
	"slaDecisionP50Ms", "slaDecisionP99Ms", "slaRequestsPerSec",
	"fairShareOtherEntitledPct", "fairShareOtherDispatchedPct", "fairShareOtherRunningPct", "fairShareFloodDispatchedPct", "fairShareWithin10PctSec",
	"rebalanceSec", "rebalanceMoved", "rebalanceBudgetViolations", "rebalanceMinRunning",
	"peakRssMb",
}

// Limits of the federation scenario: a small stack costs about 15 MiB and
// a few file descriptors, and takes about 0.15 s to start on 2 cores.
const (
	maxFedClusters = 1000
	maxFedJobs     = 100_000
	// maxFedServiceInstances bounds --services.
	maxFedServiceInstances = 100_000
	maxPoolChanges         = 100_000
	// maxFedEtcds bounds --etcds: each embedded etcd costs tens of MiB.
	maxFedEtcds = 128
)

// Fixed parts of the scenario, said in its notes.
const (
	// fedStartConcurrency is how many stacks start at once.
	fedStartConcurrency = 4
	// fedSettle is how long the stacks idle before the first CPU window,
	// so their start-up work is over.
	fedSettle = 3 * time.Second
	// propagationPools is how many global pools the changes go round.
	propagationPools = 4
	// propagationPoll is how often each cluster's pool is read while a
	// change propagates, and propagationTimeout bounds one change.
	propagationPoll    = 5 * time.Millisecond
	propagationTimeout = 30 * time.Second
	// runningSample is how many jobs are followed to their first RUNNING
	// task, every runningPoll.
	runningSample = 50
	runningPoll   = 25 * time.Millisecond
	// fedTaskCPU and fedTaskMemoryMB size every dispatched job's one task.
	fedTaskCPU      = 0.1
	fedTaskMemoryMB = 32
	// fedReadyTimeout bounds waits for clusters to be READY and pools to
	// be in every cluster.
	fedReadyTimeout = 2 * time.Minute
	fedBatchPool    = "/bench-batch"
	// fedEndWait bounds the wait for the dispatched jobs to end.
	fedEndWait = time.Minute
)

// FederationConfig sizes the federation scenario.
type FederationConfig struct {
	// RegistryClusters is how many clusters the registry phase registers
	// (0: skip it); RegistryWindow is each of its two CPU windows.
	RegistryClusters int
	RegistryWindow   time.Duration
	// Clusters is how many clusters the propagation and dispatch phases
	// run over.
	Clusters int
	// PoolChanges is how many global pool changes are timed (0: skip).
	PoolChanges int
	// Jobs is how many federated jobs are dispatched (0: skip), created by
	// Concurrency callers at once.
	Jobs        int
	Concurrency int
	// HostsPerCluster is each stack's sim hosts (32 CPUs each).
	HostsPerCluster int
	// CheckEvery is the federation's health-check period per cluster.
	CheckEvery time.Duration
	// Services is the instances of the services phase's one federated
	// service (0: skip), ServiceBudget its budget of unavailable
	// instances, ServiceToleration its failover toleration (see
	// fedservices.go).
	Services          int
	ServiceBudget     int
	ServiceToleration time.Duration
	// FairShareWindow is how long the fair-share phase samples after the
	// other pool begins to submit (0: skip); FairShareTask how long each
	// of its jobs' one task sleeps.
	FairShareWindow time.Duration
	FairShareTask   time.Duration
	// Rebalance is the instances of the rebalance phase's one federated
	// service (0: skip), RebalanceBudget its budget (see fedrebalance.go).
	Rebalance       int
	RebalanceBudget int
	// Etcds is how many embedded etcds the world runs on: 1, everything
	// on one (the stacks under their cluster names, the federation under
	// its prefix); more, the federation on the first and the stacks spread
	// over the others (Clusters+1: each its own, as in production, where
	// every cluster and the federation have an etcd of their own). 0 is 1.
	Etcds int
}

// DefaultFederationConfig is the size.
func DefaultFederationConfig() FederationConfig {
	return FederationConfig{
		RegistryClusters: 100, RegistryWindow: 30 * time.Second,
		Clusters: 10, PoolChanges: 100, Jobs: 2000, Concurrency: 64,
		HostsPerCluster: 2, CheckEvery: time.Second,
		ServiceBudget: 500, ServiceToleration: 10 * time.Second,
		FairShareWindow: 60 * time.Second, FairShareTask: 10 * time.Second,
		RebalanceBudget: 500, Etcds: 1,
	}
}

// Validate checks the config; every error names the flag at fault.
func (c *FederationConfig) Validate() error {
	switch {
	case c.RegistryClusters < 0 || c.RegistryClusters > maxFedClusters:
		return fmt.Errorf("--registry-clusters %d: must be 0..%d", c.RegistryClusters, maxFedClusters)
	case c.RegistryClusters > 0 && (c.RegistryWindow <= 0 || c.RegistryWindow > 10*time.Minute):
		return fmt.Errorf("--registry-window %s: must be > 0 and at most 10m", c.RegistryWindow)
	case c.Clusters < 0 || c.Clusters > maxFedClusters:
		return fmt.Errorf("--clusters %d: must be 0..%d", c.Clusters, maxFedClusters)
	case c.PoolChanges < 0 || c.PoolChanges > maxPoolChanges:
		return fmt.Errorf("--pool-changes %d: must be 0..%d", c.PoolChanges, maxPoolChanges)
	case c.Jobs < 0 || c.Jobs > maxFedJobs:
		return fmt.Errorf("--jobs %d: must be 0..%d", c.Jobs, maxFedJobs)
	case c.Clusters == 0 && (c.PoolChanges > 0 || c.Jobs > 0 || c.Services > 0 || c.FairShareWindow > 0 || c.Rebalance > 0):
		return fmt.Errorf("--clusters 0: the propagation, dispatch, services, fair-share and rebalance phases need a cluster (or set --pool-changes 0 --jobs 0 --services 0 --fair-share-window 0 --rebalance 0)")
	case c.FairShareWindow < 0 || c.FairShareWindow > 10*time.Minute:
		return fmt.Errorf("--fair-share-window %s: must be 0..10m", c.FairShareWindow)
	case c.FairShareWindow > 0 && (c.FairShareTask < 100*time.Millisecond || c.FairShareTask > 10*time.Minute):
		return fmt.Errorf("--fair-share-task %s: must be 100ms..10m", c.FairShareTask)
	case c.Etcds < 0 || c.Etcds > maxFedEtcds:
		return fmt.Errorf("--etcds %d: must be 1..%d", c.Etcds, maxFedEtcds)
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return fmt.Errorf("--concurrency %d: must be 1..1024", c.Concurrency)
	case c.HostsPerCluster < 1 || c.HostsPerCluster > 100:
		return fmt.Errorf("--hosts-per-cluster %d: must be 1..100", c.HostsPerCluster)
	case c.CheckEvery <= 0 || c.CheckEvery > time.Minute:
		return fmt.Errorf("--check-every %s: must be > 0 and at most 1m", c.CheckEvery)
	case c.Services < 0 || c.Services > maxFedServiceInstances:
		return fmt.Errorf("--services %d: must be 0..%d", c.Services, maxFedServiceInstances)
	case c.Services > 0 && c.Services < c.Clusters:
		return fmt.Errorf("--services %d: at least one instance per cluster (--clusters %d)", c.Services, c.Clusters)
	case c.Services > 0 && (c.ServiceBudget < 1 || c.ServiceBudget > c.Services):
		return fmt.Errorf("--service-budget %d: must be 1..--services (%d)", c.ServiceBudget, c.Services)
	case c.Services > 0 && (c.ServiceToleration < time.Second || c.ServiceToleration > 10*time.Minute):
		return fmt.Errorf("--service-toleration %s: must be 1s..10m (whole seconds)", c.ServiceToleration)
	case c.Rebalance < 0 || c.Rebalance > maxFedServiceInstances:
		return fmt.Errorf("--rebalance %d: must be 0..%d", c.Rebalance, maxFedServiceInstances)
	case c.Rebalance > 0 && c.Clusters <= rebalanceClusters:
		return fmt.Errorf("--rebalance %d: needs --clusters of at least %d (the service starts on %d, one more joins), got %d", c.Rebalance, rebalanceClusters+1, rebalanceClusters, c.Clusters)
	case c.Rebalance > 0 && c.Rebalance < rebalanceClusters+1:
		return fmt.Errorf("--rebalance %d: at least one instance per cluster (%d)", c.Rebalance, rebalanceClusters+1)
	case c.Rebalance > 0 && (c.RebalanceBudget < 1 || c.RebalanceBudget > c.Rebalance):
		return fmt.Errorf("--rebalance-budget %d: must be 1..--rebalance (%d)", c.RebalanceBudget, c.Rebalance)
	case c.RegistryClusters == 0 && c.PoolChanges == 0 && c.Jobs == 0 && c.Services == 0 && c.FairShareWindow == 0 && c.Rebalance == 0:
		return fmt.Errorf("--registry-clusters, --pool-changes, --jobs, --services, --fair-share-window and --rebalance are all 0: nothing to measure")
	}
	return nil
}

// Federation runs the federation scenario's phases in order: registry,
// propagation, dispatch (see the comment at the top of this file).
func Federation(ctx context.Context, env Env, cfg FederationConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioFederation)
	r.param("registryClusters", cfg.RegistryClusters)
	r.param("registryWindowSec", cfg.RegistryWindow.Seconds())
	r.param("clusters", cfg.Clusters)
	r.param("poolChanges", cfg.PoolChanges)
	r.param("jobs", cfg.Jobs)
	r.param("concurrency", cfg.Concurrency)
	r.param("hostsPerCluster", cfg.HostsPerCluster)
	r.param("etcds", max(cfg.Etcds, 1))
	r.param("checkEveryMs", cfg.CheckEvery.Milliseconds())
	r.param("services", cfg.Services)
	r.param("serviceBudget", cfg.ServiceBudget)
	r.param("serviceTolerationSec", cfg.ServiceToleration.Seconds())
	r.param("fairShareWindowSec", cfg.FairShareWindow.Seconds())
	r.param("fairShareTaskSec", cfg.FairShareTask.Seconds())
	r.param("rebalance", cfg.Rebalance)
	r.param("rebalanceBudget", cfg.RebalanceBudget)
	rssReset := resetPeakRSS()

	h, err := newFedHarness(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	defer h.close()
	if cfg.RegistryClusters > 0 {
		if err := h.registryPhase(ctx, r); err != nil {
			return nil, err
		}
	}
	if cfg.PoolChanges > 0 || cfg.Jobs > 0 || cfg.Services > 0 || cfg.FairShareWindow > 0 || cfg.Rebalance > 0 {
		if err := h.useClusters(ctx, cfg.Clusters); err != nil {
			return nil, err
		}
	}
	if cfg.PoolChanges > 0 {
		if err := h.propagationPhase(ctx, r); err != nil {
			return nil, err
		}
	}
	if cfg.Jobs > 0 {
		if err := h.dispatchPhase(ctx, r); err != nil {
			return nil, err
		}
	}
	// Before the services phase, which stops a cluster for its failover.
	if cfg.FairShareWindow > 0 {
		if err := h.fairSharePhase(ctx, r); err != nil {
			return nil, err
		}
	}
	if cfg.Rebalance > 0 {
		// Before the services phase, which stops a cluster at its end.
		if err := h.rebalancePhase(ctx, r); err != nil {
			return nil, err
		}
	}
	if cfg.Services > 0 {
		if err := h.servicesPhase(ctx, r); err != nil {
			return nil, err
		}
	}
	r.add("peakRssMb", PeakRSSMB(), "MiB", "whole process: every stack, etcd, the federation and the bench")
	if !rssReset {
		r.note("peakRssMb is the process's peak since it started (/proc/self/clear_refs was not writable)")
	}
	return r.finish(), nil
}

// fedHarness is the in-process world of the scenario: its etcds
// (FederationConfig.Etcds), the cluster stacks, and the federation with its
// API, once started.
type fedHarness struct {
	env      Env
	cfg      FederationConfig
	etcds    []*store.Embedded
	etcdDirs []string

	members    []fedMember
	registered map[string]bool

	fst      *store.Etcd
	fed      *federation.Federation
	gs       *grpc.Server
	fc       *client.Federation
	clusters pelotonv1.ClusterServiceClient
	pools    pelotonv1.FederatedPoolServiceClient
	jobs     pelotonv1.FederatedJobServiceClient

	routersMu sync.Mutex
	routers   []*fed.Router
}

// slaRouter is the SLA evaluator of stack name: its own, until the
// federation starts and its global evaluator takes federated services.
func (h *fedHarness) slaRouter(name string) sla.Evaluator {
	r := fed.New(sla.NewLocal(nil), nil, name, h.env.logger())
	h.routersMu.Lock()
	defer h.routersMu.Unlock()
	if h.fc != nil {
		r.SetRemote(h.fc.SLA)
	}
	h.routers = append(h.routers, r)
	return r
}

// fedMember is one cluster stack and its name.
type fedMember struct {
	name string
	*stack
}

func fedClusterName(i int) string { return fmt.Sprintf("fed-%03d", i) }

func newFedHarness(ctx context.Context, env Env, cfg FederationConfig) (*fedHarness, error) {
	h := &fedHarness{env: env, cfg: cfg, registered: map[string]bool{}}
	for range max(cfg.Etcds, 1) {
		dir, err := os.MkdirTemp("", "peloton-bench-fed-etcd-*")
		if err != nil {
			h.closeEtcds()
			return nil, fmt.Errorf("bench: temp dir: %w", err)
		}
		e, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, Logger: env.logger()})
		if err != nil {
			os.RemoveAll(dir)
			h.closeEtcds()
			return nil, fmt.Errorf("bench: start etcd: %w", err)
		}
		h.etcds, h.etcdDirs = append(h.etcds, e), append(h.etcdDirs, dir)
	}
	return h, nil
}

// clusterEndpoints are the etcd of stack i: the one etcd, or one of those
// after the federation's, in turn.
func (h *fedHarness) clusterEndpoints(i int) []string {
	if len(h.etcds) == 1 {
		return h.etcds[0].Endpoints()
	}
	return h.etcds[1+i%(len(h.etcds)-1)].Endpoints()
}

// close stops the federation, then every stack (a few at a time), then
// the etcds, and removes their data.
func (h *fedHarness) close() {
	h.stopFederation()
	h.stopStacks(0)
	h.closeEtcds()
}

func (h *fedHarness) closeEtcds() {
	for i, e := range h.etcds {
		e.Close()
		os.RemoveAll(h.etcdDirs[i])
	}
	h.etcds, h.etcdDirs = nil, nil
}

// startStacks starts stacks until there are n, fedStartConcurrency at a
// time, and says how long that took.
func (h *fedHarness) startStacks(ctx context.Context, n int) (time.Duration, error) {
	have := len(h.members)
	if n <= have {
		return 0, nil
	}
	h.env.progress("federation: starting %d cluster stacks (%d sim hosts each, %d at a time) on %d embedded etcds", n-have, h.cfg.HostsPerCluster, fedStartConcurrency, len(h.etcds))
	start := time.Now()
	started := make([]*stack, n-have)
	var mu sync.Mutex
	var firstErr error
	done := 0
	lastReport := time.Now()
	sem := make(chan struct{}, fedStartConcurrency)
	var wg sync.WaitGroup
	for i := have; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, err := startMember(ctx, h.env, h.clusterEndpoints(i), fedClusterName(i), h.cfg.HostsPerCluster, h.slaRouter(fedClusterName(i)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				return
			}
			started[i-have] = s
			done++
			if time.Since(lastReport) >= 5*time.Second {
				h.env.progress("federation: %d of %d stacks started in %s", done, n-have, time.Since(start).Round(time.Millisecond))
				lastReport = time.Now()
			}
		})
	}
	wg.Wait()
	// Keep every stack that started, so that close stops it, even on error.
	for i, s := range started {
		if s != nil {
			h.members = append(h.members, fedMember{name: fedClusterName(have + i), stack: s})
		}
	}
	if err := cmp.Or(firstErr, ctx.Err()); err != nil {
		return 0, err
	}
	took := time.Since(start)
	h.env.progress("federation: %d stacks started in %s (%s each on average)", n-have, took.Round(time.Millisecond), (took / time.Duration(n-have)).Round(time.Millisecond))
	return took, nil
}

// startMember runs cluster.Run as `peloton serve cluster --backend sim`
// does against a shared etcd, under its own cluster name, on port-0
// loopback listeners, and connects a client to it.
func startMember(ctx context.Context, env Env, endpoints []string, name string, hosts int, evaluator sla.Evaluator) (*stack, error) {
	dir, err := os.MkdirTemp("", "peloton-bench-fed-*")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &stack{dir: dir, cancel: cancel, done: make(chan error, 1)}
	readyCh := make(chan cluster.ReadyInfo, 1)
	cfg := cluster.Config{
		ClusterName: name, DataDir: dir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", EtcdEndpoints: endpoints,
		Backend: "sim", Hosts: hosts, ShutdownGrace: 2 * time.Second, Logger: env.logger().With("cluster", name),
		OnReady: func(r cluster.ReadyInfo) { readyCh <- r }, SLA: evaluator,
	}
	go func() { s.done <- cluster.Run(runCtx, cfg) }()
	select {
	case s.ready = <-readyCh:
	case err := <-s.done:
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: cluster %s did not start: %w", name, err)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("bench: cluster %s did not start: %w", name, ctx.Err())
	}
	api, err := client.New(s.ready.GRPCAddr, client.Options{Timeout: callTimeout, MaxMsgBytes: maxMsgBytes})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bench: connect to cluster %s at %s: %w", name, s.ready.GRPCAddr, err)
	}
	s.api = api
	return s, nil
}

// stopStacks stops members[from:], 16 at a time, and forgets them.
func (h *fedHarness) stopStacks(from int) {
	if from >= len(h.members) {
		return
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, m := range h.members[from:] {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := m.Close(); err != nil {
				h.env.logger().Warn("cluster stack did not stop cleanly", "cluster", m.name, "err", err)
			}
		})
	}
	wg.Wait()
	h.members = h.members[:from]
}

// startFederation starts the federation on the shared etcd and serves its
// gRPC API on a loopback port, with a client (cluster/client) connected to
// it.
func (h *fedHarness) startFederation(ctx context.Context) error {
	if h.fed != nil {
		return nil
	}
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: h.etcds[0].Endpoints(), Prefix: federation.Prefix})
	if err != nil {
		return fmt.Errorf("bench: federation store: %w", err)
	}
	f := federation.New(st, federation.Options{Logger: h.env.logger(), CheckEvery: h.cfg.CheckEvery})
	if err := f.Start(ctx); err != nil {
		st.Close()
		return fmt.Errorf("bench: start the federation: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		st.Close()
		return fmt.Errorf("bench: federation listener: %w", err)
	}
	gs := federation.NewServer(f, h.env.logger()).GRPCServer()
	go func() { _ = gs.Serve(lis) }()
	fc, err := client.NewFederation(lis.Addr().String(), client.Options{Timeout: callTimeout, MaxMsgBytes: maxMsgBytes})
	if err != nil {
		gs.Stop()
		f.Close()
		st.Close()
		return fmt.Errorf("bench: connect to the federation: %w", err)
	}
	h.fst, h.fed, h.gs, h.fc = st, f, gs, fc
	h.clusters, h.pools, h.jobs = fc.Clusters, fc.Pools, fc.Jobs
	// Each stack's federated services ask this federation's global SLA
	// evaluator from now on, as with serve cluster --federation.
	h.routersMu.Lock()
	for _, r := range h.routers {
		r.SetRemote(fc.SLA)
	}
	h.routersMu.Unlock()
	return nil
}

func (h *fedHarness) stopFederation() {
	if h.fed == nil {
		return
	}
	h.fc.Close()
	h.gs.Stop()
	h.fed.Close()
	h.fst.Close()
	h.fed = nil
}

// register registers members[:n] that are not yet, through the API, 8 at
// a time.
func (h *fedHarness) register(ctx context.Context, n int) error {
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, m := range h.members[:n] {
		if h.registered[m.name] {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := h.clusters.RegisterCluster(ctx, &pelotonv1.RegisterClusterRequest{Name: m.name, Endpoint: m.ready.GRPCAddr,
				HttpEndpoint: m.ready.HTTPAddr, Labels: map[string]string{"bench": "federation"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, fmt.Errorf("bench: RegisterCluster %s: %w", m.name, err))
				return
			}
			h.registered[m.name] = true
		})
	}
	wg.Wait()
	return firstErr
}

// waitReady waits until every registered cluster is READY.
func (h *fedHarness) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, fedReadyTimeout)
	defer cancel()
	return waitFor(ctx, 100*time.Millisecond, "waiting for every cluster to be READY", func() (bool, string, error) {
		resp, err := h.clusters.ListClusters(ctx, &pelotonv1.ListClustersRequest{})
		if err != nil {
			return false, "", fmt.Errorf("bench: ListClusters: %w", err)
		}
		ready, notReady := 0, ""
		for _, c := range resp.Clusters {
			if !h.registered[c.Name] {
				continue
			}
			if c.State == pelotonv1.ClusterState_CLUSTER_READY {
				ready++
			} else if notReady == "" {
				notReady = fmt.Sprintf("; %s is %s: %s", c.Name, c.State, c.Message)
			}
		}
		return ready == len(h.registered), fmt.Sprintf("%d of %d READY%s", ready, len(h.registered), notReady), nil
	})
}

// registryPhase: stacks alone, then the federation over all of them.
func (h *fedHarness) registryPhase(ctx context.Context, r *Result) error {
	n := h.cfg.RegistryClusters
	took, err := h.startStacks(ctx, n)
	if err != nil {
		return err
	}
	r.add("registryClusters", float64(n), "", "cluster stacks registered, all in this process")
	r.add("registryStartSec", took.Seconds(), "s", fmt.Sprintf("starting the stacks, %d at a time (not the federation's cost)", fedStartConcurrency))
	if err := sleepCtx(ctx, fedSettle); err != nil {
		return err
	}
	rss0 := rssAfterGC()
	h.env.progress("federation: measuring CPU for %s with the %d clusters alone", h.cfg.RegistryWindow, n)
	without, err := cpuPctOver(ctx, h.cfg.RegistryWindow)
	if err != nil {
		return err
	}
	h.env.progress("federation: %.1f%% of a core without the federation; starting it and registering %d clusters", without, n)
	if err := h.startFederation(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := h.register(ctx, n); err != nil {
		return err
	}
	if err := h.waitReady(ctx); err != nil {
		return err
	}
	readyIn := time.Since(start)
	h.env.progress("federation: %d clusters registered and READY in %s; settling for two checks", n, readyIn.Round(time.Millisecond))
	if err := sleepCtx(ctx, 2*h.cfg.CheckEvery); err != nil {
		return err
	}
	h.env.progress("federation: measuring CPU for %s with the federation checking %d clusters every %s", h.cfg.RegistryWindow, n, h.cfg.CheckEvery)
	with, err := cpuPctOver(ctx, h.cfg.RegistryWindow)
	if err != nil {
		return err
	}
	rss1 := rssAfterGC()
	h.env.progress("federation: %.1f%% of a core with the federation (%.1f%% its share), RSS %+.1f MiB", with, with-without, rss1-rss0)
	r.add("registryReadyMs", ms(readyIn), "ms", "first RegisterCluster call to every cluster READY (ListClusters)")
	r.add("registryBaselineCpuPctOfCore", without, "%", "whole process, the clusters idle without the federation")
	r.add("registryCpuPctOfCore", with-without, "%", "the federation's share: whole-process CPU (getrusage) with it less without it; goal < 5")
	r.add("registryRssMiB", rss1-rss0, "MiB", "process VmRSS at steady state less before the federation started, each after a forced GC; goal < 300")
	r.note("registry phase: both CPU windows are whole-process getrusage over %s; the federation's share includes the clusters' work of answering its checks and the GC of the whole process's heap, so it is an upper bound of what a federation process alone would use", h.cfg.RegistryWindow)
	return nil
}

// useClusters makes the first n stacks the registered ones: it starts and
// registers what is missing, and deregisters and stops the rest.
func (h *fedHarness) useClusters(ctx context.Context, n int) error {
	if _, err := h.startStacks(ctx, n); err != nil {
		return err
	}
	if err := h.startFederation(ctx); err != nil {
		return err
	}
	if extra := len(h.members) - n; extra > 0 {
		h.env.progress("federation: deregistering and stopping %d clusters; the next phases run over %d", extra, n)
		for _, m := range h.members[n:] {
			if !h.registered[m.name] {
				continue
			}
			if _, err := h.clusters.DeregisterCluster(ctx, &pelotonv1.DeregisterClusterRequest{Name: m.name}); err != nil {
				return fmt.Errorf("bench: DeregisterCluster %s: %w", m.name, err)
			}
			delete(h.registered, m.name)
		}
		h.stopStacks(n)
	}
	if err := h.register(ctx, n); err != nil {
		return err
	}
	return h.waitReady(ctx)
}

// propagationPhase times global pool changes one at a time, each until
// every cluster holds its part.
func (h *fedHarness) propagationPhase(ctx context.Context, r *Result) error {
	n, c := h.cfg.PoolChanges, h.cfg.Clusters
	pools := min(propagationPools, n)
	h.env.progress("federation: %d global pool changes over %d pools, one at a time, each until all %d clusters hold their part", n, pools, c)
	lat := make([]float64, 0, n)
	lastReport := time.Now()
	for i := range n {
		path := fmt.Sprintf("/bench-prop-%d", i%pools)
		k := i / pools // the pool's k-th change: a create, then updates
		// Each change moves the reservation, so every cluster's part moves.
		perCluster := 1 + float64(k%2)
		spec := &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: perCluster * float64(c), MemoryMb: 64 * float64(c)}}
		start := time.Now()
		var p *pelotonv1.FederatedPool
		if k == 0 {
			resp, err := h.pools.CreateFederatedPool(ctx, &pelotonv1.CreateFederatedPoolRequest{Path: path, Spec: spec, RequestId: client.NewRequestID()})
			if err != nil {
				return fmt.Errorf("bench: CreateFederatedPool %s: %w", path, err)
			}
			p = resp.Pool
		} else {
			resp, err := h.pools.UpdateFederatedPool(ctx, &pelotonv1.UpdateFederatedPoolRequest{Path: path, Spec: spec})
			if err != nil {
				return fmt.Errorf("bench: UpdateFederatedPool %s: %w", path, err)
			}
			p = resp.Pool
		}
		took, err := h.waitPropagated(ctx, p, start)
		if err != nil {
			return fmt.Errorf("bench: change %d of %d (%s): %w", i+1, n, path, err)
		}
		lat = append(lat, ms(took))
		if time.Since(lastReport) >= 5*time.Second {
			h.env.progress("federation: %d of %d pool changes propagated, p50 so far %.1f ms", i+1, n, percentile(lat, 50))
			lastReport = time.Now()
		}
	}
	r.add("propagationP50Ms", percentile(lat, 50), "ms", fmt.Sprintf("global pool change to every one of %d clusters' pools holding its part", c))
	r.add("propagationP99Ms", percentile(lat, 99), "ms", "goal < 500")
	r.add("propagationMaxMs", percentile(lat, 100), "ms", "")
	r.note("propagation phase: %d changes (creates, then updates alternating each cluster's part between 1 and 2 CPUs) of %d global pools, made one at a time, the next once the last reached every cluster; each cluster's GetPool polled every %s", n, pools, propagationPoll)
	return nil
}

// waitPropagated polls every registered cluster's pool p.Path until it
// holds the reservation p says it should, and returns the time from start
// until the last cluster did.
func (h *fedHarness) waitPropagated(ctx context.Context, p *pelotonv1.FederatedPool, start time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, propagationTimeout)
	defer cancel()
	want := map[string]*pelotonv1.PoolSpec{}
	for _, pc := range p.Clusters {
		if pc.Desired != nil && h.registered[pc.Cluster] {
			want[pc.Cluster] = pc.Desired
		}
	}
	if len(want) != len(h.registered) {
		return 0, fmt.Errorf("the federation gives only %d of the %d clusters a part of %s", len(want), len(h.registered), p.Path)
	}
	var mu sync.Mutex
	var last time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for name, desired := range want {
		s := h.member(name)
		wg.Go(func() {
			err := waitFor(ctx, propagationPoll, fmt.Sprintf("waiting for %s in cluster %s", p.Path, name), func() (bool, string, error) {
				got, err := s.getPool(ctx, p.Path)
				if status.Code(err) == codes.NotFound {
					return false, "not there yet", nil
				}
				if err != nil {
					return false, "", err
				}
				return sameResources(got.GetSpec().GetReservation(), desired.GetReservation()),
					fmt.Sprintf("reserves %v, want %v", got.GetSpec().GetReservation(), desired.GetReservation()), nil
			})
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			firstErr = cmp.Or(firstErr, err)
			last = max(last, took)
		})
	}
	wg.Wait()
	return last, firstErr
}

// member is the registered cluster of that name.
func (h *fedHarness) member(name string) *stack {
	for _, m := range h.members {
		if m.name == name {
			return m.stack
		}
	}
	return nil
}

// sameResources compares amounts as the cluster stores them (milli-CPU and
// whole MiB), with room for float rounding.
func sameResources(a, b *pelotonv1.Resources) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-6 }
	return near(a.GetCpu(), b.GetCpu()) && near(a.GetMemoryMb(), b.GetMemoryMb()) &&
		near(a.GetGpu(), b.GetGpu()) && near(a.GetDiskMb(), b.GetDiskMb())
}

// fedSample is a job followed from its create to its first RUNNING task.
type fedSample struct {
	id           string
	created      time.Time
	cluster      string
	clusterJobID string
	running      time.Duration // 0 until seen
}

// dispatchPhase creates Jobs federated jobs with bounded concurrency and
// times them into their clusters.
func (h *fedHarness) dispatchPhase(ctx context.Context, r *Result) error {
	n := h.cfg.Jobs
	if err := h.createHalfPool(ctx, fedBatchPool); err != nil {
		return err
	}
	sent, ended := metrics.FederationJobs.WithLabelValues("sent"), metrics.FederationJobs.WithLabelValues("done")
	sent0, ended0 := counterValue(sent), counterValue(ended)
	every := max(1, n/runningSample)
	h.env.progress("federation: creating %d jobs (%d callers at once) over %d clusters; following %d of them to their first RUNNING task", n, h.cfg.Concurrency, len(h.registered), min(n, runningSample))

	// The watcher and the sampler run beside the creates; every way out
	// stops them and waits for them.
	ctx, cancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { cancel(); bg.Wait() }()
	var mu sync.Mutex // guards samples, creating, firstErr
	var samples []*fedSample
	creating := true
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
		cancel()
	}
	// orFirst is the first failure recorded, if any, else err (which then
	// is often just the cancellation it caused).
	orFirst := func(err error) error {
		mu.Lock()
		defer mu.Unlock()
		return cmp.Or(firstErr, err)
	}
	ids := make([]string, n)
	start := time.Now()

	// Watch the "sent" count (a job's cluster job id is written) closely
	// from the first create; the API check below confirms it.
	var allSent time.Duration
	watchDone := make(chan struct{})
	bg.Go(func() {
		defer close(watchDone)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for counterValue(sent)-sent0 < float64(n) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		allSent = time.Since(start)
	})
	sampleDone := make(chan struct{})
	bg.Go(func() {
		defer close(sampleDone)
		if err := h.followSamples(ctx, &mu, &samples, &creating); err != nil {
			fail(err)
		}
	})

	idx := make(chan int)
	var wg sync.WaitGroup
	for range h.cfg.Concurrency {
		wg.Go(func() {
			for i := range idx {
				spec := &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{
					Name: fmt.Sprintf("bench-fed-%d", i), Type: pelotonv1.JobType_BATCH, Pool: fedBatchPool, InstanceCount: 1,
					DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"},
						Resources: &pelotonv1.Resources{Cpu: fedTaskCPU, MemoryMb: fedTaskMemoryMB}},
				}}
				t := time.Now()
				resp, err := h.jobs.CreateFederatedJob(ctx, &pelotonv1.CreateFederatedJobRequest{Spec: spec, RequestId: client.NewRequestID()})
				if err != nil {
					fail(fmt.Errorf("bench: CreateFederatedJob %s: %w", spec.Job.Name, err))
					continue
				}
				ids[i] = resp.JobId
				if i%every == 0 {
					mu.Lock()
					if len(samples) < runningSample {
						samples = append(samples, &fedSample{id: resp.JobId, created: t})
					}
					mu.Unlock()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(idx)
	wg.Wait()
	createdIn := time.Since(start)
	mu.Lock()
	creating = false
	mu.Unlock()
	if err := orFirst(ctx.Err()); err != nil {
		return err
	}
	h.env.progress("federation: %d jobs created in %s (%.0f/s); waiting for every one to be in a cluster", n, createdIn.Round(time.Millisecond), perSec(n, createdIn))

	// Wait for the watcher, reporting, and checking through the API every
	// 2s that no job was refused (it would never be sent).
	lastCheck := time.Now()
	err := waitFor(ctx, 50*time.Millisecond, "waiting for every job to be in a cluster", func() (bool, string, error) {
		select {
		case <-watchDone:
			return true, "", ctx.Err()
		default:
		}
		st := fmt.Sprintf("%.0f of %d jobs in a cluster", counterValue(sent)-sent0, n)
		if time.Since(lastCheck) >= 2*time.Second {
			lastCheck = time.Now()
			h.env.progress("federation: %s", st)
			if _, err := h.jobsInClusters(ctx, ids); err != nil {
				return false, "", err
			}
		}
		return false, st, nil
	})
	if err != nil {
		return orFirst(err)
	}
	in, err := h.jobsInClusters(ctx, ids)
	if err != nil {
		return orFirst(err)
	}
	if in != n {
		return fmt.Errorf("bench: the federation counted %d jobs sent, but ListFederatedJobs shows %d of %d with a cluster job id", n, in, n)
	}
	h.env.progress("federation: every job in a cluster %s after the first create (%.0f/s); waiting for the sampled jobs to run", allSent.Round(time.Millisecond), perSec(n, allSent))
	select {
	case <-sampleDone:
	case <-ctx.Done():
	}
	if err := orFirst(ctx.Err()); err != nil {
		return err
	}
	var running []float64
	for _, s := range samples {
		running = append(running, ms(s.running))
	}
	// Not measured: let the jobs end before the stacks stop, so that no
	// stack stops while it writes a task's end (and warns about it).
	h.env.progress("federation: waiting up to %s for the jobs to end", fedEndWait)
	wctx, wcancel := context.WithTimeout(ctx, fedEndWait)
	defer wcancel()
	if waitFor(wctx, 100*time.Millisecond, "", func() (bool, string, error) { return counterValue(ended)-ended0 >= float64(n), "", nil }) != nil {
		h.env.progress("federation: %.0f of %d jobs ended; stopping anyway", counterValue(ended)-ended0, n)
	}
	r.add("createJobsPerSec", perSec(n, createdIn), "jobs/s", fmt.Sprintf("CreateFederatedJob calls answered, %d callers at once", h.cfg.Concurrency))
	r.add("dispatchJobsPerSec", perSec(n, allSent), "jobs/s", "first create to every job in a cluster (cluster job id set); goal >= 500")
	r.add("createToRunningP50Ms", percentile(running, 50), "ms", fmt.Sprintf("create call to the first task RUNNING, %d sampled jobs", len(running)))
	r.add("createToRunningP99Ms", percentile(running, 99), "ms", "")
	r.note("dispatch phase: the moment the last job got its cluster job id is read from the federation's peloton_federation_jobs_total{step=\"sent\"} every 5 ms and confirmed with ListFederatedJobs; sampled jobs are polled every %s (GetFederatedJob, then the cluster's GetJob), so their times are late by up to that", runningPoll)
	return nil
}

// createHalfPool creates a leaf global pool (the dispatch phase's, the
// services phase's), reserving half of what the clusters have, and waits until every cluster holds it
// and the federation has seen it there (it dispatches only to clusters
// where it saw the pool).
func (h *fedHarness) createHalfPool(ctx context.Context, path string) error {
	resp, err := h.clusters.ListClusters(ctx, &pelotonv1.ListClustersRequest{})
	if err != nil {
		return fmt.Errorf("bench: ListClusters: %w", err)
	}
	var cpu, mem float64
	for _, c := range resp.Clusters {
		cpu += c.GetCapacity().GetCpu()
		mem += c.GetCapacity().GetMemoryMb()
	}
	return h.createPool(ctx, path, &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: math.Floor(cpu / 2), MemoryMb: math.Floor(mem / 2)}})
}

// createPool creates a leaf global pool of spec and waits until every
// cluster holds it and the federation has seen it there.
func (h *fedHarness) createPool(ctx context.Context, path string, spec *pelotonv1.FederatedPoolSpec) error {
	if _, err := h.pools.CreateFederatedPool(ctx, &pelotonv1.CreateFederatedPoolRequest{Path: path, Spec: spec, RequestId: client.NewRequestID()}); err != nil {
		return fmt.Errorf("bench: CreateFederatedPool %s: %w", path, err)
	}
	wctx, cancel := context.WithTimeout(ctx, fedReadyTimeout)
	defer cancel()
	return waitFor(wctx, 50*time.Millisecond, "waiting for "+path+" in every cluster", func() (bool, string, error) {
		resp, err := h.pools.GetFederatedPool(wctx, &pelotonv1.GetFederatedPoolRequest{Path: path})
		if err != nil {
			return false, "", fmt.Errorf("bench: GetFederatedPool %s: %w", path, err)
		}
		synced := 0
		for _, pc := range resp.Pool.Clusters {
			if pc.InSync && pc.Status != nil {
				synced++
			}
		}
		return synced == len(h.registered), fmt.Sprintf("%d of %d clusters hold it", synced, len(h.registered)), nil
	})
}

// followSamples polls the sampled jobs until each has a RUNNING task, while
// creating is true or any is left. mu guards samples and creating.
func (h *fedHarness) followSamples(ctx context.Context, mu *sync.Mutex, samples *[]*fedSample, creating *bool) error {
	for {
		mu.Lock()
		var left []*fedSample
		for _, s := range *samples {
			if s.running == 0 {
				left = append(left, s)
			}
		}
		more := *creating
		mu.Unlock()
		if !more && len(left) == 0 {
			return nil
		}
		sem := make(chan struct{}, 8)
		var emu sync.Mutex
		var firstErr error
		var wg sync.WaitGroup
		for _, s := range left {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := h.followSample(ctx, s); err != nil {
					emu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					emu.Unlock()
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		if err := sleepCtx(ctx, runningPoll); err != nil {
			return err
		}
	}
}

// followSample looks once at a sampled job: first where the federation
// sent it, then its task counts in that cluster.
func (h *fedHarness) followSample(ctx context.Context, s *fedSample) error {
	if s.clusterJobID == "" {
		resp, err := h.jobs.GetFederatedJob(ctx, &pelotonv1.GetFederatedJobRequest{JobId: s.id})
		if err != nil {
			return fmt.Errorf("bench: GetFederatedJob %s: %w", s.id, err)
		}
		j := resp.Job
		if j.ClusterJobId == "" {
			if j.DispatchState == pelotonv1.DispatchState_DISPATCH_DONE {
				return fmt.Errorf("bench: federated job %s ended without reaching a cluster: %s", s.id, j.Message)
			}
			return nil
		}
		s.cluster, s.clusterJobID = j.Cluster, j.ClusterJobId
	}
	st := h.member(s.cluster)
	if st == nil {
		return fmt.Errorf("bench: federated job %s went to unknown cluster %q", s.id, s.cluster)
	}
	j, err := st.getJob(ctx, s.clusterJobID)
	if err != nil {
		return err
	}
	if err := notFailed(j); err != nil {
		return err
	}
	c := j.GetStatus().GetTaskCounts()
	switch {
	case c[pelotonv1.TaskState_RUNNING.String()] > 0, c[pelotonv1.TaskState_SUCCEEDED.String()] > 0,
		j.GetStatus().GetState() == pelotonv1.JobState_JOB_RUNNING, j.GetStatus().GetState() == pelotonv1.JobState_JOB_SUCCEEDED:
		s.running = time.Since(s.created)
	}
	return nil
}

// jobsInClusters lists every federated job through the API and counts
// those of ids that have a cluster job id; a job that ended without one
// was refused, which is an error.
func (h *fedHarness) jobsInClusters(ctx context.Context, ids []string) (int, error) {
	ours := make(map[string]bool, len(ids))
	for _, id := range ids {
		ours[id] = true
	}
	in, token := 0, ""
	for page := 0; page <= len(ids)/5000+1; page++ {
		resp, err := h.jobs.ListFederatedJobs(ctx, &pelotonv1.ListFederatedJobsRequest{PageSize: 5000, PageToken: token})
		if err != nil {
			return 0, fmt.Errorf("bench: ListFederatedJobs: %w", err)
		}
		for _, j := range resp.Jobs {
			if !ours[j.Id] {
				continue
			}
			switch {
			case j.ClusterJobId != "":
				in++
			case j.DispatchState == pelotonv1.DispatchState_DISPATCH_DONE:
				return 0, fmt.Errorf("bench: federated job %s (%s) ended without reaching a cluster: %s", j.Id, j.GetSpec().GetJob().GetName(), j.Message)
			}
		}
		if token = resp.NextPageToken; token == "" {
			return in, nil
		}
	}
	return in, errors.New("bench: ListFederatedJobs: more pages than jobs")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPctOver is the process's CPU use over the next d, in percent of one
// core.
func cpuPctOver(ctx context.Context, d time.Duration) (float64, error) {
	c0, t0 := processCPU(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return 0, err
	}
	return 100 * float64(processCPU()-c0) / float64(time.Since(t0)), nil
}

// rssAfterGC is the process's resident set (VmRSS) in MiB after a forced
// GC that returns free memory to the OS; 0 without /proc.
func rssAfterGC() float64 {
	debug.FreeOSMemory()
	return float64(procKB("/proc/self/status", "VmRSS")) / 1024
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// counterValue reads one counter of the in-process metrics registry.
func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}
