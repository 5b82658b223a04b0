package resmgr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/casapply"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

const poolKeyPrefix = "pools"

// RunTaskID names one run of one instance.
// It is on every hot path (map keys, events), so it avoids fmt.
func RunTaskID(jobID string, instance, run uint32) string {
	return InstanceKey(jobID, instance) + "-" + strconv.FormatUint(uint64(run), 10)
}

// InstanceKey names one instance of a job.
func InstanceKey(jobID string, instance uint32) string {
	return jobID + "-" + strconv.FormatUint(uint64(instance), 10)
}

// Placement is a decision to run one task on one host.
type Placement struct {
	Task *Task
	Host string
	// Peers, for a member of a gang placed together, is the host of every
	// member placed with it, by instance (it included), so that each can be
	// told where the others run before any of them starts. Nil for a task
	// placed alone. The gang's placements share it: never modify it.
	Peers map[uint32]string
}

type taskState struct {
	task   *Task
	gang   *Gang
	state  pelotonv1.TaskState
	reason string
	// admittedAt orders victims: the most recently admitted goes first.
	admittedAt time.Time
	// preempting is set once the task is chosen as a victim.
	preempting bool
}

// Manager owns the pool tree and the queues. It is safe for concurrent use.
type Manager struct {
	store                   store.Store
	log                     *slog.Logger
	now                     func() time.Time
	backoffBase, backoffMax time.Duration
	gate                    reclaimGate

	// poolMu serializes changes of the pool tree (create, update, delete,
	// move) and is held across their store.Txn and the jobmgr callback
	// hasJobs. mu, which admission, placement and every task event take, is
	// never held across either: a slow etcd must not stall scheduling, and
	// jobmgr calls resmgr under its own lock, so calling back into jobmgr
	// under mu could deadlock. Lock order: poolMu, then mu.
	//
	// A tree change validates under mu, freezes the pools whose shape it
	// depends on (see Pool.frozen), writes etcd with mu released, then
	// applies to memory under mu (the three steps of casapply.Do). Only
	// tree changes alter the tree's shape, reservations and revisions, so
	// what was validated still holds.
	poolMu  sync.Mutex
	hasJobs func(pool string) bool // guarded by poolMu
	// freshDefault is the revision of /default when New created it on an
	// empty tree, until ReserveHostsForDefault used it; 0 otherwise.
	// Guarded by poolMu.
	freshDefault int64

	// mu guards the tree and the tasks below; a method named ...Locked
	// needs it held (poolMu, above, is the pool changes' turn).
	mu       sync.Mutex
	root     *Pool
	pools    map[string]*Pool
	tasks    map[instKey]*taskState
	capacity resources.Resources
	ready    []*Gang // admitted, waiting for placement, in order
	placed   []Placement
	victims  []Victim

	// partCap is the capacity of each host partition (SetPartitionCapacity;
	// nil when only the total is known), and partAlloc what admitted tasks
	// that target a partition hold in it: work that targets a partition
	// is admitted against that partition's hosts only. Guarded by mu.
	partCap   resources.ByPartition
	partAlloc map[string]resources.Resources
	// slack is the cluster's slack (SetSlack): what revocable work may
	// hold in all. Guarded by mu.
	slack resources.Resources

	held       map[*Gang]struct{}
	hostRes    hostResBook
	admitKick  chan struct{}
	readyCond  *sync.Cond
	placedCond *sync.Cond
	victimCond *sync.Cond
	closed     bool
}

// Options tunes a Manager.
type Options struct {
	Logger *slog.Logger
	// BackoffBase and BackoffMax bound the delay before a gang that failed
	// placement is tried again (doubling per attempt).
	BackoffBase, BackoffMax time.Duration
	// ReclaimDelay is how long a pool must wait for its entitled share
	// before other pools are preempted for it (default 1s): the hysteresis
	// that keeps short bursts from causing churn.
	ReclaimDelay time.Duration
	// ReservationAfter is how long a gang that cannot fit waits before
	// hosts are set aside for it (hostres.go; default
	// DefaultReservationAfter, negative: never).
	ReservationAfter time.Duration
	// Now is the clock (default time.Now); tests pass their own.
	Now func() time.Time
}

// New loads the pool tree from st, creating /default when the tree is empty.
func New(ctx context.Context, st store.Store, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase = 100 * time.Millisecond
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = 5 * time.Second
	}
	if opts.ReclaimDelay == 0 {
		opts.ReclaimDelay = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Manager{
		store: st, log: opts.Logger.With("component", "resmgr"), now: opts.Now, hostRes: newHostResBook(opts.ReservationAfter),
		backoffBase: opts.BackoffBase, backoffMax: opts.BackoffMax,
		pools: map[string]*Pool{}, tasks: map[instKey]*taskState{}, held: map[*Gang]struct{}{},
		admitKick: make(chan struct{}, 1),
		gate:      reclaimGate{delay: opts.ReclaimDelay, since: map[string]time.Time{}},
	}
	m.readyCond = sync.NewCond(&m.mu)
	m.placedCond = sync.NewCond(&m.mu)
	m.victimCond = sync.NewCond(&m.mu)
	m.root = &Pool{Path: RootPath, children: map[string]*Pool{}, Limit: resources.Unlimited, queue: newPriorityQueue(), admitted: map[instKey]*taskState{}}
	m.pools[RootPath] = m.root
	kvs, err := st.List(ctx, poolKeyPrefix+"/")
	if err != nil {
		return nil, fmt.Errorf("resmgr: load pools: %w", err)
	}
	// Parents sort before children because a parent path is a prefix.
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].Key < kvs[j].Key })
	for _, kv := range kvs {
		spec := &pelotonv1.PoolSpec{}
		err := proto.Unmarshal(kv.Value, spec)
		if err == nil {
			_, _, _, err = specToNode(spec)
		}
		if err != nil {
			// A pool its children and jobs are in cannot simply go: it is
			// moved aside with an empty spec (no reservation, no limit)
			// written in its place, and an operator sets its spec again.
			_, rev, qerr := quarantine.Replace(ctx, st, m.log, kv, err, []byte{})
			if qerr != nil {
				return nil, fmt.Errorf("resmgr: %w", qerr)
			}
			spec, kv.Revision = &pelotonv1.PoolSpec{}, rev
		}
		path := strings.TrimPrefix(kv.Key, poolKeyPrefix)
		if _, err := m.attach(path, spec, kv.Revision); err != nil {
			return nil, fmt.Errorf("resmgr: load pool %s: %w", path, err)
		}
	}
	if len(kvs) == 0 {
		p, err := m.CreatePool(ctx, DefaultPoolPath, &pelotonv1.PoolSpec{})
		if err != nil && apierr.Code(err) != codes.AlreadyExists {
			return nil, fmt.Errorf("resmgr: create %s: %w", DefaultPoolPath, err)
		}
		if err == nil {
			m.freshDefault = int64(p.Version)
		}
	}
	return m, nil
}

// attach adds a pool node under its (existing) parent. Caller holds mu or is New.
func (m *Manager) attach(path string, spec *pelotonv1.PoolSpec, rev int64) (*Pool, error) {
	parent, ok := m.pools[parentPath(path)]
	if !ok {
		return nil, apierr.NotFound("parent pool %s does not exist", parentPath(path))
	}
	res, limit, share, err := specToNode(spec)
	if err != nil {
		return nil, err
	}
	p := &Pool{Path: path, parent: parent, children: map[string]*Pool{}, spec: spec, revision: rev,
		Reservation: res, Limit: limit, Share: share, queue: newPriorityQueue(), admitted: map[instKey]*taskState{}}
	parent.children[path] = p
	m.pools[path] = p
	return p, nil
}

