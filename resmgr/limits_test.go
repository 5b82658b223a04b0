package resmgr

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestLimitIsPerKind is the new user's report: limit {cpu: 30} must cap cpu
// only. Memory, disk and gpu stay unlimited, so tasks that ask for memory are
// admitted and the pool is entitled to memory.
func TestLimitIsPerKind(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(resources.Resources{MilliCPU: 100_000, MemoryMB: 100_000, DiskMB: 100_000})
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, "/bc", &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 30}}); err != nil {
		t.Fatal(err)
	}
	mk := func(inst uint32, milliCPU int64) *Task {
		tk := mkTask("j", inst, 0, resources.Resources{MilliCPU: milliCPU, MemoryMB: 1024, DiskMB: 100})
		tk.Pool = "/bc"
		return tk
	}
	if err := m.Enqueue(NewGang(mk(0, 20_000)), NewGang(mk(1, 20_000))); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if st, reason, _ := m.TaskState("j", 0); st != pelotonv1.TaskState_READY {
		t.Fatalf("a task asking for memory in a pool limited in cpu only: %s %q", st, reason)
	}
	p, _ := m.GetPool("/bc")
	if e := p.Status.Entitlement; e.Cpu != 30 || e.MemoryMb == 0 {
		t.Fatalf("entitlement %v: want cpu 30 and some memory", e)
	}
	// The second task would take cpu over 30: it waits, and says so in cores.
	st, reason, _ := m.TaskState("j", 1)
	want := "waiting for admission: pool /bc would exceed its cpu limit of 30 (20 in use, this task needs 20)"
	if st != pelotonv1.TaskState_PENDING || reason != want {
		t.Fatalf("second task: %s %q, want %q", st, reason, want)
	}
}

// TestReservationUnsetIsZero states the other half of the rule: a
// reservation kind left unset reserves nothing, so non-preemptible work
// needing that kind waits, and the reason names the pool, kind and amount.
func TestReservationUnsetIsZero(t *testing.T) {
	m := newTestManager(t)
	m.SetCapacity(resources.Resources{MilliCPU: 100_000, MemoryMB: 100_000})
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, "/svc", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 4}}); err != nil {
		t.Fatal(err)
	}
	tk := mkTask("s", 0, 0, resources.Resources{MilliCPU: 1500, MemoryMB: 512})
	tk.Pool, tk.Preemptible = "/svc", false
	if err := m.Enqueue(NewGang(tk)); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	st, reason, _ := m.TaskState("s", 0)
	if st != pelotonv1.TaskState_PENDING || !strings.Contains(reason, "reservation of pool /svc, which lacks 512 memoryMb (reserves 0,") {
		t.Fatalf("non-preemptible task in a pool reserving no memory: %s %q", st, reason)
	}
	if _, err := m.UpdatePool(ctx, "/svc", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 1024}}, 0); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	st, reason, _ = m.TaskState("s", 0)
	if !strings.Contains(reason, "which lacks 0.5 cpu (reserves 1, 0 in use by non-preemptible tasks, this task needs 1.5)") {
		t.Fatalf("reason in cores: %s %q", st, reason)
	}
}

// TestPoolErrorsUseUserUnits: the new user wrote cpu: 2, the message must
// say 2, never the 2000 milli-cores resmgr counts in.
func TestPoolErrorsUseUserUnits(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, "/org", &pelotonv1.PoolSpec{}); err != nil {
		t.Fatal(err)
	}
	_, err := m.CreatePool(ctx, "/org/team", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2}})
	want := "spec.reservation.cpu: children of /org would reserve 2 cpu in all, more than its reservation of 0 cpu; raise the reservation of /org first"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	_, err = m.CreatePool(ctx, "/x", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2.5}, Limit: &pelotonv1.Resources{Cpu: 1.5}})
	if want := "spec.limit.cpu: limit 1.5 must be >= reservation 2.5"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// specTree is a random pool tree written as a user would: PoolSpecs in API
// units, each limit and reservation kind set or left unset at random.
type specTree struct {
	specs []specNode
}

type specNode struct {
	path             string
	spec             *pelotonv1.PoolSpec
	pending, alloced resources.Resources
}

