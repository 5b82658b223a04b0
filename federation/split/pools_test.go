package split

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

// Fixture builders.

func res(milliCPU, memMB, diskMB, gpu int64) resources.Resources {
	return resources.Resources{MilliCPU: milliCPU, MemoryMB: memMB, DiskMB: diskMB, GPU: gpu}
}

func cpu(milli int64) resources.Resources { return resources.Resources{MilliCPU: milli} }

func gpu(n int64) resources.Resources { return resources.Resources{GPU: n} }

var defaultShare = res(1000, 1000, 1000, 1000)

type poolBuilder struct{ p Pool }

// makePool starts a pool that reserves nothing, is unlimited and has the
// default share.
func makePool(path string) *poolBuilder {
	return &poolBuilder{Pool{Path: path, Limit: resources.Unlimited, Share: defaultShare}}
}

func (b *poolBuilder) Res(r resources.Resources) *poolBuilder {
	b.p.Reservation = r
	return b
}

// Limit sets the limit; kinds left 0 stay unlimited, as LimitFromProto reads them.
func (b *poolBuilder) Limit(r resources.Resources) *poolBuilder {
	for k := range resources.NumKinds {
		if r.Get(k) == 0 {
			r = r.Set(k, math.MaxInt64)
		}
	}
	b.p.Limit = r
	return b
}

func (b *poolBuilder) Weights(w map[string]float64) *poolBuilder { b.p.Weights = w; return b }

func (b *poolBuilder) Obj() Pool { return b.p }

func makeClusters(capacity resources.Resources, names ...string) []Cluster {
	out := make([]Cluster, len(names))
	for i, n := range names {
		out[i] = Cluster{Name: n, Capacity: capacity}
	}
	return out
}

