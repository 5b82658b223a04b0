// Package cluster assembles one cluster stack - jobmgr, resmgr, placement
// and hostmgr with a backend - over a store, and serves the public API. In
// `peloton up` it also embeds etcd; `peloton serve cluster` points it at an
// external etcd cluster instead. It is the only package that knows all the
// components; none of them imports it.
package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/hostmgr/local"
	"github.com/peloton-sched/peloton/hostmgr/mesos"
	"github.com/peloton-sched/peloton/hostmgr/sim"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/etcdtls"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/restgw"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/jobmgr"
	"github.com/peloton-sched/peloton/placement"
	"github.com/peloton-sched/peloton/resmgr"
)

// Run starts the stack and serves until ctx ends, then shuts down in order:
// stop taking requests, stop the engines, stop the tasks the local backend
// started, flush writes, close the store. Everything durable is already in
// etcd, so a crash at any point loses nothing; the next start recovers.
//
// With cfg.LeaderElect it campaigns in etcd first and runs the stack only
// while it leads (see leader.go).
func Run(ctx context.Context, cfg Config) error {
	cfg = withDefaults(cfg)
	if err := ValidateClusterName(cfg.ClusterName); err != nil {
		return err
	}
	switch {
	case cfg.TaskUser != "" && cfg.Backend != local.BackendName:
		return fmt.Errorf("--task-user: only the local backend runs tasks as processes of this machine (--backend %s)", cfg.Backend)
	case etcdtls.Enabled(cfg.EtcdTLS) && len(cfg.EtcdEndpoints) == 0:
		return errors.New("etcd TLS files are for an external etcd (--etcd-endpoints); the embedded one answers on its unix socket")
	}
	etcdTLS, err := etcdtls.Config(cfg.EtcdTLS, cfg.EtcdEndpoints, cfg.Logger)
	if err != nil {
		return err
	}
	if cfg.LeaderElect {
		return runElected(ctx, cfg, etcdTLS)
	}
	return runStack(ctx, cfg, etcdTLS, nil)
}

