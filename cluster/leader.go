package cluster

// Leader election of the cluster stack.
//
// The election itself is internal/election's, on this cluster's key
// (<cluster prefix>leader/cluster, so clusters sharing one etcd elect
// independently). This file is what is specific to the stack: the leader
// runs it with every write fenced to its term (store.Fence) and its engines
// stopping the moment the term ends; a follower keeps the configured
// listeners open and forwards them to the leader, whose addresses it reads
// from the election value: raw TCP for gRPC, a reverse proxy for HTTP except
// /healthz, which it answers itself. So a Service in front of every replica
// always reaches the leader, and probes see each replica as alive.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/peloton-sched/peloton/internal/election"
	"github.com/peloton-sched/peloton/internal/store"
)

// LeaderKey is the election's key prefix under the cluster's prefix (see
// Config.Prefix): each cluster elects its own leader.
const LeaderKey = "leader/cluster"

// DefaultLeaderLease is the TTL of the leader's lease when Config leaves it 0.
const DefaultLeaderLease = election.DefaultLease

// forwardDialTimeout bounds a follower's dial to the leader.
const forwardDialTimeout = 3 * time.Second

// term is one term of leadership, as runStack needs it.
type term struct {
	// lease ends when the session does.
	lease context.Context
	fence store.Fence
	// beforeListen frees the addresses the follower held.
	beforeListen func()
}

// storeFence is the fence of the term's writes; nil without a term.
func (t *term) storeFence() *store.Fence {
	if t == nil {
		return nil
	}
	f := t.fence
	return &f
}

// leaderInfo is the election value: who leads and where its listeners are.
// The addresses are empty until the leader's stack serves.
type leaderInfo struct {
	ID   string `json:"id"`
	GRPC string `json:"grpc,omitempty"`
	HTTP string `json:"http,omitempty"`
}

func (l leaderInfo) String() string {
	b, _ := json.Marshal(l)
	return string(b)
}

func parseLeaderInfo(v []byte) *leaderInfo {
	var l leaderInfo
	if json.Unmarshal(v, &l) != nil {
		return &leaderInfo{ID: string(v)}
	}
	return &l
}

// elector is the stack-specific side of one process's candidacy: the
// follower between terms, the stack during one. Its fields other than
// leader are used only by the goroutine of runElected.
type elector struct {
	cfg Config
	log *slog.Logger

	// leader is who leads as this process last saw it; nil: unknown.
	leader atomic.Pointer[leaderInfo]
	fol    *follower
}

// runElected campaigns until ctx ends, running the stack while it leads.
func runElected(ctx context.Context, cfg Config) error {
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("leader election needs an external etcd (--etcd-endpoints)")
	}
	if _, err := election.LeaseSeconds(cfg.LeaderLease); err != nil {
		return err
	}
	if cfg.AdvertiseHost == "" {
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w", cfg.Listen, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("leader election: --listen %s binds every address, so the other replicas cannot tell where to reach this one; set --advertise-host", cfg.Listen)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: store.DefaultDialTimeout, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	defer cli.Close()
	e := &elector{cfg: cfg, log: cfg.Logger.With("component", "leader")}
	defer e.stopFollower()
	err = election.Run(ctx, election.Config{
		Client: cli,
		Key:    cfg.Prefix() + LeaderKey,
		Lease:  cfg.LeaderLease,
		Value:  func(id string) string { return leaderInfo{ID: id}.String() },
		OnLeader: func(v []byte) {
			l := parseLeaderInfo(v)
			e.leader.Store(l)
			e.log.Info("following", "leader", l.ID, "grpc", l.GRPC, "http", l.HTTP)
		},
		// The addresses are held again before any pause, so /healthz
		// answers throughout.
		BeforeCampaign: e.startFollower,
		Logger:         e.log,
	}, e.lead)
	if errors.Is(err, election.ErrStoppedWhileLeading) {
		return errors.New("the cluster stack stopped while leading")
	}
	return err
}

// startFollower holds the stack's addresses unless the follower already
// does.
func (e *elector) startFollower() error {
	if e.fol != nil {
		return nil
	}
	fol, err := startFollower(e.cfg, e.log, e.leader.Load)
	if err != nil {
		return err
	}
	e.fol = fol
	return nil
}

