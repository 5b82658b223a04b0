package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/casapply"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// clusterKey is where a cluster's registration is kept.
func clusterKey(name string) string { return "clusters/" + name }

// member is one registered cluster: its record (as in etcd) and what its
// worker last observed. mu of the Federation guards every field.
type member struct {
	rec *pelotonv1.Cluster // the registration and the persisted health
	rev int64              // store revision of rec

	cli    *client.Client
	cancel context.CancelFunc // stops the worker
	wake   chan struct{}
	// send wakes the cluster's sender (send.go): jobs were dispatched here.
	send chan struct{}

	// What the last answered check saw.
	pools    map[string]*pelotonv1.Pool // the cluster's pool tree, by path
	lastSeen time.Time
	latency  time.Duration
	message  string
	capacity resources.Resources
	alloc    resources.Resources
	// largest is the cluster's largest host, per kind, when it knows one
	// (knowsLargest): the most one task may ask for there.
	largest      resources.Resources
	knowsLargest bool
	// checked is set once a check since the start of this process has
	// answered: until then pools is empty and says nothing.
	checked bool
	// assumed is what jobs dispatched here since the last check ask, by
	// pool: the check's statuses do not show them yet.
	assumed map[string]resources.Resources
	// synced is what the last pool pass left each global pool path as in
	// the cluster: a pool found otherwise later was changed there (drift),
	// is repaired and said so. poolMsgs is what the last pass has to say
	// per path.
	synced   map[string]*pelotonv1.PoolSpec
	poolMsgs map[string]string
	// jobCursor rotates the window of jobs a pass looks at.
	jobCursor atomic.Int64
	// passes counts the worker's finished passes (passes.go).
	passes atomic.Uint64
}

// clusterClient is how the federation calls a cluster: the one shared
// client of its public API.
type clusterClient = *client.Client

// nudgeSend wakes the cluster's sender: jobs were dispatched to it.
func (m *member) nudgeSend() {
	select {
	case m.send <- struct{}{}:
	default:
	}
}

func (m *member) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// view is the record as the API shows it: persisted fields plus what was
// last observed. Caller holds mu.
func (m *member) view() *pelotonv1.Cluster {
	c := proto.Clone(m.rec).(*pelotonv1.Cluster)
	c.Version = uint64(m.rev)
	c.State = effectiveState(c.Health, c.State == pelotonv1.ClusterState_CLUSTER_CORDONED)
	if !m.lastSeen.IsZero() {
		c.LastSeenTime = timestamppb.New(m.lastSeen)
	}
	c.LatencyMs = float64(m.latency.Microseconds()) / 1000
	if m.message != "" {
		c.Message = m.message
	}
	c.Capacity = m.capacity.ToProto()
	c.Allocation = m.alloc.ToProto()
	return c
}

// cordoned reports whether an operator cordoned the cluster.
func (m *member) cordoned() bool { return m.rec.State == pelotonv1.ClusterState_CLUSTER_CORDONED }

// effectiveState is what a cluster is said to be: CORDONED wins over health.
func effectiveState(health pelotonv1.ClusterState, cordoned bool) pelotonv1.ClusterState {
	if cordoned {
		return pelotonv1.ClusterState_CLUSTER_CORDONED
	}
	return health
}

