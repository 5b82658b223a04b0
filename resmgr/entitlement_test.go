package resmgr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

// testPool builds one pool of a test tree: pool("/a").Reserve(cores(30)).Pending(cores(10)).
type testPool struct {
	path           string
	res, share     resources.Resources
	limit          resources.Resources
	pending, alloc resources.Resources
}

func pool(path string) *testPool {
	return &testPool{path: path, limit: resources.Unlimited, share: shares(1)}
}

// Reserve sets the reservation.
func (b *testPool) Reserve(r resources.Resources) *testPool { b.res = r; return b }

// Limit sets the limit of one kind; the other kinds stay unlimited.
func (b *testPool) Limit(k resources.Kind, v int64) *testPool { b.limit = b.limit.Set(k, v); return b }

// Share sets the share, in thousandths, of every kind.
func (b *testPool) Share(r resources.Resources) *testPool { b.share = r; return b }

// Pending sets what the pool's queued tasks ask for.
func (b *testPool) Pending(r resources.Resources) *testPool { b.pending = r; return b }

// Allocated sets what the pool's admitted tasks hold.
func (b *testPool) Allocated(r resources.Resources) *testPool { b.alloc = r; return b }

func cores(n int64) resources.Resources { return resources.Resources{MilliCPU: n * 1000} }
func milli(n int64) resources.Resources { return resources.Resources{MilliCPU: n} }
func gpus(n int64) resources.Resources  { return resources.Resources{GPU: n} }
func shares(n int64) resources.Resources {
	return resources.Resources{MilliCPU: n * 1000, MemoryMB: n * 1000, DiskMB: n * 1000, GPU: n * 1000}
}
func res(milliCPU, memMB, diskMB, gpu int64) resources.Resources {
	return resources.Resources{MilliCPU: milliCPU, MemoryMB: memMB, DiskMB: diskMB, GPU: gpu}
}

// testTree is a pool tree wired the way the manager wires it, without a store.
type testTree struct {
	root  *Pool
	pools map[string]*Pool
}

// newTestTree creates the pools (and any missing ancestors, with default
// settings) and sums pending and allocation up the tree as walkUp does.
func newTestTree(pools ...*testPool) *testTree {
	t := &testTree{pools: map[string]*Pool{}}
	t.root = &Pool{Path: RootPath, children: map[string]*Pool{}, Limit: resources.Unlimited, Share: shares(1)}
	t.pools[RootPath] = t.root
	byPath := map[string]*testPool{}
	for _, b := range pools {
		byPath[b.path] = b
	}
	var ensure func(path string) *Pool
	ensure = func(path string) *Pool {
		if p, ok := t.pools[path]; ok {
			return p
		}
		parent := ensure(parentPath(path))
		b := byPath[path]
		if b == nil {
			b = pool(path)
		}
		p := &Pool{Path: path, parent: parent, children: map[string]*Pool{},
			Reservation: b.res, Limit: b.limit, Share: b.share}
		parent.children[path] = p
		t.pools[path] = p
		return p
	}
	for _, b := range pools {
		for n := ensure(b.path); n != nil; n = n.parent {
			n.Pending = n.Pending.Add(b.pending)
			n.Allocation = n.Allocation.Add(b.alloc)
		}
	}
	return t
}

func (t *testTree) ent(path string) resources.Resources { return t.pools[path].Entitlement }

type entCase struct {
	name     string
	capacity resources.Resources
	pools    []*testPool
	want     map[string]resources.Resources
}