// checkReservations verifies that the children of parent, with child's
// reservation replaced by res, do not reserve more than parent does.
func (m *Manager) checkReservations(parent *Pool, childPath string, res resources.Resources) error {
	if parent == m.root {
		return nil // the root's reservation is the whole cluster, which changes as hosts come and go
	}
	sum := res
	for path, c := range parent.children {
		if path != childPath {
			sum = sum.Add(c.Reservation)
		}
	}
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if sum.Get(k) > parent.Reservation.Get(k) {
			return apierr.Invalid("spec.reservation."+k.String(),
				"children of %s would reserve %s %s in all, more than its reservation of %s %s; raise the reservation of %s first",
				parent.Path, resources.FormatAmount(k, sum.Get(k)), k, resources.FormatAmount(k, parent.Reservation.Get(k)), k, parent.Path)
		}
	}
	return nil
}

// poolRequest checks the path and spec of a create or update: a normalized
// non-root path and a valid spec, converted to integers.
func poolRequest(path string, spec *pelotonv1.PoolSpec, rootReason string) (string, *pelotonv1.PoolSpec, [3]resources.Resources, error) {
	var r [3]resources.Resources
	path, err := NormalizePath(path, "path")
	if err != nil {
		return "", nil, r, err
	}
	if path == RootPath {
		return "", nil, r, apierr.Invalid("path", "%s", rootReason)
	}
	if spec == nil {
		spec = &pelotonv1.PoolSpec{}
	}
	r[0], r[1], r[2], err = specToNode(spec)
	return path, spec, r, err
}

// hasTasks reports whether a pool holds queued or admitted tasks. Caller holds mu.
func (m *Manager) hasTasks(p *Pool) bool {
	return p.queue.size > 0 || p.runningTasks > 0
}

// checkNoJobs asks jobmgr whether any of paths holds jobs; a pool with jobs
// may not get children, be deleted or be moved. what completes the error.
// Caller holds poolMu and not mu: jobmgr answers under its own lock.
func (m *Manager) checkNoJobs(what string, paths ...string) error {
	if m.hasJobs == nil {
		return nil
	}
	for _, path := range paths {
		if m.hasJobs(path) {
			return apierr.FailedPrecondition("pool %s has jobs; %s", path, what)
		}
	}
	return nil
}

// freeze marks pools as being changed: CheckLeafPool and Enqueue refuse them
// until thaw, so no job or task arrives in a pool between the checks of a
// tree change and its commit. Caller holds mu.
func freeze(ps ...*Pool) {
	for _, p := range ps {
		p.frozen = true
	}
}

// thaw ends a freeze. It takes mu.
func (m *Manager) thaw(ps ...*Pool) {
	m.mu.Lock()
	for _, p := range ps {
		p.frozen = false
	}
	m.mu.Unlock()
}

// ambiguousTimeout bounds how long a tree change whose Txn failed without
// an answer reads etcd back to learn whether it was applied.
const ambiguousTimeout = 5 * time.Second

// txnOutcome runs ops and, when etcd gives no clear answer (an error that
// is not a conflict: a timeout, a dropped connection), reads back probe,
// the key whose value tells whether the Txn was applied (applied compares
// the record found, nil when absent). It returns the revision when the Txn
// was applied, ErrConflict when it was not because of a compare, or an
// error when it was not applied or the outcome cannot be learned. Memory
// is changed only on success, so memory follows etcd in every outcome but
// the last, which is logged loudly and reported as Unavailable.
func (m *Manager) txnOutcome(ctx context.Context, probe string, applied func(*store.KV) (int64, bool), ops ...store.Op) (int64, error) {
	rev, err := m.store.Txn(ctx, ops...)
	if err == nil || errors.Is(err, store.ErrConflict) {
		return rev, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ambiguousTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		kv, gerr := m.store.Get(rctx, probe)
		switch {
		case gerr == nil:
			if rev, ok := applied(&kv); ok {
				return rev, nil
			}
			return 0, err
		case errors.Is(gerr, store.ErrNotFound):
			if rev, ok := applied(nil); ok {
				return rev, nil
			}
			return 0, err
		}
		select {
		case <-rctx.Done():
			m.log.Error("pool change: outcome unknown; restart resmgr to reload the pool tree", "key", probe, "err", err, "read", gerr)
			return 0, fmt.Errorf("%w (and reading it back failed: %v; the change may or may not be stored)", err, gerr)
		case <-time.After(time.Duration(50<<min(attempt, 5)) * time.Millisecond):
		}
	}
}

// CreatePool validates and stores a new pool. Its parent must exist.
func (m *Manager) CreatePool(ctx context.Context, path string, spec *pelotonv1.PoolSpec) (*pelotonv1.Pool, error) {
	return m.createPool(ctx, path, spec, nil)
}

// CreatePoolOnce is CreatePool made safe to retry by rq (see package
// requestid): if rq was carried out before it returns the pool it created,
// as it is now, and creates nothing; otherwise the pool and rq's record are
// stored in one transaction.
func (m *Manager) CreatePoolOnce(ctx context.Context, path string, spec *pelotonv1.PoolSpec, rq requestid.Request) (*pelotonv1.Pool, error) {
	o, err := requestid.Lookup(ctx, m.store, rq, m.now())
	if err == nil && !o.Done {
		var p *pelotonv1.Pool
		p, err = m.createPool(ctx, path, spec, func(path string) []store.Op { return o.Ops(rq, path, m.now()) })
		if err == nil {
			return p, nil
		}
		o, err = requestid.Recheck(ctx, m.store, rq, m.now(), err)
	}
	if err != nil {
		return nil, err
	}
	// A create of the same request may have committed and still be
	// putting the pool in memory: it holds poolMu until it has.
	m.poolMu.Lock()
	//lint:ignore SA2001 taking the lock is the wait for that create; nothing is read under it.
	m.poolMu.Unlock()
	p, err := m.GetPool(o.Object)
	if apierr.Code(err) == codes.NotFound {
		return nil, apierr.FailedPrecondition("%s: %q created pool %s, which has since been deleted", requestid.Field, rq.ID, o.Object)
	}
	return p, err
}

// createPool validates and stores a new pool; with(path), if set, are more
// writes for the pool's own transaction.
func (m *Manager) createPool(ctx context.Context, path string, spec *pelotonv1.PoolSpec, with func(path string) []store.Op) (*pelotonv1.Pool, error) {
	path, spec, r, err := poolRequest(path, spec, "the root pool / always exists and cannot be created")
	if err != nil {
		return nil, err
	}
	res := r[0]
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	// The parent stays frozen from the check until the pool is in memory
	// (or the change failed).
	var frozen *Pool
	defer func() {
		if frozen != nil {
			m.thaw(frozen)
		}
	}()
	return casapply.Do(ctx, &m.mu, casapply.Change[*Pool, *pelotonv1.Pool]{
		Check: func() (*Pool, error) {
			parent, err := m.checkCreate(path)
			if err != nil {
				return nil, err
			}
			freeze(parent)
			frozen = parent
			return parent, nil
		},
		Write: func(ctx context.Context, parent *Pool) (int64, error) {
			if parent != m.root {
				if err := m.checkNoJobs("a pool with jobs cannot get children", parent.Path); err != nil {
					return 0, err
				}
			}
			// Reservations change only under poolMu, which this holds.
			if err := m.checkReservations(parent, path, res); err != nil {
				return 0, err
			}
			val, err := proto.Marshal(spec)
			if err != nil {
				return 0, fmt.Errorf("resmgr: encode pool %s: %w", path, err)
			}
			key := poolKeyPrefix + path
			ops := []store.Op{store.Put(key, val, store.MustNotExist)}
			if with != nil {
				ops = append(ops, with(path)...)
			}
			rev, err := m.txnOutcome(ctx, key, func(kv *store.KV) (int64, bool) {
				if kv == nil || !bytes.Equal(kv.Value, val) {
					return 0, false
				}
				return kv.Revision, true
			}, ops...)
			if errors.Is(err, store.ErrConflict) {
				return 0, apierr.AlreadyExists("pool %s already exists", path)
			}
			if err != nil {
				return 0, apierr.Unavailable("store pool %s: %v", path, err)
			}
			return rev, nil
		},
		Apply: func(_ *Pool, rev int64) (*pelotonv1.Pool, error) {
			p, err := m.attach(path, proto.Clone(spec).(*pelotonv1.PoolSpec), rev)
			if err != nil {
				return nil, err // cannot happen: poolMu kept the parent
			}
			m.kick()
			m.log.Info("pool created", "path", path)
			return p.toProto(true), nil
		},
	})
}

