package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
)

// Default addresses of the federation's API.
const (
	DefaultListen     = "127.0.0.1:5392"
	DefaultHTTPListen = "127.0.0.1:5292"
)

// Config configures one federation process.
type Config struct {
	// EtcdEndpoints is the etcd cluster the federation keeps its state in
	// (under Prefix); clusters may share it under their own prefixes.
	EtcdEndpoints []string
	// Listen is the gRPC address; HTTPListen serves REST, /metrics,
	// /healthz and /readyz.
	Listen, HTTPListen string
	// Options tune the workers.
	Options Options
	// ShutdownGrace bounds graceful shutdown (default 10s).
	ShutdownGrace time.Duration
	// OnReady, if set, is called with the bound addresses once both
	// listeners serve.
	OnReady func(grpcAddr, httpAddr string)
}

// Run serves the federation until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Options.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		cfg.Options.Logger = log
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
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: cfg.EtcdEndpoints, Prefix: Prefix})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	defer st.Close()
	f := New(st, cfg.Options)
	if err := f.Start(ctx); err != nil {
		return err
	}
	defer f.Close()

	srv := NewServer(f, log)
	srv.SetReadiness(func(ctx context.Context) error {
		if _, err := st.Get(ctx, "ready-probe"); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("the store (etcd) does not answer: %w", err)
		}
		return nil
	})
	grpcLis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s (--federation-listen): %w", cfg.Listen, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen %s (--federation-http-listen): %w", cfg.HTTPListen, err)
	}
	gs := srv.GRPCServer()
	handler, err := srv.HTTPHandler(ctx, grpcLis.Addr().String())
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 2)
	go func() { serveErr <- gs.Serve(grpcLis) }()
	go func() { serveErr <- hs.Serve(httpLis) }()
	log.Info("federation is serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "clusters", len(f.List()))
	if cfg.OnReady != nil {
		cfg.OnReady(grpcLis.Addr().String(), httpLis.Addr().String())
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("federation server stopped: %w", err)
		}
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	_ = hs.Shutdown(shutCtx)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		gs.Stop()
	}
	return runErr
}