func runEntCases(t *testing.T, cases []entCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := newTestTree(tc.pools...)
			ComputeEntitlement(tree.root, tc.capacity)
			for _, path := range sortedKeys(tc.want) {
				if got := tree.ent(path); got != tc.want[path] {
					t.Errorf("entitlement of %s = %+v, want %+v", path, got, tc.want[path])
				}
			}
			checkInvariants(t, tree, tc.capacity)
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestEntitlementTalkExample is the example from the Peloton talk: 100 CPUs,
// three pools reserving 30 each with equal shares.
func TestEntitlementTalkExample(t *testing.T) {
	talk := func(a, b, c int64) []*testPool {
		return []*testPool{
			pool("/p1").Reserve(cores(30)).Pending(cores(a)),
			pool("/p2").Reserve(cores(30)).Pending(cores(b)),
			pool("/p3").Reserve(cores(30)).Pending(cores(c)),
		}
	}
	runEntCases(t, []entCase{{
		name:     "demands 10/100/100",
		capacity: cores(100),
		pools:    talk(10, 100, 100),
		want:     map[string]resources.Resources{"/": cores(100), "/p1": cores(10), "/p2": cores(45), "/p3": cores(45)},
	}, {
		name:     "p1 demand rises to 50",
		capacity: cores(100),
		pools:    talk(50, 100, 100),
		// 10 CPUs above the reservations split three ways; the one milli-CPU
		// that does not divide goes to the first pool in path order.
		want: map[string]resources.Resources{"/p1": milli(33334), "/p2": milli(33333), "/p3": milli(33333)},
	}, {
		name:     "p1 idle lends its reservation",
		capacity: cores(100),
		pools:    talk(0, 100, 100),
		want:     map[string]resources.Resources{"/p1": {}, "/p2": cores(50), "/p3": cores(50)},
	}, {
		name:     "little demand: the rest is elastic, by share",
		capacity: cores(100),
		pools:    talk(10, 20, 10),
		want:     map[string]resources.Resources{"/p1": cores(30), "/p2": cores(40), "/p3": cores(30)},
	}})
}

// TestEntitlementCases covers one rule each, then deeper trees.
func TestEntitlementCases(t *testing.T) {
	q := int64(math.MaxInt64 / 3)
	runEntCases(t, []entCase{{
		name:     "limit caps a pool and the rest goes to its siblings",
		capacity: cores(100),
		pools: []*testPool{
			pool("/a").Limit(resources.CPU, 20000).Pending(cores(100)),
			pool("/b").Pending(cores(100)),
			pool("/c").Pending(cores(10)),
		},
		want: map[string]resources.Resources{"/a": cores(20), "/b": cores(70), "/c": cores(10)},
	}, {
		name:     "limits cap elastic capacity too",
		capacity: cores(100),
		pools: []*testPool{
			pool("/a").Limit(resources.CPU, 15000).Pending(cores(10)),
			pool("/b").Limit(resources.CPU, 25000).Pending(cores(10)),
		},
		// Both at their limits: 60 CPUs stay with the parent, unassigned.
		want: map[string]resources.Resources{"/a": cores(15), "/b": cores(25)},
	}, {
		name:     "shares 2:1",
		capacity: cores(90),
		pools: []*testPool{
			pool("/a").Share(shares(2)).Pending(cores(100)),
			pool("/b").Share(shares(1)).Pending(cores(100)),
		},
		want: map[string]resources.Resources{"/a": cores(60), "/b": cores(30)},
	}, {
		name:     "shares 2:1, the heavier pool needs less than its share",
		capacity: cores(90),
		pools: []*testPool{
			pool("/a").Share(shares(2)).Pending(cores(40)),
			pool("/b").Share(shares(1)).Pending(cores(100)),
		},
		want: map[string]resources.Resources{"/a": cores(40), "/b": cores(50)},
	}, {
		name:     "each kind is divided on its own",
		capacity: res(100000, 1000, 0, 4),
		pools: []*testPool{
			pool("/a").Share(res(3000, 1000, 1000, 1000)).Pending(res(80000, 100, 0, 4)),
			pool("/b").Pending(res(80000, 900, 0, 0)),
		},
		// cpu by share 3:1; memory fits exactly; all the GPUs go to /a.
		want: map[string]resources.Resources{"/a": res(75000, 100, 0, 4), "/b": res(25000, 900, 0, 0)},
	}, {
		name:     "gpu demand only in one pool",
		capacity: res(10000, 0, 0, 8),
		pools: []*testPool{
			pool("/train").Pending(res(2000, 0, 0, 6)),
			pool("/web").Limit(resources.GPU, 0).Pending(cores(4)),
			pool("/batch").Limit(resources.GPU, 1),
		},
		// GPU: /train's 6, then the 2 idle GPUs by share up to the limits:
		// /batch is capped at 1, /web at 0. CPU: 4 idle CPUs split 3 ways,
		// the spare milli-CPU to /batch, first in path order.
		want: map[string]resources.Resources{
			"/train": res(3333, 0, 0, 7),
			"/web":   res(5333, 0, 0, 0),
			"/batch": res(1334, 0, 0, 1),
		},
	}, {
		name:     "zero capacity",
		capacity: resources.Resources{},
		pools: []*testPool{
			pool("/a/x").Reserve(cores(10)).Pending(res(5000, 10, 10, 1)),
			pool("/a").Reserve(cores(20)),
			pool("/b").Pending(cores(1)),
		},
		want: map[string]resources.Resources{"/": {}, "/a": {}, "/a/x": {}, "/b": {}},
	}, {
		name:     "zero demand everywhere: all elastic, by share, up to limits",
		capacity: cores(100),
		pools: []*testPool{
			pool("/a").Limit(resources.CPU, 20000),
			pool("/b").Share(shares(1)),
			pool("/c").Share(shares(3)),
		},
		want: map[string]resources.Resources{"/a": cores(20), "/b": cores(20), "/c": cores(60)},
	}, {
		name:     "reservation above demand: the unused part goes to siblings",
		capacity: cores(100),
		pools: []*testPool{
			pool("/a").Reserve(cores(50)).Pending(cores(10)),
			pool("/b").Pending(cores(100)),
		},
		want: map[string]resources.Resources{"/a": cores(10), "/b": cores(90)},
	}, {
		name:     "cluster shrank below the reservations: each gets the same fraction",
		capacity: milli(40001),
		pools: []*testPool{
			pool("/a").Reserve(cores(60)).Pending(cores(100)),
			pool("/b").Reserve(cores(20)).Pending(cores(100)),
		},
		want: map[string]resources.Resources{"/a": milli(30001), "/b": milli(10000)},
	}, {
		name:     "rounding units go out in path order",
		capacity: milli(2),
		pools: []*testPool{
			pool("/c").Pending(cores(1)),
			pool("/b").Pending(cores(1)),
			pool("/a").Pending(cores(1)),
		},
		want: map[string]resources.Resources{"/a": milli(1), "/b": milli(1), "/c": {}},
	}, {
		name:     "a share of zero counts as one thousandth",
		capacity: milli(1001),
		pools: []*testPool{
			pool("/a").Share(resources.Resources{}).Pending(cores(5)),
			pool("/b").Pending(cores(5)),
		},
		want: map[string]resources.Resources{"/a": milli(1), "/b": milli(1000)},
	}, {
		name:     "allocation counts as demand like pending",
		capacity: cores(100),
		pools: []*testPool{
			pool("/a").Allocated(cores(30)).Pending(cores(30)),
			pool("/b").Allocated(cores(100)),
		},
		want: map[string]resources.Resources{"/a": cores(50), "/b": cores(50)},
	}, {
		name:     "huge quantities do not overflow",
		capacity: resources.Unlimited,
		pools: []*testPool{
			pool("/a").Reserve(gpus(1 << 62)).Pending(resources.Unlimited),
			pool("/b").Reserve(gpus(1 << 62)).Pending(resources.Unlimited),
			pool("/c").Reserve(gpus(1 << 62)).Pending(resources.Unlimited),
		},
		// GPU: the reservations sum past MaxInt64, so they are scaled
		// down; the other kinds split evenly.
		want: map[string]resources.Resources{
			"/a": {MilliCPU: q + 1, MemoryMB: q + 1, DiskMB: q + 1, GPU: q + 1},
			"/b": {MilliCPU: q, MemoryMB: q, DiskMB: q, GPU: q},
			"/c": {MilliCPU: q, MemoryMB: q, DiskMB: q, GPU: q},
		},
	}})
}

// deepTree is four levels of pools under the root:
//
//	/ads            reserve 40   /ads/batch         demand 60
//	/eng            reserve 60   /eng/web           reserve 20, demand 30
//	/eng/ml         reserve 40   /eng/ml/serve      reserve 10, demand 5
//	/eng/ml/train   reserve 30   /eng/ml/train/{x,y}            demand 30, 20
func deepTree() []*testPool {
	return []*testPool{
		pool("/ads").Reserve(cores(40)),
		pool("/ads/batch").Pending(cores(60)),
		pool("/eng").Reserve(cores(60)),
		pool("/eng/web").Reserve(cores(20)).Pending(cores(30)),
		pool("/eng/ml").Reserve(cores(40)),
		pool("/eng/ml/serve").Reserve(cores(10)).Pending(cores(5)),
		pool("/eng/ml/train").Reserve(cores(30)),
		pool("/eng/ml/train/x").Pending(cores(30)),
		pool("/eng/ml/train/y").Pending(cores(20)),
	}
}

func TestEntitlementDeepTree(t *testing.T) {
	runEntCases(t, []entCase{{
		name:     "contended: reservations decide the top levels",
		capacity: cores(100),
		pools:    deepTree(),
		want: map[string]resources.Resources{
			"/ads": cores(40), "/ads/batch": cores(40),
			"/eng": cores(60), "/eng/web": cores(20),
			"/eng/ml": cores(40), "/eng/ml/serve": cores(5),
			"/eng/ml/train": cores(35), "/eng/ml/train/x": milli(17500), "/eng/ml/train/y": milli(17500),
		},
	}, {
		name:     "idle capacity flows down by share at every level",
		capacity: cores(200),
		pools:    deepTree(),
		// Root: demand met (85, 60), 55 idle CPUs split 27.5/27.5. /eng:
		// 27.5 idle split 13.75/13.75; /eng/ml: 13.75 idle, 6.875 each;
		// /eng/ml/train: 6.875 idle, the odd milli-CPU to x.
		want: map[string]resources.Resources{
			"/ads": milli(87500), "/ads/batch": milli(87500),
			"/eng": milli(112500), "/eng/web": milli(43750),
			"/eng/ml": milli(68750), "/eng/ml/serve": milli(11875),
			"/eng/ml/train": milli(56875), "/eng/ml/train/x": milli(33438), "/eng/ml/train/y": milli(23437),
		},
	}, {
		name:     "a limit on an interior pool bounds its subtree",
		capacity: cores(200),
		pools: append(deepTree(),
			pool("/eng").Reserve(cores(60)).Limit(resources.CPU, 70000)),
		want: map[string]resources.Resources{
			"/ads": cores(130), "/ads/batch": cores(130),
			"/eng": cores(70), "/eng/web": cores(25),
			"/eng/ml": cores(45), "/eng/ml/serve": cores(5),
			"/eng/ml/train": cores(40), "/eng/ml/train/x": cores(20), "/eng/ml/train/y": cores(20),
		},
	}})
}

// TestEntitlementRecompute checks that a second call starts from the tree as
// it is, not from the previous result.
func TestEntitlementRecompute(t *testing.T) {
	tree := newTestTree(
		pool("/p1").Reserve(cores(30)).Pending(cores(10)),
		pool("/p2").Reserve(cores(30)).Pending(cores(100)),
		pool("/p3").Reserve(cores(30)).Pending(cores(100)),
	)
	ComputeEntitlement(tree.root, cores(100))
	if got := tree.ent("/p2"); got != cores(45) {
		t.Fatalf("before: /p2 = %+v, want 45 CPUs", got)
	}
	for n := tree.pools["/p1"]; n != nil; n = n.parent {
		n.Pending = n.Pending.Add(cores(40))
	}
	ComputeEntitlement(tree.root, cores(100))
	for path, want := range map[string]int64{"/p1": 33334, "/p2": 33333, "/p3": 33333} {
		if got := tree.ent(path).MilliCPU; got != want {
			t.Errorf("after: %s = %d milli-CPU, want %d", path, got, want)
		}
	}
	ComputeEntitlement(nil, cores(1)) // no tree, no panic
}

// checkInvariants checks every parent's split against the properties the doc
// comment of ComputeEntitlement promises and against refSplit.
func checkInvariants(t *testing.T, tree *testTree, capacity resources.Resources) {
	t.Helper()
	if tree.root.Entitlement != capacity {
		t.Errorf("(a) root entitlement %+v, want the capacity %+v", tree.root.Entitlement, capacity)
	}
	for _, path := range sortedKeys(tree.pools) {
		p := tree.pools[path]
		if p.IsLeaf() {
			continue
		}
		kids := make([]*Pool, 0, len(p.children))
		for _, c := range p.children {
			kids = append(kids, c)
		}
		slices.SortFunc(kids, comparePoolPaths)
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			checkSplit(t, p, kids, k)
		}
	}
}

