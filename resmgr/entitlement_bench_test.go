package resmgr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

// benchTree builds 10 orgs x 10 groups x 10 teams x 10 leaf pools (11,110
// pools under the root) and spreads tasks over the leaves, skewed so that a
// few leaves are busy and every tenth is idle. Half the tasks are admitted.
// Demand is summed up the tree the way the manager's walkUp keeps it. The
// capacity covers about 60% of the CPU and memory demand and half the GPUs,
// so every level is contended.
func benchTree(tasks int) (*Pool, resources.Resources) {
	const fan = 10
	rng := rand.New(rand.NewPCG(1, 2))
	root := &Pool{Path: RootPath, children: map[string]*Pool{}, Limit: resources.Unlimited, Share: shares(1)}
	var leaves []*Pool
	var build func(parent *Pool, depth int)
	build = func(parent *Pool, depth int) {
		for i := range fan {
			p := &Pool{
				Path:     fmt.Sprintf("%s/p%d", trimRoot(parent.Path), i),
				parent:   parent,
				children: map[string]*Pool{},
				Limit:    resources.Unlimited,
				Share:    shares(1 + int64(i%5)),
			}
			parent.children[p.Path] = p
			if depth == 4 {
				leaves = append(leaves, p)
			} else {
				build(p, depth+1)
			}
		}
	}
	build(root, 1)

	for range tasks {
		leaf := leaves[int(float64(len(leaves))*math.Pow(rng.Float64(), 2))]
		if leaf.Path[len(leaf.Path)-1] == '9' {
			continue // every tenth leaf is idle
		}
		r := resources.Resources{
			MilliCPU: 100 + rng.Int64N(3900),
			MemoryMB: 128 + rng.Int64N(16256),
			DiskMB:   1024 + rng.Int64N(10240),
		}
		if rng.IntN(20) == 0 {
			r.GPU = 1 + rng.Int64N(8)
		}
		if rng.IntN(2) == 0 {
			leaf.Pending = leaf.Pending.Add(r)
		} else {
			leaf.Allocation = leaf.Allocation.Add(r)
		}
	}
	for _, leaf := range leaves {
		for n := leaf.parent; n != nil; n = n.parent {
			n.Pending = n.Pending.Add(leaf.Pending)
			n.Allocation = n.Allocation.Add(leaf.Allocation)
		}
	}

	d := root.Demand()
	capacity := resources.Resources{MilliCPU: d.MilliCPU * 6 / 10, MemoryMB: d.MemoryMB * 6 / 10, DiskMB: d.DiskMB, GPU: d.GPU / 2}
	// The orgs reserve 80% of the capacity between them, every lower level
	// 90% of its parent's reservation; every seventh pool is limited to
	// twice its reservation.
	n := 0
	var reserve func(p *Pool, budget resources.Resources)
	reserve = func(p *Pool, budget resources.Resources) {
		for _, path := range p.Children() {
			c := p.children[path]
			c.Reservation = resources.Resources{
				MilliCPU: budget.MilliCPU / fan, MemoryMB: budget.MemoryMB / fan,
				DiskMB: budget.DiskMB / fan, GPU: budget.GPU / fan,
			}
			if n++; n%7 == 0 {
				c.Limit = c.Reservation.Scale(2)
			}
			reserve(c, scalePct(c.Reservation, 90))
		}
	}
	reserve(root, scalePct(capacity, 80))
	return root, capacity
}

func scalePct(r resources.Resources, pct int64) resources.Resources {
	return resources.Resources{MilliCPU: r.MilliCPU * pct / 100, MemoryMB: r.MemoryMB * pct / 100, DiskMB: r.DiskMB * pct / 100, GPU: r.GPU * pct / 100}
}

func trimRoot(path string) string {
	if path == RootPath {
		return ""
	}
	return path
}

// BenchmarkComputeEntitlement10kPools is one full recompute over 10,000 leaf
// pools carrying the demand of 1,000,000 tasks.
func BenchmarkComputeEntitlement10kPools(b *testing.B) {
	root, capacity := benchTree(1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ComputeEntitlement(root, capacity)
	}
}
