package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/casapply"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// RequestKind scopes the request ids of global pool creates.
const poolRequestKind requestid.Kind = "federated-pool"

func poolKey(path string) string { return "pools" + path }

// globalPool is one node of the global pool tree as kept in etcd: path,
// spec and whether it is being deleted.
type globalPool struct {
	rec *pelotonv1.FederatedPool
	rev int64
	// res, limit, share are the spec as integers.
	res, limit, share resources.Resources
	// changed is when the spec last changed in this process, to measure
	// how long it takes to reach every cluster.
	changed time.Time
	// reached is the clusters in sync since changed.
	reached map[string]bool
}

func (pl *Pools) loadPools(ctx context.Context) error {
	kvs, err := pl.f.st.List(ctx, "pools/")
	if err != nil {
		return err
	}
	pools := make([]*globalPool, 0, len(kvs))
	for _, kv := range kvs {
		rec := &pelotonv1.FederatedPool{}
		err := proto.Unmarshal(kv.Value, rec)
		var gp *globalPool
		if err == nil {
			gp, err = newGlobalPool(rec, kv.Revision)
		}
		if err != nil {
			if err := pl.f.quarantine(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		pools = append(pools, gp)
	}
	pl.f.mu.Lock()
	defer pl.f.mu.Unlock()
	for _, gp := range pools {
		pl.f.pools[gp.rec.Path] = gp
	}
	return nil
}

func newGlobalPool(rec *pelotonv1.FederatedPool, rev int64) (*globalPool, error) {
	res, limit, share, err := resmgr.ValidatePoolSpec(clusterSpec(rec.Spec))
	if err != nil {
		return nil, err
	}
	return &globalPool{rec: rec, rev: rev, res: res, limit: limit, share: share}, nil
}

// clusterSpec is the cluster pool spec a global spec reads as, before it
// is split: the same reservation, limit and share.
func clusterSpec(s *pelotonv1.FederatedPoolSpec) *pelotonv1.PoolSpec {
	if s == nil {
		return &pelotonv1.PoolSpec{}
	}
	return &pelotonv1.PoolSpec{Reservation: s.Reservation, Limit: s.Limit, Share: s.Share}
}

func parentOf(path string) string {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

func depth(path string) int { return strings.Count(path, "/") }

// checkPoolLocked validates a create or update of a global pool at path:
// the spec, the placement weights (registered clusters, finite, not all
// zero, within the parent's clusters) and the reservation against the
// parent's and the siblings'. Caller holds mu.
func (pl *Pools) checkPoolLocked(path string, spec *pelotonv1.FederatedPoolSpec) (resources.Resources, error) {
	res, _, _, err := resmgr.ValidatePoolSpec(clusterSpec(spec))
	if err != nil {
		return res, err
	}
	weights := spec.GetPlacement().GetWeights()
	if len(weights) > 0 {
		sum := 0.0
		for _, name := range sortedKeys(weights) {
			w := weights[name]
			field := "spec.placement.weights." + name
			if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > 1e6 {
				return res, apierr.Invalid(field, "must be a number from 0 to 1000000, got %g", w)
			}
			if pl.f.clusters[name] == nil {
				return res, apierr.Invalid(field, "cluster %s is not registered", name)
			}
			if w > 0 {
				if set := pl.clusterSetLocked(parentOf(path)); set != nil && !set[name] {
					return res, apierr.Invalid(field, "cluster %s gets no part of the parent pool %s, so it can get none of this one", name, parentOf(path))
				}
			}
			sum += w
		}
		if sum == 0 {
			return res, apierr.Invalid("spec.placement.weights", "the weights add up to 0: no cluster would get the pool; leave weights out to split by capacity")
		}
	}
	parent := parentOf(path)
	if parent != "/" {
		p := pl.f.pools[parent]
		if p == nil || p.rec.Deleting {
			return res, apierr.NotFound("path: parent pool %s does not exist; create it first", parent)
		}
		sum := res
		for other, gp := range pl.f.pools {
			if other != path && parentOf(other) == parent && !gp.rec.Deleting {
				sum = sum.Add(gp.res)
			}
		}
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			if sum.Get(k) > p.res.Get(k) {
				return res, apierr.Invalid("spec.reservation."+k.String(),
					"children of %s would reserve %s %s in all, more than its reservation of %s %s; raise the reservation of %s first",
					parent, resources.FormatAmount(k, sum.Get(k)), k, resources.FormatAmount(k, p.res.Get(k)), k, parent)
			}
		}
	}
	return res, nil
}

// clusterSetLocked is the set of clusters a global pool is split across
// by its own or its ancestors' weights; nil: every cluster.
func (pl *Pools) clusterSetLocked(path string) map[string]bool {
	for p := path; p != "/"; p = parentOf(p) {
		gp := pl.f.pools[p]
		if gp == nil {
			return nil
		}
		if w := gp.rec.GetSpec().GetPlacement().GetWeights(); len(w) > 0 {
			set := map[string]bool{}
			for name, v := range w {
				if v > 0 {
					set[name] = true
				}
			}
			return set
		}
	}
	return nil
}

// CreatePool creates a global pool; its parts reach the clusters within a
// check. Idempotent by request id.
func (pl *Pools) CreatePool(ctx context.Context, path string, spec *pelotonv1.FederatedPoolSpec, rqID string) (*pelotonv1.FederatedPool, error) {
	path, err := resmgr.NormalizePath(path, "path")
	if err != nil {
		return nil, err
	}
	if path == "/" {
		return nil, apierr.Invalid("path", "the root pool is every cluster's own; create pools below it")
	}
	if spec == nil {
		spec = &pelotonv1.FederatedPoolSpec{}
	}
	rq, err := requestid.New(poolRequestKind, rqID, &pelotonv1.CreateFederatedPoolRequest{Path: path, Spec: spec})
	if err != nil {
		return nil, err
	}
	o, err := requestid.Lookup(ctx, pl.f.st, rq, pl.f.opts.Now())
	if err != nil {
		return nil, err
	}
	if o.Done {
		return pl.GetPool(o.Object)
	}
	rec := &pelotonv1.FederatedPool{Path: path, Spec: spec}
	return casapply.Do(ctx, &pl.f.mu, casapply.Change[struct{}, *pelotonv1.FederatedPool]{
		Check: func() (struct{}, error) {
			if gp := pl.f.pools[path]; gp != nil {
				if gp.rec.Deleting {
					return struct{}{}, apierr.FailedPrecondition("path: global pool %s is being deleted from its clusters; create it again once it is gone", path)
				}
				return struct{}{}, apierr.AlreadyExists("path: global pool %s already exists", path)
			}
			_, err := pl.checkPoolLocked(path, spec)
			return struct{}{}, err
		},
		Write: func(ctx context.Context, _ struct{}) (int64, error) {
			b, err := proto.Marshal(rec)
			if err != nil {
				return 0, err
			}
			ops := append([]store.Op{store.Put(poolKey(path), b, store.MustNotExist)}, o.Ops(rq, path, pl.f.opts.Now())...)
			rev, err := pl.f.st.Txn(ctx, ops...)
			if err != nil {
				if o2, rerr := requestid.Recheck(ctx, pl.f.st, rq, pl.f.opts.Now(), err); rerr == nil && o2.Done {
					return 0, answer(pl.GetPool(o2.Object))
				}
				if errors.Is(err, store.ErrConflict) {
					return 0, apierr.AlreadyExists("path: global pool %s was created meanwhile", path)
				}
				return 0, apierr.Unavailable("create global pool %s: %v", path, err)
			}
			return rev, nil
		},
		Apply: func(_ struct{}, rev int64) (*pelotonv1.FederatedPool, error) {
			gp, err := newGlobalPool(rec, rev)
			if err != nil {
				return nil, err
			}
			gp.changed = pl.f.opts.Now()
			pl.f.pools[path] = gp
			pl.resplitLocked()
			pl.f.nudgeAllLocked()
			pl.f.log.Info("global pool created", "path", path)
			return pl.poolViewLocked(gp, nil), nil
		},
	})
}

// answer ends a change whose write found it made already (casapply.Answer)
// with the object as it is now, or with the error reading it gave.
func answer[R any](r R, err error) error {
	if err != nil {
		return err
	}
	return casapply.Answer(r)
}

// poolChange is what a check of an update or delete of a global pool hands
// its write: the record to write and the revision it was read at.
type poolChange struct {
	rec *pelotonv1.FederatedPool
	rev int64
}

// UpdatePool replaces a global pool's spec (compare-and-swap on version
// when given).
func (pl *Pools) UpdatePool(ctx context.Context, path string, spec *pelotonv1.FederatedPoolSpec, version uint64) (*pelotonv1.FederatedPool, error) {
	path, err := resmgr.NormalizePath(path, "path")
	if err != nil {
		return nil, err
	}
	if spec == nil {
		spec = &pelotonv1.FederatedPoolSpec{}
	}
	return casapply.Do(ctx, &pl.f.mu, casapply.Change[poolChange, *pelotonv1.FederatedPool]{
		Check: func() (poolChange, error) {
			gp := pl.f.pools[path]
			if gp == nil || gp.rec.Deleting {
				return poolChange{}, apierr.NotFound("global pool %s does not exist", path)
			}
			if version != 0 && uint64(gp.rev) != version {
				return poolChange{}, apierr.FailedPrecondition("version: global pool %s is at version %d, not %d", path, gp.rev, version)
			}
			if _, err := pl.checkPoolLocked(path, spec); err != nil {
				return poolChange{}, err
			}
			// Children must still fit the new reservation.
			res, _, _, _ := resmgr.ValidatePoolSpec(clusterSpec(spec))
			var sum resources.Resources
			for other, c := range pl.f.pools {
				if parentOf(other) == path && !c.rec.Deleting {
					sum = sum.Add(c.res)
				}
			}
			for k := resources.Kind(0); k < resources.NumKinds; k++ {
				if sum.Get(k) > res.Get(k) {
					return poolChange{}, apierr.Invalid("spec.reservation."+k.String(), "children of %s reserve %s %s in all, more than %s %s; lower theirs first",
						path, resources.FormatAmount(k, sum.Get(k)), k, resources.FormatAmount(k, res.Get(k)), k)
				}
			}
			rec := proto.Clone(gp.rec).(*pelotonv1.FederatedPool)
			rec.Spec = spec
			return poolChange{rec, gp.rev}, nil
		},
		Write: pl.writeChange(path, "update"),
		Apply: func(c poolChange, newRev int64) (*pelotonv1.FederatedPool, error) {
			ngp, err := newGlobalPool(c.rec, newRev)
			if err != nil {
				return nil, err
			}
			ngp.changed = pl.f.opts.Now()
			pl.f.pools[path] = ngp
			pl.resplitLocked()
			pl.f.nudgeAllLocked()
			pl.f.log.Info("global pool updated", "path", path)
			return pl.poolViewLocked(ngp, nil), nil
		},
	})
}

// writeChange is the Write step of a change to an existing global pool's
// record: a compare-and-swap on the revision the check read; what verb
// names goes into the error of a store that does not answer.
func (pl *Pools) writeChange(path, verb string) func(context.Context, poolChange) (int64, error) {
	return func(ctx context.Context, c poolChange) (int64, error) {
		newRev, err := pl.f.put(ctx, poolKey(path), c.rec, c.rev)
		if errors.Is(err, store.ErrConflict) {
			return 0, apierr.Aborted("global pool %s changed meanwhile; try again", path)
		}
		if err != nil {
			return 0, apierr.Unavailable("%s global pool %s: %v", verb, path, err)
		}
		return newRev, nil
	}
}

// DeletePool marks a global pool without children for deletion; the
// workers remove it from every cluster, and the last one forgets it.
func (pl *Pools) DeletePool(ctx context.Context, path string) error {
	path, err := resmgr.NormalizePath(path, "path")
	if err != nil {
		return err
	}
	_, err = casapply.Do(ctx, &pl.f.mu, casapply.Change[poolChange, struct{}]{
		Check: func() (poolChange, error) {
			gp := pl.f.pools[path]
			if gp == nil {
				return poolChange{}, apierr.NotFound("global pool %s does not exist", path)
			}
			if gp.rec.Deleting {
				return poolChange{}, casapply.Answer(struct{}{})
			}
			for other := range pl.f.pools {
				if parentOf(other) == path {
					return poolChange{}, apierr.FailedPrecondition("global pool %s has children (%s); delete them first", path, other)
				}
			}
			rec := proto.Clone(gp.rec).(*pelotonv1.FederatedPool)
			rec.Deleting = true
			return poolChange{rec, gp.rev}, nil
		},
		Write: pl.writeChange(path, "delete"),
		Apply: func(c poolChange, newRev int64) (struct{}, error) {
			if cur := pl.f.pools[path]; cur != nil {
				cur.rec, cur.rev = c.rec, newRev
			}
			pl.resplitLocked()
			pl.f.nudgeAllLocked()
			pl.f.log.Info("global pool deleting", "path", path)
			return struct{}{}, nil
		},
	})
	return err
}

// GetPool returns a global pool with each cluster's part as last observed.
func (pl *Pools) GetPool(path string) (*pelotonv1.FederatedPool, error) {
	path, err := resmgr.NormalizePath(path, "path")
	if err != nil {
		return nil, err
	}
	pl.f.mu.Lock()
	defer pl.f.mu.Unlock()
	gp := pl.f.pools[path]
	if gp == nil {
		return nil, apierr.NotFound("global pool %s does not exist", path)
	}
	fs := pl.f.fairShareLocked()
	return pl.poolViewLocked(gp, &fs), nil
}

// ListPools returns every global pool, by path.
func (pl *Pools) ListPools() []*pelotonv1.FederatedPool {
	pl.f.mu.Lock()
	defer pl.f.mu.Unlock()
	out := make([]*pelotonv1.FederatedPool, 0, len(pl.f.pools))
	fs := pl.f.fairShareLocked()
	for _, path := range sortedKeys(pl.f.pools) {
		out = append(out, pl.poolViewLocked(pl.f.pools[path], &fs))
	}
	return out
}

// poolViewLocked is a global pool as the API shows it, with its standing
// in fs (computed here when nil). Caller holds mu.
func (pl *Pools) poolViewLocked(gp *globalPool, fs *fairShare) *pelotonv1.FederatedPool {
	out := proto.Clone(gp.rec).(*pelotonv1.FederatedPool)
	out.Version = uint64(gp.rev)
	if fs == nil {
		share := pl.f.fairShareLocked()
		fs = &share
	}
	if s := fs.pools[gp.rec.Path]; s != nil {
		out.Global = s.view(fs.capacity)
	}
	for other := range pl.f.pools {
		if parentOf(other) == gp.rec.Path {
			out.Children = append(out.Children, other)
		}
	}
	sort.Strings(out.Children)
	var ent, alloc, demand resources.Resources
	var pending, running uint32
	notes := pl.f.split.Notes[gp.rec.Path]
	for _, name := range sortedKeys(pl.f.clusters) {
		m := pl.f.clusters[name]
		want, wanted := pl.desiredLocked(name, gp.rec.Path)
		have := m.pools[gp.rec.Path]
		if !wanted && have == nil {
			continue
		}
		pc := &pelotonv1.FederatedPoolCluster{Cluster: name}
		if wanted {
			pc.Desired = want
		}
		if have != nil {
			pc.Actual = have.Spec
			pc.Status = have.Status
			if st := have.Status; st != nil {
				e, _ := resources.FromProto(st.Entitlement, "")
				a, _ := resources.FromProto(st.Allocation, "")
				d, _ := resources.FromProto(st.Demand, "")
				ent, alloc, demand = ent.Add(e), alloc.Add(a), demand.Add(d)
				pending += st.PendingTasks
				running += st.RunningTasks
			}
		}
		pc.InSync = wanted == (have != nil) && (!wanted || sameSpec(want, have.Spec))
		switch {
		case !m.checked:
			pc.Message = "not checked yet since the federation started"
		case m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE:
			pc.Message = "cluster unreachable: its part waits for it"
		case !wanted:
			pc.Message = "the cluster gets no part of this pool: to be removed"
		}
		if msg := m.poolMsgs[gp.rec.Path]; msg != "" {
			pc.Message = strings.TrimPrefix(pc.Message+"; "+msg, "; ")
		}
		for _, n := range notes {
			if strings.HasPrefix(n, "cluster "+name+":") {
				pc.Message = strings.TrimPrefix(pc.Message+"; "+n, "; ")
			}
		}
		out.Clusters = append(out.Clusters, pc)
	}
	out.Total = &pelotonv1.PoolStatus{Entitlement: ent.ToProto(), Allocation: alloc.ToProto(), Demand: demand.ToProto(),
		PendingTasks: pending, RunningTasks: running}
	return out
}

// resplitLocked splits the global pool tree again over the clusters that
// are not UNREACHABLE and have been checked (their capacity is known).
// Caller holds mu.
func (pl *Pools) resplitLocked() {
	var clusters []split.Cluster
	of := map[string]resources.Resources{}
	for _, name := range sortedKeys(pl.f.clusters) {
		m := pl.f.clusters[name]
		if m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE || !m.checked {
			continue
		}
		clusters = append(clusters, split.Cluster{Name: name, Capacity: m.capacity})
		of[name] = m.capacity
	}
	pools := make([]split.Pool, 0, len(pl.f.pools))
	for _, path := range sortedKeys(pl.f.pools) {
		gp := pl.f.pools[path]
		if gp.rec.Deleting {
			continue
		}
		pools = append(pools, split.Pool{Path: path, Reservation: gp.res, Limit: gp.limit, Share: gp.share,
			Weights: gp.rec.GetSpec().GetPlacement().GetWeights()})
	}
	pl.f.split = split.Pools(pools, clusters)
	pl.f.splitOf = of
}

// splitStaleLocked reports whether the split was made for other clusters
// or capacities than the ones observed now. Caller holds mu.
func (pl *Pools) splitStaleLocked() bool {
	n := 0
	for name, m := range pl.f.clusters {
		if m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE || !m.checked {
			continue
		}
		n++
		if c, ok := pl.f.splitOf[name]; !ok || c != m.capacity {
			return true
		}
	}
	return n != len(pl.f.splitOf)
}

// splitSettledLocked reports whether every cluster that is not known to be
// unreachable has been checked since start, or enough time passed that
// the ones not checked yet count as unreachable. Until then the split
// would give one cluster what belongs to another that merely has not been
// looked at yet, so no pool is changed. Caller holds mu.
func (pl *Pools) splitSettledLocked(now time.Time) bool {
	if now.Sub(pl.f.startedAt) >= pl.f.opts.UnreachableAfter {
		return true
	}
	for _, m := range pl.f.clusters {
		if !m.checked && m.rec.Health != pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
			return false
		}
	}
	return true
}

// desiredLocked is the pool spec cluster should hold at path, and whether
// it should hold one. Caller holds mu.
func (pl *Pools) desiredLocked(cluster, path string) (*pelotonv1.PoolSpec, bool) {
	gp := pl.f.pools[path]
	if gp == nil || gp.rec.Deleting {
		return nil, false
	}
	cp, ok := pl.f.split.Pools[cluster][path]
	if !ok {
		return nil, false
	}
	limit := cp.Limit
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if limit.Get(k) == math.MaxInt64 {
			limit = limit.Set(k, 0) // unset: unlimited
		}
	}
	spec := &pelotonv1.PoolSpec{Reservation: cp.Reservation.ToProto(), Limit: limit.ToProto()}
	if s := gp.rec.GetSpec().GetShare(); s != nil {
		spec.Share = proto.Clone(s).(*pelotonv1.Resources)
	}
	return spec, true
}