func checkSplit(t *testing.T, p *Pool, kids []*Pool, k resources.Kind) {
	t.Helper()
	e := p.Entitlement.Get(k)
	var sum, sumMin int64
	covered := true // the parent can give every child min(demand, reservation)
	for _, c := range kids {
		sum += c.Entitlement.Get(k)
		m := min(c.Demand().Get(k), c.Reservation.Get(k))
		if m > math.MaxInt64-sumMin {
			covered = false
		} else {
			sumMin += m
		}
	}
	covered = covered && sumMin <= e
	where := func(c *Pool) string { return fmt.Sprintf("%s %s", c.Path, k) }
	// (a) never more than the parent has.
	if sum > e || sum < 0 {
		t.Errorf("(a) children of %s get %d %s in all, parent has %d", p.Path, sum, k, e)
	}
	anyBelowLimit, anyUnmet := false, false
	for _, c := range kids {
		got, d, r, l := c.Entitlement.Get(k), c.Demand().Get(k), c.Reservation.Get(k), c.Limit.Get(k)
		if got < 0 {
			t.Errorf("%s: negative entitlement %d", where(c), got)
		}
		// (b) the guarantee, when the parent can cover all of them.
		if covered && got < min(d, r) {
			t.Errorf("(b) %s: entitlement %d below min(demand %d, reservation %d)", where(c), got, d, r)
		}
		// (c) never above the limit.
		if got > l {
			t.Errorf("(c) %s: entitlement %d above limit %d", where(c), got, l)
		}
		anyBelowLimit = anyBelowLimit || got < l
		anyUnmet = anyUnmet || (got < d && got < l)
	}
	// (d) work-conserving: unmet demand within limits means nothing is held
	// back; and more strongly, capacity is kept only when every child is at
	// its limit.
	if anyUnmet && sum != e {
		t.Errorf("(d) %s: %d of %d %s handed out while a child has unmet demand", p.Path, sum, e, k)
	}
	if anyBelowLimit && sum != e {
		t.Errorf("(d) %s: %d of %d %s handed out while a child is below its limit", p.Path, sum, e, k)
	}
	// (e) max-min: two children with unmet demand got the same amount above
	// their guarantee per unit of share, up to one unit of rounding each.
	if covered {
		for i, a := range kids {
			for _, b := range kids[i+1:] {
				if !hasUnmetDemand(a, k) || !hasUnmetDemand(b, k) {
					continue
				}
				da := a.Entitlement.Get(k) - min(a.Demand().Get(k), a.Reservation.Get(k))
				db := b.Entitlement.Get(k) - min(b.Demand().Get(k), b.Reservation.Get(k))
				sa, sb := max(a.Share.Get(k), 1), max(b.Share.Get(k), 1)
				if diff := math.Abs(float64(da)*float64(sb) - float64(db)*float64(sa)); diff > float64(sa+sb) {
					t.Errorf("(e) %s and %s: %d and %d above the guarantee for shares %d and %d", where(a), b.Path, da, db, sa, sb)
				}
			}
		}
	}
	// (f) within one unit of the literal round-by-round algorithm.
	if e < 1<<52 { // refSplit works in float64
		ref := refSplit(e, kids, k)
		for i, c := range kids {
			if diff := math.Abs(float64(c.Entitlement.Get(k)) - ref[i]); diff >= 1+1e-6 {
				t.Errorf("(f) %s: entitlement %d, round-by-round gives %.3f", where(c), c.Entitlement.Get(k), ref[i])
			}
		}
	}
}

