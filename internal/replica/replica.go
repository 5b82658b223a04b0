// Package replica runs one replica of a Peloton daemon that several
// processes serve together (--leader-elect): the replicas campaign in etcd,
// the leader runs the daemon, and every other replica holds the daemon's
// listen addresses and forwards them to the leader, so a Service in front
// of all replicas always reaches the leader and probes see each replica
// alive.
//
// It owns the candidacy around internal/election (checking the settings it
// needs, dialling etcd, campaigning on the key its caller names), the
// follower (gRPC as raw TCP, HTTP through a reverse proxy except /healthz
// and /readyz, which it answers itself), the election value that says who
// leads and where it serves, and turning the leader's bound addresses into
// ones other replicas can dial (AdvertiseHost). The cluster stack
// (cluster/leader.go) and the federation (federation/run.go) are built on
// it.
//
// It knows nothing of what the daemon does: the daemon is the caller's lead
// function, which gets the Term (its store fence, its lease) and the
// handover of the addresses. It must not import any Peloton package but
// internal/election and internal/store (for store.Fence); in particular no
// component (jobmgr, resmgr, placement, hostmgr), nor cluster or federation.
package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/peloton-sched/peloton/internal/election"
	"github.com/peloton-sched/peloton/internal/store"
)

// DefaultLease is the TTL of the leader's lease when Config leaves it 0.
const DefaultLease = election.DefaultLease

// ErrStoppedWhileLeading is what Run returns when the lead function
// returned nil while this replica still led and Run's context was alive:
// the daemon stopped on its own, which is no reason to campaign again.
var ErrStoppedWhileLeading = election.ErrStoppedWhileLeading

// forwardDialTimeout bounds a follower's dial to the leader.
const forwardDialTimeout = 3 * time.Second

// Flags names the daemon's command-line flags for each setting, so that an
// error tells the user what to change. Empty fields take the cluster
// stack's names (--etcd-endpoints, --listen, --http-listen,
// --advertise-host).
type Flags struct {
	EtcdEndpoints, Listen, HTTPListen, AdvertiseHost, AdminListen string
}

func (f Flags) withDefaults() Flags {
	if f.EtcdEndpoints == "" {
		f.EtcdEndpoints = "--etcd-endpoints"
	}
	if f.Listen == "" {
		f.Listen = "--listen"
	}
	if f.HTTPListen == "" {
		f.HTTPListen = "--http-listen"
	}
	if f.AdvertiseHost == "" {
		f.AdvertiseHost = "--advertise-host"
	}
	if f.AdminListen == "" {
		f.AdminListen = "--admin-listen"
	}
	return f
}

// Config describes one replica.
type Config struct {
	// EtcdEndpoints is the external etcd the replicas campaign in; it must
	// not be empty (an embedded etcd is one process's alone).
	EtcdEndpoints []string
	// EtcdTLS, if set, is the etcd client's TLS configuration, the same as
	// the daemon's store's.
	EtcdTLS *tls.Config
	// Key is the election's key prefix, absolute and without a trailing
	// slash: each candidate's key is Key + "/<lease id>". Replicas of one
	// daemon share it.
	Key string
	// Lease is the TTL of the leader's lease (0: DefaultLease; whole
	// seconds, 1s to 1h): how long a leader that died holds the daemon up.
	Lease time.Duration
	// Listen and HTTPListen are the daemon's gRPC and HTTP addresses: the
	// follower holds them between terms, the daemon binds them while it
	// leads.
	Listen, HTTPListen string
	// TLS says the daemon's listeners serve TLS: the follower then forwards
	// HTTP as raw TCP too, so TLS (and the client's certificate) reaches
	// the leader, and answers the probes only on AdminListen.
	TLS bool
	// AdminListen, if set, is the daemon's admin listener (/metrics and
	// the probes, plaintext); the follower holds it and answers the probes
	// there.
	AdminListen string
	// AdvertiseHost is the host (IP or DNS name) other replicas reach this
	// one at, on the ports the daemon binds. Empty means the host of
	// Listen, which then must not be a wildcard (0.0.0.0, ::).
	AdvertiseHost string
	// Flags names the daemon's flags in errors.
	Flags Flags
	// Logger; nil discards.
	Logger *slog.Logger
}

// Term is one term of leadership, as the lead function sees it.
type Term struct {
	// ID identifies this replica in the election:
	// "<hostname>/<lease id in hex>".
	ID string
	// Fence ties the daemon's writes to this term: a store built with it
	// (store.EtcdConfig.Fence) refuses every write once the term is over.
	Fence store.Fence
	// Lease ends when the term does (the lease was lost or revoked); the
	// daemon should stop acting on its own at once, not only once its API
	// has drained.
	Lease context.Context

	ctx       context.Context
	el        *election.Term
	advertise func(addr string) string
	log       *slog.Logger
}

