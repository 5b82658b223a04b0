package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Round is the working state of one Place call: the snapshot, what the round
// has placed so far, and the indexes strategies keep over it. It lives only
// as long as the call, so Place stays a pure function of its arguments.
type Round struct {
	cfg    Config
	offers []hostmgr.HostOffer
	// free is what each offered host has free, minus this round's placements.
	free []resources.Resources

	// Failure domains, computed on first use by SPREAD.
	zone   []int32
	nzones int

	anyClass   *class
	classByPtr map[*pelotonv1.PlacementSpec]*class
	classByKey map[string]*class
	nclasses   int32

	// members lists, per host, the pack-tree leaves that show it.
	members [][]leafRef
	// jobs holds per-host counts of the jobs that need them (SPREAD, or a
	// maximum per host); other jobs are absent.
	jobs      map[string]*jobState
	spreaders map[spreadKey]*spreader
	// level0 is, per (class, shape), how far into each domain's hosts SPREAD
	// has found only hosts too full for the shape: a fact about free
	// resources, so every job's spreader of that shape starts there.
	level0 map[shapeKey][]int
	byName map[string]int32

	catalog []hostmgr.HostClass
	// reach memoizes, per (class, shape), whether the cluster could ever
	// hold the shape and on how many hosts.
	reach map[shapeKey]reach
	// noRoom memoizes, per (class, shape, job, max), that nothing fits now.
	// Free resources only shrink within a round, so a failure stays a failure
	// until a gang is rolled back, which bumps gen.
	noRoom map[noRoomKey]noRoomMemo
	gen    int
}

// class is the set of offered hosts that pass one combination of partition
// and label constraints. Tasks whose specs filter alike share a class, and so
// its host list and pack trees.
type class struct {
	id    int32
	spec  *pelotonv1.PlacementSpec // a representative; nil for anyClass
	hosts []int32
	// byZone is hosts grouped by failure domain, built for SPREAD.
	byZone [][]int32
	// pack holds the pack trees of the class: [0] hosts without GPUs,
	// [1] hosts with GPUs.
	pack [2]*packTree
	// packBuilt says whether pack[i] was built (it may be nil if empty).
	packBuilt [2]bool
}

type jobState struct {
	counts   map[int32]int32
	zoneLoad []int32 // per domain; nil until SPREAD needs it
	// rejects counts hosts pack searches passed over for the job's cap.
	rejects int
	// trees are the job's own pack trees, if it got any.
	trees []*packTree
}

func (j *jobState) count(h int32) int32 {
	if j == nil {
		return 0
	}
	return j.counts[h]
}

// request is one task with its filters resolved.
type request struct {
	task *resmgr.Task
	// cls is nil for a task bound to a host: it is judged on that host
	// alone, so the round does not compute its class.
	cls      *class
	job      *jobState // nil unless the job's per-host counts matter
	max      uint32
	strategy Strategy
	// bound is the offer index of the task's bound host, -1 if that host was
	// not offered. Unused without a bound host.
	bound int32
}

type shapeKey struct {
	class int32
	need  resources.Resources
}

type reach struct {
	reason string // "" if some host could take the shape
	hosts  int    // hosts of the cluster that could take it, when empty
}

type noRoomKey struct {
	class int32
	need  resources.Resources
	job   *jobState
	max   uint32
}

type noRoomMemo struct {
	gen    int
	reason string
}