// TestPools pins the decisions on small trees: which clusters get which
// reservation, the limits where they matter, and the exact notes.
func TestPools(t *testing.T) {
	big := res(64000, 65536, 100000, 8)
	for _, tc := range []struct {
		name     string
		clusters []Cluster
		pools    []Pool
		// wantRes[cluster][path]: the whole of Pools as reservations; a
		// path missing here must be missing from the result.
		wantRes map[string]map[string]resources.Resources
		// wantLim[cluster][path]: limits checked where listed.
		wantLim   map[string]map[string]resources.Resources
		wantNotes map[string][]string
	}{
		{
			name:     "even split by capacity",
			clusters: makeClusters(res(8000, 16384, 1000, 2), "a", "b"),
			pools:    []Pool{makePool("/p").Res(res(4000, 8192, 100, 2)).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": res(2000, 4096, 50, 1)},
				"b": {"/p": res(2000, 4096, 50, 1)},
			},
		},
		{
			name: "uneven capacities split each kind by its own fractions",
			clusters: []Cluster{
				{Name: "a", Capacity: res(6000, 1000, 500, 0)},
				{Name: "b", Capacity: res(2000, 3000, 500, 4)},
			},
			pools: []Pool{makePool("/p").Res(res(4000, 2000, 100, 2)).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": res(3000, 500, 50, 0)},
				"b": {"/p": res(1000, 1500, 50, 2)},
			},
		},
		{
			name:     "weights 2:1",
			clusters: makeClusters(big, "b", "a"),
			pools:    []Pool{makePool("/p").Res(res(3000, 3000, 0, 3)).Weights(map[string]float64{"a": 2, "b": 1}).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": res(2000, 2000, 0, 2)},
				"b": {"/p": res(1000, 1000, 0, 1)},
			},
		},
		{
			name:     "a weight of 0 or no weight leaves a cluster out",
			clusters: makeClusters(big, "a", "b", "c"),
			pools:    []Pool{makePool("/p").Res(cpu(3000)).Weights(map[string]float64{"a": 1, "b": 0}).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(3000)},
				"b": {},
				"c": {},
			},
		},
		{
			name:     "child inherits its parent's weights",
			clusters: makeClusters(big, "a", "b", "c"),
			pools: []Pool{
				makePool("/p/q").Res(cpu(4000)).Obj(),
				makePool("/p").Res(cpu(8000)).Weights(map[string]float64{"a": 3, "b": 1}).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(6000), "/p/q": cpu(3000)},
				"b": {"/p": cpu(2000), "/p/q": cpu(1000)},
				"c": {},
			},
		},
		{
			name:     "child weights outside the parent's set are ignored with a note",
			clusters: makeClusters(big, "a", "b"),
			pools: []Pool{
				makePool("/p").Res(cpu(8000)).Weights(map[string]float64{"a": 1}).Obj(),
				// gone is not a cluster now: unreachable, no note.
				makePool("/p/q").Res(cpu(4000)).Weights(map[string]float64{"a": 1, "b": 5, "gone": 1}).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(8000), "/p/q": cpu(4000)},
				"b": {},
			},
			wantNotes: map[string][]string{
				"/p/q": {"cluster b: weight ignored, parent pool /p does not go to that cluster"},
			},
		},
		{
			name:     "3 GPUs over 2 equal clusters: 2+1, and a child of 3 fits exactly",
			clusters: makeClusters(gpu(4), "b", "a"),
			pools: []Pool{
				makePool("/p").Res(gpu(3)).Obj(),
				makePool("/p/q").Res(gpu(3)).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": gpu(2), "/p/q": gpu(2)},
				"b": {"/p": gpu(1), "/p/q": gpu(1)},
			},
		},
		{
			name:     "reservation larger than capacity is shortened",
			clusters: makeClusters(cpu(8000), "a", "b"),
			pools:    []Pool{makePool("/p").Res(cpu(24000)).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(8000)},
				"b": {"/p": cpu(8000)},
			},
			wantNotes: map[string][]string{"/p": {
				"cluster a: reservation of cpu shortened from 12 to 8 (its capacity has 8 left)",
				"cluster b: reservation of cpu shortened from 12 to 8 (its capacity has 8 left)",
			}},
		},
		{
			name:     "excess moves to a cluster with room, and the limit is raised over it",
			clusters: makeClusters(cpu(8000), "a", "b"),
			pools: []Pool{
				makePool("/p").Res(cpu(15000)).Limit(cpu(15000)).Weights(map[string]float64{"a": 2, "b": 1}).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(8000)},
				"b": {"/p": cpu(7000)},
			},
			wantLim: map[string]map[string]resources.Resources{
				"a": {"/p": resources.Unlimited.Set(resources.CPU, 10000)},
				"b": {"/p": resources.Unlimited.Set(resources.CPU, 7000)},
			},
			wantNotes: map[string][]string{"/p": {
				"cluster b: limit of cpu raised from 5 to 7 to cover its reservation; the clusters' limits add up to 17, more than the declared 15",
			}},
		},
		{
			name:     "earlier siblings use up the parent's part",
			clusters: makeClusters(big, "a", "b"),
			pools: []Pool{
				makePool("/p").Res(cpu(4000)).Obj(),
				makePool("/p/x").Res(cpu(3000)).Weights(map[string]float64{"a": 1}).Obj(),
				makePool("/p/y").Res(cpu(2000)).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(2000), "/p/x": cpu(2000), "/p/y": {}},
				"b": {"/p": cpu(2000), "/p/y": cpu(2000)},
			},
			wantNotes: map[string][]string{
				"/p/x": {"cluster a: reservation of cpu shortened from 3 to 2 (parent pool /p has 2 left there)"},
			},
		},
		{
			name: "a cluster of zero capacity",
			clusters: []Cluster{
				{Name: "a", Capacity: cpu(8000)},
				{Name: "z"},
			},
			pools: []Pool{
				makePool("/p").Res(cpu(2000)).Obj(),
				// Weighted equally, z cannot take its half: a takes it.
				makePool("/q").Res(cpu(4000)).Weights(map[string]float64{"a": 1, "z": 1}).Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(2000), "/q": cpu(4000)},
				"z": {"/p": {}, "/q": {}},
			},
		},
		{
			name:    "no clusters at all",
			pools:   []Pool{makePool("/p").Res(cpu(1000)).Obj(), makePool("/p/q").Obj()},
			wantRes: map[string]map[string]resources.Resources{},
			wantNotes: map[string][]string{
				"/p":   {"no clusters to split it across; pool not split"},
				"/p/q": {"no clusters to split it across; pool not split"},
			},
		},
		{
			name:     "weights naming no available cluster",
			clusters: makeClusters(big, "a"),
			pools: []Pool{
				makePool("/p").Weights(map[string]float64{"gone": 1, "a": -1}).Obj(),
				makePool("/p/q").Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{"a": {}},
			wantNotes: map[string][]string{
				"/p":   {"its weights give no available cluster a weight > 0; pool not split"},
				"/p/q": {"parent pool /p goes to no cluster, so neither does this pool"},
			},
		},
		{
			name:     "unlimited limit stays unlimited",
			clusters: makeClusters(big, "a", "b"),
			pools:    []Pool{makePool("/p").Res(cpu(2000)).Limit(cpu(10000)).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": cpu(1000)},
				"b": {"/p": cpu(1000)},
			},
			wantLim: map[string]map[string]resources.Resources{
				"a": {"/p": resources.Unlimited.Set(resources.CPU, 5000)},
				"b": {"/p": resources.Unlimited.Set(resources.CPU, 5000)},
			},
		},
		{
			name:     "small finite limit over many clusters never yields 0",
			clusters: makeClusters(big, "e", "d", "c", "b", "a"),
			pools:    []Pool{makePool("/p").Limit(gpu(2)).Obj()},
			wantRes: map[string]map[string]resources.Resources{
				"a": {"/p": {}}, "b": {"/p": {}}, "c": {"/p": {}}, "d": {"/p": {}}, "e": {"/p": {}},
			},
			wantLim: map[string]map[string]resources.Resources{
				"a": {"/p": resources.Unlimited.Set(resources.GPU, 1)},
				"c": {"/p": resources.Unlimited.Set(resources.GPU, 1)},
				"e": {"/p": resources.Unlimited.Set(resources.GPU, 1)},
			},
			wantNotes: map[string][]string{"/p": {
				"cluster c: limit of gpu raised from 0 to 1 as a limit of 0 would read as unlimited there; the clusters' limits add up to 5, more than the declared 2",
				"cluster d: limit of gpu raised from 0 to 1 as a limit of 0 would read as unlimited there; the clusters' limits add up to 5, more than the declared 2",
				"cluster e: limit of gpu raised from 0 to 1 as a limit of 0 would read as unlimited there; the clusters' limits add up to 5, more than the declared 2",
			}},
		},
		{
			name:     "bad paths, duplicates and missing parents are skipped",
			clusters: makeClusters(big, "a"),
			pools: []Pool{
				makePool("/").Obj(),
				makePool("a/b").Obj(),
				makePool("/x/").Obj(),
				makePool("/d").Res(cpu(1)).Obj(),
				makePool("/d").Res(cpu(2)).Obj(),
				makePool("/d/e").Obj(),
				makePool("/m/n").Obj(),
				makePool("/ok").Obj(),
			},
			wantRes: map[string]map[string]resources.Resources{"a": {"/ok": {}}},
			wantNotes: map[string][]string{
				"/":    {`"/" is not a normalized absolute pool path; pool not split`},
				"a/b":  {`"a/b" is not a normalized absolute pool path; pool not split`},
				"/x/":  {`"/x/" is not a normalized absolute pool path; pool not split`},
				"/d":   {"declared 2 times; pool not split"},
				"/d/e": {"parent pool /d was not split (see its notes); pool not split"},
				"/m/n": {"parent pool /m is not in the tree; pool not split"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Pools(tc.pools, tc.clusters)
			gotRes := map[string]map[string]resources.Resources{}
			for c, paths := range got.Pools {
				gotRes[c] = map[string]resources.Resources{}
				for path, cp := range paths {
					gotRes[c][path] = cp.Reservation
					if cp.Share != defaultShare {
						t.Errorf("%s %s: share %v, want it copied", c, path, cp.Share)
					}
				}
			}
			if !reflect.DeepEqual(gotRes, tc.wantRes) {
				t.Errorf("reservations:\n got %v\nwant %v", gotRes, tc.wantRes)
			}
			for c, paths := range tc.wantLim {
				for path, want := range paths {
					if lim := got.Pools[c][path].Limit; lim != want {
						t.Errorf("%s %s: limit %v, want %v", c, path, lim, want)
					}
				}
			}
			if tc.wantNotes == nil {
				tc.wantNotes = map[string][]string{}
			}
			if !reflect.DeepEqual(got.Notes, tc.wantNotes) {
				t.Errorf("notes:\n got %q\nwant %q", got.Notes, tc.wantNotes)
			}
		})
	}
}