// Serving publishes the addresses the daemon now serves on (as bound;
// AdvertiseHost replaces their host), so the followers start forwarding to
// them. Until it is called they refuse requests: the leader is not serving
// yet. A failure is logged, not returned: the daemon serves all the same,
// and only the followers cannot reach it.
func (t *Term) Serving(grpcAddr, httpAddr string) {
	me := leaderInfo{ID: t.ID, GRPC: t.advertise(grpcAddr), HTTP: t.advertise(httpAddr)}
	if err := t.el.Proclaim(t.ctx, me.String()); err != nil {
		t.log.Warn("cannot publish this leader's addresses; followers cannot forward to it", "err", err)
	}
}

// LeadFunc runs the daemon for one term, until ctx ends (Run's context
// ended or the term did). handOver closes the follower's listeners; the
// daemon calls it just before it binds the same addresses, from lead's own
// goroutine. Once lead has returned, handOver does nothing.
type LeadFunc func(ctx context.Context, t *Term, handOver func()) error

// replica is one Run: the follower between terms, lead during one.
type replica struct {
	cfg  Config
	log  *slog.Logger
	lead LeadFunc

	// leader is who leads as this replica last saw it; nil: unknown.
	leader atomic.Pointer[leaderInfo]

	// mu guards fol (and each term's end): the handover may come from the
	// daemon's goroutines.
	mu  sync.Mutex
	fol *follower
}

// Check reports whether cfg can run, in the words of the daemon's flags,
// without touching the network.
func Check(cfg Config) error {
	flags := cfg.Flags.withDefaults()
	if len(cfg.EtcdEndpoints) == 0 {
		return fmt.Errorf("leader election needs an external etcd (%s)", flags.EtcdEndpoints)
	}
	if cfg.Key == "" {
		return errors.New("leader election: the election key must be set")
	}
	if _, err := election.LeaseSeconds(cfg.Lease); err != nil {
		return err
	}
	if cfg.AdvertiseHost == "" {
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w", cfg.Listen, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("leader election: %s %s binds every address, so the other replicas cannot tell where to reach this one; set %s",
				flags.Listen, cfg.Listen, flags.AdvertiseHost)
		}
	}
	return nil
}

// Run campaigns until ctx ends. While this replica does not lead, it holds
// Listen and HTTPListen as a follower; each time it leads it calls lead.
// It returns nil once ctx has ended; lead's error if lead failed while the
// term lasted; ErrStoppedWhileLeading if lead returned nil on its own. A
// term that ends because the lease was lost is no error: Run follows and
// campaigns again.
func Run(ctx context.Context, cfg Config, lead LeadFunc) error {
	if err := Check(cfg); err != nil {
		return err
	}
	cfg.Flags = cfg.Flags.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: store.DefaultDialTimeout, Logger: zap.NewNop(), TLS: cfg.EtcdTLS})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	defer cli.Close()
	r := &replica{cfg: cfg, log: cfg.Logger, lead: lead}
	defer r.stopFollower()
	return election.Run(ctx, election.Config{
		Client: cli,
		Key:    cfg.Key,
		Lease:  cfg.Lease,
		Value:  func(id string) string { return leaderInfo{ID: id}.String() },
		OnLeader: func(v []byte) {
			l := parseLeaderInfo(v)
			r.leader.Store(l)
			r.log.Info("following", "leader", l.ID, "grpc", l.GRPC, "http", l.HTTP)
		},
		// The addresses are held again before any pause, so /healthz
		// answers throughout.
		BeforeCampaign: r.startFollower,
		Logger:         r.log,
	}, r.runTerm)
}

// runTerm is one term: the follower answers for this replica until the
// daemon takes the addresses over.
func (r *replica) runTerm(ctx context.Context, et *election.Term) error {
	r.leader.Store(&leaderInfo{ID: et.ID})
	defer r.leader.Store(nil)
	t := &Term{ID: et.ID, Fence: store.Fence{Key: et.Key, Revision: et.Revision}, Lease: et.Lease,
		ctx: ctx, el: et, advertise: r.advertise, log: r.log}
	// A handover that comes after the term (a straggling goroutine of the
	// daemon) must not close the follower of the next campaign; ended is
	// guarded by mu, as fol is.
	ended := false
	defer func() {
		r.mu.Lock()
		ended = true
		r.mu.Unlock()
	}()
	handOver := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !ended {
			r.stopFollowerLocked()
		}
	}
	return r.lead(ctx, t, handOver)
}

// advertise turns a bound address into one other replicas can dial.
func (r *replica) advertise(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if r.cfg.AdvertiseHost != "" {
		host = r.cfg.AdvertiseHost
	}
	return net.JoinHostPort(host, port)
}

// startFollower holds the daemon's addresses unless the follower already
// does.
func (r *replica) startFollower() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fol != nil {
		return nil
	}
	fol, err := startFollower(r.cfg, r.log, r.leader.Load)
	if err != nil {
		return err
	}
	r.fol = fol
	return nil
}

func (r *replica) stopFollower() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopFollowerLocked()
}

// stopFollowerLocked frees the addresses; the caller holds mu.
func (r *replica) stopFollowerLocked() {
	if r.fol != nil {
		r.fol.close()
		r.fol = nil
	}
}
