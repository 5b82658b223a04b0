package resmgr

import (
	"math/rand/v2"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

// TestDivideEntitlementIsComputeEntitlement: the flat-list entry point
// gives every pool of 200 random trees what ComputeEntitlement gives it in
// the tree the manager wires, so the federation's global fair share and a
// cluster's are one division.
func TestDivideEntitlementIsComputeEntitlement(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 1))
	for range 200 {
		tree, capacity := randomTree(rng)
		var in []EntitlementInput
		for _, path := range sortedKeys(tree.pools) {
			p := tree.pools[path]
			if p == tree.root {
				continue
			}
			own := p.Demand()
			for _, c := range p.children {
				own = own.Sub(c.Demand())
			}
			in = append(in, EntitlementInput{Path: path, Reservation: p.Reservation, Limit: p.Limit, Share: p.Share, Demand: own})
		}
		got, err := DivideEntitlement(capacity, in)
		if err != nil {
			t.Fatal(err)
		}
		ComputeEntitlement(tree.root, capacity)
		for path, p := range tree.pools {
			if got[path] != p.Entitlement {
				t.Fatalf("%s: DivideEntitlement %+v, ComputeEntitlement %+v", path, got[path], p.Entitlement)
			}
		}
	}
}

func TestDivideEntitlementDefaultsAndErrors(t *testing.T) {
	// /a/x's parent /a is not listed: it gets a cluster pool's defaults, so
	// /a and /b split 100 CPUs evenly when both want it all.
	got, err := DivideEntitlement(cores(100), []EntitlementInput{
		{Path: "/a/x", Limit: resources.Unlimited, Share: shares(1), Demand: cores(100)},
		{Path: "/b", Limit: resources.Unlimited, Share: shares(1), Demand: cores(100)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int64{"/": 100_000, "/a": 50_000, "/a/x": 50_000, "/b": 50_000} {
		if got[path].MilliCPU != want {
			t.Errorf("%s: %d milli-CPU, want %d", path, got[path].MilliCPU, want)
		}
	}
	for _, bad := range [][]EntitlementInput{{{Path: "/"}}, {{Path: ""}}, {{Path: "/a"}, {Path: "/a"}}} {
		if _, err := DivideEntitlement(cores(1), bad); err == nil {
			t.Errorf("DivideEntitlement(%+v): no error", bad)
		}
	}
}