// checkCreate validates the place of a new pool at path in the tree and
// returns its parent. Caller holds mu.
func (m *Manager) checkCreate(path string) (*Pool, error) {
	if _, ok := m.pools[path]; ok {
		return nil, apierr.AlreadyExists("pool %s already exists", path)
	}
	parent, ok := m.pools[parentPath(path)]
	if !ok {
		return nil, apierr.NotFound("path: parent pool %s does not exist; create %s first (pools are created parent first)", parentPath(path), parentPath(path))
	}
	if parent != m.root && m.hasTasks(parent) {
		return nil, apierr.FailedPrecondition("pool %s has jobs; a pool with jobs cannot get children", parent.Path)
	}
	return parent, nil
}

// UpdatePool replaces a pool's spec. version, when non-zero, must match.
func (m *Manager) UpdatePool(ctx context.Context, path string, spec *pelotonv1.PoolSpec, version uint64) (*pelotonv1.Pool, error) {
	path, spec, r, err := poolRequest(path, spec, "the root pool / is the whole cluster and has no spec")
	if err != nil {
		return nil, err
	}
	res, limit, share := r[0], r[1], r[2]
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	return casapply.Do(ctx, &m.mu, casapply.Change[poolAt, *pelotonv1.Pool]{
		Check: func() (poolAt, error) {
			p, rev0, err := m.checkUpdate(path, res, version)
			return poolAt{p, rev0}, err
		},
		Write: func(ctx context.Context, at poolAt) (int64, error) {
			val, err := proto.Marshal(spec)
			if err != nil {
				return 0, fmt.Errorf("resmgr: encode pool %s: %w", path, err)
			}
			key := poolKeyPrefix + path
			rev, err := m.txnOutcome(ctx, key, func(kv *store.KV) (int64, bool) {
				if kv == nil || kv.Revision == at.rev || !bytes.Equal(kv.Value, val) {
					return 0, false
				}
				return kv.Revision, true
			}, store.Put(key, val, at.rev))
			if errors.Is(err, store.ErrConflict) {
				return 0, apierr.Aborted("pool %s changed concurrently; retry", path)
			}
			if err != nil {
				return 0, apierr.Unavailable("store pool %s: %v", path, err)
			}
			return rev, nil
		},
		Apply: func(at poolAt, rev int64) (*pelotonv1.Pool, error) {
			p := at.pool
			p.spec, p.revision = proto.Clone(spec).(*pelotonv1.PoolSpec), rev
			p.Reservation, p.Limit, p.Share = res, limit, share
			m.kick()
			return p.toProto(true), nil
		},
	})
}

// poolAt is a pool a check found and the revision it found it at, for the
// write's compare-and-swap.
type poolAt struct {
	pool *Pool
	rev  int64
}

// checkUpdate validates a new reservation of the pool at path against its
// parent and children and returns the pool and its revision. Caller holds mu.
func (m *Manager) checkUpdate(path string, res resources.Resources, version uint64) (*Pool, int64, error) {
	p, ok := m.pools[path]
	if !ok {
		return nil, 0, apierr.NotFound("pool %s does not exist", path)
	}
	if version != 0 && int64(version) != p.revision {
		return nil, 0, apierr.Aborted("pool %s is at version %d, not %d", path, p.revision, version)
	}
	if err := m.checkReservations(p.parent, path, res); err != nil {
		return nil, 0, err
	}
	var childRes resources.Resources
	for _, c := range p.children {
		childRes = childRes.Add(c.Reservation)
	}
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if len(p.children) > 0 && childRes.Get(k) > res.Get(k) {
			return nil, 0, apierr.Invalid("spec.reservation."+k.String(), "must be >= %s, what the children of %s reserve", resources.FormatAmount(k, childRes.Get(k)), path)
		}
	}
	return p, p.revision, nil
}

// DeletePool removes a leaf pool that holds no jobs and no tasks.
func (m *Manager) DeletePool(ctx context.Context, path string) error {
	path, err := NormalizePath(path, "path")
	if err != nil {
		return err
	}
	if path == RootPath {
		return apierr.Invalid("path", "the root pool / cannot be deleted")
	}
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	var frozen *Pool
	defer func() {
		if frozen != nil {
			m.thaw(frozen)
		}
	}()
	_, err = casapply.Do(ctx, &m.mu, casapply.Change[*Pool, struct{}]{
		Check: func() (*Pool, error) {
			p, ok := m.pools[path]
			switch {
			case !ok:
				return nil, apierr.NotFound("pool %s does not exist", path)
			case !p.IsLeaf():
				return nil, apierr.FailedPrecondition("pool %s has child pools %s; delete them first", path, strings.Join(p.Children(), ", "))
			case m.hasTasks(p):
				return nil, apierr.FailedPrecondition("pool %s has jobs; delete them first", path)
			}
			freeze(p)
			frozen = p
			return p, nil
		},
		Write: func(ctx context.Context, p *Pool) (int64, error) {
			if err := m.checkNoJobs("delete them first", path); err != nil {
				return 0, err
			}
			key := poolKeyPrefix + path
			rev, err := m.txnOutcome(ctx, key, func(kv *store.KV) (int64, bool) { return 0, kv == nil },
				store.Delete(key, p.revision))
			if errors.Is(err, store.ErrConflict) {
				return 0, apierr.Aborted("pool %s changed concurrently; retry", path)
			}
			if err != nil {
				return 0, apierr.Unavailable("delete pool %s: %v", path, err)
			}
			return rev, nil
		},
		Apply: func(p *Pool, _ int64) (struct{}, error) {
			delete(p.parent.children, path)
			delete(m.pools, path)
			m.kick()
			return struct{}{}, nil
		},
	})
	if err != nil {
		return err
	}
	m.log.Info("pool deleted", "path", path)
	return nil
}

// SetJobChecker installs the function that says whether a pool still has
// jobs (jobmgr owns jobs; resmgr must not import it). resmgr calls it only
// while changing the pool tree, never under the lock its hot paths take.
func (m *Manager) SetJobChecker(fn func(pool string) bool) {
	m.poolMu.Lock()
	m.hasJobs = fn
	m.poolMu.Unlock()
}

// GetPool returns a pool with its status.
func (m *Manager) GetPool(path string) (*pelotonv1.Pool, error) {
	path, err := NormalizePath(path, "path")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[path]
	if !ok {
		return nil, apierr.NotFound("pool %s does not exist", path)
	}
	return p.toProto(true), nil
}