// sameSpec compares pool specs as the cluster reads them.
func sameSpec(a, b *pelotonv1.PoolSpec) bool {
	ar, al, as, aerr := resmgr.ValidatePoolSpec(a)
	br, bl, bs, berr := resmgr.ValidatePoolSpec(b)
	return aerr == nil && berr == nil && ar == br && al == bl && as == bs
}

// poolAction is one change the reconciler makes in a cluster's pool tree.
type poolAction struct {
	kind string // "create", "update", "delete"
	path string
	spec *pelotonv1.PoolSpec
	// drift: the pool was in sync before and someone changed it there.
	drift bool
}

// planPools is the pure part of pool reconciliation: the changes that take
// a cluster's pools (have) to what it should hold (want), over the paths
// the federation owns (owned: every global pool path, deleting ones
// included; a cluster pool outside them is the cluster's own business).
// The order respects the cluster's rule that children reserve no more than
// their parent: first every reservation that shrinks, children first; then
// deletes, children first; then creates and growth, parents first.
func planPools(want map[string]*pelotonv1.PoolSpec, have map[string]*pelotonv1.Pool, owned []string, left map[string]*pelotonv1.PoolSpec) []poolAction {
	sort.Slice(owned, func(i, j int) bool {
		if di, dj := depth(owned[i]), depth(owned[j]); di != dj {
			return di > dj
		}
		return owned[i] < owned[j]
	})
	var shrink, del, grow []poolAction
	for _, path := range owned {
		w, h := want[path], have[path]
		switch {
		case w == nil && h != nil:
			del = append(del, poolAction{kind: "delete", path: path})
		case w != nil && h == nil:
			// Gone although the federation left it there: deleted in the cluster.
			grow = append(grow, poolAction{kind: "create", path: path, spec: w, drift: left[path] != nil})
		case w != nil && !sameSpec(w, h.Spec):
			// Drift is a pool that no longer is what the federation left,
			// not one whose desired state moved on.
			drift := left[path] != nil && !sameSpec(left[path], h.Spec)
			if lower := lowerReservation(h.Spec, w); lower != nil {
				shrink = append(shrink, poolAction{kind: "update", path: path, spec: lower, drift: drift})
				if sameSpec(lower, w) {
					continue // nothing grows: the shrink is the whole change
				}
				drift = false
			}
			grow = append(grow, poolAction{kind: "update", path: path, spec: w, drift: drift})
		}
	}
	// grow parents first: reverse of the children-first order.
	for i, j := 0, len(grow)-1; i < j; i, j = i+1, j-1 {
		grow[i], grow[j] = grow[j], grow[i]
	}
	return append(append(shrink, del...), grow...)
}