// TestPoolsDeterministic: shuffling pools and clusters, ties included (equal
// capacities, equal weights, odd amounts), changes nothing in the result.
func TestPoolsDeterministic(t *testing.T) {
	clusters := []Cluster{
		{Name: "a", Capacity: res(4000, 4096, 100, 3)},
		{Name: "b", Capacity: res(4000, 4096, 100, 3)},
		{Name: "c", Capacity: res(2000, 1024, 100, 1)},
		{Name: "d"},
	}
	pools := []Pool{
		makePool("/p").Res(res(5001, 4097, 301, 5)).Limit(gpu(5)).Obj(),
		makePool("/p/x").Res(res(2001, 1025, 101, 3)).Weights(map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1}).Obj(),
		makePool("/p/y").Res(res(3001, 1, 1, 1)).Obj(),
		makePool("/q").Res(res(7000, 9000, 9, 9)).Weights(map[string]float64{"c": 1, "b": 1}).Obj(),
		makePool("/q/r").Res(cpu(1)).Limit(cpu(1)).Obj(),
		makePool("/s/t").Obj(),
	}
	want := Pools(pools, clusters)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(pools), func(i, j int) { pools[i], pools[j] = pools[j], pools[i] })
		rng.Shuffle(len(clusters), func(i, j int) { clusters[i], clusters[j] = clusters[j], clusters[i] })
		if got := Pools(pools, clusters); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v / %v changed the result:\n got %+v\nwant %+v", pools, clusters, got, want)
		}
	}
}

