package cluster

// Leader election of the cluster stack.
//
// Every replica campaigns for one key prefix in etcd through an etcd
// concurrency.Election on its own session (a lease of LeaderLease). The one
// whose key is oldest leads and runs the stack; every write of that stack is
// fenced to its key (store.Fence), and the stack's engines stop the moment
// the session ends. A follower keeps the configured listeners open and
// forwards them to the leader, whose addresses it reads from the election
// value: raw TCP for gRPC, a reverse proxy for HTTP except /healthz, which
// it answers itself. So a Service in front of every replica always reaches
// the leader, and probes see each replica as alive.
//
// Handover: a leader that stops (SIGTERM) revokes its lease once its stack
// has stopped, so the next candidate leads at once. A leader that dies holds
// the key until its lease expires. A leader cut off from etcd sees its
// session end when the etcd client gives up on the lease (its TTL after the
// last renewal it saw); etcd may have handed the key over a little earlier,
// which is why the fence, not this notice, is what keeps two leaders from
// writing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/peloton-sched/peloton/internal/store"
)

// LeaderKey is the election's key prefix, under the store's prefix.
const LeaderKey = "leader/cluster"

// DefaultLeaderLease is the TTL of the leader's lease when Config leaves it 0.
const DefaultLeaderLease = 15 * time.Second

const (
	// electionRequestTimeout bounds each etcd call of the election itself
	// (grant, check, revoke); campaigning waits as long as it must.
	electionRequestTimeout = 5 * time.Second
	// forwardDialTimeout bounds a follower's dial to the leader.
	forwardDialTimeout = 3 * time.Second
	// observeRetry is the pause before watching the leader again after the
	// watch broke (etcd unreachable).
	observeRetry = time.Second
)

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

// LeaseSeconds checks a LeaderLease and returns it in whole seconds, the
// unit of etcd leases (0 means DefaultLeaderLease).
func LeaseSeconds(d time.Duration) (int, error) {
	if d == 0 {
		d = DefaultLeaderLease
	}
	if d < time.Second {
		return 0, fmt.Errorf("leader lease %s: must be at least 1s", d)
	}
	if d > time.Hour {
		return 0, fmt.Errorf("leader lease %s: must be at most 1h", d)
	}
	return int(math.Ceil(d.Seconds())), nil
}

// elector runs the campaign loop of one process. Its fields other than
// leader are used only by the goroutine of runElected.
type elector struct {
	cfg    Config
	log    *slog.Logger
	cli    *clientv3.Client
	ttl    int
	prefix string

	// leader is who leads as this process last saw it; nil: unknown.
	leader atomic.Pointer[leaderInfo]
	fol    *follower
}

// runElected campaigns until ctx ends, running the stack while it leads.
func runElected(ctx context.Context, cfg Config) error {
	if len(cfg.EtcdEndpoints) == 0 {
		return errors.New("leader election needs an external etcd (--etcd-endpoints)")
	}
	ttl, err := LeaseSeconds(cfg.LeaderLease)
	if err != nil {
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
	e := &elector{cfg: cfg, log: cfg.Logger.With("component", "leader"), cli: cli, ttl: ttl, prefix: store.DefaultPrefix + LeaderKey}
	defer e.stopFollower()
	return e.run(ctx)
}

func (e *elector) run(ctx context.Context) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 10 * time.Second}
	retry := false
	for ctx.Err() == nil {
		// The addresses are held again before any pause, so /healthz
		// answers throughout.
		if e.fol == nil {
			fol, err := startFollower(e.cfg, e.log, e.leader.Load)
			if err != nil {
				return err
			}
			e.fol = fol
		}
		if retry {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff.Step()):
			}
		}
		retry = true
		sess, err := e.newSession(ctx)
		if err != nil {
			e.log.Warn("cannot open an etcd session to campaign; retrying", "err", err)
			continue
		}
		id := fmt.Sprintf("%s/%x", hostname(), sess.Lease())
		el, err := e.campaign(ctx, sess, id)
		if err != nil {
			e.endSession(sess)
			if ctx.Err() == nil {
				e.log.Warn("campaign ended without leading; campaigning again", "err", err)
			}
			continue
		}
		backoff.Duration = 500 * time.Millisecond
		err = e.lead(ctx, sess, el, id)
		lost := sess.Ctx().Err() != nil
		e.endSession(sess)
		switch {
		case ctx.Err() != nil:
			// Stopped as asked; a stack cut short while starting says
			// "context canceled", which is no failure.
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case lost:
			e.log.Warn("the cluster stack stopped after the leader lease was lost; campaigning again", "err", err)
		case err != nil:
			return err
		default:
			return errors.New("the cluster stack stopped while leading")
		}
	}
	return nil
}