// lowerReservation returns the spec want with, in each kind, the smaller
// of have's and want's reservation, when that differs from have's: the
// first half of a change that lowers some kinds and raises others. nil
// when no kind shrinks.
func lowerReservation(have, want *pelotonv1.PoolSpec) *pelotonv1.PoolSpec {
	hr, _, _, err := resmgr.ValidatePoolSpec(have)
	if err != nil {
		return nil
	}
	wr, _, _, _ := resmgr.ValidatePoolSpec(want)
	lo := hr.Min(wr)
	if lo == hr {
		return nil
	}
	out := proto.Clone(want).(*pelotonv1.PoolSpec)
	out.Reservation = lo.ToProto()
	return out
}

// syncPools brings one cluster's pools to their desired state.
func (pl *Pools) syncPools(ctx context.Context, name string, m *member) {
	now := pl.f.opts.Now()
	pl.f.mu.Lock()
	if pl.splitStaleLocked() {
		pl.resplitLocked()
	}
	if !pl.splitSettledLocked(now) || pl.f.clusters[name] != m || m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
		pl.f.mu.Unlock()
		return
	}
	owned := make([]string, 0, len(pl.f.pools))
	want := map[string]*pelotonv1.PoolSpec{}
	for path := range pl.f.pools {
		owned = append(owned, path)
		if spec, ok := pl.desiredLocked(name, path); ok {
			want[path] = spec
		}
	}
	have := m.pools
	if m.synced == nil {
		m.synced = map[string]*pelotonv1.PoolSpec{}
	}
	synced := m.synced
	cli := m.cli
	pl.f.mu.Unlock()

	actions := planPools(want, have, owned, synced)
	versions := make(map[string]uint64, len(have))
	for path, p := range have {
		versions[path] = p.GetVersion()
	}
	msgs := map[string]string{}
	failed := map[string]bool{}
	for _, a := range actions {
		if failed[a.path] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, pl.f.opts.CallTimeout)
		var err error
		switch a.kind {
		case "create":
			_, err = cli.Pools.CreatePool(cctx, &pelotonv1.CreatePoolRequest{Path: a.path, Spec: a.spec})
			if status.Code(err) == codes.AlreadyExists {
				err = nil // created by an earlier pass whose answer was lost; the next check compares it
			}
		case "update":
			// Compare-and-swap on the version this pass read: a change made
			// in the cluster meanwhile fails the update, and the next pass
			// looks again rather than overwriting what it did not see.
			var resp *pelotonv1.UpdatePoolResponse
			resp, err = cli.Pools.UpdatePool(cctx, &pelotonv1.UpdatePoolRequest{Path: a.path, Spec: a.spec, Version: versions[a.path]})
			if err == nil {
				versions[a.path] = resp.GetPool().GetVersion()
			}
		case "delete":
			_, err = cli.Pools.DeletePool(cctx, &pelotonv1.DeletePoolRequest{Path: a.path})
			if status.Code(err) == codes.NotFound {
				err = nil
			}
		}
		cancel()
		if err != nil {
			failed[a.path] = true
			msgs[a.path] = fmt.Sprintf("%s in the cluster failed: %s", a.kind, status.Convert(err).Message())
			pl.f.log.Warn("cannot bring a cluster's pool to its desired state", "cluster", name, "pool", a.path, "action", a.kind, "err", status.Convert(err).Message())
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if a.drift {
			pl.f.log.Warn("repaired a pool changed in its cluster", "cluster", name, "pool", a.path)
			metrics.FederationPoolRepairs.WithLabelValues(name).Inc()
			msgs[a.path] = "repaired at " + pl.f.opts.Now().UTC().Format(time.RFC3339) + ": the pool had been changed in the cluster"
		}
		pl.f.log.Debug("pool brought to its desired state", "cluster", name, "pool", a.path, "action", a.kind)
	}
	pl.f.mu.Lock()
	defer pl.f.mu.Unlock()
	if m.poolMsgs == nil {
		m.poolMsgs = map[string]string{}
	}
	for path := range m.poolMsgs {
		if _, still := msgs[path]; !still && !strings.HasPrefix(m.poolMsgs[path], "repaired") {
			delete(m.poolMsgs, path)
		}
	}
	for path, msg := range msgs {
		m.poolMsgs[path] = msg
	}
	// What was not acted on, or acted on without error, is as desired now.
	for path := range synced {
		delete(synced, path)
	}
	for path, spec := range want {
		if !failed[path] {
			synced[path] = spec
		}
	}
	pl.notePropagatedLocked(name, want, failed)
	pl.forgetDeletedLocked(have, failed, name)
}