func hasUnmetDemand(c *Pool, k resources.Kind) bool {
	got := c.Entitlement.Get(k)
	return got < min(c.Demand().Get(k), c.Limit.Get(k))
}

// refSplit divides e among kids the slow, literal way, in real numbers: the
// guarantees (scaled down in proportion if e is short), then rounds of "give
// every child below its cap remaining*share/sumShares, cap, redistribute",
// first up to min(demand, limit), then up to limit.
func refSplit(e int64, kids []*Pool, k resources.Kind) []float64 {
	n := len(kids)
	cur, top, w := make([]float64, n), make([]float64, n), make([]float64, n)
	var sum float64
	for i, c := range kids {
		top[i] = float64(min(c.Demand().Get(k), c.Limit.Get(k), c.Reservation.Get(k)))
		sum += top[i]
	}
	left := float64(e)
	if sum <= left {
		copy(cur, top)
		left -= sum
	} else {
		for i := range cur {
			cur[i] = left * top[i] / sum
		}
		left = 0
	}
	rounds := func() {
		for range 2*n + 2 {
			var sumW float64
			for i := range cur {
				if top[i]-cur[i] > 1e-9 {
					sumW += w[i]
				}
			}
			if left <= 1e-9 || sumW == 0 {
				return
			}
			var given float64
			for i := range cur {
				if top[i]-cur[i] > 1e-9 {
					g := min(left*w[i]/sumW, top[i]-cur[i])
					cur[i] += g
					given += g
				}
			}
			left -= given
		}
	}
	for i, c := range kids {
		top[i] = float64(min(c.Demand().Get(k), c.Limit.Get(k)))
		w[i] = float64(max(c.Share.Get(k), 1))
	}
	rounds()
	for i, c := range kids {
		top[i] = float64(c.Limit.Get(k))
	}
	rounds()
	return cur
}

