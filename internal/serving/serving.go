// Package serving runs the listeners of a Peloton daemon (the cluster
// stack, the federation) the one way they are secured: gRPC and HTTP, with
// TLS (reloaded when the files change) and mutual TLS if configured; an
// in-memory gRPC listener that the daemon's REST gateway and its own
// components (host agents, advisor) call through, never on a socket; the
// guard (internal/auth) on both; an optional plain admin listener for
// /metrics and the probes. It also refuses to expose an unsecured listener
// beyond loopback unless told to.
package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // clients may compress; limits apply to the decompressed size
	"google.golang.org/grpc/test/bufconn"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/restgw"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// Security is how a daemon's listeners are secured. The zero value is
// plaintext and unauthenticated: the development mode of `peloton up`,
// which CheckExposure allows on loopback only.
type Security struct {
	// TLS are the listeners' certificate and key and, for mutual TLS, the
	// CA of the clients' certificates.
	TLS tlsfiles.Server
	// Auth configures authentication, authorization, the audit log, rate
	// limits and handler deadlines. ClientCerts is implied by
	// TLS.ClientCAFile.
	Auth auth.Config
	// MaxRequestBytes bounds every request, gRPC (after decompression) or
	// REST; 0 keeps the daemon's default.
	MaxRequestBytes int
	// AdminListen, if set, serves /metrics, /healthz and /readyz in
	// plaintext without authentication, for scrapers and probes on a
	// network the operator keeps apart.
	AdminListen string
	// Insecure allows listeners beyond loopback without TLS and
	// authentication (see CheckExposure).
	Insecure bool
}

// Authenticating says whether callers must prove who they are.
func (s Security) Authenticating() bool { return s.Auth.TokenFile != "" || s.TLS.ClientCAFile != "" }

// CheckExposure refuses a listener that other machines can reach unless it
// serves TLS and authenticates its callers, or Insecure says the operator
// accepts the risk. addrs maps each listener's flag to its address.
func CheckExposure(s Security, addrs map[string]string) error {
	if s.Insecure {
		return nil
	}
	for _, flag := range slices.Sorted(maps.Keys(addrs)) {
		addr := addrs[flag]
		if Loopback(addr) {
			continue
		}
		var missing []string
		if !s.TLS.Enabled() {
			missing = append(missing, "TLS (--tls-cert-file, --tls-key-file)")
		}
		if !s.Authenticating() {
			missing = append(missing, "authentication (--auth-token-file or --client-ca-file)")
		}
		if len(missing) == 0 {
			continue
		}
		what := missing[0]
		if len(missing) == 2 {
			what = missing[0] + " and no " + missing[1]
		}
		return fmt.Errorf("%s %s is reachable from other machines but has no %s: anyone who reaches it could run, kill and rewrite everything; secure it, bind it to 127.0.0.1, or pass --insecure to accept that", flag, addr, what)
	}
	return nil
}

// Loopback says whether a listen address binds loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// API is what a daemon serves.
type API struct {
	// GRPCServer returns a gRPC server with the daemon's services and its
	// own interceptors (metrics, error mapping), with opts after them.
	GRPCServer func(opts ...grpc.ServerOption) *grpc.Server
	// HTTPHandler returns the daemon's HTTP handler (REST through
	// grpcAddr, probes, UI in extra), changed by opts.
	HTTPHandler func(ctx context.Context, grpcAddr string, extra http.Handler, opts ...restgw.Option) (http.Handler, error)
	// Rules say who may call each method; every method served needs one.
	Rules auth.Rules
	// Extra serves every other HTTP path (the web UI).
	Extra http.Handler
	// Ready is the readiness check of the admin listener's /readyz.
	Ready func(context.Context) error
}

// Server is a daemon's running listeners.
type Server struct {
	GRPC     *grpc.Server
	Internal *grpc.Server
	HTTP     *http.Server
	Admin    *http.Server
	Guard    *auth.Guard
	// AdminAddr is the admin listener's address, if there is one.
	AdminAddr string

	mem      *bufconn.Listener
	errs     chan error
	stopHUP  func()
	log      *slog.Logger
	tlsOn    bool
	grpcLis  net.Listener
	httpLis  net.Listener
	adminLis net.Listener
}

// memAddr names the in-memory listener in gRPC targets and logs.
const memAddr = "peloton-in-process"