// TestPoolsProperties checks, on random trees up to depth 3 over up to 6
// clusters, what every cluster needs to accept its pools and what the user
// was promised:
//   - children's parts add up to at most the parent's part, top-level parts
//     to at most the capacity, in every cluster and kind;
//   - a pool is in a cluster only if its parent is, and never where its
//     weights give the cluster no weight > 0;
//   - the parts add up to the global reservation, or less with a note saying
//     which kind was shortened;
//   - a finite limit is split into parts >= the reservation part and >= 1,
//     an unlimited one stays unlimited; a sum above the declared limit comes
//     with a note;
//   - shuffling the input changes nothing.
func TestPoolsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240601, 7))
	for iter := range 500 {
		clusters, pools := randomInput(rng)
		got := Pools(pools, clusters)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("iteration %d: %s\nclusters %+v\npools %+v\nresult %+v", iter, fmt.Sprintf(format, args...), clusters, pools, got)
		}

		if len(got.Pools) != len(clusters) {
			fail("%d clusters in Pools, want %d", len(got.Pools), len(clusters))
		}
		byPath := map[string]Pool{}
		for _, p := range pools {
			byPath[p.Path] = p
		}
		for _, c := range clusters {
			mine, ok := got.Pools[c.Name]
			if !ok {
				fail("cluster %s has no entry", c.Name)
			}
			// Sum the children of each pool (and of the root) in this cluster.
			children := map[string]resources.Resources{}
			for path, cp := range mine {
				parent := path[:strings.LastIndexByte(path, '/')]
				if parent != "" {
					if _, ok := mine[parent]; !ok {
						fail("cluster %s holds %s but not its parent", c.Name, path)
					}
				}
				children[parent] = children[parent].Add(cp.Reservation)
				gp := byPath[path]
				if cp.Share != gp.Share {
					fail("%s in %s: share %v, want %v", path, c.Name, cp.Share, gp.Share)
				}
				if len(gp.Weights) > 0 && !(gp.Weights[c.Name] > 0) {
					fail("%s in %s: weight %v, yet the cluster got a part", path, c.Name, gp.Weights[c.Name])
				}
				for k := range resources.NumKinds {
					lim, res := cp.Limit.Get(k), cp.Reservation.Get(k)
					if gp.Limit.Get(k) == math.MaxInt64 {
						if lim != math.MaxInt64 {
							fail("%s in %s: unlimited %s became %d", path, c.Name, k, lim)
						}
					} else if lim < res || lim < 1 {
						fail("%s in %s: limit of %s %d, reservation %d", path, c.Name, k, lim, res)
					}
				}
			}
			for parent, sum := range children {
				room := c.Capacity
				if parent != "" {
					room = mine[parent].Reservation
				}
				if !sum.FitsIn(room) {
					fail("cluster %s: children of %q reserve %v, more than %v", c.Name, parent, sum, room)
				}
			}
		}
		for _, p := range pools {
			var res, lim resources.Resources
			placed := false
			for _, c := range clusters {
				if cp, ok := got.Pools[c.Name][p.Path]; ok {
					res, lim, placed = res.Add(cp.Reservation), lim.Add(cp.Limit), true
				}
			}
			notes := strings.Join(got.Notes[p.Path], "\n")
			for k := range resources.NumKinds {
				if res.Get(k) > p.Reservation.Get(k) {
					fail("%s: %s parts add up to %d, more than %d", p.Path, k, res.Get(k), p.Reservation.Get(k))
				}
				if res.Get(k) < p.Reservation.Get(k) && notes == "" {
					fail("%s: %s parts add up to %d < %d without a note", p.Path, k, res.Get(k), p.Reservation.Get(k))
				}
				if placed && res.Get(k) < p.Reservation.Get(k) && !strings.Contains(notes, "reservation of "+k.String()+" shortened") {
					fail("%s: %s shortened without saying so: %q", p.Path, k, notes)
				}
				if l := p.Limit.Get(k); l != math.MaxInt64 && lim.Get(k) > l && !strings.Contains(notes, "limit of "+k.String()+" raised") {
					fail("%s: %s limits add up to %d > %d without a note: %q", p.Path, k, lim.Get(k), l, notes)
				}
			}
		}

		shuffled := slices.Clone(pools)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sc := slices.Clone(clusters)
		rng.Shuffle(len(sc), func(i, j int) { sc[i], sc[j] = sc[j], sc[i] })
		if again := Pools(shuffled, sc); !reflect.DeepEqual(again, got) {
			fail("shuffled input gave %+v", again)
		}
	}
}

