package split

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestService(t *testing.T) {
	clusters := []ServiceCluster{
		{Name: "c", Labels: map[string]string{"region": "east"}},
		{Name: "a", Labels: map[string]string{"region": "west"}},
		{Name: "b", Labels: map[string]string{"region": "west"}},
		{Name: "off", Labels: map[string]string{"region": "west"}, Cordoned: true},
	}
	share := func(s ...*pelotonv1.ClusterShare) *pelotonv1.ServicePlacement {
		return &pelotonv1.ServicePlacement{Clusters: s}
	}
	west := map[string]string{"region": "west"}
	cases := []struct {
		name  string
		total uint32
		pl    *pelotonv1.ServicePlacement
		want  map[string]uint32
		err   string
	}{
		{name: "empty: every cluster taking work, evenly; the remainder by name", total: 10, pl: nil,
			want: map[string]uint32{"a": 4, "b": 3, "c": 3}},
		{name: "weights", total: 30, pl: share(&pelotonv1.ClusterShare{Name: "a", Weight: 2}, &pelotonv1.ClusterShare{Name: "c", Weight: 1}),
			want: map[string]uint32{"a": 20, "c": 10}},
		{name: "largest remainder", total: 10, pl: share(&pelotonv1.ClusterShare{Name: "a", Weight: 1}, &pelotonv1.ClusterShare{Name: "b", Weight: 2}, &pelotonv1.ClusterShare{Name: "c", Weight: 3}),
			want: map[string]uint32{"a": 2, "b": 3, "c": 5}},
		{name: "a fixed count first, then the weights", total: 10, pl: share(&pelotonv1.ClusterShare{Name: "c", Count: 4}, &pelotonv1.ClusterShare{Selector: west, Weight: 1}),
			want: map[string]uint32{"a": 3, "b": 3, "c": 4}},
		{name: "a selector skips cordoned clusters; a name does not", total: 3, pl: share(&pelotonv1.ClusterShare{Selector: west, Weight: 1}, &pelotonv1.ClusterShare{Name: "off", Count: 1}),
			want: map[string]uint32{"a": 1, "b": 1, "off": 1}},
		{name: "a cluster with too small a weight gets none", total: 2, pl: share(&pelotonv1.ClusterShare{Name: "a", Weight: 10}, &pelotonv1.ClusterShare{Name: "b", Weight: 1}),
			want: map[string]uint32{"a": 2}},
		{name: "unknown cluster", total: 3, pl: share(&pelotonv1.ClusterShare{Name: "zz", Weight: 1}),
			err: "spec.placement.clusters[0].name: cluster zz is not registered (registered: a, b, c, off)"},
		{name: "weights sum to 0", total: 3, pl: share(&pelotonv1.ClusterShare{Name: "a"}),
			err: "spec.placement.clusters: 3 instances are left after the fixed counts and the weights sum to 0"},
		{name: "fixed counts above the total", total: 3, pl: share(&pelotonv1.ClusterShare{Name: "a", Count: 2}, &pelotonv1.ClusterShare{Name: "b", Count: 2}),
			err: "spec.placement.clusters: fixed counts add up to 4, above spec.job.instanceCount 3"},
		{name: "both name and selector", total: 3, pl: share(&pelotonv1.ClusterShare{Name: "a", Selector: west, Weight: 1}),
			err: "spec.placement.clusters[0]: give a name or a selector, not both"},
		{name: "neither", total: 3, pl: share(&pelotonv1.ClusterShare{Weight: 1}),
			err: "spec.placement.clusters[0]: give a name or a selector"},
		{name: "weight and count", total: 3, pl: share(&pelotonv1.ClusterShare{Name: "a", Weight: 1, Count: 1}),
			err: "spec.placement.clusters[0]: give a weight or a count, not both"},
		{name: "count with a selector", total: 3, pl: share(&pelotonv1.ClusterShare{Selector: west, Count: 1}),
			err: "spec.placement.clusters[0].count: a fixed count is for one named cluster"},
		{name: "a cluster twice", total: 3, pl: share(&pelotonv1.ClusterShare{Selector: west, Weight: 1}, &pelotonv1.ClusterShare{Name: "b", Weight: 1}),
			err: "spec.placement.clusters[1]: cluster b is also given by clusters[0]"},
		{name: "selector matching nothing", total: 3, pl: share(&pelotonv1.ClusterShare{Selector: map[string]string{"region": "mars"}, Weight: 1}),
			err: "spec.placement.clusters[0].selector: {region=mars} matches no registered cluster that takes work"},
		{name: "min clusters", total: 2, pl: &pelotonv1.ServicePlacement{MinClusters: 3},
			err: "spec.placement.minClusters: 3, but the placement gives instances to 2 cluster(s) (a, b)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Service(tc.total, tc.pl, clusters)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("split = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Service(1, nil, nil); err == nil || !strings.Contains(err.Error(), "no cluster is registered") {
		t.Errorf("no clusters: %v", err)
	}
}

// TestServiceAddsUp: for any total and weights, the parts add up to
// the total and no part is off its exact share by a whole instance.
func TestServiceAddsUp(t *testing.T) {
	var clusters []ServiceCluster
	for i := 0; i < 5; i++ {
		clusters = append(clusters, ServiceCluster{Name: fmt.Sprintf("c%d", i)})
	}
	for total := uint32(1); total <= 60; total += 7 {
		for seed := uint32(1); seed <= 9; seed++ {
			pl := &pelotonv1.ServicePlacement{}
			var weights [5]uint32
			sum := uint32(0)
			for i := range clusters {
				weights[i] = (seed*uint32(i+3))%7 + 1
				sum += weights[i]
				pl.Clusters = append(pl.Clusters, &pelotonv1.ClusterShare{Name: clusters[i].Name, Weight: weights[i]})
			}
			got, err := Service(total, pl, clusters)
			if err != nil {
				t.Fatal(err)
			}
			n := uint32(0)
			for i, c := range clusters {
				n += got[c.Name]
				exact := float64(total) * float64(weights[i]) / float64(sum)
				if d := float64(got[c.Name]) - exact; d <= -1 || d >= 1 {
					t.Errorf("total %d weights %v: %s got %d, exact share %.2f", total, weights, c.Name, got[c.Name], exact)
				}
			}
			if n != total {
				t.Errorf("total %d weights %v: parts add up to %d (%v)", total, weights, n, got)
			}
		}
	}
}

func TestBudget(t *testing.T) {
	cases := []struct {
		budget uint32
		parts  map[string]uint32
		want   map[string]uint32
	}{
		{3, map[string]uint32{"a": 10, "b": 10, "c": 10}, map[string]uint32{"a": 1, "b": 1, "c": 1}},
		{10, map[string]uint32{"a": 20, "b": 10}, map[string]uint32{"a": 7, "b": 3}},
		{4, map[string]uint32{"a": 10, "b": 10, "c": 10}, map[string]uint32{"a": 2, "b": 1, "c": 1}},
		// Rounded down: the shares never add up to more than the budget,
		// even when a cluster's share is then 0.
		{1, map[string]uint32{"a": 10, "b": 10}, map[string]uint32{"a": 1, "b": 0}},
		{2, map[string]uint32{"a": 1, "b": 1, "c": 98}, map[string]uint32{"a": 0, "b": 0, "c": 2}},
		{5, map[string]uint32{}, map[string]uint32{}},
	}
	for _, tc := range cases {
		if got := Budget(tc.budget, tc.parts); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Budget(%d, %v) = %v, want %v", tc.budget, tc.parts, got, tc.want)
		}
	}
	// Over many shapes: the shares add up to the budget exactly.
	for budget := uint32(0); budget <= 12; budget++ {
		for n := 1; n <= 5; n++ {
			parts := map[string]uint32{}
			for i := range n {
				parts[string(rune('a'+i))] = uint32(1 + (i*7+int(budget))%11)
			}
			sum := uint32(0)
			for _, b := range Budget(budget, parts) {
				sum += b
			}
			if sum != budget {
				t.Errorf("Budget(%d, %v): shares add up to %d", budget, parts, sum)
			}
		}
	}
}

func TestShares(t *testing.T) {
	clusters := []ServiceCluster{
		{Name: "a", Labels: map[string]string{"region": "west"}},
		{Name: "b", Labels: map[string]string{"region": "west"}},
		{Name: "c", Labels: map[string]string{"region": "east"}},
		{Name: "off", Labels: map[string]string{"region": "west"}, Cordoned: true},
	}
	got, err := Shares(&pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{
		{Name: "c", Count: 1}, {Selector: map[string]string{"region": "west"}, Weight: 1}}}, clusters)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"c": 0, "a": 1, "b": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Shares = %v, want %v", got, want)
	}
	got, err = Shares(nil, clusters)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a": -1, "b": -1, "c": -1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Shares(empty) = %v, want %v", got, want)
	}
	if _, err := Shares(&pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Name: "zz", Weight: 1}}}, clusters); err == nil || !strings.Contains(err.Error(), "spec.placement.clusters[0].name") {
		t.Fatalf("an unknown cluster: %v", err)
	}
}