// kindValue sets one kind of an API Resources in user units.
func kindValue(r *pelotonv1.Resources, k resources.Kind, v float64) {
	switch k {
	case resources.CPU:
		r.Cpu = v
	case resources.Memory:
		r.MemoryMb = v
	case resources.Disk:
		r.DiskMb = v
	case resources.GPU:
		r.Gpu = v
	}
}

func randomSpecTree(rng *rand.Rand) specTree {
	// In API units: cores, MiB, MiB, GPUs.
	scale := [resources.NumKinds]int64{100, 64000, 200000, 16}
	var out specTree
	var grow func(parent string, budget [resources.NumKinds]int64, depth int)
	grow = func(parent string, budget [resources.NumKinds]int64, depth int) {
		n := rng.IntN(5)
		if depth == 0 {
			n = 1 + rng.IntN(5)
		}
		if depth == 3 {
			n = 0
		}
		for i := range n {
			path := fmt.Sprintf("%s/p%d", strings.TrimSuffix(parent, "/"), i)
			spec := &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{}, Limit: &pelotonv1.Resources{}}
			var mine [resources.NumKinds]int64
			for k := resources.Kind(0); k < resources.NumKinds; k++ {
				var r int64
				if left := budget[k]; (depth == 0 || left > 0) && rng.IntN(2) == 0 {
					if depth == 0 {
						r = rng.Int64N(scale[k] / 2)
					} else {
						r = rng.Int64N(left + 1)
						budget[k] -= r
					}
					kindValue(spec.Reservation, k, float64(r))
				}
				mine[k] = r
				if rng.IntN(2) == 0 { // a set limit, >= the reservation and > 0
					kindValue(spec.Limit, k, float64(r+1+rng.Int64N(scale[k])))
				}
			}
			node := specNode{path: path, spec: spec}
			idx := len(out.specs)
			out.specs = append(out.specs, node)
			before := len(out.specs)
			grow(path, mine, depth+1)
			if len(out.specs) == before { // a leaf: give it demand in internal units
				for k := resources.Kind(0); k < resources.NumKinds; k++ {
					unit := int64(1)
					if k == resources.CPU {
						unit = 1000
					}
					out.specs[idx].pending = out.specs[idx].pending.Set(k, rng.Int64N(scale[k]*unit))
					out.specs[idx].alloced = out.specs[idx].alloced.Set(k, rng.Int64N(scale[k]*unit/2))
				}
			}
		}
	}
	grow(RootPath, [resources.NumKinds]int64{}, 0)
	return out
}

// build converts the specs the way resmgr does (specToNode) into a tree.
// explicit replaces every unset limit kind by a set limit far above any
// capacity: the tree that "unset means unlimited" must behave like.
func (st specTree) build(t *testing.T, explicit bool) *testTree {
	t.Helper()
	var pools []*testPool
	for _, n := range st.specs {
		spec := n.spec
		if explicit {
			spec = &pelotonv1.PoolSpec{Reservation: n.spec.Reservation, Limit: &pelotonv1.Resources{
				Cpu: n.spec.Limit.Cpu, MemoryMb: n.spec.Limit.MemoryMb, DiskMb: n.spec.Limit.DiskMb, Gpu: n.spec.Limit.Gpu}}
			for k := resources.Kind(0); k < resources.NumKinds; k++ {
				if r, _ := resources.FromProto(spec.Limit, "x"); r.Get(k) == 0 {
					kindValue(spec.Limit, k, 1e12)
				}
			}
		}
		res, limit, share, err := specToNode(spec)
		if err != nil {
			t.Fatalf("%s: %v", n.path, err)
		}
		b := pool(n.path)
		b.res, b.limit, b.share, b.pending, b.alloc = res, limit, share, n.pending, n.alloced
		pools = append(pools, b)
	}
	return newTestTree(pools...)
}