// randomInput draws 1 to 6 clusters of small capacities (zeros and ties
// are likely) and a tree of up to depth 3 whose reservations sometimes
// exceed what fits, with random weights (some <= 0, some naming no cluster)
// and limits (some unlimited, some below the reservation).
func randomInput(rng *rand.Rand) ([]Cluster, []Pool) {
	names := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	clusters := make([]Cluster, 1+rng.IntN(6))
	for i := range clusters {
		clusters[i] = Cluster{Name: names[i], Capacity: res(
			int64(rng.IntN(5))*2000, int64(rng.IntN(4))*1024, int64(rng.IntN(3)*7), int64(rng.IntN(4)))}
	}
	amount := func(scale int64) int64 {
		if rng.IntN(5) == 0 {
			return 0
		}
		return rng.Int64N(scale)
	}
	var pools []Pool
	var grow func(path string, depth int, scale resources.Resources)
	grow = func(path string, depth int, scale resources.Resources) {
		p := Pool{Path: path, Share: res(int64(rng.IntN(3)+1)*1000, 1000, 1000, 1000)}
		p.Reservation = res(amount(scale.MilliCPU+1), amount(scale.MemoryMB+1), amount(scale.DiskMB+1), amount(scale.GPU+1))
		for k := range resources.NumKinds {
			l := int64(math.MaxInt64)
			if rng.IntN(2) == 0 {
				l = rng.Int64N(p.Reservation.Get(k)*2 + 3)
			}
			p.Limit = p.Limit.Set(k, l)
		}
		if rng.IntN(2) == 0 {
			p.Weights = map[string]float64{}
			for _, n := range append(names[:len(clusters):len(clusters)], "gone") {
				if rng.IntN(3) > 0 {
					p.Weights[n] = []float64{-1, 0, 0.5, 1, 1, 2, 3, 1e-9}[rng.IntN(8)]
				}
			}
		}
		pools = append(pools, p)
		if depth == 3 {
			return
		}
		for i := range rng.IntN(4) {
			grow(fmt.Sprintf("%s/%d", path, i), depth+1, p.Reservation.Scale(2).Add(res(1, 1, 1, 1)))
		}
	}
	var total resources.Resources
	for _, c := range clusters {
		total = total.Add(c.Capacity)
	}
	for i := range 1 + rng.IntN(3) {
		grow(fmt.Sprintf("/p%d", i), 1, total)
	}
	return clusters, pools
}