// ListPools returns every pool, root first, in path order.
func (m *Manager) ListPools() []*pelotonv1.Pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pelotonv1.Pool, 0, len(m.pools))
	for _, p := range m.pools {
		out = append(out, p.toProto(true))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// CheckLeafPool returns nil if path names an existing leaf pool, or the
// error a job submission should get. field names the request field.
func (m *Manager) CheckLeafPool(path, field string) (string, error) {
	norm, err := NormalizePath(path, field)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[norm]
	if !ok {
		return "", apierr.NotFound("%s: pool %s does not exist", field, norm)
	}
	if !p.IsLeaf() || p == m.root {
		return "", apierr.FailedPrecondition("%s: pool %s is not a leaf pool; jobs go to leaf pools", field, norm)
	}
	if p.frozen {
		return "", apierr.Unavailable("%s: pool %s is being changed (created under, moved or deleted); retry", field, norm)
	}
	return norm, nil
}

// ReserveHostsForDefault makes /default reserve capacity (what the hosts
// have), once, when this manager created /default on an empty tree: the
// first start of a cluster. Without it a newcomer's first non-preemptible
// service pends for ever, since non-preemptible work runs only inside a
// reservation and an out-of-the-box /default reserves nothing. It writes at
// most once and only over the spec it created itself (version-checked), so
// it never overwrites what an operator set, and later starts, which find
// the tree, leave /default alone. `peloton up` calls it; a production
// `serve cluster` leaves reservations to the operator.
func (m *Manager) ReserveHostsForDefault(ctx context.Context, capacity resources.Resources) error {
	m.poolMu.Lock()
	rev := m.freshDefault
	m.freshDefault = 0
	m.poolMu.Unlock()
	if rev == 0 || capacity.IsZero() {
		return nil
	}
	_, err := m.UpdatePool(ctx, DefaultPoolPath, &pelotonv1.PoolSpec{Reservation: capacity.ToProto()}, uint64(rev))
	switch apierr.Code(err) {
	case codes.OK:
		m.log.Info("pool /default reserves what the hosts have (first start)", "reservation", capacity.String())
		return nil
	case codes.Aborted, codes.NotFound:
		return nil // changed or deleted by an operator already: theirs wins
	}
	return err
}

// SetCapacity tells resmgr the cluster's total capacity, not split by
// partition: work that targets a partition is then admitted against the
// total only.
func (m *Manager) SetCapacity(c resources.Resources) {
	m.mu.Lock()
	changed := m.capacity != c || m.partCap != nil
	m.capacity, m.partCap = c, nil
	m.mu.Unlock()
	if changed {
		m.HostsChanged()
	}
}

// SetPartitionCapacity tells resmgr the capacity of the hosts in service,
// by partition (hostmgr's Options.OnCapacity). The cluster's capacity is
// their total.
func (m *Manager) SetPartitionCapacity(c resources.ByPartition) {
	m.mu.Lock()
	changed := m.partCap == nil || !m.partCap.Equal(c)
	m.partCap = make(resources.ByPartition, len(c))
	for k, r := range c {
		m.partCap[k] = r
	}
	m.capacity = c.Total()
	m.mu.Unlock()
	if changed {
		m.HostsChanged()
	}
}

// SetSlack tells resmgr the cluster's slack, what revocable work may hold
// in all (hostmgr's Options.OnSlack): the resources other work holds but
// does not use, as the host agents measure them.
func (m *Manager) SetSlack(s resources.Resources) {
	m.mu.Lock()
	grew := !s.FitsIn(m.slack)
	m.slack = s
	m.mu.Unlock()
	if grew {
		m.kick()
	}
}

func (m *Manager) kick() {
	select {
	case m.admitKick <- struct{}{}:
	default:
	}
}

// addUsage walks from a leaf to the root adding delta (which may be
// subtracted by passing neg=true) to the chosen counter.
func walkUp(p *Pool, fn func(*Pool)) {
	for ; p != nil; p = p.parent {
		fn(p)
	}
}

// Enqueue adds gangs to their pools' pending queues. Every task must name an
// existing leaf pool; a task already known to resmgr is an error.
func (m *Manager) Enqueue(gangs ...*Gang) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range gangs {
		p, ok := m.pools[g.Pool]
		if !ok || !p.IsLeaf() {
			return fmt.Errorf("resmgr: pool %s is not a leaf pool", g.Pool)
		}
		if p.frozen {
			return fmt.Errorf("resmgr: pool %s is being changed (created under, moved or deleted)", g.Pool)
		}
		for _, t := range g.Tasks {
			if old, dup := m.tasks[t.key()]; dup && old.task.RunID >= t.RunID {
				return fmt.Errorf("resmgr: task %s is already queued", t.Key())
			}
		}
	}
	// A newer run of an instance supersedes an older one still known here
	// (its end may be reported a moment after the new run is queued).
	for _, g := range gangs {
		for _, t := range g.Tasks {
			if old, ok := m.tasks[t.key()]; ok && old.task.RunID < t.RunID {
				m.releaseLocked(t.JobID, t.Instance)
			}
		}
	}
	now := m.now()
	for _, g := range gangs {
		p := m.pools[g.Pool]
		g.enqueued = now
		if ws := g.WaitingSince; !ws.IsZero() && ws.Before(now) {
			g.enqueued = ws
		}
		p.queue.push(g)
		for _, t := range g.Tasks {
			m.tasks[t.key()] = &taskState{task: t, gang: g, state: pelotonv1.TaskState_PENDING, reason: "waiting for admission in pool " + g.Pool}
		}
		walkUp(p, func(n *Pool) { n.Pending = n.Pending.Add(g.Resources); n.pendingTasks += len(g.Tasks) })
	}
	metrics.QueueDepth.WithLabelValues("pending").Add(float64(countTasks(gangs)))
	m.kick()
	return nil
}

func countTasks(gangs []*Gang) int {
	n := 0
	for _, g := range gangs {
		n += len(g.Tasks)
	}
	return n
}

