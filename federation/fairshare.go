package federation

import (
	"fmt"
	"sort"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Global fair share. Federated batch jobs of a global leaf pool queue at
// the federation and are dispatched only while their pool stays within
// its fair share of the sum of the clusters' capacity: the pools' spec
// (reservation, limit, share) divided with resmgr.DivideEntitlement, the
// very elastic max-min a cluster computes among its own pools, with each
// pool's demand being what its dispatched jobs hold plus what its waiting
// jobs ask. So one team cannot fill every cluster while another waits: once
// the other submits, its entitlement grows, the first's shrinks, and the
// first's jobs wait while the capacity its ended jobs free goes to the
// other. There is no preemption across clusters: a pool over its share
// after a change waits for its own jobs to end.
//
// What a dispatched job holds is counted from its dispatch until it is
// DONE (its end in its cluster, learned by that cluster's worker), in
// full: the dispatch state is in each job's record in etcd, so the count is
// rebuilt from there after a restart and costs no write of its own.

// poolShare is one global pool's standing with the dispatcher. held,
// queued and the job counts of an interior pool are its subtree's.
type poolShare struct {
	ent, held, queued resources.Resources
	limit             resources.Resources
	dispatched, jobs  int // jobs: queued jobs
}

// shareLoad is one job of a global leaf pool as the fair share counts it:
// held from dispatch until done, queued while it waits for dispatch.
type shareLoad struct {
	pool string
	req  resources.Resources
	held bool
}

// shareSpec is one live global pool's spec as integers.
type shareSpec struct {
	path              string
	res, limit, share resources.Resources
}

// fairShare is every global pool's standing over capacity, the sum of the
// capacity of the clusters it is computed over.
type fairShare struct {
	capacity resources.Resources
	pools    map[string]*poolShare
	// leaves are the global leaf pools, whose jobs admit judges.
	leaves map[string]bool
}

// computeFairShare divides capacity among the global pools by their specs
// and the loads of their jobs (a load of a pool that is not a leaf of
// specs is ignored: only leaves take jobs). It is pure.
func computeFairShare(capacity resources.Resources, specs []shareSpec, loads []shareLoad) fairShare {
	fs := fairShare{capacity: capacity, pools: make(map[string]*poolShare, len(specs)+1), leaves: make(map[string]bool, len(specs))}
	fs.pools["/"] = &poolShare{limit: resources.Unlimited}
	for _, s := range specs {
		fs.pools[s.path] = &poolShare{limit: s.limit}
		fs.leaves[s.path] = true
	}
	for _, s := range specs {
		delete(fs.leaves, parentOf(s.path))
	}
	own := make(map[string]resources.Resources, len(specs))
	for _, l := range loads {
		if !fs.leaves[l.pool] {
			continue
		}
		own[l.pool] = own[l.pool].Add(l.req)
		fs.walkUp(l.pool, func(_ string, p *poolShare) {
			if l.held {
				p.held = p.held.Add(l.req)
				p.dispatched++
			} else {
				p.queued = p.queued.Add(l.req)
				p.jobs++
			}
		})
	}
	in := make([]resmgr.EntitlementInput, 0, len(specs))
	for _, s := range specs {
		in = append(in, resmgr.EntitlementInput{Path: s.path, Reservation: s.res, Limit: s.limit, Share: s.share, Demand: own[s.path]})
	}
	ent, err := resmgr.DivideEntitlement(capacity, in)
	if err != nil {
		return fs // specs from f.pools have unique, normalized paths: cannot happen
	}
	for path, p := range fs.pools {
		p.ent = ent[path]
	}
	return fs
}

// walkUp calls fn on the pool at path and each of its ancestors that is a
// global pool, then the root.
func (fs fairShare) walkUp(path string, fn func(string, *poolShare)) {
	for p := path; ; p = parentOf(p) {
		if s := fs.pools[p]; s != nil {
			fn(p, s)
		}
		if p == "/" {
			return
		}
	}
}

// admit decides whether a job of global leaf pool path asking req may be
// dispatched now: "" if so, and then it is counted as held (so that the
// next job of the same pass sees it); otherwise why it waits, in words a
// user can act on. Only the kinds the job asks are judged.
func (fs fairShare) admit(path string, req resources.Resources) string {
	leaf := fs.pools[path]
	if leaf == nil || !fs.leaves[path] {
		return ""
	}
	var why string
	fs.walkUp(path, func(at string, p *poolShare) {
		if why != "" || at == "/" {
			return
		}
		if k, over := overAsked(p.held, req, p.limit); over {
			why = fmt.Sprintf("waiting for global fair share: global pool %s would exceed its %s limit of %s (%s held by its dispatched jobs, this job asks %s)",
				at, k, resources.FormatAmount(k, p.limit.Get(k)), resources.FormatAmount(k, p.held.Get(k)), resources.FormatAmount(k, req.Get(k)))
		}
	})
	if why != "" {
		return why
	}
	if k, over := overAsked(leaf.held, req, leaf.ent); over {
		return fmt.Sprintf("waiting for global fair share: global pool %s is at its entitlement and lacks %s %s (entitled to %s of the clusters' %s %s, %s held by its dispatched jobs, this job asks %s)",
			path, resources.FormatAmount(k, leaf.held.Add(req).Sub(leaf.ent).Get(k)), k, resources.FormatAmount(k, leaf.ent.Get(k)),
			resources.FormatAmount(k, fs.capacity.Get(k)), k, resources.FormatAmount(k, leaf.held.Get(k)), resources.FormatAmount(k, req.Get(k)))
	}
	fs.walkUp(path, func(_ string, p *poolShare) {
		p.held, p.queued = p.held.Add(req), p.queued.Sub(req)
		p.dispatched++
		p.jobs--
	})
	return ""
}

// overAsked says in which kind, of those need asks, used plus need passes
// ceiling, if any.
func overAsked(used, need, ceiling resources.Resources) (resources.Kind, bool) {
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if n := need.Get(k); n > 0 && used.Get(k)+n > ceiling.Get(k) {
			return k, true
		}
	}
	return 0, false
}