func newRound(c Config, gangs []*resmgr.Gang, hosts []hostmgr.HostOffer) *Round {
	if c.DomainLabel == "" {
		c.DomainLabel = DefaultDomainLabel
	}
	r := &Round{
		cfg: c, offers: hosts, free: make([]resources.Resources, len(hosts)),
		classByPtr: map[*pelotonv1.PlacementSpec]*class{}, classByKey: map[string]*class{},
		members: make([][]leafRef, len(hosts)), catalog: c.Catalog,
		reach: map[shapeKey]reach{}, noRoom: map[noRoomKey]noRoomMemo{},
	}
	for i, h := range hosts {
		r.free[i] = h.Free
	}
	// The class of specs with no filter: every host but those with taints
	// (hostmgr.LabelTaints), which take only tasks that tolerate them.
	all := make([]int32, 0, len(hosts))
	for i, h := range hosts {
		if h.Labels[hostmgr.LabelTaints] == "" {
			all = append(all, int32(i))
		}
	}
	r.anyClass = &class{id: 0, hosts: all}
	r.nclasses = 1
	// Per-host counts only for the jobs that need them, filled in one pass
	// over the offers rather than one per job.
	for _, g := range gangs {
		for _, t := range g.Tasks {
			if needsCounts(t) && r.jobs[t.JobID] == nil {
				if r.jobs == nil {
					r.jobs = map[string]*jobState{}
				}
				r.jobs[t.JobID] = &jobState{counts: map[int32]int32{}}
			}
		}
	}
	if len(r.jobs) > 0 {
		for i, h := range hosts {
			for job, n := range h.JobCounts {
				if js := r.jobs[job]; js != nil && n > 0 {
					js.counts[int32(i)] = int32(n)
				}
			}
		}
	}
	return r
}

func needsCounts(t *resmgr.Task) bool {
	return t.Strategy == pelotonv1.PlacementStrategy_SPREAD || t.Placement.GetMaxInstancesPerHost() > 0
}

// request resolves a task's class (or bound host), job counts and strategy.
func (r *Round) request(t *resmgr.Task) request {
	q := request{task: t, max: t.Placement.GetMaxInstancesPerHost(), bound: -1}
	if t.BoundHost != "" {
		q.bound = r.hostIndex(t.BoundHost)
	} else {
		q.cls, q.strategy = r.classOf(t.Placement), strategyFor(t.Strategy)
	}
	if needsCounts(t) {
		q.job = r.jobs[t.JobID]
	}
	return q
}

// hostIndex returns the offer index of the named host, or -1. The index by
// name is built on first use: most rounds need none.
func (r *Round) hostIndex(name string) int32 {
	if r.byName == nil {
		r.byName = make(map[string]int32, len(r.offers))
		for i, o := range r.offers {
			r.byName[o.Name] = int32(i)
		}
	}
	if h, ok := r.byName[name]; ok {
		return h
	}
	return -1
}

// classOf returns the class of a placement spec, computing its matching hosts
// the first time a spec with that partition and those constraints is seen.
func (r *Round) classOf(p *pelotonv1.PlacementSpec) *class {
	if p == nil || (p.Partition == "" && len(p.Constraints) == 0 && len(p.AnyOf) == 0 && len(p.Tolerations) == 0) {
		return r.anyClass
	}
	if c, ok := r.classByPtr[p]; ok {
		return c
	}
	var b strings.Builder
	b.WriteString(p.Partition)
	writeConstraints(&b, p.Constraints)
	for _, t := range p.AnyOf {
		b.WriteString("\x02")
		writeConstraints(&b, t.Constraints)
	}
	for _, t := range p.Tolerations {
		fmt.Fprintf(&b, "\x03%s\x01%d\x01%s\x01%s", t.Key, t.Op, t.Value, t.Effect)
	}
	key := b.String()
	c, ok := r.classByKey[key]
	if !ok {
		c = &class{id: r.nclasses, spec: p}
		r.nclasses++
		for i := range r.offers {
			if hostmgr.Matches(p, r.offers[i].Partition, r.offers[i].Labels) {
				c.hosts = append(c.hosts, int32(i))
			}
		}
		r.classByKey[key] = c
	}
	r.classByPtr[p] = c
	return c
}