// admitOnce recomputes entitlements, moves every gang that may run now from
// the pending queues to the ready queue, and plans preemptions for pools
// that wait for their entitled share. A gang that does not fit does not
// block the gangs behind it. It returns how many gangs were admitted.
func (m *Manager) admitOnce() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	ComputeEntitlement(m.root, m.capacity)
	admitted := 0
	leaves := make([]*Pool, 0, len(m.pools))
	for _, p := range m.pools {
		if p != m.root && p.IsLeaf() {
			leaves = append(leaves, p)
		}
	}
	sort.Slice(leaves, func(i, j int) bool { return leaves[i].Path < leaves[j].Path })
	now := m.now()
	var waiting []*Pool
	type blocked struct {
		p       *Pool
		g       *Gang
		ceiling resources.Resources
	}
	var byPriority []blocked
	// Shapes already refused in this pass: a gang that needs at least as
	// much as a refused one is refused for the same reason without being
	// checked again. Batch jobs queue thousands of identical tasks, so this
	// keeps a pass over a large backlog linear and cheap. Capacity refusals
	// hold for every pool; the others only within one pool.
	var fullCluster []refusal
	var cands []*Gang // refused gangs, for host reservations
	for _, p := range leaves {
		if p.queue.size == 0 {
			continue
		}
		isWaiting, sawEntitlementBlock := false, false
		var refused []refusal
		p.queue.each(func(g *Gang) bool {
			if g.heldUntil.After(now) {
				return true // no host could take it; see ReturnGangUnresolvable
			}
			delete(m.held, g)
			block, reason := blockNone, ""
			if r, ok := findRefusal(refused, fullCluster, g); ok && r.shape == g.Resources {
				block, reason = r.kind, r.reason
			} else if ok {
				// Refused for sure, but the reason names amounts, which
				// differ for a larger gang: ask again for its own words.
				block, reason = m.admissible(p, g)
			} else {
				block, reason = m.admissible(p, g)
				switch {
				case block == blockCapacity && len(fullCluster) < maxRefusals:
					fullCluster = append(fullCluster, refusal{g.Resources, g.Tasks[0].Preemptible, block, reason, ""})
				case block != blockNone && len(refused) < maxRefusals:
					refused = append(refused, refusal{g.Resources, g.Tasks[0].Preemptible, block, reason, refusalPartition(block, g)})
				}
			}
			if waitsForRoom(block) && m.hostRes.completeFor(g) {
				block = blockNone // its reserved hosts hold it; their backfill is being preempted
			}
			g.block = block
			if block != blockNone {
				if m.hostRes.after >= 0 && m.hostRes.byPool[p.Path] == nil {
					cands = append(cands, g)
				}
				if block == blockCapacity {
					isWaiting = true
				}
				if (block == blockEntitlement || block == blockLimit) && !sawEntitlementBlock {
					// The pool's most important waiting gang that its
					// entitlement, or its own limit, cannot take: it may
					// displace lower priorities of the pool.
					sawEntitlementBlock = true
					ceiling := p.Entitlement
					if block == blockLimit {
						ceiling = p.Limit
					}
					byPriority = append(byPriority, blocked{p, g, ceiling})
				}
				for _, t := range g.Tasks {
					m.tasks[t.key()].reason = reason
				}
				return true
			}
			p.queue.remove(g)
			walkUp(p, func(n *Pool) {
				n.Pending = n.Pending.Sub(g.Resources)
				n.pendingTasks -= len(g.Tasks)
			})
			for _, t := range g.Tasks {
				ts := m.tasks[t.key()]
				ts.state, ts.reason, ts.admittedAt = pelotonv1.TaskState_READY, "waiting for placement", now
				m.hold(p, ts, true)
			}
			metrics.AdmissionLatency.Observe(now.Sub(g.enqueued).Seconds())
			m.ready = append(m.ready, g)
			admitted++
			return true
		})
		if isWaiting {
			waiting = append(waiting, p)
		}
	}
	if admitted > 0 {
		m.readyCond.Broadcast()
	}
	m.hostRes.choose(cands, m.ready, now)
	// Reclaim first (across pools), then priority (inside a pool); a task
	// chosen once is not chosen again.
	m.markVictims(planReclaim(leaves, m.gate.ready(waiting, now)))
	for _, b := range byPriority {
		if !b.g.Tasks[0].Preemptible {
			continue // non-preemptible work waits for its reservation, never displaces
		}
		m.markVictims(planPriority(b.p, b.g, b.ceiling))
	}
	return admitted
}

// refusal remembers a gang shape that admission refused in this pass.
type refusal struct {
	shape       resources.Resources
	preemptible bool
	kind        blockKind
	reason      string
	// partition is set for a blockPartition refusal, which holds only for
	// gangs that target the same partition.
	partition string
}

// refusalPartition is the partition a refusal of kind block for g holds in.
func refusalPartition(block blockKind, g *Gang) string {
	if block == blockPartition {
		return g.Tasks[0].Placement.GetPartition()
	}
	return ""
}

// maxRefusals bounds the shapes remembered per pool and pass.
const maxRefusals = 8

// findRefusal returns a remembered refusal that also applies to g: same
// preemptibility (which decides the rule that applies) and a shape g needs
// at least as much as in every kind. Revocable gangs are always checked.
func findRefusal(pool, cluster []refusal, g *Gang) (refusal, bool) {
	if g.Tasks[0].Revocable {
		return refusal{}, false
	}
	pre := g.Tasks[0].Preemptible
	for _, list := range [][]refusal{pool, cluster} {
		for _, r := range list {
			if r.preemptible == pre && r.shape.FitsIn(g.Resources) &&
				(r.partition == "" || r.partition == g.Tasks[0].Placement.GetPartition()) {
				return r, true
			}
		}
	}
	return refusal{}, false
}

// markVictims records victims as being preempted and hands them to jobmgr.
// A victim that belongs to a gang takes its whole gang with it: no partial
// gang may keep running.
func (m *Manager) markVictims(vs []Victim) {
	for i := 0; i < len(vs); i++ {
		v := vs[i]
		if ts, ok := m.tasks[v.Task.key()]; ok && !ts.preempting && len(ts.gang.Tasks) > 1 {
			for _, t := range ts.gang.Tasks {
				if o, ok := m.tasks[t.key()]; ok && o != ts && o.gang == ts.gang && !o.preempting {
					vs = append(vs, Victim{Task: t, Reason: v.Reason, Detail: v.Detail + " (gang member)"})
				}
			}
		}
		ts, ok := m.tasks[v.Task.key()]
		if !ok || ts.preempting {
			continue
		}
		ts.preempting = true
		p := m.pools[ts.task.Pool]
		if p == nil {
			p = m.root
		}
		walkUp(p, func(n *Pool) { n.preempting = n.preempting.Add(ts.task.Resources) })
		metrics.Preemptions.WithLabelValues(v.Reason).Inc()
		m.victims = append(m.victims, v)
	}
	if len(vs) > 0 {
		m.victimCond.Broadcast()
	}
}

// hold adds (or with add=false removes) what an admitted task holds to its
// pool and every ancestor.
func (m *Manager) hold(p *Pool, ts *taskState, add bool) {
	r := ts.task.Resources
	np := !ts.task.Preemptible && !ts.task.Revocable
	// Revocable work holds slack, not a partition's capacity.
	if part := ts.task.Placement.GetPartition(); part != "" && !ts.task.Revocable {
		if m.partAlloc == nil {
			m.partAlloc = map[string]resources.Resources{}
		}
		if add {
			m.partAlloc[part] = m.partAlloc[part].Add(r)
		} else {
			m.partAlloc[part] = m.partAlloc[part].Sub(r)
		}
	}
	if add {
		p.admitted[ts.task.key()] = ts
	} else {
		delete(p.admitted, ts.task.key())
	}
	walkUp(p, func(n *Pool) {
		if add {
			n.Allocation = n.Allocation.Add(r)
			n.runningTasks++
			if np {
				n.NonPreemptible = n.NonPreemptible.Add(r)
			}
			if ts.task.Revocable {
				n.Revocable = n.Revocable.Add(r)
			}
			return
		}
		n.Allocation = n.Allocation.Sub(r)
		n.runningTasks--
		if np {
			n.NonPreemptible = n.NonPreemptible.Sub(r)
		}
		if ts.task.Revocable {
			n.Revocable = n.Revocable.Sub(r)
		}
		if ts.preempting {
			n.preempting = n.preempting.Sub(r)
		}
	})
}

type blockKind int

const (
	blockNone blockKind = iota
	// blockPool: an ancestor's limit or the reservation rule; waits for
	// tasks to end.
	blockPool
	// blockLimit: the leaf pool's own limit; lower priorities of the pool
	// may be displaced.
	blockLimit
	// blockEntitlement: the pool holds its entitled share; lower priorities may be displaced.
	blockEntitlement
	// blockCapacity: entitled, but the cluster is full; other pools may be reclaimed.
	blockCapacity
	// blockPartition: the cluster has room, but not the hosts of the
	// partition the gang targets; waits for work there to end or hosts to
	// join it.
	blockPartition
	// blockSlack: revocable work waits for slack (hostmgr/slack.go); it
	// displaces nobody.
	blockSlack
)

// revocableLimit is what pool p lets its revocable tasks hold in all
// (spec.revocableLimit), zero when it sets no cap. The spec was checked
// when the pool was written.
func revocableLimit(p *Pool) resources.Resources {
	if p.spec.GetRevocableLimit() == nil {
		return resources.Resources{}
	}
	lim, err := resources.LimitFromProto(p.spec.GetRevocableLimit(), "spec.revocableLimit")
	if err != nil {
		return resources.Resources{}
	}
	return lim
}

