package resmgr

import (
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/peloton-sched/peloton/internal/resources"
)

// ComputeEntitlement sets Entitlement on every pool of the tree under root:
// root gets capacity, and each parent's entitlement is divided among its
// children, top-down, by hierarchical weighted max-min sharing. Every resource
// kind is divided on its own: a pool's GPU entitlement never depends on CPU.
//
// For one kind, a parent with entitlement E divides it among its children in
// three steps. Demand is p.Demand() (pending plus allocation, already summed
// over the subtree for interior pools), limit is p.Limit (resources.Unlimited
// when unset) and share is p.Share in thousandths.
//
//  1. Guarantee. Each child first gets min(demand, reservation). This is what
//     makes a reservation mean something: a team gets what it reserved as soon
//     as it asks for it, whatever its siblings want. Reservation beyond demand
//     is not held back (it would sit idle): steps 2 and 3 lend it to siblings,
//     and the next recompute after the team's demand rises takes it back.
//     Should E not cover all these minima (the cluster shrank below the sum
//     of the reservations at the top), each child gets the same fraction of
//     its minimum instead, and steps 2 and 3 have nothing left to give.
//  2. Fair share. What is left is water-filled by share among the children
//     whose demand is not yet met, each capped at min(demand, limit): the
//     same result as repeated rounds of "give every unsatisfied child
//     remaining*share/sumShares, cap, redistribute the excess", which is
//     weighted max-min fairness: no child can get more without taking from
//     a child that has less per unit of share. It is computed exactly in one
//     pass instead of rounds: sort the children by headroom/share; walking
//     that order, a child whose headroom is at most its share of what is left
//     is capped and drops out, and the first child that is not capped fixes
//     the water level for itself and everyone after it. O(k log k) per parent.
//  3. Elastic. Anything still left (every child's demand is met) goes by share
//     to the children up to their limits, the same way. This makes the
//     division work-conserving: no capacity sits idle while some pool may use
//     it, so a pool can run preemptible work up to its limit on an idle
//     cluster, and the scheduler may take that back when a sibling's demand
//     rises, since the sibling's entitlement then grows at step 2.
//
// A child never gets more than its limit and the children together never get
// more than E; E is handed out in full unless every child is at its limit.
// Quantities are integers, so each water level is rounded down and the units
// lost to rounding (fewer than the number of children) go out one at a time
// in child path order: no capacity is lost and the result does not depend on
// map iteration order. A share of zero counts as one thousandth.
//
// ComputeEntitlement is a pure function of the tree: no clock, no I/O, no
// locking; the caller holds the manager's lock. It allocates only per-call
// scratch space sized to the largest fan-out and the tree depth.
func ComputeEntitlement(root *Pool, capacity resources.Resources) {
	if root == nil {
		return
	}
	root.Entitlement = capacity
	s := entScratch{kids: make([]*Pool, 0, 64)}
	s.divide(root)
}

// entScratch is reused across every parent of one ComputeEntitlement call so
// that the walk allocates only when it meets a larger fan-out than before.
type entScratch struct {
	// kids is a stack of child lists, each sorted by path: a parent pushes its
	// children, divides, recurses into each, then pops them.
	kids []*Pool
	// The per-child arrays below hold one kind of one parent at a time.
	demand   []resources.Resources
	cur, top []int64 // current amount and the cap of the running step
	weight   []int64
	order    []int32 // indices of the children taking part in fill
}

func comparePoolPaths(a, b *Pool) int { return strings.Compare(a.Path, b.Path) }

// divide sets the entitlement of p's children from p's and recurses.
func (s *entScratch) divide(p *Pool) {
	n := len(p.children)
	if n == 0 {
		return
	}
	base := len(s.kids)
	for _, c := range p.children {
		s.kids = append(s.kids, c)
	}
	kids := s.kids[base:]
	slices.SortFunc(kids, comparePoolPaths)
	s.demand = growTo(s.demand, n)
	s.cur, s.top, s.weight = growTo(s.cur, n), growTo(s.top, n), growTo(s.weight, n)
	s.order = growTo(s.order, n)
	for i, c := range kids {
		s.demand[i] = c.Demand()
	}
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		s.divideKind(p.Entitlement.Get(k), kids, k)
	}
	// Recursing may grow (move) s.kids, so index it afresh each time.
	for i := 0; i < n; i++ {
		s.divide(s.kids[base+i])
	}
	clear(s.kids[base:])
	s.kids = s.kids[:base]
}