// notePropagatedLocked observes, for every global pool changed since it
// last reached this cluster, how long the change took to get there.
func (pl *Pools) notePropagatedLocked(name string, want map[string]*pelotonv1.PoolSpec, failed map[string]bool) {
	for path := range want {
		gp := pl.f.pools[path]
		if gp == nil || gp.changed.IsZero() || failed[path] || gp.reached[name] {
			continue
		}
		if gp.reached == nil {
			gp.reached = map[string]bool{}
		}
		gp.reached[name] = true
		metrics.FederationPoolPropagation.Observe(pl.f.opts.Now().Sub(gp.changed).Seconds())
	}
}

// forgetDeletedLocked drops a deleting global pool once no reachable
// cluster holds it any more. Caller holds mu; the delete is written
// asynchronously (goLocked), and one Close cuts short is written by a
// later check.
func (pl *Pools) forgetDeletedLocked(have map[string]*pelotonv1.Pool, failed map[string]bool, name string) {
	for path, gp := range pl.f.pools {
		if !gp.rec.Deleting || failed[path] {
			continue
		}
		gone := true
		// Every registered cluster must have been seen without it, an
		// unreachable one included: a pool forgotten while a cluster was
		// away would stay in that cluster for good, no longer owned.
		for _, m := range pl.f.clusters {
			if !m.checked {
				gone = false
				break
			}
			if _, holds := m.pools[path]; holds && (m.rec.Name != name || failed[path]) {
				gone = false
				break
			}
		}
		if !gone {
			continue
		}
		rev := gp.rev
		key := poolKey(path)
		pl.f.goLocked(func(ctx context.Context) {
			if _, err := pl.f.st.Txn(ctx, store.Delete(key, rev)); err != nil {
				if errors.Is(err, store.ErrConflict) {
					return // another worker forgot it first
				}
				pl.f.log.Warn("cannot forget a deleted global pool; retried at the next check", "pool", path, "err", err)
				return
			}
			pl.f.mu.Lock()
			if cur := pl.f.pools[path]; cur != nil && cur.rev == rev {
				delete(pl.f.pools, path)
			}
			pl.f.mu.Unlock()
			pl.f.log.Info("global pool deleted from every cluster", "pool", path)
		})
	}
}