// admissible says whether gang g may be admitted into leaf p now, and if not
// what blocks it and why (in words for the user).
//
// Non-preemptible work runs only inside the pool's reservation, so it never
// needs anyone preempted. Preemptible work may use the pool's entitlement,
// which includes elastic capacity others do not need now. Revocable work
// runs on slack (hostmgr/slack.go): what other work holds but does not use,
// apart from capacity, entitlement and limits; revocableLimit caps it.
func (m *Manager) admissible(p *Pool, g *Gang) (blockKind, string) {
	var np, rev resources.Resources
	for _, t := range g.Tasks {
		switch {
		case t.Revocable:
			rev = rev.Add(t.Resources)
		case !t.Preemptible:
			np = np.Add(t.Resources)
		}
	}
	// A pool's limit bounds what it holds of the cluster's capacity;
	// revocable tasks hold slack, under revocableLimit (below).
	if need := g.Resources.Sub(rev); !need.IsZero() {
		for n := p; n != nil; n = n.parent {
			held := n.Allocation.Sub(n.Revocable)
			if k, ok := exceeds(held, need, n.Limit); ok {
				kind := blockPool
				if n == p {
					kind = blockLimit
				}
				return kind, fmt.Sprintf("waiting for admission: pool %s would exceed its %s limit of %s (%s in use, this task needs %s)",
					n.Path, k, amount(k, n.Limit), amount(k, held), amount(k, need))
			}
		}
	}
	if k, ok := exceeds(p.NonPreemptible, np, p.Reservation); !np.IsZero() && ok {
		return blockPool, fmt.Sprintf("waiting for admission: non-preemptible work runs only inside the reservation of pool %s, which lacks %s %s "+
			"(reserves %s, %s in use by non-preemptible tasks, this task needs %s); raise the pool's reservation or make the job preemptible",
			p.Path, amount(k, p.NonPreemptible.Add(np).Sub(p.Reservation)), k, amount(k, p.Reservation), amount(k, p.NonPreemptible), amount(k, np))
	}
	entitled := g.Resources.Sub(rev)
	used := p.Allocation.Sub(p.Revocable).Sub(p.preempting)
	if k, ok := exceeds(used, entitled, p.Entitlement); !entitled.IsZero() && ok {
		return blockEntitlement, fmt.Sprintf("waiting for admission: pool %s is at its entitlement and lacks %s %s (entitled to %s, %s in use, this task needs %s)",
			p.Path, amount(k, used.Add(entitled).Sub(p.Entitlement)), k, amount(k, p.Entitlement), amount(k, used), amount(k, entitled))
	}
	// Revocable work holds slack, apart from capacity (hostmgr/slack.go).
	held := m.root.Allocation.Sub(m.root.Revocable)
	if k, ok := exceeds(held, entitled, m.capacity); !entitled.IsZero() && ok {
		return blockCapacity, fmt.Sprintf("waiting for admission: the cluster is full and lacks %s %s (capacity %s, %s in use, this task needs %s); reclaiming from pools over their entitlement",
			amount(k, held.Add(entitled).Sub(m.capacity)), k, amount(k, m.capacity), amount(k, held), amount(k, entitled))
	}
	if !rev.IsZero() {
		for n := p; n != nil; n = n.parent {
			if lim := revocableLimit(n); !lim.IsZero() {
				if k, ok := exceeds(n.Revocable, rev, lim); ok {
					return blockPool, fmt.Sprintf("waiting for admission: pool %s caps its revocable tasks at %s %s (spec.revocableLimit; %s in use, this task needs %s)",
						n.Path, amount(k, lim), k, amount(k, n.Revocable), amount(k, rev))
				}
			}
		}
		if k, ok := exceeds(m.root.Revocable, rev, m.slack); ok {
			return blockSlack, fmt.Sprintf("waiting for slack: revocable tasks run on what other work holds but does not use, as the host agents measure it; "+
				"the cluster has %s %s of slack, revocable tasks hold %s, this task needs %s",
				amount(k, m.slack), k, amount(k, m.root.Revocable), amount(k, rev))
		}
		if entitled.IsZero() {
			return blockNone, ""
		}
	}
	// A partition with no host in service at all is left to placement,
	// which tells the user that no host is in it.
	if part := g.Tasks[0].Placement.GetPartition(); part != "" && m.partCap != nil {
		if c, ok := m.partCap[part]; ok && !m.partAlloc[part].Add(g.Resources).FitsIn(c) {
			return blockPartition, fmt.Sprintf("waiting for admission: partition %s is full (%s in use of its %s)", part, m.partAlloc[part], c)
		}
	}
	return blockNone, ""
}

// exceeds reports the first kind in which used+need does not fit in ceiling.
func exceeds(used, need, ceiling resources.Resources) (resources.Kind, bool) {
	sum := used.Add(need)
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if sum.Get(k) > ceiling.Get(k) {
			return k, true
		}
	}
	return 0, false
}

// amount renders one kind of r in user units, for pending reasons.
func amount(k resources.Kind, r resources.Resources) string {
	return resources.FormatAmount(k, r.Get(k))
}

// GetPreemptions returns the tasks chosen for preemption, waiting until there
// is one or ctx ends. jobmgr kills each and queues it again.
func (m *Manager) GetPreemptions(ctx context.Context) []Victim {
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.victimCond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.victims) == 0 && !m.closed && ctx.Err() == nil {
		m.victimCond.Wait()
	}
	out := m.victims
	m.victims = nil
	return out
}

// Run drives admission until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	// The tick lets reclaim's hysteresis expire without other events.
	tick := time.NewTicker(min(250*time.Millisecond, m.gate.delay/2+time.Millisecond))
	defer tick.Stop()
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		m.closed = true
		m.readyCond.Broadcast()
		m.placedCond.Broadcast()
		m.victimCond.Broadcast()
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.admitKick:
		case <-tick.C:
		}
		m.admitOnce()
		m.updateGauges()
		metrics.AdmissionRounds.Inc()
	}
}

func (m *Manager) updateGauges() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for path, p := range m.pools {
		for _, v := range []struct {
			typ string
			r   resources.Resources
		}{{"reservation", p.Reservation}, {"entitlement", p.Entitlement}, {"allocation", p.Allocation}, {"demand", p.Demand()}} {
			metrics.PoolResources.WithLabelValues(path, v.typ, "cpu").Set(float64(v.r.MilliCPU) / 1000)
			metrics.PoolResources.WithLabelValues(path, v.typ, "memoryMb").Set(float64(v.r.MemoryMB))
			metrics.PoolResources.WithLabelValues(path, v.typ, "gpu").Set(float64(v.r.GPU))
		}
		// The reservations' cost is in /metrics, at 0, before the first.
		metrics.ReservationIdle.WithLabelValues(path)
	}
	metrics.QueueDepth.WithLabelValues("pending").Set(float64(m.root.pendingTasks))
	metrics.QueueDepth.WithLabelValues("ready").Set(float64(countTasks(m.ready)))
	metrics.QueueDepth.WithLabelValues("placed").Set(float64(len(m.placed)))
}

