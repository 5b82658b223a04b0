// The split of the global pool tree across clusters. The federation's
// reconciler reads the global tree and the clusters' capacities, calls
// Pools, and writes each cluster its part.

package split

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/peloton-sched/peloton/internal/resources"
)

// Cluster is a cluster a global pool tree may be split across.
type Cluster struct {
	Name     string
	Capacity resources.Resources // what its hosts in service hold
}

// Pool is one node of the global pool tree, converted to integers.
type Pool struct {
	Path                      string              // normalized absolute path, "/a" or "/a/b"; never "/"
	Reservation, Limit, Share resources.Resources // Limit kinds of math.MaxInt64 are unlimited
	// Weights of clusters by name. Empty: the pool inherits its parent's
	// fractions (a top-level pool: by capacity). A cluster named with
	// weight <= 0, or left out when Weights is not empty, gets no part.
	Weights map[string]float64
}

// Part is one cluster's part of a global pool.
type Part struct {
	Reservation, Limit, Share resources.Resources
}

// Result is what Pools decided.
type Result struct {
	// Pools[cluster][path]: the pool the cluster should hold. A path absent
	// for a cluster: the cluster gets no such pool. Every cluster passed to
	// Pools has an entry, possibly empty.
	Pools map[string]map[string]Part
	// Notes[path]: what could not be done as declared, one sentence each,
	// naming the cluster and the resource kind in user units.
	Notes map[string][]string
}

const numKinds = int(resources.NumKinds)

// weightScale is what the largest declared weight of a pool becomes once
// weights are made integers. Integer weights make apportioning exact: a part
// is total*w/W computed in 128 bits together with its remainder, so the parts
// always add up to the total and a tie between remainders is a real tie that
// the cluster name breaks, never float noise deciding which cluster gets the
// odd GPU.
const weightScale = 1 << 32

// treeNode is a pool already split, or the virtual root that stands for the
// clusters' capacities. Slices are indexed by cluster (clusters sorted by
// name). A pool without weights shares in and w with its parent: they are
// never written after the node is built.
type treeNode struct {
	in   []bool                // in[i]: cluster i is in the pool's set
	w    [numKinds][]uint64    // w[k][i]: weight of cluster i for kind k; fraction = w[k][i]/wsum[k]
	wsum [numKinds]uint64      // sum of w[k] over the set
	res  []resources.Resources // the pool's reservation part per cluster; the capacity for the root
	used []resources.Resources // what the children split so far reserve per cluster
}

// splitter carries one Pools call: the clusters, the result being built and
// scratch slices reused for every pool and kind.
type splitter struct {
	clusters []Cluster
	out      Result
	members  []int // clusters in the set of the pool at hand, by name
	part     []int64
	rem      []uint64
	order    []int
	before   []int64 // per cluster: the part as apportioned, kept for notes; -1 when reserve did not cap it
}

