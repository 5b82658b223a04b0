package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/history"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"github.com/peloton-sched/peloton/sla/fed"
	"github.com/peloton-sched/peloton/ui"
)

// fedFlags are the flags of the federation's own listeners and workers.
type fedFlags struct {
	listen, httpListen string
	checkEvery         time.Duration
	callTimeout        time.Duration
	slowAfter          time.Duration
	unreachableAfter   time.Duration
	jobRetention       time.Duration
	finishedJobTTL     time.Duration
	// archive is serve federation's --archive: a bbolt file or a
	// PostgreSQL URL (empty: no history).
	archive string
	// Leader election (serve federation only).
	leaderElect   bool
	leaderLease   time.Duration
	advertiseHost string
}

// register adds the flags; prefix is "" for `serve federation` and
// "federation-" for `peloton up`, whose --listen is the cluster's.
func (f *fedFlags) register(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&f.listen, prefix+"listen", federation.DefaultListen, "gRPC listen address of the federation")
	fs.StringVar(&f.httpListen, prefix+"http-listen", federation.DefaultHTTPListen, "HTTP listen address of the federation (REST, /metrics, /healthz, /readyz)")
	fs.DurationVar(&f.checkEvery, prefix+"check-every", time.Second, "how often the federation checks each cluster")
	fs.DurationVar(&f.callTimeout, prefix+"call-timeout", 2*time.Second, "deadline of every call the federation makes to a cluster")
	fs.DurationVar(&f.slowAfter, prefix+"slow-after", time.Second, "a cluster answering a check slower than this is DEGRADED")
	fs.DurationVar(&f.unreachableAfter, prefix+"unreachable-after", 5*time.Second, "a cluster that answered no check for this long is UNREACHABLE")
	fs.DurationVar(&f.jobRetention, prefix+"job-retention", 7*24*time.Hour, "how long a federated job is kept after it is done, when the federation keeps no history")
	fs.DurationVar(&f.finishedJobTTL, prefix+"finished-job-ttl", federation.DefaultFinishedJobTTL, "how long a done federated job stays in etcd before it is moved to the history store (with a history store)")
}

func (f *fedFlags) config(prefix string) (federation.Config, error) {
	for _, a := range []struct{ flag, addr string }{{prefix + "listen", f.listen}, {prefix + "http-listen", f.httpListen}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return federation.Config{}, usageErrorf("invalid --%s %q: want host:port", a.flag, a.addr)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"check-every", f.checkEvery}, {"call-timeout", f.callTimeout}, {"slow-after", f.slowAfter}, {"unreachable-after", f.unreachableAfter}, {"job-retention", f.jobRetention}, {"finished-job-ttl", f.finishedJobTTL}} {
		if d.v <= 0 {
			return federation.Config{}, usageErrorf("invalid --%s%s %s: must be > 0", prefix, d.flag, d.v)
		}
	}
	return federation.Config{Listen: f.listen, HTTPListen: f.httpListen, UI: ui.Handler(ui.Federation), Options: federation.Options{
		CheckEvery: f.checkEvery, CallTimeout: f.callTimeout, SlowAfter: f.slowAfter, UnreachableAfter: f.unreachableAfter,
		JobRetention: f.jobRetention, FinishedJobTTL: f.finishedJobTTL}}, nil
}