// writeConstraints appends cs to a class key.
func writeConstraints(b *strings.Builder, cs []*pelotonv1.Constraint) {
	for _, c := range cs {
		fmt.Fprintf(b, "\x00%s\x01%d", c.Label, c.Op)
		for _, v := range c.Values {
			b.WriteString("\x01" + v)
		}
	}
}

// reachOf says whether some host of the cluster, empty, could take a task of
// need with q's filters, and how many could. Memoized per (class, shape).
func (r *Round) reachOf(cls *class, need resources.Resources) reach {
	k := shapeKey{cls.id, need}
	if v, ok := r.reach[k]; ok {
		return v
	}
	if r.catalog == nil {
		r.catalog = make([]hostmgr.HostClass, len(r.offers))
		for i, o := range r.offers {
			r.catalog[i] = hostmgr.HostClass{Capacity: o.Capacity, Labels: o.Labels, Partition: o.Partition, Count: 1}
		}
	}
	v := r.computeReach(cls.spec, need)
	r.reach[k] = v
	return v
}

func (r *Round) computeReach(p *pelotonv1.PlacementSpec, need resources.Resources) reach {
	// Narrow the catalog filter by filter, to name the one that leaves nothing.
	left := make([]int, 0, len(r.catalog))
	for i, hc := range r.catalog {
		if p.GetPartition() == "" || hc.Partition == p.GetPartition() {
			left = append(left, i)
		}
	}
	if len(left) == 0 {
		if p.GetPartition() != "" {
			return reach{reason: fmt.Sprintf("%s %q", ReasonNoPartition, p.GetPartition())}
		}
		return reach{reason: fmt.Sprintf("%s (needs %s; the cluster has no hosts)", ReasonTooLarge, needs(need))}
	}
	for _, c := range p.GetConstraints() {
		kept := left[:0]
		for _, i := range left {
			if hostmgr.Holds(c, r.catalog[i].Labels) {
				kept = append(kept, i)
			}
		}
		left = kept
		if len(left) == 0 {
			return reach{reason: fmt.Sprintf("%s %s", ReasonNoMatch, describe(c))}
		}
	}
	if terms := p.GetAnyOf(); len(terms) > 0 {
		kept := left[:0]
		for _, i := range left {
			if hostmgr.HoldsAnyOf(terms, r.catalog[i].Labels) {
				kept = append(kept, i)
			}
		}
		if left = kept; len(left) == 0 {
			return reach{reason: fmt.Sprintf("%s %s", ReasonNoMatch, describeAnyOf(terms))}
		}
	}
	kept, untolerated := left[:0], ""
	for _, i := range left {
		if taint := hostmgr.TaintsTolerated(p.GetTolerations(), r.catalog[i].Labels[hostmgr.LabelTaints]); taint == "" {
			kept = append(kept, i)
		} else if untolerated == "" {
			untolerated = taint
		}
	}
	if left = kept; len(left) == 0 {
		return reach{reason: fmt.Sprintf("%s (every matching host has a taint it does not tolerate, e.g. %s)", ReasonUntolerated, untolerated)}
	}
	var largest resources.Resources
	n := 0
	for _, i := range left {
		hc := r.catalog[i]
		largest = largest.Max(hc.Capacity)
		if need.FitsIn(hc.Capacity) {
			n += hc.Count
		}
	}
	if n == 0 {
		return reach{reason: fmt.Sprintf("%s (needs %s; largest matching host has %s)", ReasonTooLarge, needs(need), needs(largest))}
	}
	return reach{hosts: n}
}