// DequeueGangs hands up to max admitted gangs to a placement engine, waiting
// up to wait for one to become ready. Their tasks move to PLACING.
func (m *Manager) DequeueGangs(ctx context.Context, max int, wait time.Duration) []*Gang {
	// The wait is the caller's, in real time; back-offs are on the
	// manager's clock (Options.Now), which a test may hold still.
	deadline := time.Now().Add(wait)
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		now := m.now()
		var out []*Gang
		rest := m.ready[:0]
		var nextAt time.Time
		for _, g := range m.ready {
			if len(out) < max && !g.notBefore.After(now) {
				out = append(out, g)
				for _, t := range g.Tasks {
					m.tasks[t.key()].state = pelotonv1.TaskState_PLACING
				}
				continue
			}
			if g.notBefore.After(now) && (nextAt.IsZero() || g.notBefore.Before(nextAt)) {
				nextAt = g.notBefore
			}
			rest = append(rest, g)
		}
		clear(m.ready[len(rest):])
		m.ready = rest
		if len(out) > 0 || m.closed || ctx.Err() != nil || !time.Now().Before(deadline) {
			return out
		}
		// Wake when something becomes ready, a backoff expires, or the wait ends.
		d := time.Until(deadline)
		if !nextAt.IsZero() && nextAt.Sub(now) < d {
			d = nextAt.Sub(now)
		}
		timer := time.AfterFunc(d, func() {
			m.mu.Lock()
			m.readyCond.Broadcast()
			m.mu.Unlock()
		})
		m.readyCond.Wait()
		timer.Stop()
	}
}

// ReturnGang gives a gang that could not be placed back to the ready queue;
// it is offered again after a backoff that doubles per attempt. reason is
// shown to users as the tasks' pending reason.
func (m *Manager) ReturnGang(g *Gang, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	live := false
	for _, t := range g.Tasks {
		if ts, ok := m.tasks[t.key()]; ok && ts.gang == g {
			ts.state, ts.reason = pelotonv1.TaskState_READY, reason
			live = true
		}
	}
	if !live {
		return // the gang was removed (killed) while it was being placed
	}
	g.attempts++
	d := m.backoffBase << min(g.attempts-1, 16)
	if d > m.backoffMax {
		d = m.backoffMax
	}
	g.notBefore = m.now().Add(d)
	m.ready = append(m.ready, g)
	m.readyCond.Broadcast()
}

// UnresolvableHold is how long a gang that no host could ever take waits
// before admission tries it again, unless the hosts change first.
const UnresolvableHold = time.Minute

// ReturnGangUnresolvable takes back a gang that placement found no host could
// ever run (constraints, partition or size match no host even when empty).
// Retrying it every few milliseconds would be pointless: it gives back its
// admission, so it holds none of its pool's entitlement, and waits in its
// pool's queue, with the reason for users, until the hosts change or
// UnresolvableHold passes.
func (m *Manager) ReturnGangUnresolvable(g *Gang, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var live []*taskState
	for _, t := range g.Tasks {
		if ts, ok := m.tasks[t.key()]; ok && ts.gang == g {
			live = append(live, ts)
		}
	}
	if len(live) == 0 {
		return
	}
	p := m.pools[g.Pool]
	if p == nil || !p.IsLeaf() {
		return
	}
	msg := "cannot be placed: " + reason + "; tried again when hosts change"
	if r := m.hostRes.byGang[g]; r != nil {
		m.hostRes.end(r, m.now()) // no host could take it: holding hosts for it helps nobody
	}
	for _, ts := range live {
		m.hold(p, ts, false)
		ts.state, ts.reason = pelotonv1.TaskState_PENDING, msg
	}
	g.heldUntil = m.now().Add(UnresolvableHold)
	g.notBefore = time.Time{}
	p.queue.push(g)
	walkUp(p, func(n *Pool) { n.Pending = n.Pending.Add(g.Resources); n.pendingTasks += len(g.Tasks) })
	m.held[g] = struct{}{}
	m.kick()
}

// HostsChanged releases gangs held as unresolvable, so admission and
// placement try them again on the new hosts.
func (m *Manager) HostsChanged() {
	m.mu.Lock()
	for g := range m.held {
		g.heldUntil = time.Time{}
	}
	clear(m.held)
	m.mu.Unlock()
	m.kick()
}

// SetPlacements records placement decisions; jobmgr picks them up with
// GetPlacements. Placements of tasks that were removed meanwhile are dropped
// and returned so the caller can free their host resources.
func (m *Manager) SetPlacements(ps []Placement) (dropped []Placement) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		ts, ok := m.tasks[p.Task.key()]
		if !ok || ts.task.RunID != p.Task.RunID {
			dropped = append(dropped, p)
			continue
		}
		ts.state, ts.reason = pelotonv1.TaskState_PLACED, "placed on "+p.Host
		m.hostRes.placedLocked(ts, p.Host, m.now())
		m.placed = append(m.placed, p)
	}
	if len(m.placed) > 0 {
		m.placedCond.Broadcast()
	}
	return dropped
}

// GetPlacements returns up to max placements, waiting until there is one or
// ctx ends.
func (m *Manager) GetPlacements(ctx context.Context, max int) []Placement {
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.placedCond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.placed) == 0 && !m.closed && ctx.Err() == nil {
		m.placedCond.Wait()
	}
	n := min(max, len(m.placed))
	out := make([]Placement, n)
	copy(out, m.placed[:n])
	// Taking from the front in O(n) for n taken, not for all queued:
	// launchers take one at a time from queues of thousands. The taken
	// slots are cleared so they hold no task; append reallocates the
	// array, dropping them, as the queue refills.
	clear(m.placed[:n])
	m.placed = m.placed[n:]
	if len(m.placed) == 0 {
		m.placed = nil
	}
	for _, p := range out {
		if ts, ok := m.tasks[p.Task.key()]; ok {
			ts.state, ts.reason = pelotonv1.TaskState_LAUNCHING, ""
		}
	}
	return out
}

// Recover registers a task that is already running (found at start-up), so its
// pool's allocation counts it.
func (m *Manager) Recover(t *Task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tasks[t.key()]; ok {
		return
	}
	p, ok := m.pools[t.Pool]
	if !ok {
		p = m.root // the pool vanished; still count the task against the cluster
	}
	g := NewGang(t)
	ts := &taskState{task: t, gang: g, state: pelotonv1.TaskState_RUNNING, admittedAt: m.now()}
	m.tasks[t.key()] = ts
	m.hold(p, ts, true)
}

// Release forgets a task wherever it is (pending, ready, placed or running)
// and frees what it held. Releasing an unknown task is a no-op.
func (m *Manager) Release(jobID string, instance uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(jobID, instance)
}

// ReleaseRun is Release for one run: it forgets the instance's task only if
// it is that run, so that a caller freeing an ended run cannot take away
// the instance's next run, queued meanwhile by another goroutine.
func (m *Manager) ReleaseRun(jobID string, instance, run uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts, ok := m.tasks[instKey{jobID, instance}]; ok && ts.task.RunID == run {
		m.releaseLocked(jobID, instance)
	}
}

func (m *Manager) releaseLocked(jobID string, instance uint32) {
	key := instKey{jobID, instance}
	ts, ok := m.tasks[key]
	if !ok {
		return
	}
	delete(m.tasks, key)
	m.hostRes.releasedLocked(ts, m.now())
	p := m.pools[ts.task.Pool]
	if p == nil {
		p = m.root
	}
	g := ts.gang
	if g.elem != nil {
		// Still pending: the whole gang stays queued minus this task.
		p.queue.remove(g)
		walkUp(p, func(n *Pool) { n.Pending = n.Pending.Sub(ts.task.Resources); n.pendingTasks-- })
		g.Tasks = removeTask(g.Tasks, ts.task)
		g.Resources = g.Resources.Sub(ts.task.Resources)
		if len(g.Tasks) > 0 {
			p.queue.push(g)
		}
	} else {
		m.hold(p, ts, false)
		if ts.state == pelotonv1.TaskState_READY {
			g.Tasks = removeTask(g.Tasks, ts.task)
			g.Resources = g.Resources.Sub(ts.task.Resources)
			if len(g.Tasks) == 0 {
				m.ready = removeGang(m.ready, g)
			}
		}
	}
	m.kick()
}

func removeTask(ts []*Task, t *Task) []*Task {
	for i, x := range ts {
		if x == t {
			return append(ts[:i:i], ts[i+1:]...)
		}
	}
	return ts
}