// serveFederationCommand is `peloton serve federation`.
func (a *app) serveFederationCommand() *cobra.Command {
	var f fedFlags
	var sec securityFlags
	var endpoints []string
	var etcdTLS etcdTLSFlags
	var logLevel string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "federation --etcd-endpoints URLS",
		Short: "Run the federation (global control plane) as a daemon against an external etcd",
		Long: `Run the federation: the registry of cluster stacks and their health, the
global pool tree split into each cluster's pools, and the dispatch of batch
jobs to clusters. Its state lives in etcd under /peloton/federation/; the
clusters it federates may share that etcd under their own prefixes.
Cluster stacks join it with "peloton serve cluster --federation ADDR", or an
operator registers them with "peloton cluster register".`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rejectClientFlags(cmd); err != nil {
				return err
			}
			cfg, err := f.config("")
			if err != nil {
				return err
			}
			if cfg.Security, err = sec.config(map[string]string{"--listen": f.listen, "--http-listen": f.httpListen}); err != nil {
				return err
			}
			if cfg.Options.ClusterCredentials, err = sec.peer(); err != nil {
				return err
			}
			cfg.EtcdEndpoints = trimAll(endpoints)
			if len(cfg.EtcdEndpoints) == 0 {
				return usageErrorf("missing --etcd-endpoints: the federation keeps its state in an external etcd")
			}
			if cfg.EtcdTLS, err = etcdTLS.config(cfg.EtcdEndpoints); err != nil {
				return err
			}
			if grace < 0 {
				return usageErrorf("invalid --shutdown-grace %s: must be >= 0", grace)
			}
			cfg.ShutdownGrace = grace
			if f.leaderElect {
				lf := serverFlags{leaderElect: true, leaderLease: f.leaderLease, advertiseHost: f.advertiseHost, listen: f.listen}
				if err := lf.checkLeaderFlags(); err != nil {
					return err
				}
				cfg.LeaderElect, cfg.LeaderLease, cfg.AdvertiseHost = true, f.leaderLease, strings.TrimSpace(f.advertiseHost)
			}
			level, err := parseLogLevel(logLevel)
			if err != nil {
				return err
			}
			cfg.Options.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
			var once sync.Once
			cfg.OnReady = func(grpcAddr, httpAddr string) {
				once.Do(func() { fmt.Fprintln(a.stdout, fedReadyLine(grpcAddr, httpAddr, cfg.Security.TLS.Enabled())) })
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			defer survivesSIGHUP()()
			if f.archive != "" {
				h, err := openFederationArchive(ctx, f.archive)
				if err != nil {
					return err
				}
				defer h.Close()
				cfg.History = h
			}
			err = a.runFederation(ctx, cfg)
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	f.register(cmd.Flags(), "")
	cmd.Flags().BoolVar(&f.leaderElect, "leader-elect", false, "campaign for leadership in etcd and run the federation only while leading, so several replicas can run; followers forward their listeners to the leader")
	cmd.Flags().DurationVar(&f.leaderLease, "leader-lease", federation.DefaultLeaderLease, "TTL of the leader's etcd lease (whole seconds, at least 1s; with --leader-elect)")
	cmd.Flags().StringVar(&f.advertiseHost, "advertise-host", "", "address the other replicas reach this one at, on the --listen and --http-listen ports (with --leader-elect; default: the host of --listen, which must then not be a wildcard)")
	cmd.Flags().StringSliceVar(&endpoints, "etcd-endpoints", nil, "external etcd to use (comma-separated URLs; required)")
	etcdTLS.register(cmd.Flags())
	cmd.Flags().StringVar(&f.archive, "archive", "", "the federation's history store: a bbolt file (created if missing) or a PostgreSQL URL (postgres://user:password@host/db); done federated jobs move there after --finished-job-ttl and deleted services when they go. Empty: no history (done jobs are deleted after --job-retention)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().DurationVar(&grace, "shutdown-grace", 10*time.Second, "how long a graceful shutdown may take")
	sec.register(cmd.Flags())
	cmd.SetUsageTemplate(serverUsage)
	return cmd
}

// openFederationArchive opens serve federation's --archive: a PostgreSQL
// URL (postgres:// or postgresql://) or the path of a bbolt file.
func openFederationArchive(ctx context.Context, spec string) (history.Store, error) {
	spec = strings.TrimSpace(spec)
	if strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://") {
		h, err := history.OpenPostgres(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("--archive: %w", err)
		}
		return h, nil
	}
	if spec == "" || strings.Contains(spec, "://") {
		return nil, usageErrorf("invalid --archive %q: want the path of a bbolt file or a postgres:// URL", spec)
	}
	if err := os.MkdirAll(filepath.Dir(spec), 0o700); err != nil {
		return nil, fmt.Errorf("--archive: %w", err)
	}
	h, err := history.OpenBolt(spec)
	if err != nil {
		return nil, fmt.Errorf("--archive: %w", err)
	}
	return h, nil
}

func fedReadyLine(grpcAddr, httpAddr string, tls bool) string {
	http := withScheme(httpAddr)
	if tls {
		http = "https://" + httpAddr
	}
	return fmt.Sprintf("peloton federation is ready: grpc %s, http %s", grpcAddr, http)
}

func trimAll(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseLabels reads k=v,... flag entries into a map, naming the flag.
func parseLabels(flag string, entries []string) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range entries {
		k, v, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usageErrorf("invalid --%s entry %q: want key=value", flag, e)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := federation.ValidateLabels(out, "--"+flag); err != nil {
		return nil, usageErrorf("invalid %s", status.Convert(err).Message())
	}
	return out, nil
}

// parseClusters reads `peloton up --clusters`: a count (3: c1, c2, c3) or
// names (a,b,c).
func parseClusters(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > 16 {
			return nil, usageErrorf("invalid --clusters %d: want 1 to 16 clusters, or their names", n)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = "c" + strconv.Itoa(i+1)
		}
		return names, nil
	}
	var names []string
	seen := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if err := cluster.ValidateClusterName(name); err != nil {
			return nil, usageErrorf("invalid --clusters entry %q: must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", name)
		}
		if seen[name] {
			return nil, usageErrorf("invalid --clusters: %q is named twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	if len(names) > 16 {
		return nil, usageErrorf("invalid --clusters: at most 16 clusters, got %d", len(names))
	}
	return names, nil
}

// shiftPort moves the port of addr by delta; port 0 (a free port) stays 0.
func shiftPort(addr string, delta int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(p+delta))
}

// freeIfZero returns addr with port 0 when like asks for a free port: a
// `peloton up --listen 127.0.0.1:0` (tests, scripts running several) must
// not collide on the federation's fixed default port either.
func freeIfZero(addr, like string, changed bool) string {
	if changed {
		return addr
	}
	if _, port, err := net.SplitHostPort(like); err == nil && port == "0" {
		host, _, _ := net.SplitHostPort(addr)
		return net.JoinHostPort(host, "0")
	}
	return addr
}

// registrar keeps one cluster registered with a federation: it registers
// once the federation's address is known and again every keepAlive, so a
// federation that lost or never had the registration gets it back.
type registrar struct {
	log       *slog.Logger
	fedAddr   <-chan string // receives the federation's address once
	keepAlive time.Duration
	// creds are the TLS files and token the cluster proves itself with.
	creds pclient.Options
}

// keep registers req until ctx ends.
func (r registrar) keep(ctx context.Context, req *pelotonv1.RegisterClusterRequest) {
	var addr string
	select {
	case addr = <-r.fedAddr:
	case <-ctx.Done():
		return
	}
	fed, err := pclient.NewFederation(addr, r.creds)
	if err != nil {
		r.log.Error("cannot reach the federation to register", "federation", addr, "err", err)
		return
	}
	defer fed.Close()
	clusters := fed.Clusters
	registered := false
	failures := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := clusters.RegisterCluster(cctx, req)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && (failures < 3 || failures%30 == 0):
			r.log.Warn("cannot register with the federation; trying again", "federation", addr, "cluster", req.Name, "failures", failures+1, "err", status.Convert(err).Message())
		case err == nil && !registered:
			registered = true
			r.log.Info("registered with the federation", "federation", addr, "cluster", req.Name, "endpoint", req.Endpoint, "state", c.Cluster.GetState())
		}
		// A federation that does not answer is asked again soon at first,
		// then less often (at most every keepAlive), so a cluster without
		// its federation does not fill its log.
		wait := r.keepAlive
		if err != nil {
			failures++
			wait = min(time.Duration(1<<min(failures-1, 5))*time.Second, r.keepAlive)
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// advertised turns a bound address into one the federation can dial: the
// advertise host if set, else the bound host, which must not be a wildcard.
func advertised(addr, advertiseHost string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if advertiseHost != "" {
		host = advertiseHost
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("%s binds every address, so the federation cannot tell where to reach this cluster; set --advertise-host", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// runUp runs `peloton up`: the first cluster (which embeds etcd, unless
// --etcd-endpoints names one), then the federation and the other clusters
// on its etcd, each cluster registered with the federation. On SIGINT or
// SIGTERM everything stops, the first cluster last: its embedded etcd must
// outlive the writes the others make while they stop.
func (a *app) runUp(ctx context.Context, first cluster.Config, names []string, fcfg federation.Config, labels map[string]string, peer pclient.Options) error {
	log := first.Logger
	// One archive for every cluster of this process and the federation
	// (each under its own name): a bolt file can be opened once.
	if first.History == nil {
		h, err := cluster.OpenArchive(ctx, first.Archive, first.DataDir, log)
		if err != nil {
			return err
		}
		if h != nil {
			defer h.Close()
			first.History = h
			fcfg.History = h
		}
	}
	// Every cluster's federated services ask the federation's global SLA
	// evaluator, once it serves (until then, and whenever it is away, each
	// cluster decides on its share).
	slaRouters := &upRouters{creds: peer}
	defer slaRouters.close()
	first.SLA = slaRouters.add(first)
	fedAddr := make(chan string, len(names))
	others, stopOthers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOthers()
	var wg sync.WaitGroup
	errs := make(chan error, len(names)+1)
	reg := registrar{log: log, fedAddr: fedAddr, keepAlive: 10 * time.Second, creds: peer}
	var readyMu sync.Mutex
	ready := func(info cluster.ReadyInfo, dataDir string) {
		readyMu.Lock()
		defer readyMu.Unlock()
		fmt.Fprintln(a.stdout, readyLine(info, dataDir))
	}
	register := func(info cluster.ReadyInfo) {
		endpoint, _ := advertised(info.GRPCAddr, "")
		httpEndpoint, _ := advertised(info.HTTPAddr, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			reg.keep(others, &pelotonv1.RegisterClusterRequest{Name: info.ClusterName, Endpoint: endpoint,
				HttpEndpoint: httpEndpoint, Labels: labels, Replace: true})
		}()
	}
	var firstOnce sync.Once
	first.OnReady = func(info cluster.ReadyInfo) {
		firstOnce.Do(func() {
			ready(info, first.DataDir)
			a.startRest(others, &wg, errs, info.EtcdEndpoints, first, names[1:], fcfg, fedAddr, ready, register, slaRouters)
			register(info)
		})
	}
	firstCtx, stopFirst := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFirst()
	firstDone := make(chan error, 1)
	go func() { firstDone <- a.runCluster(firstCtx, first) }()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-firstDone:
		firstDone <- runErr
	case runErr = <-errs:
	}
	// Stop the federation and the other clusters, then the first.
	stopOthers()
	wg.Wait()
	stopFirst()
	if err := <-firstDone; runErr == nil {
		runErr = err
	}
	close(errs)
	for err := range errs {
		if runErr == nil && err != nil && !errors.Is(err, context.Canceled) {
			runErr = err
		}
	}
	if errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	return runErr
}

// startRest starts the federation and the clusters after the first, on
// the first's etcd.
func (a *app) startRest(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, endpoints []string, first cluster.Config,
	names []string, fcfg federation.Config, fedAddr chan<- string, ready func(cluster.ReadyInfo, string), register func(cluster.ReadyInfo),
	routers *upRouters) {
	fcfg.EtcdEndpoints, fcfg.EtcdTLS = endpoints, first.EtcdTLS
	if fcfg.Options.Logger == nil {
		fcfg.Options.Logger = first.Logger.With("component", "federation")
	}
	fcfg.ShutdownGrace = first.ShutdownGrace
	fcfg.OnReady = func(grpcAddr, httpAddr string) {
		fmt.Fprintln(a.stdout, fedReadyLine(grpcAddr, httpAddr, fcfg.Security.TLS.Enabled()))
		routers.connect(ctx, grpcAddr, first.Logger)
		for range len(names) + 1 {
			fedAddr <- grpcAddr
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.runFederation(ctx, fcfg); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("federation: %w", err)
		}
	}()
	for i, name := range names {
		cfg := first
		cfg.ClusterName = name
		cfg.EtcdEndpoints, cfg.EtcdListen = endpoints, ""
		cfg.DataDir = filepath.Join(first.DataDir, "clusters", name)
		cfg.Listen = shiftPort(first.Listen, 10*(i+1))
		cfg.HTTPListen = shiftPort(first.HTTPListen, 10*(i+1))
		cfg.Logger = first.Logger.With("cluster", name)
		cfg.SLA = routers.add(cfg)
		var once sync.Once
		cfg.OnReady = func(info cluster.ReadyInfo) {
			once.Do(func() { ready(info, cfg.DataDir); register(info) })
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.runCluster(ctx, cfg); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("cluster %s: %w", name, err)
			}
		}()
	}
}

// upRouters are the SLA routers of `peloton up`'s clusters: each decides
// alone until the federation serves, then asks it about federated
// services.
type upRouters struct {
	mu      sync.Mutex
	routers []*fed.Router
	fc      *pclient.Federation
	stop    context.CancelFunc
	// creds are how the clusters prove themselves to the federation.
	creds pclient.Options
}

func (u *upRouters) add(cfg cluster.Config) *fed.Router {
	r := fed.New(sla.NewLocal(nil), nil, cfg.ClusterName, cfg.Logger)
	u.mu.Lock()
	u.routers = append(u.routers, r)
	u.mu.Unlock()
	return r
}

// connect points every router at the federation at addr.
func (u *upRouters) connect(ctx context.Context, addr string, log *slog.Logger) {
	o := u.creds
	o.Timeout = 5 * time.Second
	fc, err := pclient.NewFederation(addr, o)
	if err != nil {
		log.Warn("cannot reach the federation's SLA evaluator; clusters decide federated services' disruptions alone", "err", err)
		return
	}
	rctx, stop := context.WithCancel(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fc, u.stop = fc, stop
	for _, r := range u.routers {
		r.SetRemote(fc.SLA)
		go r.Run(rctx)
	}
}

func (u *upRouters) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stop != nil {
		u.stop()
	}
	if u.fc != nil {
		_ = u.fc.Close()
	}
}