// gangUnresolvable returns why no cluster could ever take the gang, or "".
// It checks every member before any is tried, so that a gang stuck on an
// impossible member is reported as such and not retried as "no room now".
func (r *Round) gangUnresolvable(reqs []request) string {
	nbound := 0
	for i := range reqs {
		var reason string
		if reqs[i].task.BoundHost != "" {
			reason = r.boundUnresolvable(&reqs[i])
			nbound++
		} else {
			reason = r.reachOf(reqs[i].cls, reqs[i].task.Resources).reason
		}
		if reason != "" {
			if len(reqs) > 1 {
				return fmt.Sprintf("%s (instance %d)", reason, reqs[i].task.Instance)
			}
			return reason
		}
	}
	if len(reqs) < 2 {
		return ""
	}
	if nbound > 1 {
		if reason := r.gangBoundUnresolvable(reqs); reason != "" {
			return reason
		}
	}
	// A gang of n instances of a job capped at m per host needs n/m hosts.
	type group struct {
		job  *jobState
		cls  *class
		need resources.Resources
		max  uint32
	}
	var counted map[group]int
	for i := range reqs {
		if reqs[i].max > 0 && reqs[i].task.BoundHost == "" {
			if counted == nil {
				counted = map[group]int{}
			}
			counted[group{reqs[i].job, reqs[i].cls, reqs[i].task.Resources, reqs[i].max}]++
		}
	}
	for g, n := range counted {
		hosts := r.reachOf(g.cls, g.need).hosts
		if n > hosts*int(g.max) {
			return fmt.Sprintf("%s: %d instances at max %d per host need %d hosts, %d match",
				ReasonGangTooWide, n, g.max, (n+int(g.max)-1)/int(g.max), hosts)
		}
	}
	return ""
}

// boundStatus returns what the round knows of q's bound host: its offer,
// or else what hostmgr said of it (Config.Bound). ok is false if the host
// is gone.
func (r *Round) boundStatus(q *request) (st hostmgr.HostStatus, ok bool) {
	if h := q.bound; h >= 0 {
		o := &r.offers[h]
		return hostmgr.HostStatus{State: pelotonv1.HostState_HOST_UP, Capacity: o.Capacity, Labels: o.Labels, Partition: o.Partition}, true
	}
	st, ok = r.cfg.Bound[q.task.BoundHost]
	return st, ok
}

// boundUnresolvable returns why q's bound host could never take q, or "":
// the host is gone, fails q's partition or a constraint (a DAEMON's
// constraints must hold on the host it serves), or is too small even empty.
func (r *Round) boundUnresolvable(q *request) string {
	name, need := q.task.BoundHost, q.task.Resources
	st, ok := r.boundStatus(q)
	if !ok {
		return fmt.Sprintf("%s: %s", ReasonBoundGone, name)
	}
	p := q.task.Placement
	if p.GetPartition() != "" && p.GetPartition() != st.Partition {
		return fmt.Sprintf("%s: %s is not in partition %q", ReasonBoundMismatch, name, p.GetPartition())
	}
	for _, c := range p.GetConstraints() {
		if !hostmgr.Holds(c, st.Labels) {
			return fmt.Sprintf("%s: %s fails %s", ReasonBoundMismatch, name, describe(c))
		}
	}
	if !hostmgr.HoldsAnyOf(p.GetAnyOf(), st.Labels) {
		return fmt.Sprintf("%s: %s fails %s", ReasonBoundMismatch, name, describeAnyOf(p.GetAnyOf()))
	}
	if taint := hostmgr.TaintsTolerated(p.GetTolerations(), st.Labels[hostmgr.LabelTaints]); taint != "" {
		return fmt.Sprintf("%s: %s has taint %s, not tolerated", ReasonBoundMismatch, name, taint)
	}
	if !need.FitsIn(st.Capacity) {
		return fmt.Sprintf("%s: %s (needs %s; host has %s)", ReasonBoundTooSmall, name, needs(need), needs(st.Capacity))
	}
	return ""
}