// randomTree builds a tree of depth <= 4 with up to 8 children per pool.
// Reservations fit in the parent's, limits are unlimited or at least the
// reservation, shares are 1..5, demand sits on the leaves (zero a quarter of
// the time per kind).
func randomTree(rng *rand.Rand) (*testTree, resources.Resources) {
	scale := [resources.NumKinds]int64{100000, 64000, 200000, 16}
	var pools []*testPool
	var grow func(parent string, budget resources.Resources, depth int)
	grow = func(parent string, budget resources.Resources, depth int) {
		n := rng.IntN(9)
		if depth == 0 {
			n = 1 + rng.IntN(8)
		}
		if depth == 4 {
			n = 0
		}
		for i := range n {
			b := pool(fmt.Sprintf("%s/p%d", strings.TrimSuffix(parent, "/"), i))
			for k := resources.Kind(0); k < resources.NumKinds; k++ {
				var r int64
				switch left := budget.Get(k); {
				case depth == 0: // the root's reservation is not bounded
					r = rng.Int64N(scale[k] / 2)
				case left > 0 && rng.IntN(3) > 0:
					r = rng.Int64N(left + 1)
					budget = budget.Set(k, left-r)
				}
				b.res = b.res.Set(k, r)
				if rng.IntN(3) > 0 {
					b.limit = b.limit.Set(k, r+rng.Int64N(2*scale[k]))
				}
				b.share = b.share.Set(k, 1000*(1+rng.Int64N(5)))
			}
			pools = append(pools, b)
			before := len(pools)
			grow(b.path, b.res, depth+1)
			if len(pools) == before { // a leaf: give it demand
				for k := resources.Kind(0); k < resources.NumKinds; k++ {
					if rng.IntN(4) > 0 {
						b.pending = b.pending.Set(k, rng.Int64N(scale[k]))
					}
					if rng.IntN(4) > 0 {
						b.alloc = b.alloc.Set(k, rng.Int64N(scale[k]))
					}
				}
			}
		}
	}
	grow(RootPath, resources.Resources{}, 0)
	tree := newTestTree(pools...)
	var capacity resources.Resources
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		// Anywhere from nothing to half again the total demand, so every
		// step (shortfall, fair share, elastic) gets exercised.
		d := tree.root.Demand().Get(k)
		if rng.IntN(10) > 0 {
			capacity = capacity.Set(k, rng.Int64N(d+d/2+2))
		}
	}
	return tree, capacity
}