func removeGang(gs []*Gang, g *Gang) []*Gang {
	for i, x := range gs {
		if x == g {
			return append(gs[:i], gs[i+1:]...)
		}
	}
	return gs
}

// TaskState returns resmgr's live state for an instance and why it waits.
func (m *Manager) TaskState(jobID string, instance uint32) (pelotonv1.TaskState, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ts, ok := m.tasks[instKey{jobID, instance}]
	if !ok {
		return 0, "", false
	}
	return ts.state, ts.reason, true
}

// MarkRunning records that a placed task was launched.
func (m *Manager) MarkRunning(jobID string, instance uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts, ok := m.tasks[instKey{jobID, instance}]; ok {
		ts.state, ts.reason = pelotonv1.TaskState_RUNNING, ""
	}
}

// maxMovedPools bounds a move: the whole subtree is rewritten in one
// transaction, which etcd limits (--max-txn-ops, 128 by default).
const maxMovedPools = 64

// checkMove validates moving the pool at path to newPath under newParent
// against the tree. It returns the pool, the new parent and the subtree to
// rewrite (the pool first), or only the pool when it is already there.
// Caller holds mu.
func (m *Manager) checkMove(path, newParent, newPath string) (*Pool, *Pool, []*Pool, error) {
	p, ok := m.pools[path]
	if !ok {
		return nil, nil, nil, apierr.NotFound("pool %s does not exist", path)
	}
	target, ok := m.pools[newParent]
	if !ok {
		return nil, nil, nil, apierr.NotFound("newParent: pool %s does not exist", newParent)
	}
	if newPath == path {
		return p, target, nil, nil
	}
	if _, exists := m.pools[newPath]; exists {
		return nil, nil, nil, apierr.AlreadyExists("pool %s already exists", newPath)
	}
	var subtree []*Pool
	var collect func(*Pool)
	collect = func(n *Pool) {
		subtree = append(subtree, n)
		for _, c := range n.children {
			collect(c)
		}
	}
	collect(p)
	if len(subtree) > maxMovedPools {
		return nil, nil, nil, apierr.FailedPrecondition("pool %s has %d pools under it; at most %d move at once", path, len(subtree), maxMovedPools)
	}
	for _, n := range subtree {
		if m.hasTasks(n) {
			return nil, nil, nil, apierr.FailedPrecondition("pool %s has jobs; pools with jobs cannot be moved", n.Path)
		}
		if depth := strings.Count(newPath+strings.TrimPrefix(n.Path, path), "/"); depth > 16 {
			return nil, nil, nil, apierr.Invalid("newParent", "%s would be %d levels deep; at most 16", newPath+strings.TrimPrefix(n.Path, path), depth)
		}
	}
	if target != m.root && target.IsLeaf() && m.hasTasks(target) {
		return nil, nil, nil, apierr.FailedPrecondition("newParent: pool %s has jobs; a pool with jobs cannot get children", target.Path)
	}
	return p, target, subtree, nil
}

// MovePool moves a pool and its subtree under newParent. The pools keep
// their specs; their paths change. Pools that hold jobs cannot be moved (a
// job names its pool by path), a move may not put a pool inside itself, and
// the new parent's children may not reserve more than it does. The whole
// subtree is rewritten in one transaction: all of it moves or none.
func (m *Manager) MovePool(ctx context.Context, path, newParent string) (*pelotonv1.Pool, error) {
	path, err := NormalizePath(path, "path")
	if err != nil {
		return nil, err
	}
	newParent, err = NormalizePath(newParent, "newParent")
	if err != nil {
		return nil, err
	}
	if path == RootPath {
		return nil, apierr.Invalid("path", "the root pool / cannot be moved")
	}
	if newParent == path || strings.HasPrefix(newParent, path+"/") {
		return nil, apierr.Invalid("newParent", "%s is %s or inside it; moving it there would create a cycle", newParent, path)
	}
	base := path[strings.LastIndex(path, "/")+1:]
	newPath := strings.TrimSuffix(newParent, "/") + "/" + base
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	// The subtree and the new parent stay frozen from the check until the
	// move is in memory (or failed).
	var frozen []*Pool
	defer func() {
		if frozen != nil {
			m.thaw(frozen...)
		}
	}()
	return casapply.Do(ctx, &m.mu, casapply.Change[move, *pelotonv1.Pool]{
		Check: func() (move, error) {
			p, target, subtree, err := m.checkMove(path, newParent, newPath)
			if err != nil {
				return move{}, err
			}
			if p.Path == newPath {
				return move{}, casapply.Answer(p.toProto(true))
			}
			frozen = append(slices.Clone(subtree), target)
			freeze(frozen...)
			return move{p, target, subtree}, nil
		},
		Write: func(ctx context.Context, mv move) (int64, error) {
			p, target, subtree := mv.pool, mv.target, mv.subtree
			paths := make([]string, 0, len(subtree)+1)
			for _, n := range subtree {
				paths = append(paths, n.Path)
			}
			if err := m.checkNoJobs("pools with jobs cannot be moved", paths...); err != nil {
				return 0, err
			}
			if target != m.root && target.IsLeaf() {
				if m.hasJobs != nil && m.hasJobs(target.Path) {
					return 0, apierr.FailedPrecondition("newParent: pool %s has jobs; a pool with jobs cannot get children", target.Path)
				}
			}
			// The tree's shape and reservations change only under poolMu,
			// which this holds: reading them without mu is safe.
			if err := m.checkReservations(target, newPath, p.Reservation); err != nil {
				return 0, err
			}
			ops := make([]store.Op, 0, 2*len(subtree))
			var probeVal []byte
			for _, n := range subtree {
				val, err := proto.Marshal(n.spec)
				if err != nil {
					return 0, fmt.Errorf("resmgr: encode pool %s: %w", n.Path, err)
				}
				if n == p {
					probeVal = val
				}
				ops = append(ops,
					store.Delete(poolKeyPrefix+n.Path, n.revision),
					store.Put(poolKeyPrefix+newPath+strings.TrimPrefix(n.Path, path), val, store.MustNotExist))
			}
			rev, err := m.txnOutcome(ctx, poolKeyPrefix+newPath, func(kv *store.KV) (int64, bool) {
				if kv == nil || !bytes.Equal(kv.Value, probeVal) {
					return 0, false
				}
				return kv.Revision, true
			}, ops...)
			if errors.Is(err, store.ErrConflict) {
				return 0, apierr.Aborted("pools under %s changed concurrently; retry", path)
			}
			if err != nil {
				return 0, apierr.Unavailable("move pool %s: %v", path, err)
			}
			return rev, nil
		},
		Apply: func(mv move, rev int64) (*pelotonv1.Pool, error) {
			p, target, subtree := mv.pool, mv.target, mv.subtree
			delete(p.parent.children, path)
			for _, n := range subtree {
				delete(m.pools, n.Path)
			}
			// Children maps are keyed by path: rebuild them bottom-up with the new paths.
			for i := len(subtree) - 1; i >= 0; i-- {
				n := subtree[i]
				n.Path = newPath + strings.TrimPrefix(n.Path, path)
				n.revision = rev
				kids := make(map[string]*Pool, len(n.children))
				for _, c := range n.children {
					kids[c.Path] = c
				}
				n.children = kids
				m.pools[n.Path] = n
			}
			p.parent = target
			target.children[p.Path] = p
			m.kick()
			m.log.Info("pool moved", "from", path, "to", p.Path)
			return p.toProto(true), nil
		},
	})
}

// move is what a move's check hands its write: the pool, its new parent
// and its subtree (the pool first, parents before children).
type move struct {
	pool    *Pool
	target  *Pool
	subtree []*Pool
}