// Pools divides a global pool tree across clusters. Each pool goes to a set of
// clusters with a fraction per cluster and kind: its weights, else its
// parent's fractions, else (top level) the clusters' capacities. Reservations
// are apportioned by largest remainder and capped so that they fit, in every
// cluster, what the parent (or the cluster's capacity) has left; limits are
// apportioned the same way and raised to cover the reservation and to stay
// above 0, which a cluster reads as unlimited. What could not be honoured is
// explained in Notes; the result does not depend on the order of the inputs.
func Pools(pools []Pool, clusters []Cluster) Result {
	cl := sortClusters(clusters)
	n := len(cl)
	s := &splitter{
		clusters: cl,
		out:      Result{Pools: make(map[string]map[string]Part, n), Notes: map[string][]string{}},
		members:  make([]int, 0, n),
		part:     make([]int64, n),
		rem:      make([]uint64, n),
		order:    make([]int, 0, n),
		before:   make([]int64, n),
	}
	for _, c := range cl {
		s.out.Pools[c.Name] = map[string]Part{}
	}

	// Parents before children: a child's room is what its parent got, and
	// siblings in path order so that "earlier siblings" is well defined.
	seen := make(map[string]int, len(pools))
	idx := make([]int, 0, len(pools))
	for i := range pools {
		seen[pools[i].Path]++
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(a, b int) int {
		pa, pb := pools[a].Path, pools[b].Path
		if da, db := strings.Count(pa, "/"), strings.Count(pb, "/"); da != db {
			return da - db
		}
		return strings.Compare(pa, pb)
	})

	root := rootNode(cl)
	nodes := make(map[string]*treeNode, len(pools))
	for j, i := range idx {
		p := &pools[i]
		if !validPath(p.Path) {
			s.note(p.Path, "%q is not a normalized absolute pool path; pool not split", p.Path)
			continue
		}
		// Two declarations of one path cannot both be honoured, and keeping
		// either would make the result depend on the input order.
		if seen[p.Path] > 1 {
			if j == 0 || pools[idx[j-1]].Path != p.Path {
				s.note(p.Path, "declared %d times; pool not split", seen[p.Path])
			}
			continue
		}
		parentPath := p.Path[:strings.LastIndexByte(p.Path, '/')]
		parent := root
		if parentPath != "" {
			parent = nodes[parentPath]
			if parent == nil {
				if seen[parentPath] > 0 {
					s.note(p.Path, "parent pool %s was not split (see its notes); pool not split", parentPath)
				} else {
					s.note(p.Path, "parent pool %s is not in the tree; pool not split", parentPath)
				}
				continue
			}
		}
		nodes[p.Path] = s.pool(p, parentPath, parent)
	}
	return s.out
}

// pool splits one pool whose parent is already split, records its parts
// in the result and returns its node for its children.
func (s *splitter) pool(p *Pool, parentPath string, parent *treeNode) *treeNode {
	n := len(s.clusters)
	node := &treeNode{res: make([]resources.Resources, n), used: make([]resources.Resources, n)}
	s.chooseSet(p, parentPath, parent, node)

	s.members = s.members[:0]
	for i := range n {
		if node.in[i] {
			s.members = append(s.members, i)
		}
	}
	if len(s.members) == 0 {
		switch {
		case n == 0:
			s.note(p.Path, "no clusters to split it across; pool not split")
		case !slices.Contains(parent.in, true):
			s.note(p.Path, "parent pool %s goes to no cluster, so neither does this pool", parentPath)
		default:
			s.note(p.Path, "its weights give no available cluster a weight > 0; pool not split")
		}
		// The node stays, with an empty set, so that its children read
		// "goes to no cluster" rather than "not in the tree".
		return node
	}

	limits := make([]resources.Resources, n)
	for k := range resources.Kind(numKinds) {
		s.reserve(p, parentPath, parent, node, k)
		s.limit(p, node, limits, k)
	}
	for _, i := range s.members {
		parent.used[i] = parent.used[i].Add(node.res[i])
		s.out.Pools[s.clusters[i].Name][p.Path] = Part{Reservation: node.res[i], Limit: limits[i], Share: p.Share}
	}
	return node
}

// chooseSet fills node's set and weights: the parent's when the pool declares
// no weights, else the declared weights restricted to the parent's set.
func (s *splitter) chooseSet(p *Pool, parentPath string, parent, node *treeNode) {
	if len(p.Weights) == 0 {
		node.in, node.w, node.wsum = parent.in, parent.w, parent.wsum
		return
	}
	n := len(s.clusters)
	node.in = make([]bool, n)
	maxw := 0.0
	for i, c := range s.clusters {
		w, named := p.Weights[c.Name]
		switch {
		case !named || !(w > 0): // also NaN: no part, as declared
		case math.IsInf(w, 1):
			s.note(p.Path, "cluster %s: weight is not a finite number; ignored", c.Name)
		case !parent.in[i]:
			// A cluster missing from the input is only unreachable for now
			// and needs no sentence; one the parent does not go to is a
			// mistake in the tree the user can fix.
			s.note(p.Path, "cluster %s: weight ignored, parent pool %s does not go to that cluster", c.Name, parentPath)
		default:
			node.in[i] = true
			maxw = max(maxw, w)
		}
	}
	// Scale by the largest weight so that any finite weights, however large
	// or small, become integers of the same precision.
	ws := make([]uint64, n)
	var sum uint64
	for i, c := range s.clusters {
		if node.in[i] {
			ws[i] = max(1, uint64(math.Round(p.Weights[c.Name]/maxw*weightScale)))
			sum += ws[i]
		}
	}
	for k := range numKinds {
		node.w[k], node.wsum[k] = ws, sum
	}
}

