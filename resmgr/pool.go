package resmgr

import (
	"math"
	"regexp"
	"sort"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// RootPath is the root pool; it stands for the whole cluster and is never stored.
const RootPath = "/"

// DefaultPoolPath is the leaf pool that exists out of the box.
const DefaultPoolPath = "/default"

var segmentRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// NormalizePath turns "org/team", "/org/team/" into "/org/team" and checks
// every segment. field names the request field for errors.
func NormalizePath(p, field string) (string, error) {
	if p == "" {
		return "", apierr.Invalid(field, "required")
	}
	p = "/" + strings.Trim(p, "/")
	if p == "/" {
		return p, nil
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > 16 {
		return "", apierr.Invalid(field, "at most 16 levels deep, got %d", len(segs))
	}
	for _, s := range segs {
		if !segmentRE.MatchString(s) {
			return "", apierr.Invalid(field, "segment %q must be 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", s)
		}
	}
	return p, nil
}

func parentPath(p string) string {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return RootPath
	}
	return p[:i]
}

// Pool is one node of the pool tree. All pool arithmetic lives on this type:
// the configured reservation/limit/share and the observed demand and allocation,
// as integers.
type Pool struct {
	Path     string
	parent   *Pool
	children map[string]*Pool

	spec     *pelotonv1.PoolSpec
	revision int64

	Reservation resources.Resources
	// Limit is math.MaxInt64 (unlimited) in every kind the spec leaves unset.
	Limit resources.Resources
	// Share is the weight per kind in thousandths (share 1 = 1000).
	Share resources.Resources

	// Allocation is what admitted (ready, placing, placed or running) tasks hold.
	Allocation resources.Resources
	// Entitlement is this pool's fair slice of its parent's entitlement (the
	// root's is the cluster capacity), as last set by ComputeEntitlement. It
	// is never more than Limit.
	Entitlement resources.Resources
	// Pending is what queued, not yet admitted tasks ask for.
	Pending resources.Resources

	// NonPreemptible is the part of Allocation held by non-preemptible tasks;
	// it may never exceed Reservation.
	NonPreemptible resources.Resources
	// Revocable is the part of Allocation held by revocable tasks, which does
	// not count against Entitlement.
	Revocable resources.Resources
	// preempting is what tasks chosen for preemption still hold until they end.
	preempting resources.Resources

	// frozen is set while a change of the pool tree that depends on this
	// pool holding no jobs is being written (see Manager.poolMu): no job
	// or task may arrive in it meanwhile.
	frozen bool

	pendingTasks int
	runningTasks int
	queue        *priorityQueue // leaves only
	// admitted are the leaf's tasks that hold resources, by instance key.
	admitted map[instKey]*taskState
}

// runningCandidates returns the leaf's launched tasks not already being
// preempted that keep accepts: what preemption may choose from.
func (p *Pool) runningCandidates(keep func(*taskState) bool) []*taskState {
	var out []*taskState
	for _, ts := range p.admitted {
		if ts.state == pelotonv1.TaskState_RUNNING && !ts.preempting && keep(ts) {
			out = append(out, ts)
		}
	}
	return out
}

// IsLeaf reports whether the pool has no children. Only leaves take jobs.
func (p *Pool) IsLeaf() bool { return len(p.children) == 0 }

// Demand is pending plus allocated resources.
func (p *Pool) Demand() resources.Resources { return p.Pending.Add(p.Allocation) }

// Children returns the child paths in order.
func (p *Pool) Children() []string {
	out := make([]string, 0, len(p.children))
	for _, c := range p.children {
		out = append(out, c.Path)
	}
	sort.Strings(out)
	return out
}

// ValidatePoolSpec checks a pool spec as a create or update of a pool
// does, with errors that name the field (spec.reservation.cpu, ...), and
// returns its reservation, limit (unset kinds unlimited) and share as
// integers. The federation checks global pools with it, so that a global
// pool is refused in the same words as a cluster pool.
func ValidatePoolSpec(spec *pelotonv1.PoolSpec) (res, limit, share resources.Resources, err error) {
	return specToNode(spec)
}

// specToNode validates a spec and converts it to integers.
func specToNode(spec *pelotonv1.PoolSpec) (res, limit, share resources.Resources, err error) {
	if spec == nil {
		spec = &pelotonv1.PoolSpec{}
	}
	if res, err = resources.FromProto(spec.Reservation, "spec.reservation"); err != nil {
		return
	}
	// Limits are per kind: a kind the spec leaves unset is unlimited, while
	// an unset reservation kind is zero (see resources.LimitFromProto).
	if limit, err = resources.LimitFromProto(spec.Limit, "spec.limit"); err != nil {
		return
	}
	if spec.RevocableLimit != nil {
		if _, err = resources.LimitFromProto(spec.RevocableLimit, "spec.revocableLimit"); err != nil {
			return
		}
	}
	share = resources.Resources{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 1000, GPU: 1000}
	if spec.Share != nil {
		// proto3 cannot tell an unset kind from 0, so a 0 kind means "unset"
		// (1); a share that is 0 in every kind can only be a mistake.
		if sh := spec.Share; sh.Cpu == 0 && sh.MemoryMb == 0 && sh.DiskMb == 0 && sh.Gpu == 0 {
			err = apierr.Invalid("spec.share", "must be > 0 in at least one kind; leave share out for 1 in every kind")
			return
		}
		for _, kv := range []struct {
			k resources.Kind
			v float64
		}{{resources.CPU, spec.Share.Cpu}, {resources.Memory, spec.Share.MemoryMb}, {resources.Disk, spec.Share.DiskMb}, {resources.GPU, spec.Share.Gpu}} {
			if math.IsNaN(kv.v) || kv.v < 0 || kv.v > 1e6 {
				err = apierr.Invalid("spec.share."+kv.k.String(), "must be between 0 and 1000000, got %g", kv.v)
				return
			}
			if kv.v == 0 {
				kv.v = 1
			}
			share = share.Set(kv.k, int64(math.Round(kv.v*1000)))
		}
	}
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if limit.Get(k) < res.Get(k) {
			err = apierr.Invalid("spec.limit."+k.String(), "limit %s must be >= reservation %s",
				resources.FormatAmount(k, limit.Get(k)), resources.FormatAmount(k, res.Get(k)))
			return
		}
	}
	return
}

func (p *Pool) toProto(withStatus bool) *pelotonv1.Pool {
	out := &pelotonv1.Pool{Path: p.Path, Children: p.Children(), Version: uint64(p.revision)}
	if p.spec != nil {
		out.Spec = proto.Clone(p.spec).(*pelotonv1.PoolSpec)
	} else {
		out.Spec = &pelotonv1.PoolSpec{}
	}
	if withStatus {
		out.Status = &pelotonv1.PoolStatus{
			Entitlement:  p.Entitlement.ToProto(),
			Allocation:   p.Allocation.ToProto(),
			Demand:       p.Demand().ToProto(),
			PendingTasks: uint32(p.pendingTasks),
			RunningTasks: uint32(p.runningTasks),
		}
	}
	return out
}
