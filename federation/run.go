package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/etcdtls"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/replica"
	"github.com/peloton-sched/peloton/internal/restgw"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// Default addresses of the federation's API.
const (
	DefaultListen     = "127.0.0.1:5392"
	DefaultHTTPListen = "127.0.0.1:5292"
)

// LeaderKey is the federation's election key under Prefix, as
// cluster.LeaderKey is a cluster's under its own: each candidate's key is
// Prefix + LeaderKey + "/<lease id>", beside the federation's clusters/,
// pools/ and jobs/.
const LeaderKey = "leader"

// DefaultLeaderLease is the TTL of the leader's lease when Config leaves it 0.
const DefaultLeaderLease = replica.DefaultLease

// Config configures one federation process.
type Config struct {
	// EtcdEndpoints is the etcd cluster the federation keeps its state in
	// (under Prefix); clusters may share it under their own prefixes.
	EtcdEndpoints []string
	// EtcdTLS names the files of the etcd clients' TLS (the server's CA,
	// a client certificate); empty: as the endpoints' schemes say. Files
	// replaced while the federation runs are read again (etcdtls).
	EtcdTLS tlsfiles.Client
	// Listen is the gRPC address; HTTPListen serves REST, /metrics,
	// /healthz and /readyz.
	Listen, HTTPListen string
	// UI, if set, serves the web UI on the HTTP listener's other paths.
	UI http.Handler
	// Options tune the workers.
	Options Options
	// History is the archive the federation keeps its history in
	// (Options.History; set either): `peloton up` passes the store its
	// clusters archive to, `serve federation` the one --archive opens.
	// nil: no archive. Run does not close it.
	History history.Store
	// Security secures both listeners (internal/serving); the zero value
	// is plaintext with everyone allowed everything.
	Security serving.Security
	// ShutdownGrace bounds graceful shutdown (default 10s).
	ShutdownGrace time.Duration
	// OnReady, if set, is called with the bound addresses once both
	// listeners serve. With LeaderElect, that is each time this process
	// starts to lead.
	OnReady func(grpcAddr, httpAddr string)

	// LeaderElect lets several processes serve one federation: each
	// campaigns in etcd (key Prefix+LeaderKey) and only the leader runs
	// the federation - its workers and its API - with every write fenced
	// to its term; the others hold Listen and HTTPListen and forward them
	// to the leader, answering /healthz themselves. A new leader starts
	// from etcd, as after a restart.
	LeaderElect bool
	// LeaderLease is the TTL of the leader's etcd lease, rounded up to
	// whole seconds (default 15s): how long a leader that died without
	// resigning holds the federation up, and the longest a partitioned
	// leader can take to notice.
	LeaderLease time.Duration
	// AdvertiseHost is the address (IP or DNS name) other replicas reach
	// this process at, on the ports of Listen and HTTPListen. Empty means
	// the host of Listen, which then must not be a wildcard (0.0.0.0, ::).
	AdvertiseHost string
	// OnLeading, if set, is called with true when this process has won the
	// election, before the federation starts, and with false once it has
	// stopped (LeaderElect only).
	OnLeading func(leading bool)
}

// Run serves the federation until ctx ends. With cfg.LeaderElect it
// campaigns in etcd first and serves only while it leads.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Options.Logger == nil {
		cfg.Options.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("federation: etcd endpoints (--etcd-endpoints) must not be empty")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.HTTPListen == "" {
		cfg.HTTPListen = DefaultHTTPListen
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	tlsCfg, err := etcdtls.Config(cfg.EtcdTLS, cfg.EtcdEndpoints, cfg.Options.Logger)
	if err != nil {
		return err
	}
	if cfg.LeaderElect {
		return runElected(ctx, cfg, tlsCfg)
	}
	return serve(ctx, cfg, tlsCfg, nil, nil)
}