// divideKind runs the three steps for one kind and writes the children's
// entitlements in that kind.
func (s *entScratch) divideKind(avail int64, kids []*Pool, k resources.Kind) {
	avail = max(avail, 0)
	n := len(kids)
	// Step 1: min(demand, reservation), also capped at the limit should the
	// spec be inconsistent. sum saturates; saturated means "more than avail".
	var sum int64
	saturated := false
	for i, c := range kids {
		want := min(max(s.demand[i].Get(k), 0), max(c.Limit.Get(k), 0))
		g := min(want, max(c.Reservation.Get(k), 0))
		s.top[i] = g
		if g > math.MaxInt64-sum {
			saturated = true
		} else {
			sum += g
		}
	}
	if !saturated && sum <= avail {
		copy(s.cur[:n], s.top[:n])
		avail -= sum
	} else {
		// Not every guarantee fits: split avail in proportion to them.
		for i := 0; i < n; i++ {
			s.cur[i], s.weight[i] = 0, s.top[i]
		}
		avail = s.fill(avail, n)
	}
	// Step 2: water-fill by share up to min(demand, limit).
	if avail > 0 {
		for i, c := range kids {
			s.top[i] = min(max(s.demand[i].Get(k), 0), max(c.Limit.Get(k), 0))
			s.weight[i] = max(c.Share.Get(k), 1)
		}
		avail = s.fill(avail, n)
	}
	// Step 3: what no demand wants goes by share up to the limits.
	if avail > 0 {
		for i, c := range kids {
			s.top[i] = max(c.Limit.Get(k), s.cur[i])
			s.weight[i] = max(c.Share.Get(k), 1)
		}
		s.fill(avail, n)
	}
	for i, c := range kids {
		c.Entitlement = c.Entitlement.Set(k, s.cur[i])
	}
}

// fill water-fills avail over children 0..n-1: child i grows from cur[i]
// towards top[i], every growing child by the same amount per unit of
// weight[i]. It returns what is left once every child is at its top. weight
// may be scaled down in place.
func (s *entScratch) fill(avail int64, n int) int64 {
	if avail <= 0 {
		return avail
	}
	order := s.order[:0]
	var maxW uint64
	for i := 0; i < n; i++ {
		if s.top[i] > s.cur[i] && s.weight[i] > 0 {
			order = append(order, int32(i))
			maxW = max(maxW, uint64(s.weight[i]))
		}
	}
	s.order = order
	if len(order) == 0 {
		return avail
	}
	// Keep the sum of weights below 2^62 so it fits in an int64 and the
	// 128-bit products below cannot overflow. Weights are relative, so a
	// common shift changes nothing but rounding; it only happens for
	// reservations near 2^62 (step 1) or absurdly many children.
	if hi, lo := bits.Mul64(maxW, uint64(len(order))); hi != 0 || lo >= 1<<62 {
		width := bits.Len64(lo)
		if hi != 0 {
			width = 64 + bits.Len64(hi)
		}
		shift := uint(width - 62)
		for _, i := range order {
			s.weight[i] = max(s.weight[i]>>shift, 1)
		}
	}
	var sumW uint64
	for _, i := range order {
		sumW += uint64(s.weight[i])
	}
	// Ascending headroom/weight; the children that cap out come first.
	slices.SortFunc(order, func(a, b int32) int {
		ha, hb := uint64(s.top[a]-s.cur[a]), uint64(s.top[b]-s.cur[b])
		if c := cmp128(ha, uint64(s.weight[b]), hb, uint64(s.weight[a])); c != 0 {
			return c
		}
		return int(a - b)
	})
	left := uint64(avail)
	j := 0
	for ; j < len(order); j++ {
		i := order[j]
		h, w := uint64(s.top[i]-s.cur[i]), uint64(s.weight[i])
		// Capped when headroom <= left*w/sumW, i.e. h*sumW <= left*w.
		if cmp128(h, sumW, left, w) > 0 {
			break
		}
		s.cur[i] = s.top[i]
		left -= h
		sumW -= w
	}
	if j == len(order) {
		return int64(left) // everyone capped
	}
	// The rest share left at one water level; each gets left*w/sumW rounded
	// down, which is strictly below its headroom (it was not capped), so a
	// rounding unit on top never passes top.
	var given uint64
	for _, i := range order[j:] {
		hi, lo := bits.Mul64(left, uint64(s.weight[i]))
		q, _ := bits.Div64(hi, lo, sumW) // hi < sumW since left < 2^64
		s.cur[i] += int64(q)
		given += q
	}
	left -= given
	// Fewer units than uncapped children are left; hand them out in path
	// order (children are sorted by path) so the result is deterministic.
	for i := 0; i < n && left > 0; i++ {
		if s.weight[i] > 0 && s.cur[i] < s.top[i] {
			s.cur[i]++
			left--
		}
	}
	return int64(left)
}

// cmp128 compares a*b with c*d without overflow.
func cmp128(a, b, c, d uint64) int {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	switch {
	case h1 < h2:
		return -1
	case h1 > h2:
		return 1
	case l1 < l2:
		return -1
	case l1 > l2:
		return 1
	}
	return 0
}

// growTo returns s with length n, reusing its array when large enough.
func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, max(n, 2*cap(s)))
	}
	return s[:n]
}
