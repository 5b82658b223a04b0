package resmgr

import (
	"fmt"

	"github.com/peloton-sched/peloton/internal/resources"
)

// EntitlementInput is one pool of a tree whose entitlement is computed
// apart from a Manager: its path, its spec as integers (as
// ValidatePoolSpec returns them: Limit is resources.Unlimited in every
// kind it leaves unset, Share in thousandths) and its own demand (what its
// own work holds plus what it asks for; an interior pool's is its
// children's, summed here, plus any it has itself).
type EntitlementInput struct {
	Path                      string
	Reservation, Limit, Share resources.Resources
	Demand                    resources.Resources
}

// DivideEntitlement divides capacity among the pools of a tree given as a
// flat list with ComputeEntitlement, the very division a cluster makes
// among its pools, and returns each pool's entitlement by path (the root,
// "/", gets capacity). The federation divides the sum of its clusters'
// capacity among its global pools with it (global fair share), so the two
// levels share one definition of fair.
//
// A pool whose ancestors are not listed gets them with the defaults a
// cluster pool has (no reservation, no limit, share 1). Paths must be
// normalized (NormalizePath); a path listed twice or the root listed is
// an error. It is pure: no clock, no I/O.
func DivideEntitlement(capacity resources.Resources, pools []EntitlementInput) (map[string]resources.Resources, error) {
	root := &Pool{Path: RootPath, children: map[string]*Pool{}, Limit: resources.Unlimited, Share: defaultShare}
	byPath := map[string]*Pool{RootPath: root}
	listed := make(map[string]bool, len(pools))
	var ensure func(path string) *Pool
	ensure = func(path string) *Pool {
		if p := byPath[path]; p != nil {
			return p
		}
		parent := ensure(parentPath(path))
		p := &Pool{Path: path, parent: parent, children: map[string]*Pool{}, Limit: resources.Unlimited, Share: defaultShare}
		parent.children[path] = p
		byPath[path] = p
		return p
	}
	for _, in := range pools {
		if in.Path == RootPath || in.Path == "" || listed[in.Path] {
			return nil, fmt.Errorf("resmgr: DivideEntitlement: pool %q is the root, empty or listed twice", in.Path)
		}
		listed[in.Path] = true
		p := ensure(in.Path)
		p.Reservation, p.Limit, p.Share = in.Reservation, in.Limit, in.Share
		// Pending carries the demand: Demand() is Pending plus Allocation,
		// summed up the tree as the manager's walkUp does.
		for n := p; n != nil; n = n.parent {
			n.Pending = n.Pending.Add(in.Demand)
		}
	}
	ComputeEntitlement(root, capacity)
	out := make(map[string]resources.Resources, len(byPath))
	for path, p := range byPath {
		out[path] = p.Entitlement
	}
	return out, nil
}

// defaultShare is a pool's share when its spec sets none: 1 in every kind.
var defaultShare = resources.Resources{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 1000, GPU: 1000}