// TestEntitlementPropertiesSpecLimits checks, over random trees written as
// specs that mix set and unset limit and reservation kinds: entitlement never
// exceeds a limit that is set nor the capacity, and a tree behaves exactly as
// if every unset limit were set to more than the cluster has.
func TestEntitlementPropertiesSpecLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 7))
	trees := 300
	if testing.Short() {
		trees = 30
	}
	for i := range trees {
		st := randomSpecTree(rng)
		tree := st.build(t, false)
		var capacity resources.Resources
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			d := tree.root.Demand().Get(k)
			capacity = capacity.Set(k, rng.Int64N(d+d/2+2))
		}
		ComputeEntitlement(tree.root, capacity)
		other := st.build(t, true)
		ComputeEntitlement(other.root, capacity)
		ok := t.Run(fmt.Sprintf("tree%d", i), func(t *testing.T) {
			checkInvariants(t, tree, capacity)
			for _, n := range st.specs {
				p := tree.pools[n.path]
				set, _ := resources.FromProto(n.spec.Limit, "x")
				for k := resources.Kind(0); k < resources.NumKinds; k++ {
					e := p.Entitlement.Get(k)
					if l := set.Get(k); l > 0 && e > l {
						t.Errorf("%s: %s entitlement %d over its set limit %d", n.path, k, e, l)
					}
					if l := set.Get(k); l == 0 && p.Limit.Get(k) != math.MaxInt64 {
						t.Errorf("%s: unset %s limit became %d, not unlimited", n.path, k, p.Limit.Get(k))
					}
					if e > capacity.Get(k) {
						t.Errorf("%s: %s entitlement %d over the capacity %d", n.path, k, e, capacity.Get(k))
					}
				}
				if got, want := p.Entitlement, other.pools[n.path].Entitlement; got != want {
					t.Errorf("%s: entitlement %+v with unset limits, %+v with the same kinds set to 1e12", n.path, got, want)
				}
			}
		})
		if !ok {
			break
		}
	}
}

// TestReserveHostsForDefault: on a cluster's first start /default reserves
// what the hosts have, so a non-preemptible service runs out of the box;
// it is written once and never over an operator's change.
func TestReserveHostsForDefault(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	m := reload(t, st)
	capacity := resources.Resources{MilliCPU: 4000, MemoryMB: 4096, DiskMB: 20000}
	m.SetCapacity(capacity)
	svc := mkTask("svc", 0, 0, resources.Resources{MilliCPU: 1000, MemoryMB: 128})
	svc.Preemptible = false
	if err := m.Enqueue(NewGang(svc)); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if st, reason, _ := m.TaskState("svc", 0); st != pelotonv1.TaskState_PENDING ||
		!strings.Contains(reason, "reservation of pool /default, which lacks 1 cpu (reserves 0,") {
		t.Fatalf("before: %s %q", st, reason)
	}
	if err := m.ReserveHostsForDefault(ctx, capacity); err != nil {
		t.Fatal(err)
	}
	m.admitOnce()
	if st, reason, _ := m.TaskState("svc", 0); st != pelotonv1.TaskState_READY {
		t.Fatalf("after /default reserved the hosts: %s %q", st, reason)
	}
	p, _ := m.GetPool(DefaultPoolPath)
	if r := p.Spec.Reservation; r.Cpu != 4 || r.MemoryMb != 4096 || r.DiskMb != 20000 {
		t.Fatalf("/default reserves %v", r)
	}
	// Once: a later capacity, or a restart on the same tree, changes nothing.
	if err := m.ReserveHostsForDefault(ctx, capacity.Scale(2)); err != nil {
		t.Fatal(err)
	}
	if err := reload(t, st).ReserveHostsForDefault(ctx, capacity.Scale(2)); err != nil {
		t.Fatal(err)
	}
	if p, _ := reload(t, st).GetPool(DefaultPoolPath); p.Spec.Reservation.Cpu != 4 {
		t.Fatalf("/default rewritten: %v", p.Spec)
	}

	// An operator who changed /default before the hosts came keeps the change.
	_, st2 := storetest.StartEtcd(t)
	m2 := reload(t, st2)
	if _, err := m2.UpdatePool(ctx, DefaultPoolPath, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := m2.ReserveHostsForDefault(ctx, capacity); err != nil {
		t.Fatal(err)
	}
	if p, _ := m2.GetPool(DefaultPoolPath); p.Spec.Reservation.Cpu != 1 || p.Spec.Reservation.MemoryMb != 0 {
		t.Fatalf("operator's /default overwritten: %v", p.Spec)
	}
}