// lead runs the stack for one term.
func (e *elector) lead(ctx context.Context, t *election.Term) error {
	// Until the stack serves, the follower answers for this process.
	e.leader.Store(&leaderInfo{ID: t.ID})
	defer e.leader.Store(nil)
	e.log.Info("leading; starting the cluster stack", "id", t.ID, "revision", t.Revision)
	if e.cfg.OnLeading != nil {
		e.cfg.OnLeading(true)
		defer e.cfg.OnLeading(false)
	}

	cfg := e.cfg
	cfg.OnReady = func(info ReadyInfo) {
		me := leaderInfo{ID: t.ID, GRPC: e.advertise(info.GRPCAddr), HTTP: e.advertise(info.HTTPAddr)}
		if err := t.Proclaim(ctx, me.String()); err != nil {
			e.log.Warn("cannot publish this leader's addresses; followers cannot forward to it", "err", err)
		}
		if e.cfg.OnReady != nil {
			e.cfg.OnReady(info)
		}
	}
	return runStack(ctx, cfg, &term{lease: t.Lease, fence: store.Fence{Key: t.Key, Revision: t.Revision}, beforeListen: e.stopFollower})
}

// advertise turns a bound address into one other replicas can dial.
func (e *elector) advertise(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if e.cfg.AdvertiseHost != "" {
		host = e.cfg.AdvertiseHost
	}
	return net.JoinHostPort(host, port)
}

func (e *elector) stopFollower() {
	if e.fol != nil {
		e.fol.close()
		e.fol = nil
	}
}

// follower holds the stack's addresses while this process does not lead:
// /healthz is answered here, everything else goes to the leader.
type follower struct {
	log    *slog.Logger
	leader func() *leaderInfo
	grpc   net.Listener
	http   net.Listener
	hs     *http.Server

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

type targetKey struct{}

func startFollower(cfg Config, log *slog.Logger, leader func() *leaderInfo) (*follower, error) {
	gl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s (--listen): %w", cfg.Listen, err)
	}
	hl, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("listen %s (--http-listen): %w", cfg.HTTPListen, err)
	}
	f := &follower{log: log, leader: leader, grpc: gl, http: hl, conns: map[net.Conn]struct{}{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(targetKey{}).(string)
			r.SetXForwarded()
		},
		// Log streams must reach the client as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "peloton: the leader did not answer: "+err.Error(), http.StatusBadGateway)
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		l := leader()
		if l == nil {
			_, _ = io.WriteString(w, "ok (following; no leader known yet)\n")
			return
		}
		_, _ = fmt.Fprintf(w, "ok (following %s)\n", l.ID)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if l := leader(); l != nil {
			_, _ = fmt.Fprintf(w, "ok (following %s)\n", l.ID)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: following, and no leader is known\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		l := leader()
		if l == nil || l.HTTP == "" {
			http.Error(w, "peloton: no leader is serving yet; try again shortly", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, l.HTTP)))
	})
	f.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		_ = f.hs.Serve(hl)
	}()
	go func() {
		defer f.wg.Done()
		f.serveTCP(gl)
	}()
	log.Info("follower listening", "grpc", gl.Addr().String(), "http", hl.Addr().String())
	return f, nil
}

// serveTCP forwards every connection to the leader's gRPC address.
func (f *follower) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c)
		}()
	}
}

// forward pipes c to the leader until either side closes. Without a leader
// it closes c: gRPC clients see an unavailable server and retry.
func (f *follower) forward(c net.Conn) {
	defer f.untrack(c)
	l := f.leader()
	if l == nil || l.GRPC == "" {
		return
	}
	up, err := net.DialTimeout("tcp", l.GRPC, forwardDialTimeout)
	if err != nil {
		f.log.Debug("forward to the leader", "leader", l.ID, "err", err)
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		// Either side ending ends both.
		up.Close()
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	up.Close()
	c.Close()
	<-done
}

func (f *follower) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *follower) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// close frees the addresses and cuts every forwarded connection; it returns
// once nothing of the follower runs.
func (f *follower) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.grpc.Close()
	_ = f.hs.Close()
	f.wg.Wait()
}