// gangBoundUnresolvable returns why a gang's members bound to one host
// could never be there together, or "": their sum is larger than the host,
// or they are more instances of a job than its maximum per host. Each
// member alone passed boundUnresolvable.
func (r *Round) gangBoundUnresolvable(reqs []request) string {
	type hostJob struct{ host, job string }
	sum := map[string]resources.Resources{}
	count := map[hostJob]uint32{}
	for i := range reqs {
		t := reqs[i].task
		if t.BoundHost == "" {
			continue
		}
		sum[t.BoundHost] = sum[t.BoundHost].Add(t.Resources)
		if m := reqs[i].max; m > 0 {
			k := hostJob{t.BoundHost, t.JobID}
			if count[k]++; count[k] > m {
				return fmt.Sprintf("%s: more than %d %s of job %s bound to %s", ReasonGangTooWide, m, plural(m, "instance"), t.JobID, t.BoundHost)
			}
		}
		if st, _ := r.boundStatus(&reqs[i]); !sum[t.BoundHost].FitsIn(st.Capacity) {
			return fmt.Sprintf("%s: %s (the gang's members bound to it need %s; host has %s)", ReasonBoundTooSmall, t.BoundHost, needs(sum[t.BoundHost]), needs(st.Capacity))
		}
	}
	return ""
}

// chooseBound places q on its bound host if the host was offered and has
// room, and otherwise says what q waits for.
func (r *Round) chooseBound(q *request) (int32, string) {
	name, need, h := q.task.BoundHost, q.task.Resources, q.bound
	if h < 0 {
		// Known (gangUnresolvable ruled out a gone host) but not offered:
		// in maintenance, or leased by another engine.
		switch st := r.cfg.Bound[name].State; {
		case r.cfg.Bound[name].Unschedulable:
			return -1, fmt.Sprintf("%s: %s (it takes no new tasks: cordoned or not ready)", ReasonBoundNoRoom, name)
		case st == pelotonv1.HostState_HOST_DRAINING || st == pelotonv1.HostState_HOST_DRAINED:
			return -1, fmt.Sprintf("%s: %s (%s)", ReasonBoundMaintenance, name, st)
		case r.cfg.Bound[name].MovingTo != "":
			return -1, fmt.Sprintf("%s: %s (moving to partition %s)", ReasonBoundMaintenance, name, r.cfg.Bound[name].MovingTo)
		case st == pelotonv1.HostState_HOST_UP:
			return -1, fmt.Sprintf("%s: %s (another placement engine holds it)", ReasonBoundNoRoom, name)
		default:
			return -1, fmt.Sprintf("%s: %s (%s)", ReasonBoundNoRoom, name, st)
		}
	}
	if hostmgr.Fits(need, q.max, r.free[h], int(q.job.count(h))) {
		return h, ""
	}
	if !need.FitsIn(r.free[h]) {
		return -1, fmt.Sprintf("%s: %s (needs %s; has %s free)", ReasonBoundNoRoom, name, needs(need), needs(r.free[h]))
	}
	return -1, fmt.Sprintf("%s: %s (it holds max %d %s of this job)", ReasonBoundNoRoom, name, q.max, plural(q.max, "instance"))
}

// choose picks q's host: its bound host, or its previous host if that
// passes the filters and fits, else its strategy's choice. It returns -1
// and why when none fits.
func (r *Round) choose(q *request) (int32, string) {
	if q.task.BoundHost != "" {
		return r.chooseBound(q)
	}
	need := q.task.Resources
	if h := r.prevHost(q); h >= 0 {
		return h, ""
	}
	k := noRoomKey{class: q.cls.id, need: need, max: q.max}
	if q.max > 0 {
		k.job = q.job
	}
	if m, ok := r.noRoom[k]; ok && m.gen == r.gen {
		return -1, m.reason
	}
	if h := q.strategy.Choose(r, q); h >= 0 {
		return h, ""
	}
	reason := fmt.Sprintf("%s (needs %s)", ReasonNoCapacity, needs(need))
	if q.max > 0 {
		// Say "max reached" only if resources alone would have fitted.
		for _, h := range q.cls.hosts {
			if hostmgr.Fits(need, 0, r.free[h], 0) {
				reason = fmt.Sprintf("max %d %s %s", q.max, plural(q.max, "instance"), ReasonMaxPerHost)
				break
			}
		}
	}
	r.noRoom[k] = noRoomMemo{gen: r.gen, reason: reason}
	return -1, reason
}