var (
	clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// validateName checks a cluster name as the cluster stack checks its own
// --cluster-name: a DNS label.
func validateName(name, field string) error {
	if name == "" {
		return apierr.Invalid(field, "required")
	}
	if !clusterNameRE.MatchString(name) {
		return apierr.Invalid(field, "%q must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// ValidateLabels checks cluster labels (and selectors): Kubernetes-style
// keys and values, at most 64 pairs. field names the map in errors. The
// rules are split's, which selects clusters by them.
func ValidateLabels(labels map[string]string, field string) error {
	return split.ValidateLabels(labels, field)
}

func validateEndpoint(ep, field string, required bool) error {
	if ep == "" {
		if required {
			return apierr.Invalid(field, "required: the cluster's gRPC address, host:port")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host == "" || port == "" || strings.ContainsAny(ep, " /") {
		return apierr.Invalid(field, "%q must be host:port", ep)
	}
	return nil
}

// Register adds a cluster to the registry, or (with replace) changes an
// existing registration's endpoint and labels. A registration that would
// change nothing is accepted as is, so a stack can keep registering itself.
// The cluster is checked once before the answer: the registration says
// whether it answered.
func (f *Federation) Register(ctx context.Context, req *pelotonv1.RegisterClusterRequest) (*pelotonv1.Cluster, error) {
	if err := validateName(req.GetName(), "name"); err != nil {
		return nil, err
	}
	if err := validateEndpoint(req.GetEndpoint(), "endpoint", true); err != nil {
		return nil, err
	}
	if err := validateEndpoint(req.GetHttpEndpoint(), "httpEndpoint", false); err != nil {
		return nil, err
	}
	if err := ValidateLabels(req.GetLabels(), "labels"); err != nil {
		return nil, err
	}
	// A health change written meanwhile by the cluster's worker is no
	// reason to fail a registration: try again on the newer record.
	for attempt := 0; ; attempt++ {
		c, err := f.register(ctx, req)
		if apierr.Code(err) == codes.Aborted && attempt < 5 {
			continue
		}
		return c, err
	}
}

// registration is what a registration's check hands its write, and what
// the write (a probe of the cluster, then the record) hands its apply.
type registration struct {
	rec *pelotonv1.Cluster
	rev int64
	cli *client.Client
	obs observation
}

func (f *Federation) register(ctx context.Context, req *pelotonv1.RegisterClusterRequest) (*pelotonv1.Cluster, error) {
	now := f.opts.Now()
	return casapply.Do(ctx, &f.mu, casapply.Change[*registration, *pelotonv1.Cluster]{
		Check: func() (*registration, error) {
			rec := &pelotonv1.Cluster{
				Name:           req.Name,
				Labels:         req.Labels,
				Endpoint:       req.Endpoint,
				HttpEndpoint:   req.HttpEndpoint,
				RegisteredTime: timestamppb.New(now),
				Health:         pelotonv1.ClusterState_CLUSTER_READY,
				State:          pelotonv1.ClusterState_CLUSTER_READY,
				StateTime:      timestamppb.New(now),
			}
			old := f.clusters[req.Name]
			if old == nil {
				return &registration{rec: rec, rev: store.MustNotExist}, nil
			}
			prev := proto.Clone(old.rec).(*pelotonv1.Cluster)
			if prev.Endpoint == req.Endpoint && prev.HttpEndpoint == req.HttpEndpoint && maps.Equal(prev.Labels, req.Labels) {
				return nil, casapply.Answer(old.view())
			}
			if !req.Replace {
				return nil, apierr.AlreadyExists("name: cluster %s is already registered with endpoint %s; deregister it first, or set replace", req.Name, prev.Endpoint)
			}
			rec.RegisteredTime = prev.RegisteredTime
			rec.State = prev.State // a cordon survives a new endpoint
			return &registration{rec: rec, rev: old.rev}, nil
		},
		Write: func(ctx context.Context, r *registration) (int64, error) {
			// One probe before answering, so the caller learns at once
			// whether the endpoint answers; the worker goes on from there.
			cli, err := f.opts.Dial(req.Endpoint)
			if err != nil {
				return 0, apierr.Invalid("endpoint", "%v", err)
			}
			r.cli, r.obs = cli, f.probe(ctx, cli)
			rec := r.rec
			if !r.obs.answered {
				rec.Health = pelotonv1.ClusterState_CLUSTER_UNREACHABLE
				rec.Message = "did not answer at registration: " + r.obs.err
			} else if r.obs.err != "" {
				rec.Health = pelotonv1.ClusterState_CLUSTER_DEGRADED
				rec.Message = r.obs.err
			}
			if rec.State != pelotonv1.ClusterState_CLUSTER_CORDONED {
				rec.State = rec.Health
			}
			newRev, err := f.put(ctx, clusterKey(req.Name), rec, r.rev)
			if err != nil {
				_ = cli.Close()
				if errors.Is(err, store.ErrConflict) {
					return 0, apierr.Aborted("cluster %s changed meanwhile; try again", req.Name)
				}
				return 0, err
			}
			return newRev, nil
		},
		Apply: func(r *registration, newRev int64) (*pelotonv1.Cluster, error) {
			rec := r.rec
			m := &member{rec: rec, rev: newRev, cli: r.cli, wake: make(chan struct{}, 1), send: make(chan struct{}, 1)}
			if old := f.clusters[req.Name]; old != nil {
				f.stopWorkerLocked(old)
				_ = old.cli.Close()
				// The same cluster at a new address (a restart, a new
				// leader): what was observed of it still holds until the
				// next check, so the split does not hand its part to the
				// others meanwhile.
				m.pools, m.capacity, m.alloc, m.checked, m.lastSeen = old.pools, old.capacity, old.alloc, old.checked, old.lastSeen
				m.largest, m.knowsLargest = old.largest, old.knowsLargest
				m.synced, m.poolMsgs = old.synced, old.poolMsgs
			}
			if r.obs.answered {
				m.observe(r.obs, now)
			}
			f.clusters[req.Name] = m
			f.setStateMetric(rec.Name, rec.State)
			f.log.Info("cluster registered", "cluster", req.Name, "endpoint", req.Endpoint, "health", rec.Health, "message", rec.Message)
			f.Pools().resplitLocked()
			if f.started {
				f.startWorkerLocked(m)
			}
			return m.view(), nil
		},
	})
}

// Deregister forgets a cluster. Its pools are left as they are; federated
// jobs dispatched to it that had not started are dispatched elsewhere, and
// those that had are given up, said so in their message.
func (f *Federation) Deregister(ctx context.Context, name string) error {
	if err := validateName(name, "name"); err != nil {
		return err
	}
	_, err := casapply.Do(ctx, &f.mu, casapply.Change[*member, struct{}]{
		Check: func() (*member, error) {
			m := f.clusters[name]
			if m == nil {
				return nil, apierr.NotFound("cluster %s is not registered", name)
			}
			return m, nil
		},
		Write: func(ctx context.Context, _ *member) (int64, error) {
			rev, err := f.st.Txn(ctx, store.Delete(clusterKey(name), store.AnyRevision))
			if err != nil {
				return 0, apierr.Unavailable("deregister %s: %v", name, err)
			}
			return rev, nil
		},
		Apply: func(m *member, _ int64) (struct{}, error) {
			if f.clusters[name] == m {
				delete(f.clusters, name)
				f.stopWorkerLocked(m)
				_ = m.cli.Close()
			}
			for _, s := range allClusterStates {
				metrics.FederationClusterState.DeleteLabelValues(name, s.String())
			}
			f.Pools().resplitLocked()
			f.nudgeAllLocked()
			return struct{}{}, nil
		},
	})
	if err != nil {
		return err
	}
	f.log.Info("cluster deregistered", "cluster", name)
	f.Jobs().clusterGone(ctx, name)
	return nil
}

// Get returns one cluster as last observed.
func (f *Federation) Get(name string) (*pelotonv1.Cluster, error) {
	if err := validateName(name, "name"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.clusters[name]
	if m == nil {
		return nil, apierr.NotFound("cluster %s is not registered", name)
	}
	return m.view(), nil
}

// List returns every cluster, by name.
func (f *Federation) List() []*pelotonv1.Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*pelotonv1.Cluster, 0, len(f.clusters))
	for _, name := range sortedKeys(f.clusters) {
		out = append(out, f.clusters[name].view())
	}
	return out
}

// Cordon stops new work from going to a cluster (cordon true) or lets it
// take work again (false). Its pools and work stay.
func (f *Federation) Cordon(ctx context.Context, name string, cordon bool) (*pelotonv1.Cluster, error) {
	if err := validateName(name, "name"); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, err := casapply.Do(ctx, &f.mu, casapply.Change[clusterChange, *pelotonv1.Cluster]{
			Check: func() (clusterChange, error) {
				m := f.clusters[name]
				if m == nil {
					return clusterChange{}, apierr.NotFound("cluster %s is not registered", name)
				}
				if m.cordoned() == cordon {
					return clusterChange{}, casapply.Answer(m.view())
				}
				rec := proto.Clone(m.rec).(*pelotonv1.Cluster)
				rec.State = effectiveState(rec.Health, cordon)
				// The state changed: "state since" is when.
				rec.StateTime = timestamppb.New(f.opts.Now())
				return clusterChange{rec: rec, rev: m.rev}, nil
			},
			Write: func(ctx context.Context, c clusterChange) (int64, error) {
				newRev, err := f.put(ctx, clusterKey(name), c.rec, c.rev)
				if errors.Is(err, store.ErrConflict) && attempt < 5 {
					return 0, err // a health change was written meanwhile: try again
				}
				if err != nil {
					return 0, apierr.Unavailable("cordon %s: %v", name, err)
				}
				return newRev, nil
			},
			Apply: func(c clusterChange, newRev int64) (*pelotonv1.Cluster, error) {
				if m := f.clusters[name]; m != nil && m.rev == c.rev {
					m.rec, m.rev = c.rec, newRev
				}
				f.setStateMetric(name, c.rec.State)
				f.log.Info("cluster cordon changed", "cluster", name, "cordoned", cordon)
				if !cordon {
					f.kickDispatch()
				}
				return f.clusters[name].view(), nil
			},
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return c, err
	}
}

// clusterChange is what a check of a change of a cluster's record hands
// its write: the record to write, the revision it was read at, and the
// health it had.
type clusterChange struct {
	rec  *pelotonv1.Cluster
	rev  int64
	from pelotonv1.ClusterState
}

// setHealth persists a change of a cluster's health (rare: state changes,
// not checks). It takes mu; the write happens without it.
func (f *Federation) setHealth(ctx context.Context, name string, of *member, health pelotonv1.ClusterState, why string) {
	changed, err := casapply.Do(ctx, &f.mu, casapply.Change[clusterChange, bool]{
		Check: func() (clusterChange, error) {
			m := f.clusters[name]
			// of is the member the observation was made of: a worker
			// replaced by a new registration (a new endpoint) must not
			// speak for the new one.
			if m == nil || m != of || m.rec.Health == health {
				return clusterChange{}, casapply.Answer(false)
			}
			rec := proto.Clone(m.rec).(*pelotonv1.Cluster)
			from := rec.Health
			rec.Health = health
			rec.State = effectiveState(health, rec.State == pelotonv1.ClusterState_CLUSTER_CORDONED)
			rec.Message = why
			rec.StateTime = timestamppb.New(f.opts.Now())
			return clusterChange{rec: rec, rev: m.rev, from: from}, nil
		},
		Write: func(ctx context.Context, c clusterChange) (int64, error) {
			newRev, err := f.put(ctx, clusterKey(name), c.rec, c.rev)
			if err != nil {
				// Health is observed again at the next check; the change
				// is written then.
				f.log.Warn("cannot record a cluster's health", "cluster", name, "health", health, "err", err)
			}
			return newRev, err
		},
		Apply: func(c clusterChange, newRev int64) (bool, error) {
			if m := f.clusters[name]; m != nil && m.rev == c.rev {
				m.rec, m.rev = c.rec, newRev
				f.setStateMetric(name, c.rec.State)
				// Membership of the pool split follows health.
				f.Pools().resplitLocked()
				f.nudgeAllLocked()
			}
			f.log.Info("cluster health changed", "cluster", name, "from", c.from, "to", health, "why", why)
			return true, nil
		},
	})
	if err != nil || !changed {
		return
	}
	metrics.FederationClusterTransitions.WithLabelValues(name, health.String()).Inc()
	switch health {
	case pelotonv1.ClusterState_CLUSTER_UNREACHABLE:
		f.Jobs().clusterUnreachable(ctx, name)
	case pelotonv1.ClusterState_CLUSTER_READY:
		f.kickDispatch()
	}
}

var allClusterStates = []pelotonv1.ClusterState{
	pelotonv1.ClusterState_CLUSTER_READY, pelotonv1.ClusterState_CLUSTER_DEGRADED,
	pelotonv1.ClusterState_CLUSTER_UNREACHABLE, pelotonv1.ClusterState_CLUSTER_CORDONED,
}

// setStateMetric sets peloton_federation_cluster_state: 1 for the
// cluster's state, 0 for the others. The cluster's counters start at 0
// here, so they are in /metrics before its first change or repair.
func (f *Federation) setStateMetric(name string, st pelotonv1.ClusterState) {
	for _, s := range allClusterStates {
		v := 0.0
		if s == st {
			v = 1
		}
		metrics.FederationClusterState.WithLabelValues(name, s.String()).Set(v)
		metrics.FederationClusterTransitions.WithLabelValues(name, s.String()).Add(0)
	}
	metrics.FederationPoolRepairs.WithLabelValues(name).Add(0)
}

func (f *Federation) loadClusters(ctx context.Context) error {
	kvs, err := f.st.List(ctx, "clusters/")
	if err != nil {
		return err
	}
	good := kvs[:0:0]
	for _, kv := range kvs {
		if err := proto.Unmarshal(kv.Value, &pelotonv1.Cluster{}); err != nil {
			if err := f.quarantine(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		good = append(good, kv)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, kv := range good {
		rec := &pelotonv1.Cluster{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err) // decoded above
		}
		cli, err := f.opts.Dial(rec.Endpoint)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", rec.Name, err)
		}
		f.clusters[rec.Name] = &member{rec: rec, rev: kv.Revision, cli: cli, wake: make(chan struct{}, 1), send: make(chan struct{}, 1)}
		f.setStateMetric(rec.Name, rec.State)
	}
	return nil
}

// quarantine moves aside a record that cannot be loaded at start
// (internal/quarantine); the federation starts without it:
//
//   - a cluster: it is no member until it registers again (a stack run
//     with --federation does so by itself);
//   - a global pool: the federation no longer keeps the clusters' pools
//     in line with it; they stay as they are;
//   - a federated job or service: forgotten; what it made in the clusters
//     (jobs) goes on there, no longer followed or repaired;
//   - an SLA grant: forgotten (grants are short leases; the holder asks
//     again).
func (f *Federation) quarantine(ctx context.Context, kv store.KV, err error) error {
	if _, qerr := quarantine.Move(ctx, f.st, f.log, kv, err); qerr != nil {
		return fmt.Errorf("federation: %w", qerr)
	}
	return nil
}

// put writes a protobuf record with compare-and-swap.
func (f *Federation) put(ctx context.Context, key string, m proto.Message, expect int64) (int64, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	return f.st.Txn(ctx, store.Put(key, b, expect))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