// runStack is Run without leader election. etcdTLS is the TLS of its etcd
// client (nil: none). t, if not nil, is the term of
// leadership it runs in: its writes are fenced to the leader key, its
// engines stop the moment the lease is lost, and the follower's listeners
// are handed over just before the stack's own bind the same addresses.
func runStack(ctx context.Context, cfg Config, etcdTLS *tls.Config, t *term) error {
	log := cfg.Logger

	endpoints := cfg.EtcdEndpoints
	// inProcess, with the embedded etcd, makes clients that call it
	// directly rather than through its socket.
	var inProcess func() *clientv3.Client
	var defragment func(context.Context) error
	if len(endpoints) == 0 {
		if cfg.TaskUser != "" {
			// The task user must be able to pass through the data dir to
			// its sandboxes; etcd would make it 0700.
			if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
				return fmt.Errorf("--data-dir: %w", err)
			}
		}
		dir := filepath.Join(cfg.DataDir, "etcd")
		e, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, ClientAddr: cfg.EtcdListen, Logger: log,
			QuotaBackendBytes: cfg.EtcdQuotaBytes})
		if err != nil {
			return fmt.Errorf("start embedded etcd: %w", err)
		}
		defer e.Close()
		// This process's clients use the socket even when etcd also
		// listens on TCP.
		endpoints = []string{"unix://" + e.SocketPath()}
		inProcess, defragment = e.InProcessClient, e.Defragment
		log.Info("embedded etcd started", "endpoint", endpoints[0], "dir", dir)
		if cfg.EtcdListen != "" {
			log.Warn("the embedded etcd also answers on TCP (--etcd-listen): every process of this machine, tasks included, can connect to it, "+
				"and read or change all of Peloton's state; leave --etcd-listen out to keep it on its socket alone", "endpoints", e.Endpoints())
		}
	}
	// Every key of this stack lives under its cluster's prefix, so stacks
	// of other names on the same etcd never see them.
	sc := store.EtcdConfig{Endpoints: endpoints, Prefix: cfg.Prefix(), Fence: t.storeFence(), TLS: etcdTLS}
	if inProcess != nil {
		// The store is this process's busiest etcd client: in-process
		// calls save it the encoding and the socket on every write.
		sc.Client = inProcess()
	}
	st, err := store.NewEtcd(ctx, sc)
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	defer st.Close()
	if err := migrateLegacy(ctx, st.Client(), cfg, st.MaxTxnOps(), log); err != nil {
		return err
	}
	batcher := store.NewBatcher(st, store.BatcherOptions{})
	defer batcher.Close()

	backend, err := newBackend(cfg, st)
	if err != nil {
		return err
	}
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: log, ReclaimDelay: cfg.ReclaimDelay, ReservationAfter: cfg.ReservationAfter})
	if err != nil {
		return err
	}
	// Admission divides the capacity of the hosts in service; hostmgr tells
	// resmgr whenever that changes (a drain, a host returning to service).
	// Revocable work is admitted against the slack the host agents measure.
	hm := hostmgr.NewManager(backend, hostmgr.Options{Logger: log, Store: st, OnCapacity: rm.SetPartitionCapacity,
		OnSlack: rm.SetSlack, SlackMargin: cfg.SlackMargin, UsageStaleAfter: cfg.UsageStaleAfter,
		MemoryOversubscription: cfg.MemoryOversubscription, Profiles: cfg.PartitionProfiles})
	// The engines get their own context so they stop only after the API has.
	runCtx, stopEngines := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngines()
	if t != nil {
		// Except when the leader lease is lost: then nothing may go on
		// scheduling while the API drains.
		defer context.AfterFunc(t.lease, stopEngines)()
	}
	if err := hm.Start(runCtx); err != nil {
		return err
	}
	defer func() {
		if err := hm.Close(); err != nil {
			log.Warn("backend did not stop cleanly", "err", err)
		}
	}()

	rm.SetPartitionCapacity(hm.CapacityByPartition())
	if cfg.DefaultReservesHosts {
		if err := rm.ReserveHostsForDefault(ctx, hm.Capacity()); err != nil {
			log.Warn("could not make /default reserve the hosts; reserve it with peloton pool update", "err", err)
		}
	}
	// Finished jobs move to the archive after their time to live.
	archive := cfg.History
	if archive == nil {
		name := cfg.Archive
		if name == "" && cfg.LeaderElect {
			log.Warn("no --archive: finished jobs stay in the store until deleted (with --leader-elect the embedded archive would be each replica's own; give --archive postgres://...)")
			name = ArchiveOff
		}
		if archive, err = OpenArchive(ctx, name, cfg.DataDir, log); err != nil {
			return err
		}
		if archive != nil {
			defer archive.Close()
		}
	}
	ttl := jobmgr.DefaultFinishedJobTTL
	if cfg.FinishedJobTTL != nil {
		ttl = *cfg.FinishedJobTTL
	}
	// A backend that keeps jobs' disruption budgets (kubernetes) hears of
	// their changes from jobmgr.
	budgets, _ := backend.(hostmgr.DisruptionBudgeter)
	// Self-scaling jobs' runs get a token of their own (jobtoken.go).
	jtKey, err := loadJobTokenKey(runCtx, st)
	if err != nil {
		return err
	}
	ssEnv := &selfScaleEnv{tokens: &auth.JobTokens{Key: jtKey}, tls: cfg.Security.TLS.Enabled()}
	ssEnv.presetAddrs(cfg.Listen, cfg.HTTPListen)
	jm := jobmgr.New(st, batcher, rm, hm, jobmgr.Options{Logger: log, SLA: cfg.SLA, SLATimeout: cfg.SLATimeout,
		History: archive, ClusterName: cmp.Or(cfg.ClusterName, DefaultClusterName), Collect: jobmgr.CollectOptions{TTL: ttl},
		Budgets: budgets, SelfScaleEnv: ssEnv.env})
	ssEnv.tokens.Live = jobLive(jm)
	// DAEMON jobs follow hosts that join or leave as soon as the backend
	// says so (kubernetes); jobmgr also re-checks every few seconds.
	hm.OnHostsChanged(jm.HostsChanged)
	if err := jm.Start(runCtx); err != nil {
		return err
	}
	// Request ids of creates are kept for requestid.Retention; expired ones
	// are deleted in bounded passes, and the sweep ends
	// before the store closes.
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		requestid.SweepEvery(runCtx, st, requestid.SweepInterval, requestid.SweepLimit, func(err error) { log.Warn("sweep expired request ids", "err", err) })
	}()
	defer func() { stopEngines(); <-sweepDone }()
	// The store never fills silently: its size is read every few
	// seconds, published, and new creates refused near the quota.
	quota := cfg.EtcdQuotaBytes
	if quota <= 0 && inProcess != nil {
		quota = store.DefaultEmbeddedQuotaBackendBytes
	}
	clusterName := cmp.Or(cfg.ClusterName, DefaultClusterName)
	guard := store.NewQuotaGuard(st.Client(), store.QuotaGuardOptions{QuotaBytes: quota, Embedded: inProcess != nil, Defragment: defragment,
		CompactLag: embeddedCompactLag,
		Interval:   cfg.StoreQuotaInterval, Logger: log, OnUse: func(u store.QuotaUse) {
			metrics.StoreDBBytes.WithLabelValues(clusterName).Set(float64(u.DBBytes))
			metrics.StoreDBInUseBytes.WithLabelValues(clusterName).Set(float64(u.InUseBytes))
			metrics.StoreQuotaBytes.WithLabelValues(clusterName).Set(float64(u.QuotaBytes))
		}})
	guardDone := make(chan struct{})
	go func() { defer close(guardDone); guard.Run(runCtx) }()
	defer func() { stopEngines(); <-guardDone }()
	// Placement engines run active-active: hostmgr leases keep them off each
	// other's hosts and its Commit re-checks every fit.
	engineDone := make(chan struct{}, 1+cfg.PlacementEngines)
	go func() { rm.Run(runCtx); engineDone <- struct{}{} }()
	for i := 0; i < cfg.PlacementEngines; i++ {
		go func() {
			placement.NewEngine(rm, hm, placement.EngineOptions{Logger: log}).Run(runCtx)
			engineDone <- struct{}{}
		}()
	}

	srv := api.NewServer(jm, rm, api.Hosts{Cache: hm, Maintenance: hm.Maintenance(), Usage: hm.Usage()}, log)
	srv.SetMaxInstances(cfg.MaxInstances)
	srv.SetCreateGuard(guard.Check)
	// The federation's calls are believed from its principal only, which
	// the policy gives admin; the guard exists once serving starts.
	var authGuard atomic.Pointer[auth.Guard]
	srv.SetFederationCheck(func(ctx context.Context) bool {
		g := authGuard.Load()
		return g != nil && g.Holds(ctx, auth.Admin)
	})
	if archive != nil {
		srv.SetHistory(archive, cmp.Or(cfg.ClusterName, DefaultClusterName))
	}
	srv.SetReadiness(func(ctx context.Context) error {
		// Reading the quarantine also tells whether the store answers.
		quarantined, err := quarantine.List(ctx, st, "")
		if err != nil {
			return fmt.Errorf("the store (etcd) does not answer: %w", err)
		}
		if n := jm.UnwrittenEvents(); n > 0 {
			return fmt.Errorf("%d task events wait to be written to the store", n)
		}
		// The API serves while the substrate is away (and says so here);
		// new work waits for it.
		if s := hm.Substrate(); !s.Reachable {
			return errors.New(s.Describe(time.Now()))
		}
		if err := quarantineReadiness(quarantined); err != nil {
			return err
		}
		// Finished jobs wait in the store while the archive cannot take
		// them: it serves, but someone should look.
		if err := jm.Archive().ArchiveError(); err != nil {
			return &restgw.Degraded{Reason: "finished jobs cannot be archived (they stay in the store until the archive takes them): " + err.Error()}
		}
		return nil
	})
	// The UI's live updates (/v1/events) watch every key of the stack.
	srv.SetWatch(func(ctx context.Context) <-chan int64 { return st.Watch(ctx, "") })
	if t != nil {
		t.beforeListen()
	}
	grpcLis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s (--listen): %w", cfg.Listen, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen %s (--http-listen): %w", cfg.HTTPListen, err)
	}
	ssEnv.setAddrs(grpcLis.Addr().String(), httpLis.Addr().String())
	sec := cfg.Security
	sec.Auth.JobTokens = ssEnv.tokens
	served, err := serving.Start(runCtx, serving.API{GRPCServer: srv.GRPCServer, HTTPHandler: srv.HTTPHandler, Rules: srv.Rules(),
		Extra: cfg.UI, Ready: srv.Ready}, sec, grpcLis, httpLis, log)
	if err != nil {
		return err
	}
	authGuard.Store(served.Guard)
	ready := ReadyInfo{ClusterName: cfg.ClusterName, GRPCAddr: grpcLis.Addr().String(), HTTPAddr: httpLis.Addr().String(),
		AdminAddr: served.AdminAddr, TLS: served.TLS(), EtcdEndpoints: endpoints, InProcessEtcd: inProcess}
	log.Info("peloton is serving", "cluster", cfg.ClusterName, "grpc", ready.GRPCAddr, "http", ready.HTTPAddr, "backend", backend.Name(), "hosts", len(hm.ListHosts()))
	var agents *localAgents
	var agentErr error
	simb, isSim := backend.(*sim.Backend)
	lb, isLocal := backend.(*local.Backend)
	switch {
	case isLocal && !cfg.NoHostAgents:
		agents, agentErr = startLocalAgents(runCtx, served.InProcess, hm, lb, nil, cfg, log)
	case isSim && cfg.SimHostAgents:
		agents, agentErr = startLocalAgents(runCtx, served.InProcess, hm, nil, simb, cfg, log)
	}
	if agentErr != nil {
		log.Warn("cannot start the hosts' agents; their usage is not reported", "err", agentErr)
	}
	stopAdvisor, advErr := startAdvisor(runCtx, served.InProcess, cfg, log)
	if advErr != nil {
		return fmt.Errorf("start the host advisor: %w", advErr)
	}
	defer stopAdvisor()
	if cfg.OnReady != nil {
		cfg.OnReady(ready)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-served.Err():
		runErr = fmt.Errorf("server stopped: %w", err)
	}
	log.Info("shutting down")
	stopAdvisor()
	if agents != nil {
		agents.stop()
	}
	// Agents elsewhere keep their report streams open: end them, so that
	// the graceful stop does not wait for them (they report to whoever
	// serves next).
	srv.EndStreams()
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	served.Shutdown(shutCtx)
	stopEngines()
	jm.Wait()
	for i := 0; i < 1+cfg.PlacementEngines; i++ {
		<-engineDone
	}
	log.Info("stopped")
	return runErr
}