func plural(n uint32, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// prevHost returns the host of q's previous run if it is offered, passes q's
// filters and fits, else -1.
func (r *Round) prevHost(q *request) int32 {
	name := q.task.PrevHost
	if name == "" {
		return -1
	}
	h := r.hostIndex(name)
	if h < 0 || !hostmgr.Matches(q.cls.spec, r.offers[h].Partition, r.offers[h].Labels) {
		return -1
	}
	if !hostmgr.Fits(q.task.Resources, q.max, r.free[h], int(q.job.count(h))) {
		return -1
	}
	return h
}

// assume records q on host h for the rest of the round.
func (r *Round) assume(q *request, h int32) {
	r.free[h] = r.free[h].Sub(q.task.Resources)
	if q.job != nil {
		q.job.counts[h]++
		if q.job.zoneLoad != nil {
			q.job.zoneLoad[r.zone[h]]++
		}
		r.block(q.job, h)
	}
	r.touch(h)
}

// block hides or shows host h in the job's own pack trees as its count
// reaches or leaves each tree's cap. The caller touches h afterwards.
func (r *Round) block(j *jobState, h int32) {
	if len(j.trees) == 0 {
		return
	}
	c := j.counts[h]
	for _, m := range r.members[h] {
		if m.tree.blocked != nil && slices.Contains(j.trees, m.tree) {
			m.tree.blocked[m.leaf] = c >= int32(m.tree.jobMax)
		}
	}
}

// forget undoes assume for a gang that did not fit whole. Resources coming
// back invalidate the round's "nothing fits" memos and SPREAD's queues,
// which dropped hosts for being too full.
func (r *Round) forget(q *request, h int32) {
	r.free[h] = r.free[h].Add(q.task.Resources)
	if q.job != nil {
		if q.job.counts[h]--; q.job.counts[h] <= 0 {
			delete(q.job.counts, h)
		}
		if q.job.zoneLoad != nil {
			q.job.zoneLoad[r.zone[h]]--
		}
		r.block(q.job, h)
	}
	r.touch(h)
	r.gen++
	r.spreaders, r.level0 = nil, nil
}

// touch refreshes the pack trees that show host h.
func (r *Round) touch(h int32) {
	if len(r.members[h]) == 0 {
		return
	}
	key := packKey(r.free[h], r.offers[h].Capacity)
	for _, m := range r.members[h] {
		m.tree.set(m.leaf, r.free[h], key)
	}
}

// zones assigns every offered host its failure domain, once per round.
func (r *Round) zones() {
	if r.zone != nil {
		return
	}
	r.zone = make([]int32, len(r.offers))
	ids := map[string]int32{}
	for i, o := range r.offers {
		v := o.Labels[r.cfg.DomainLabel]
		id, ok := ids[v]
		if !ok {
			id = int32(len(ids))
			ids[v] = id
		}
		r.zone[i] = id
	}
	r.nzones = len(ids)
}

// zoneLoads returns the job's instances per failure domain.
func (r *Round) zoneLoads(j *jobState) []int32 {
	r.zones()
	if j.zoneLoad == nil {
		j.zoneLoad = make([]int32, r.nzones)
		for h, n := range j.counts {
			j.zoneLoad[r.zone[h]] += n
		}
	}
	return j.zoneLoad
}

// byZone returns the class's hosts grouped by failure domain.
func (r *Round) byZone(c *class) [][]int32 {
	r.zones()
	if c.byZone == nil {
		c.byZone = make([][]int32, r.nzones)
		for _, h := range c.hosts {
			z := r.zone[h]
			c.byZone[z] = append(c.byZone[z], h)
		}
	}
	return c.byZone
}