// view is a global pool's standing as the API shows it.
func (s *poolShare) view(capacity resources.Resources) *pelotonv1.FederatedPoolShare {
	return &pelotonv1.FederatedPoolShare{Entitlement: s.ent.ToProto(), Allocation: s.held.ToProto(), Queued: s.queued.ToProto(),
		DispatchedJobs: uint32(s.dispatched), QueuedJobs: uint32(s.jobs), Capacity: capacity.ToProto()}
}

// fairShareLocked computes every global pool's standing now, over the
// clusters the pools are split across (checked since start and not
// UNREACHABLE; a cordoned one's capacity counts, as its running work
// does). Caller holds mu.
func (f *Federation) fairShareLocked() fairShare {
	var capacity resources.Resources
	for _, m := range f.clusters {
		if m.checked && m.rec.Health != pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
			capacity = capacity.Add(m.capacity)
		}
	}
	specs := make([]shareSpec, 0, len(f.pools))
	for path, gp := range f.pools {
		if !gp.rec.Deleting {
			specs = append(specs, shareSpec{path: path, res: gp.res, limit: gp.limit, share: gp.share})
		}
	}
	sort.Slice(specs, func(a, b int) bool { return specs[a].path < specs[b].path })
	var loads []shareLoad
	for _, j := range f.jobs {
		if gp := f.pools[j.pool]; gp == nil || gp.rec.Deleting {
			continue
		}
		switch j.rec.DispatchState {
		case pelotonv1.DispatchState_DISPATCHED, pelotonv1.DispatchState_DISPATCH_MOVING:
			loads = append(loads, shareLoad{pool: j.pool, req: j.req, held: true})
		case pelotonv1.DispatchState_DISPATCH_PENDING:
			if !j.rec.Killed {
				loads = append(loads, shareLoad{pool: j.pool, req: j.req})
			}
		}
	}
	return computeFairShare(capacity, specs, loads)
}

// jobPool is a job spec's pool path, normalized ("" when it is not valid,
// which a create refuses).
func jobPool(spec *pelotonv1.JobSpec) string {
	p, err := resmgr.NormalizePath(spec.GetPool(), "pool")
	if err != nil {
		return ""
	}
	return p
}

// refuseOverGlobalLimitLocked refuses a job of a global leaf pool that
// asks, in all, more than the limit of its pool or of an ancestor: the
// fair share could never let it through. Caller holds mu.
func (f *Federation) refuseOverGlobalLimitLocked(pool string, req resources.Resources) error {
	if !f.isGlobalLeafLocked(pool) {
		return nil
	}
	for p := pool; p != "/"; p = parentOf(p) {
		gp := f.pools[p]
		if gp == nil || gp.rec.Deleting {
			continue
		}
		if k, over := overAsked(resources.Resources{}, req, gp.limit); over {
			return apierr.Invalid("spec.job.instanceCount", "the job asks for %s in all, more than the %s limit of global pool %s (%s): it could never be dispatched; run fewer or smaller instances, or raise the pool's limit",
				resources.AmountWithUnit(k, req.Get(k)), k, p, resources.FormatAmount(k, gp.limit.Get(k)))
		}
	}
	return nil
}
