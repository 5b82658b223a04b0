package placement

import (
	"math"
	"slices"
	"sort"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Strategy picks the host for one task among those of its class (the hosts
// passing its partition and constraints) that pass hostmgr.Fits, including
// the job's maximum per host. It returns the host's index in the round's
// offers, or -1 if none has room. Choose may keep per-round indexes in the
// Round; it must not keep anything between rounds. Place tries a task's
// previous host before asking its strategy. The implementations (pack,
// spread) live in this package: the request type is internal.
type Strategy interface {
	Choose(r *Round, q *request) int32
}

var (
	packStrategy   Strategy = pack{}
	spreadStrategy Strategy = spread{}
)

// strategyFor maps the API strategy to its implementation. Tasks reach
// placement with the job type's default already filled in; an unset one
// packs.
func strategyFor(s pelotonv1.PlacementStrategy) Strategy {
	if s == pelotonv1.PlacementStrategy_SPREAD {
		return spreadStrategy
	}
	return packStrategy
}

// pack is multi-resource best fit: the host with the least free resources
// (summed over kinds, each as a fraction of the host's capacity) that still
// fits. Whole hosts stay free for large tasks. Tasks without GPUs use hosts
// without GPUs first, so that GPU hosts stay free for GPU work.
type pack struct{}

var _ Strategy = pack{}

func (pack) Choose(r *Round, q *request) int32 {
	need := q.task.Resources
	if need.GPU == 0 {
		if h := r.packTreeFor(q, 0).best(r, q); h >= 0 {
			return h
		}
	}
	return r.packTreeFor(q, 1).best(r, q)
}

// privateAfter is how many hosts a job's searches may pass over for being at
// its maximum per host before the job gets pack trees of its own. A
// variable so that tests can exercise both paths.
var privateAfter = 256

// packTreeFor returns the tree q searches: the class's, or, for a job capped
// per host that keeps running into its cap, the job's own copy where hosts
// at the cap are hidden. Without it, a large job capped at one per host
// would walk past every host it already uses on each search.
func (r *Round) packTreeFor(q *request, tier int) *packTree {
	shared := r.packTree(q.cls, tier)
	if q.max == 0 || q.job == nil || q.job.rejects < privateAfter || shared == nil {
		return shared
	}
	for _, t := range q.job.trees {
		if t.cls == q.cls && t.tier == tier && t.jobMax == q.max {
			return t
		}
	}
	t := &packTree{size: shared.size, host: shared.host, cls: q.cls, tier: tier, jobMax: q.max,
		max: slices.Clone(shared.max), minKey: slices.Clone(shared.minKey), blocked: make([]bool, shared.size)}
	for i, h := range t.host {
		r.members[h] = append(r.members[h], leafRef{t, int32(i)})
		if q.job.count(h) >= int32(q.max) {
			t.blocked[i] = true
			t.max[t.size+i], t.minKey[t.size+i] = noHost, math.MaxInt64
		}
	}
	t.rebuild()
	q.job.trees = append(q.job.trees, t)
	return t
}

// spread puts a job's instances on the hosts holding the fewest of them
// (counting runs already there), then in the failure domain holding the
// fewest, so that losing one host or domain takes few instances down.
type spread struct{}

var _ Strategy = spread{}

func (spread) Choose(r *Round, q *request) int32 {
	k := spreadKey{job: q.job, cls: q.cls, need: q.task.Resources, max: q.max}
	s := r.spreaders[k]
	if s == nil {
		s = newSpreader(r, k)
		if r.spreaders == nil {
			r.spreaders = map[spreadKey]*spreader{}
		}
		r.spreaders[k] = s
	}
	return s.choose(r)
}

// packKey orders hosts for pack: the sum over kinds of the free fraction of
// capacity, scaled to an integer. Lower is fuller.
func packKey(free, capacity resources.Resources) int64 {
	var f float64
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if c := capacity.Get(k); c > 0 {
			f += float64(free.Get(k)) / float64(c)
		}
	}
	return int64(f * (1 << 20))
}

// packTree is a segment tree over some hosts of a class, holding at every
// node the per-kind maximum free and the minimum pack key of its leaves. A
// subtree whose maximum does not cover the task, or whose best key cannot
// beat the best host found so far, is skipped whole, so finding the fullest
// host that fits takes about log(hosts) steps instead of a scan. Leaves are
// laid out by key at the start of the round, so that similar hosts share
// subtrees and the bounds stay tight.
type packTree struct {
	size   int     // leaves, a power of two
	host   []int32 // leaf -> host
	max    []resources.Resources
	minKey []int64
	cls    *class
	tier   int
	// A job's own tree (see packTreeFor) hides the hosts where the job is at
	// jobMax: blocked leaves read as empty whatever their host has free.
	jobMax  uint32
	blocked []bool
}

type leafRef struct {
	tree *packTree
	leaf int32
}

// noHost is the maximum of an empty leaf: no task fits it.
var noHost = resources.Resources{MilliCPU: -1, MemoryMB: -1, DiskMB: -1, GPU: -1}

// packTree returns the class's pack tree of hosts without (tier 0) or with
// (tier 1) GPUs, building it on first use; nil if there are no such hosts.
func (r *Round) packTree(c *class, tier int) *packTree {
	if c.packBuilt[tier] {
		return c.pack[tier]
	}
	c.packBuilt[tier] = true
	var hosts []int32
	for _, h := range c.hosts {
		if (r.offers[h].Capacity.GPU > 0) == (tier == 1) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	keys := make([]int64, len(r.offers))
	for _, h := range hosts {
		keys[h] = packKey(r.free[h], r.offers[h].Capacity)
	}
	sort.SliceStable(hosts, func(i, j int) bool { return keys[hosts[i]] < keys[hosts[j]] })
	size := 1
	for size < len(hosts) {
		size <<= 1
	}
	t := &packTree{size: size, host: hosts, max: make([]resources.Resources, 2*size), minKey: make([]int64, 2*size)}
	for i := 0; i < size; i++ {
		if i < len(hosts) {
			h := hosts[i]
			t.max[size+i], t.minKey[size+i] = r.free[h], keys[h]
			r.members[h] = append(r.members[h], leafRef{t, int32(i)})
		} else {
			t.max[size+i], t.minKey[size+i] = noHost, math.MaxInt64
		}
	}
	t.cls, t.tier = c, tier
	t.rebuild()
	c.pack[tier] = t
	return t
}

// rebuild recomputes every inner node from the leaves.
func (t *packTree) rebuild() {
	for n := t.size - 1; n >= 1; n-- {
		t.max[n] = t.max[2*n].Max(t.max[2*n+1])
		t.minKey[n] = min(t.minKey[2*n], t.minKey[2*n+1])
	}
}

// set updates one leaf and its ancestors, stopping where nothing changes.
func (t *packTree) set(leaf int32, free resources.Resources, key int64) {
	n := t.size + int(leaf)
	if t.blocked != nil && t.blocked[leaf] {
		free, key = noHost, math.MaxInt64
	}
	t.max[n], t.minKey[n] = free, key
	for n >>= 1; n >= 1; n >>= 1 {
		m, k := t.max[2*n].Max(t.max[2*n+1]), min(t.minKey[2*n], t.minKey[2*n+1])
		if m == t.max[n] && k == t.minKey[n] {
			return
		}
		t.max[n], t.minKey[n] = m, k
	}
}

// best returns the host with the lowest key that passes hostmgr.Fits for q,
// or -1. Branch and bound: children with the lower key are searched first,
// and a subtree is pruned when it cannot fit q or cannot beat the best key.
func (t *packTree) best(r *Round, q *request) int32 {
	if t == nil {
		return -1
	}
	need := q.task.Resources
	best, bestKey := int32(-1), int64(math.MaxInt64)
	var stack [128]int32
	stack[0] = 1
	sp := 1
	for sp > 0 {
		sp--
		n := stack[sp]
		if t.minKey[n] >= bestKey || !need.FitsIn(t.max[n]) {
			continue
		}
		if int(n) >= t.size {
			h := t.host[int(n)-t.size]
			if hostmgr.Fits(need, q.max, r.free[h], int(q.job.count(h))) {
				best, bestKey = h, t.minKey[n]
			} else if q.job != nil {
				q.job.rejects++
			}
			continue
		}
		l, rt := 2*n, 2*n+1
		if t.minKey[l] <= t.minKey[rt] {
			l, rt = rt, l
		}
		// Push the worse child first so that the better one is searched first.
		stack[sp], stack[sp+1] = l, rt
		sp += 2
	}
	return best
}

type spreadKey struct {
	job  *jobState
	cls  *class
	need resources.Resources
	max  uint32
}

// spreader serves one job's tasks of one class and shape: hosts by how many
// of the job's instances they hold (level), each level by failure domain.
//
// Level 0 is the class's hosts per domain, read in place from a position:
// the larger of the spreader's own and the one shared by every spreader of
// the class and shape, before which all hosts are too full for the shape
// (free only shrinks within a round; a rollback resets both). So a new job
// costs a few slice headers, not a walk past every full host, and a host
// is passed over once per shape, not once per job. Higher levels are queues
// of the hosts that took instances. Counts change under the levels (other
// shapes of the job, runs already there, rollbacks): a host whose count no
// longer matches its level moves when it is reached.
type spreader struct {
	key    spreadKey
	zones  [][]int32 // the class's hosts per domain
	own    []int     // level 0: this spreader's position per domain
	shared []int     // level 0: the class and shape's position per domain
	levels []spreadLevel
}

type spreadLevel struct {
	q    [][]int32 // per domain
	head []int
	n    int // hosts queued in the level
}

func newSpreader(r *Round, k spreadKey) *spreader {
	zs := r.byZone(k.cls)
	r.zoneLoads(k.job)
	sk := shapeKey{k.cls.id, k.need}
	if r.level0 == nil {
		r.level0 = map[shapeKey][]int{}
	}
	shared := r.level0[sk]
	if shared == nil {
		shared = make([]int, len(zs))
		r.level0[sk] = shared
	}
	return &spreader{key: k, zones: zs, own: make([]int, len(zs)), shared: shared, levels: []spreadLevel{{}}}
}

func (s *spreader) push(level int32, z int32, h int32) {
	if level == 0 || (s.key.max > 0 && uint32(level) >= s.key.max) {
		return // level 0 is the class's hosts; a host at the cap takes no more
	}
	for int(level) >= len(s.levels) {
		nz := len(s.zones)
		s.levels = append(s.levels, spreadLevel{q: make([][]int32, nz), head: make([]int, nz)})
	}
	l := &s.levels[level]
	l.q[z] = append(l.q[z], h)
	l.n++
}

func (s *spreader) choose(r *Round) int32 {
	if h := s.chooseLevel0(r); h >= 0 {
		return h
	}
	job, need := s.key.job, s.key.need
	for lv := 1; lv < len(s.levels); lv++ {
		l := &s.levels[lv]
		for l.n > 0 {
			// The domain holding the fewest of the job's instances among those
			// with hosts left at this level; ties go to the first domain.
			z := -1
			for d := range l.q {
				if l.head[d] < len(l.q[d]) && (z < 0 || job.zoneLoad[d] < job.zoneLoad[z]) {
					z = d
				}
			}
			h := l.q[z][l.head[z]]
			l.head[z]++
			l.n--
			c := job.count(h)
			if int(c) != lv {
				s.push(c, int32(z), h)
				l = &s.levels[lv] // push may have grown s.levels
				continue
			}
			if !hostmgr.Fits(need, s.key.max, r.free[h], int(c)) {
				continue
			}
			// It takes an instance now: it belongs one level up.
			s.push(c+1, int32(z), h)
			return h
		}
	}
	return -1
}

// chooseLevel0 picks among the hosts holding none of the job's instances,
// in the domain holding the fewest of them.
func (s *spreader) chooseLevel0(r *Round) int32 {
	job, need := s.key.job, s.key.need
	for {
		z := -1
		for d, hs := range s.zones {
			if max(s.own[d], s.shared[d]) < len(hs) && (z < 0 || job.zoneLoad[d] < job.zoneLoad[z]) {
				z = d
			}
		}
		if z < 0 {
			return -1
		}
		at := max(s.own[z], s.shared[z])
		h := s.zones[z][at]
		s.own[z] = at + 1
		if !hostmgr.Fits(need, 0, r.free[h], 0) {
			if at == s.shared[z] {
				s.shared[z]++ // too full for the shape, for every job
			}
			continue
		}
		if c := job.count(h); c != 0 {
			s.push(c, int32(z), h)
			continue
		}
		s.push(1, int32(z), h)
		return h
	}
}