// Start serves api on grpcLis and httpLis (which it owns from now on),
// secured as sec says. The servers run until Shutdown; Err reports one that
// stopped on its own.
func Start(ctx context.Context, api API, sec Security, grpcLis, httpLis net.Listener, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	closeAll := func() {
		grpcLis.Close()
		httpLis.Close()
	}
	ac := sec.Auth
	ac.ClientCerts = sec.TLS.ClientCAFile != ""
	if ac.Log == nil {
		ac.Log = log
	}
	guard, err := auth.New(ac, api.Rules)
	if err != nil {
		closeAll()
		return nil, err
	}
	s := &Server{Guard: guard, mem: bufconn.Listen(1 << 20), errs: make(chan error, 3), log: log, grpcLis: grpcLis, httpLis: httpLis}
	var opts []grpc.ServerOption
	if sec.MaxRequestBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(sec.MaxRequestBytes))
	}
	var httpTLS *tls.Config
	if sec.TLS.Enabled() {
		grpcTLS, err := tlsfiles.ServerConfig(sec.TLS, []string{"h2"}, log)
		if err == nil {
			httpTLS, err = tlsfiles.ServerConfig(sec.TLS, []string{"h2", "http/1.1"}, log)
		}
		if err != nil {
			closeAll()
			guard.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		s.tlsOn = true
		s.GRPC = api.GRPCServer(append(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(grpcTLS))}, opts...), guard.ServerOptions()...)...)
	} else {
		s.GRPC = api.GRPCServer(append(opts, guard.ServerOptions()...)...)
	}
	s.Internal = api.GRPCServer(append(opts, guard.Internal().ServerOptions()...)...)
	if err := api.Rules.Check(methods(s.GRPC)); err != nil {
		closeAll()
		guard.Close()
		return nil, err
	}
	handler, err := api.HTTPHandler(ctx, memAddr, api.Extra, func(o *restgw.Options) {
		o.Dial = func(ctx context.Context, _ string) (net.Conn, error) { return s.mem.DialContext(ctx) }
		o.Guard = guard
		if sec.MaxRequestBytes > 0 {
			o.MaxRequestBytes = sec.MaxRequestBytes
		}
	})
	if err != nil {
		closeAll()
		guard.Close()
		return nil, err
	}
	// A request's body must arrive within ReadTimeout and an idle
	// keep-alive connection goes after IdleTimeout, so slow or idle
	// clients cannot hold connections; answers are not bounded (logs
	// followed and the UI's event streams last as long as the client).
	s.HTTP = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute, TLSConfig: httpTLS,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if sec.AdminListen != "" {
		al, err := net.Listen("tcp", sec.AdminListen)
		if err != nil {
			closeAll()
			guard.Close()
			return nil, fmt.Errorf("listen %s (--admin-listen): %w", sec.AdminListen, err)
		}
		if !Loopback(sec.AdminListen) {
			log.Warn("the admin listener serves /metrics without TLS or authentication beyond loopback", "address", sec.AdminListen)
		}
		s.adminLis, s.AdminAddr = al, al.Addr().String()
		s.Admin = &http.Server{Handler: restgw.AdminHandler(api.Ready), ReadHeaderTimeout: 10 * time.Second}
		go func() { s.errs <- serveHTTP(s.Admin, al, false) }()
	}
	go func() { s.errs <- s.GRPC.Serve(grpcLis) }()
	go func() { s.errs <- serveHTTP(s.HTTP, httpLis, s.tlsOn) }()
	go func() { _ = s.Internal.Serve(s.mem) }()
	s.stopHUP = reopenOnHUP(guard, log)
	return s, nil
}

func serveHTTP(hs *http.Server, l net.Listener, tlsOn bool) error {
	var err error
	if tlsOn {
		err = hs.ServeTLS(l, "", "")
	} else {
		err = hs.Serve(l)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// reopenOnHUP reopens the audit log on SIGHUP, after the operator rotated
// it.
func reopenOnHUP(g *auth.Guard, log *slog.Logger) func() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				if err := g.ReopenAudit(); err != nil {
					log.Error("cannot reopen the audit log", "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

func methods(g *grpc.Server) []string {
	var out []string
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			out = append(out, "/"+svc+"/"+m.Name)
		}
	}
	return out
}

// Err reports a listener that stopped serving on its own.
func (s *Server) Err() <-chan error { return s.errs }

// TLS says whether the listeners serve TLS.
func (s *Server) TLS() bool { return s.tlsOn }

// InProcess opens a connection of one of the daemon's own components to
// its API over the in-memory listener, as principal (auth.Principal*).
func (s *Server) InProcess(principal string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+memAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.mem.DialContext(ctx) }),
		auth.InProcess(principal))
}

// Shutdown stops taking calls and waits for those in flight until ctx
// ends, then cuts them.
func (s *Server) Shutdown(ctx context.Context) {
	s.stopHUP()
	_ = s.HTTP.Shutdown(ctx)
	if s.Admin != nil {
		_ = s.Admin.Shutdown(ctx)
	}
	stopped := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); s.Internal.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.GRPC.Stop()
		s.Internal.Stop()
	}
	_ = s.Guard.Close()
}