// TestPoolsHugeNumbers: amounts near math.MaxInt64 (capacities whose sum
// overflows, weights 600 orders of magnitude apart) neither panic nor break
// the sums.
func TestPoolsHugeNumbers(t *testing.T) {
	clusters := makeClusters(resources.Unlimited, "a", "b", "c")
	huge := resources.Unlimited.Sub(res(1, 1, 1, 1))
	pools := []Pool{
		makePool("/p").Res(huge).Obj(),
		{Path: "/p/q", Reservation: huge, Limit: huge},
		makePool("/w").Res(gpu(1000)).Limit(gpu(1000)).Weights(map[string]float64{"a": 1e300, "b": 1e-300}).Obj(),
	}
	got := Pools(pools, clusters)
	wantNotes := map[string][]string{"/w": {
		"cluster b: limit of gpu raised from 0 to 1 as a limit of 0 would read as unlimited there; the clusters' limits add up to 1001, more than the declared 1000",
	}}
	if !reflect.DeepEqual(got.Notes, wantNotes) {
		t.Errorf("notes %q, want %q", got.Notes, wantNotes)
	}
	for _, p := range pools {
		var sum resources.Resources
		for _, c := range clusters {
			cp := got.Pools[c.Name][p.Path]
			sum = sum.Add(cp.Reservation)
			if !cp.Reservation.FitsIn(cp.Limit) {
				t.Errorf("%s in %s: reservation %v above limit %v", p.Path, c.Name, cp.Reservation, cp.Limit)
			}
		}
		if sum != p.Reservation {
			t.Errorf("%s: parts add up to %v, want %v", p.Path, sum, p.Reservation)
		}
	}
	if a, b := got.Pools["a"]["/w"], got.Pools["b"]["/w"]; a.Reservation.GPU != 1000 || b.Reservation.GPU != 0 || b.Limit.GPU != 1 {
		t.Errorf("weights 1e300:1e-300 gave a %+v, b %+v; want all to a and b's limit 1", a, b)
	}
}