// TestEntitlementProperties checks the invariants on 500 random trees.
func TestEntitlementProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 7))
	trees := 500
	if testing.Short() {
		trees = 50
	}
	for i := range trees {
		tree, capacity := randomTree(rng)
		ComputeEntitlement(tree.root, capacity)
		before := map[string]resources.Resources{}
		for path, p := range tree.pools {
			before[path] = p.Entitlement
		}
		ok := t.Run(fmt.Sprintf("tree%d", i), func(t *testing.T) {
			checkInvariants(t, tree, capacity)
			// Deterministic: children live in maps, whose order changes
			// from one iteration to the next.
			ComputeEntitlement(tree.root, capacity)
			for _, path := range sortedKeys(tree.pools) {
				if got := tree.pools[path].Entitlement; got != before[path] {
					t.Errorf("%s: %+v on the first run, %+v on the second", path, before[path], got)
				}
			}
		})
		if !ok {
			break // one failing tree is enough to read
		}
	}
}

// TestEntitlementLargeTree checks the invariants on the benchmark's tree:
// 10,000 leaves, every level contended.
func TestEntitlementLargeTree(t *testing.T) {
	root, capacity := benchTree(100_000)
	tree := &testTree{root: root, pools: map[string]*Pool{}}
	var index func(p *Pool)
	index = func(p *Pool) {
		tree.pools[p.Path] = p
		for _, c := range p.children {
			index(c)
		}
	}
	index(root)
	ComputeEntitlement(root, capacity)
	checkInvariants(t, tree, capacity)
}