// rootNode is the virtual parent of the top-level pools: every cluster, with
// fractions by capacity, and the capacity as the room its children share.
func rootNode(cl []Cluster) *treeNode {
	n := len(cl)
	root := &treeNode{in: make([]bool, n), res: make([]resources.Resources, n), used: make([]resources.Resources, n)}
	for i, c := range cl {
		root.in[i] = true
		root.res[i] = resources.Resources{}.Max(c.Capacity) // negative capacity reads as none
	}
	for k := range resources.Kind(numKinds) {
		w := make([]uint64, n)
		for i := range cl {
			w[i] = uint64(root.res[i].Get(k))
		}
		root.w[k], root.wsum[k] = w, weightSum(w)
	}
	return root
}

// weightSum returns the sum of w, first making every weight 1 when all are 0
// (clusters without capacity are then equals) and halving them while the sum
// would overflow, which only absurd capacities need.
func weightSum(w []uint64) uint64 {
	for {
		var sum, carry uint64
		for _, x := range w {
			var c uint64
			sum, c = bits.Add64(sum, x, 0)
			carry |= c
		}
		if carry != 0 {
			for i := range w {
				if w[i] > 0 {
					w[i] = max(1, w[i]>>1)
				}
			}
			continue
		}
		if sum == 0 && len(w) > 0 {
			for i := range w {
				w[i] = 1
			}
			return uint64(len(w))
		}
		return sum
	}
}

// reserve splits kind k of p's reservation over the set into node.res.
//
// The room of a cluster is what the parent's part there has left after the
// earlier siblings (for a top-level pool: the capacity after the earlier
// top-level pools). Capping at the room is what guarantees that every
// cluster accepts its pools: a cluster refuses children that reserve more
// than their parent. The excess goes to the clusters still having room,
// largest fraction first, so the total is kept whenever the set as a whole
// has room for it.
func (s *splitter) reserve(p *Pool, parentPath string, parent, node *treeNode, k resources.Kind) {
	total := max(0, p.Reservation.Get(k))
	s.apportion(total, node.w[k], node.wsum[k])
	var excess int64
	shortened := false
	for _, i := range s.members {
		s.before[i] = -1
		room := satSub(parent.res[i].Get(k), parent.used[i].Get(k))
		if s.part[i] > room {
			excess += s.part[i] - room
			s.before[i], s.part[i] = s.part[i], room
			shortened = true
		}
	}
	if shortened {
		s.order = append(s.order[:0], s.members...)
		w := node.w[k]
		slices.SortFunc(s.order, func(a, b int) int {
			if w[a] != w[b] {
				if w[a] > w[b] {
					return -1
				}
				return 1
			}
			return a - b
		})
		for _, i := range s.order {
			if excess == 0 {
				break
			}
			room := satSub(parent.res[i].Get(k), parent.used[i].Get(k))
			take := min(excess, room-s.part[i])
			if take > 0 {
				s.part[i] += take
				excess -= take
			}
		}
	}
	for _, i := range s.members {
		node.res[i] = node.res[i].Set(k, s.part[i])
		if excess == 0 || s.before[i] < 0 {
			continue
		}
		where := "its capacity has " + resources.FormatAmount(k, s.part[i]) + " left"
		if parentPath != "" {
			where = "parent pool " + parentPath + " has " + resources.FormatAmount(k, s.part[i]) + " left there"
		}
		s.note(p.Path, "cluster %s: reservation of %s shortened from %s to %s (%s)", s.clusters[i].Name, k,
			resources.FormatAmount(k, s.before[i]), resources.FormatAmount(k, s.part[i]), where)
	}
}