// runElected campaigns until ctx ends, serving the federation while it
// leads.
func runElected(ctx context.Context, cfg Config, tlsCfg *tls.Config) error {
	log := cfg.Options.Logger.With("component", "federation-leader")
	rc := replica.Config{
		EtcdEndpoints: cfg.EtcdEndpoints,
		EtcdTLS:       tlsCfg,
		Key:           Prefix + LeaderKey,
		Lease:         cfg.LeaderLease,
		Listen:        cfg.Listen,
		HTTPListen:    cfg.HTTPListen,
		TLS:           cfg.Security.TLS.Enabled(),
		AdminListen:   cfg.Security.AdminListen,
		AdvertiseHost: cfg.AdvertiseHost,
		// Flags: replica's defaults (--listen, --http-listen,
		// --advertise-host), the names `peloton serve federation` uses;
		// replicas of the federation run there, not in `peloton up`.
		Logger: log,
	}
	err := replica.Run(ctx, rc, func(ctx context.Context, t *replica.Term, handOver func()) error {
		log.Info("leading; starting the federation", "id", t.ID, "revision", t.Fence.Revision)
		if cfg.OnLeading != nil {
			cfg.OnLeading(true)
			defer cfg.OnLeading(false)
		}
		return serve(ctx, cfg, tlsCfg, t, handOver)
	})
	if errors.Is(err, replica.ErrStoppedWhileLeading) {
		return errors.New("the federation stopped while leading")
	}
	return err
}

// serve is Run without leader election. tlsCfg is the etcd client's TLS
// (nil: none). t, if not nil, is the term it
// serves in: its writes are fenced to the leader key, its workers stop the
// moment the lease is lost, and handOver frees the follower's addresses
// just before its own listeners bind them.
func serve(ctx context.Context, cfg Config, tlsCfg *tls.Config, t *replica.Term, handOver func()) error {
	log := cfg.Options.Logger
	var fence *store.Fence
	if t != nil {
		fence = &t.Fence
	}
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: cfg.EtcdEndpoints, Prefix: Prefix, Fence: fence, TLS: tlsCfg})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	defer st.Close()
	if cfg.History != nil {
		cfg.Options.History = cfg.History
	}
	f := New(st, cfg.Options)
	if err := f.Start(ctx); err != nil {
		return err
	}
	// Close once, from whichever comes first: the end of the lease or the
	// end of serve.
	closeFed := sync.OnceFunc(f.Close)
	defer closeFed()
	if t != nil {
		// A deposed leader's workers must not go on repairing clusters
		// while its API drains (their writes would fail on the fence, but
		// their calls to the clusters would not).
		defer context.AfterFunc(t.Lease, closeFed)()
	}

	srv := NewServer(f, log)
	srv.SetReadiness(func(ctx context.Context) error {
		// Reading the quarantine also tells whether the store answers.
		quarantined, err := quarantine.List(ctx, st, "")
		if err != nil {
			return fmt.Errorf("the store (etcd) does not answer: %w", err)
		}
		if len(quarantined) > 0 {
			// Still ready: it serves all else (internal/restgw.Degraded).
			return &restgw.Degraded{Reason: fmt.Sprintf("%d records in quarantine; the federation runs without them (docs/operations.md, Quarantined records)", len(quarantined)),
				Items: quarantined}
		}
		return nil
	})
	// The UI's live updates (/v1/events) watch every key of the federation.
	srv.SetWatch(func(ctx context.Context) <-chan int64 { return st.Watch(ctx, "") })
	if handOver != nil {
		handOver()
	}
	grpcLis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s (--federation-listen): %w", cfg.Listen, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen %s (--federation-http-listen): %w", cfg.HTTPListen, err)
	}
	served, err := serving.Start(ctx, serving.API{GRPCServer: srv.GRPCServer, HTTPHandler: srv.HTTPHandler, Rules: srv.Rules(),
		Extra: cfg.UI, Ready: srv.Ready}, cfg.Security, grpcLis, httpLis, log)
	if err != nil {
		return err
	}
	log.Info("federation is serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "clusters", len(f.List()))
	if t != nil {
		t.Serving(grpcLis.Addr().String(), httpLis.Addr().String())
	}
	if cfg.OnReady != nil {
		cfg.OnReady(grpcLis.Addr().String(), httpLis.Addr().String())
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-served.Err():
		runErr = fmt.Errorf("federation server stopped: %w", err)
	}
	srv.EndStreams() // the UI's event streams would hold up the graceful stop
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	served.Shutdown(shutCtx)
	return runErr
}