func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClusterName == "" {
		cfg.ClusterName = DefaultClusterName
	}
	if cfg.DataDir == "" {
		cfg.DataDir = "./peloton-data"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:5391"
	}
	if cfg.HTTPListen == "" {
		cfg.HTTPListen = "127.0.0.1:5291"
	}
	if cfg.Backend == "" {
		cfg.Backend = "local"
	}
	if cfg.Hosts <= 0 {
		cfg.Hosts = 1
	}
	if cfg.PlacementEngines <= 0 {
		cfg.PlacementEngines = 1
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	return cfg
}

// newBackend builds the configured hostmgr backend. st is the stack's
// (fenced) store: a backend that must remember something of its own across
// restarts of the control plane keeps it there, as the Mesos backend does
// its framework ID and the records of its runs.
func newBackend(cfg Config, st store.Store) (hostmgr.Backend, error) {
	switch cfg.Backend {
	case "local":
		if cfg.TaskUser == "" && os.Geteuid() == 0 {
			cfg.Logger.Warn("tasks run as root: they can read and change every file of this machine, Peloton's data dir and its etcd included; "+
				"run them as an unprivileged user with --task-user", "dataDir", cfg.DataDir)
		}
		total := local.DefaultHostCapacity()
		per := resources.Resources{
			MilliCPU: total.MilliCPU / int64(cfg.Hosts),
			MemoryMB: total.MemoryMB / int64(cfg.Hosts),
			DiskMB:   total.DiskMB / int64(cfg.Hosts),
		}
		if cfg.HostCPU > 0 {
			per.MilliCPU = int64(math.Round(cfg.HostCPU * 1000))
		}
		if cfg.HostMemoryMB > 0 {
			per.MemoryMB = cfg.HostMemoryMB
		}
		if cfg.HostDiskMB > 0 {
			per.DiskMB = cfg.HostDiskMB
		}
		b, err := local.New(local.Config{Dir: filepath.Join(cfg.DataDir, "tasks"), Hosts: cfg.Hosts, Partitions: cfg.HostPartitions, HostCapacity: per, Logger: cfg.Logger,
			TaskUser: cfg.TaskUser, LogRetention: cfg.LogRetention})
		if err != nil && cfg.TaskUser != "" {
			return nil, fmt.Errorf("--task-user %s: %w", cfg.TaskUser, err)
		}
		return b, err
	case "sim":
		per := resources.Resources{
			MilliCPU: int64(math.Round(cfg.HostCPU * 1000)),
			MemoryMB: cfg.HostMemoryMB,
			DiskMB:   cfg.HostDiskMB,
			GPU:      cfg.HostGPU,
		}
		// Zero CPU or memory takes sim's defaults (32 CPUs, 131072 MiB).
		return sim.New(sim.Config{Hosts: cfg.Hosts, HostCapacity: per, Labels: cfg.HostLabels, Logger: cfg.Logger})
	case kubernetes.BackendName:
		k := cfg.Kube
		return kubernetes.New(kubernetes.Config{Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, PoolNamespaces: k.PoolNamespaces,
			NodeSelector: k.NodeSelector, DefaultImage: k.Image, QPS: k.QPS, Burst: k.Burst,
			BindMode: kubernetes.BindMode(k.BindMode), Secondary: k.Secondary, SecondaryNamespaces: k.SecondaryNamespaces,
			Logger: cfg.Logger})
	case mesos.BackendName:
		return newMesosBackend(cfg, st)
	default:
		return nil, fmt.Errorf("--backend: unknown backend %q (this build has: local, sim, kubernetes, mesos)", cfg.Backend)
	}
}

// embeddedCompactLag is how far behind its current revision the embedded
// etcd is kept compacted (store.QuotaGuardOptions.CompactLag).
const embeddedCompactLag = time.Minute

// quarantineReadiness is what /readyz says of the records in quarantine
// (internal/quarantine): nothing when there are none; else the stack is
// degraded, still ready, since it serves everything else, and a person
// must look at the records it names.
func quarantineReadiness(keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return &restgw.Degraded{Reason: fmt.Sprintf("%d records in quarantine; the stack runs without them (docs/operations.md, Quarantined records)", len(keys)),
		Items: keys}
}