// limit splits kind k of p's limit over the set into limits, after reserve
// has set node.res for that kind.
func (s *splitter) limit(p *Pool, node *treeNode, limits []resources.Resources, k resources.Kind) {
	total := p.Limit.Get(k)
	if total == math.MaxInt64 {
		for _, i := range s.members {
			limits[i] = limits[i].Set(k, math.MaxInt64)
		}
		return
	}
	total = max(0, total)
	s.apportion(total, node.w[k], node.wsum[k])
	// A cluster rejects a limit below the reservation, and reads a limit of
	// 0 as unlimited, so a finite limit is raised rather than split into
	// either; the sum over clusters may then exceed what was declared.
	var sum int64
	raised := false
	for _, i := range s.members {
		s.before[i] = s.part[i] // the apportioned part, kept for the note
		if v := max(s.part[i], node.res[i].Get(k), 1); v != s.part[i] {
			s.part[i], raised = v, true
		}
		sum = satAdd(sum, s.part[i])
		limits[i] = limits[i].Set(k, s.part[i])
	}
	if !raised {
		return
	}
	sumText := resources.FormatAmount(k, sum) + ", more than"
	if sum == math.MaxInt64 { // saturated: the true sum has no int64 to print
		sumText = "more than"
	}
	for _, i := range s.members {
		if s.part[i] == s.before[i] {
			continue
		}
		why := "to cover its reservation"
		if node.res[i].Get(k) < 1 {
			why = "as a limit of 0 would read as unlimited there"
		}
		s.note(p.Path, "cluster %s: limit of %s raised from %s to %s %s; the clusters' limits add up to %s the declared %s",
			s.clusters[i].Name, k, resources.FormatAmount(k, s.before[i]), resources.FormatAmount(k, s.part[i]), why,
			sumText, resources.FormatAmount(k, total))
	}
}

// apportion sets s.part[i] for each member to its share of total by largest
// remainder: each gets the floor of total*w[i]/wsum, and the units left over
// (fewer than the members) go one each to the largest remainders, ties to the
// first name. The parts add up to total exactly.
func (s *splitter) apportion(total int64, w []uint64, wsum uint64) {
	var given int64
	for _, i := range s.members {
		// w[i] <= wsum, so the quotient fits in 64 bits and Div64 cannot panic.
		hi, lo := bits.Mul64(uint64(total), w[i])
		q, r := bits.Div64(hi, lo, wsum)
		s.part[i], s.rem[i] = int64(q), r
		given += int64(q)
	}
	left := total - given
	if left == 0 {
		return
	}
	s.order = append(s.order[:0], s.members...)
	slices.SortFunc(s.order, func(a, b int) int {
		if s.rem[a] != s.rem[b] {
			if s.rem[a] > s.rem[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	for _, i := range s.order[:left] {
		s.part[i]++
	}
}

func (s *splitter) note(path, format string, args ...any) {
	s.out.Notes[path] = append(s.out.Notes[path], fmt.Sprintf(format, args...))
}

// sortClusters returns the clusters by name. Results are keyed by name, so
// a repeated name keeps one cluster: the first after ordering by capacity as
// well, which keeps the choice independent of the input order.
func sortClusters(clusters []Cluster) []Cluster {
	cl := slices.Clone(clusters)
	slices.SortFunc(cl, func(a, b Cluster) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		for k := range resources.Kind(numKinds) {
			if x, y := a.Capacity.Get(k), b.Capacity.Get(k); x != y {
				if x < y {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return slices.CompactFunc(cl, func(a, b Cluster) bool { return a.Name == b.Name })
}

// validPath reports whether path is a normalized absolute pool path other
// than the root: "/a", "/a/b", no empty, "." or ".." segment.
func validPath(path string) bool {
	if len(path) < 2 || path[0] != '/' {
		return false
	}
	for _, seg := range strings.Split(path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func satSub(a, b int64) int64 {
	if b >= a {
		return 0
	}
	return a - b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