// newSession grants a lease and keeps it alive until endSession. The grant
// is bounded; the keep-alive is not tied to ctx so that endSession can still
// revoke the lease after ctx ended.
func (e *elector) newSession(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, electionRequestTimeout)
	defer cancel()
	g, err := e.cli.Grant(gctx, int64(e.ttl))
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(e.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(e.ttl),
		concurrency.WithContext(context.Background()))
}

// endSession stops the keep-alive and revokes the lease, which deletes this
// process's election key: the next candidate need not wait for the TTL.
func (e *elector) endSession(sess *concurrency.Session) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), electionRequestTimeout)
	defer cancel()
	if _, err := e.cli.Revoke(ctx, sess.Lease()); err != nil {
		e.log.Debug("revoke the leader lease", "err", err)
	}
}

// campaign waits until this process leads, the session ends or ctx does.
// While it waits it keeps e.leader up to date for the follower.
func (e *elector) campaign(ctx context.Context, sess *concurrency.Session, id string) (*concurrency.Election, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), cancel)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.observe(cctx, concurrency.NewElection(sess, e.prefix))
	}()
	el := concurrency.NewElection(sess, e.prefix)
	e.log.Info("campaigning for leadership", "id", id, "key", e.prefix)
	err := el.Campaign(cctx, leaderInfo{ID: id}.String())
	cancel()
	wg.Wait()
	if err != nil {
		if sess.Ctx().Err() != nil {
			return nil, fmt.Errorf("session lost while campaigning: %w", err)
		}
		return nil, err
	}
	// Campaign returns once every older key is gone, without checking that
	// ours is still there (its lease may have run out meanwhile).
	gctx, gcancel := context.WithTimeout(ctx, electionRequestTimeout)
	defer gcancel()
	resp, err := e.cli.Get(gctx, el.Key())
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() {
		return nil, errors.New("our election key was gone when the campaign ended")
	}
	return el, nil
}

// observe records the current leader until ctx ends.
func (e *elector) observe(ctx context.Context, el *concurrency.Election) {
	for {
		for resp := range el.Observe(ctx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			l := parseLeaderInfo(resp.Kvs[0].Value)
			if old := e.leader.Swap(l); old == nil || *old != *l {
				e.log.Info("following", "leader", l.ID, "grpc", l.GRPC, "http", l.HTTP)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(observeRetry):
		}
	}
}

// lead runs the stack until ctx ends or the session does.
func (e *elector) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, id string) error {
	leaderCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), func() {
		e.log.Error("lost the leader lease; stopping the cluster stack now", "id", id)
		cancel()
	})
	defer stop()
	// Until the stack serves, the follower answers for this process.
	e.leader.Store(&leaderInfo{ID: id})
	e.log.Info("leading; starting the cluster stack", "id", id, "revision", el.Rev())
	if e.cfg.OnLeading != nil {
		e.cfg.OnLeading(true)
		defer e.cfg.OnLeading(false)
	}

	cfg := e.cfg
	cfg.OnReady = func(info ReadyInfo) {
		me := leaderInfo{ID: id, GRPC: e.advertise(info.GRPCAddr), HTTP: e.advertise(info.HTTPAddr)}
		pctx, pcancel := context.WithTimeout(leaderCtx, electionRequestTimeout)
		defer pcancel()
		if err := el.Proclaim(pctx, me.String()); err != nil {
			e.log.Warn("cannot publish this leader's addresses; followers cannot forward to it", "err", err)
		}
		if e.cfg.OnReady != nil {
			e.cfg.OnReady(info)
		}
	}
	t := &term{lease: sess.Ctx(), fence: store.Fence{Key: el.Key(), Revision: el.Rev()}, beforeListen: e.stopFollower}
	err := runStack(leaderCtx, cfg, t)
	e.leader.Store(nil)
	return err
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

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return fmt.Sprintf("pid-%d", os.Getpid())
	}
	return h
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
