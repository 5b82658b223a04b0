package cluster

// Leader election of the cluster stack.
//
// The candidacy and the follower are internal/replica's, on this cluster's
// key (<cluster prefix>leader/cluster, so clusters sharing one etcd elect
// independently): a follower keeps the configured listeners open and
// forwards them to the leader, answering /healthz itself. This file is what
// is specific to the stack: the leader runs it with every write fenced to
// its term (store.Fence), its engines stopping the moment the term ends,
// and its listeners taking the follower's addresses over just before they
// bind.

import (
	"context"
	"crypto/tls"
	"errors"

	"github.com/peloton-sched/peloton/internal/replica"
	"github.com/peloton-sched/peloton/internal/store"
)

// LeaderKey is the election's key prefix under the cluster's prefix (see
// Config.Prefix): each cluster elects its own leader.
const LeaderKey = "leader/cluster"

// DefaultLeaderLease is the TTL of the leader's lease when Config leaves it 0.
const DefaultLeaderLease = replica.DefaultLease

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

// replicaConfig is this stack's candidacy: its key, its addresses and the
// flags of `peloton serve cluster` that set them.
func replicaConfig(cfg Config, etcdTLS *tls.Config) replica.Config {
	return replica.Config{
		EtcdEndpoints: cfg.EtcdEndpoints,
		EtcdTLS:       etcdTLS,
		Key:           cfg.Prefix() + LeaderKey,
		Lease:         cfg.LeaderLease,
		Listen:        cfg.Listen,
		HTTPListen:    cfg.HTTPListen,
		TLS:           cfg.Security.TLS.Enabled(),
		AdminListen:   cfg.Security.AdminListen,
		AdvertiseHost: cfg.AdvertiseHost,
		Flags:         replica.Flags{EtcdEndpoints: "--etcd-endpoints", Listen: "--listen", HTTPListen: "--http-listen", AdvertiseHost: "--advertise-host"},
		Logger:        cfg.Logger.With("component", "leader"),
	}
}

// runElected campaigns until ctx ends, running the stack while it leads.
func runElected(ctx context.Context, cfg Config, etcdTLS *tls.Config) error {
	rc := replicaConfig(cfg, etcdTLS)
	log := rc.Logger
	err := replica.Run(ctx, rc, func(ctx context.Context, t *replica.Term, handOver func()) error {
		log.Info("leading; starting the cluster stack", "id", t.ID, "revision", t.Fence.Revision)
		if cfg.OnLeading != nil {
			cfg.OnLeading(true)
			defer cfg.OnLeading(false)
		}
		scfg := cfg
		scfg.OnReady = func(info ReadyInfo) {
			t.Serving(info.GRPCAddr, info.HTTPAddr)
			if cfg.OnReady != nil {
				cfg.OnReady(info)
			}
		}
		return runStack(ctx, scfg, etcdTLS, &term{lease: t.Lease, fence: t.Fence, beforeListen: handOver})
	})
	if errors.Is(err, replica.ErrStoppedWhileLeading) {
		return errors.New("the cluster stack stopped while leading")
	}
	return err
}
