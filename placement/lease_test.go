package placement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/resmgr"
)

func TestHostFilterDemand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gangs    []*resmgr.Gang
		demand   resources.Resources
		minHosts int
		// fill: some unbound task packs, so the lease fills first.
		fill bool
	}{
		{"the summed resources of the tasks",
			singles(MakeTask("a", 0).CPU(2).Obj(), MakeTask("b", 0).CPU(0.5).Mem(512).GPU(1).Obj()),
			resources.Resources{MilliCPU: 2500, MemoryMB: 640, GPU: 1}, 0, true},
		{"tasks bound to a host are asked for by name, not in the demand",
			singles(MakeTask("s", 0).CPU(3).Bound("h1").Obj(), MakeTask("b", 0).Obj()),
			resources.Resources{MilliCPU: 1000, MemoryMB: 128}, 0, true},
		{"only bound tasks: no demand", singles(MakeTask("s", 0).Bound("h1").Obj()), resources.Resources{}, 0, false},
		{"a spread job needs a host per instance",
			singles(instances("w", 5, func(b *taskBuilder) { b.Spread() })...),
			resources.Resources{MilliCPU: 5000, MemoryMB: 640}, 5, false},
		{"a job capped per host needs a host per cap's worth, gangs included",
			append(singles(instances("c", 3, func(b *taskBuilder) { b.MaxPerHost(2) })...),
				resmgr.NewGang(instances("c", 4, func(b *taskBuilder) { b.MaxPerHost(2) })...)),
			resources.Resources{MilliCPU: 7000, MemoryMB: 896}, 4, true},
		{"the most any one job needs",
			singles(append(instances("w", 3, func(b *taskBuilder) { b.Spread() }), instances("c", 9, func(b *taskBuilder) { b.MaxPerHost(2) })...)...),
			resources.Resources{MilliCPU: 12000, MemoryMB: 1536}, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFilter(tc.gangs, 100)
			if f.Demand != tc.demand || f.MinHosts != tc.minHosts || f.FillFirst != tc.fill {
				t.Fatalf("demand %v on %d hosts, fill first %v; want %v on %d, %v", f.Demand, f.MinHosts, f.FillFirst, tc.demand, tc.minHosts, tc.fill)
			}
		})
	}
}

// recordingHosts is the real hostmgr seen through Hosts, recording what an
// engine leased and committed, and running beforeCommit (once) while the
// engine still holds its lease.
type recordingHosts struct {
	*hostmgr.Manager
	// acquires counts calls to AcquireHosts (a lease, or hosts added to
	// one), leased the hosts they offered.
	acquires     int
	leased       int
	committed    []hostmgr.Assignment
	beforeCommit func()
}

var _ Hosts = (*recordingHosts)(nil)

func (r *recordingHosts) AcquireHosts(f hostmgr.HostFilter) (string, []hostmgr.HostOffer) {
	id, offers := r.Manager.AcquireHosts(f)
	r.acquires++
	r.leased += len(offers)
	return id, offers
}

func (r *recordingHosts) Commit(id string, as []hostmgr.Assignment) error {
	if f := r.beforeCommit; f != nil {
		r.beforeCommit = nil
		f()
	}
	err := r.Manager.Commit(id, as)
	if err == nil {
		r.committed = append(r.committed, as...)
	}
	return err
}

// leaseCluster is a hostmgr over n hosts of 4 CPUs and 4 GiB, named h00..,
// labelled by label(i) if it is set, and a resmgr that knows none of the
// tasks: the engine's placements are seen in what it commits.
func leaseCluster(t *testing.T, n int, label func(i int) map[string]string) (*hostmgr.Manager, *resmgr.Manager) {
	t.Helper()
	infos := make([]hostmgr.HostInfo, n)
	for i := range infos {
		infos[i] = hostmgr.HostInfo{Name: fmt.Sprintf("h%02d", i), Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}}
		if label != nil {
			infos[i].Labels = label(i)
		}
	}
	hm := hostmgr.NewManager(&fixedBackend{infos}, hostmgr.Options{LeaseTTL: time.Hour, Logger: quiet})
	if err := hm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	rm, err := resmgr.New(context.Background(), memstore.New(memstore.Options{}), resmgr.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return hm, rm
}

// TestRoundsOfTwoEnginesLeaseAtOnce: a second engine's round, run while the
// first engine's round holds its lease, still finds hosts and places all
// its tasks: each round leased what its work needs, not the cluster.
func TestRoundsOfTwoEnginesLeaseAtOnce(t *testing.T) {
	hm, rm := leaseCluster(t, 40, nil)
	h1, h2 := &recordingHosts{Manager: hm}, &recordingHosts{Manager: hm}
	e1 := NewEngine(rm, h1, EngineOptions{Logger: quiet})
	e2 := NewEngine(rm, h2, EngineOptions{Logger: quiet})
	g1 := singles(instances("one", 10, nil)...)
	g2 := singles(instances("two", 10, nil)...)
	h1.beforeCommit = func() { e2.placeRound(g2, false) }
	e1.placeRound(g1, false)
	if len(h1.committed) != 10 || len(h2.committed) != 10 {
		t.Fatalf("first engine placed %d of 10 on %d leased hosts, second %d of 10 on %d",
			len(h1.committed), h1.leased, len(h2.committed), h2.leased)
	}
	if h1.leased+h2.leased >= 40 {
		t.Fatalf("two rounds of 10 small tasks leased %d and %d of 40 hosts", h1.leased, h2.leased)
	}
}

// hostsOf counts the distinct hosts of the assignments.
func hostsOf(as []hostmgr.Assignment) map[string]int {
	out := map[string]int{}
	for _, a := range as {
		out[a.Host]++
	}
	return out
}

// TestSpreadAndCappedJobsLeaseEnoughHosts: a small lease would put a spread
// job's instances several to a host, or leave instances of a job capped
// per host unplaced; the round leases hosts enough for one instance each
// (per cap's worth), in one lease, while the cluster has them.
func TestSpreadAndCappedJobsLeaseEnoughHosts(t *testing.T) {
	t.Run("spread", func(t *testing.T) {
		hm, rm := leaseCluster(t, 40, nil)
		h := &recordingHosts{Manager: hm}
		NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(singles(instances("w", 12, func(b *taskBuilder) { b.CPU(0.1).Spread() })...), false)
		if on := hostsOf(h.committed); len(h.committed) != 12 || len(on) != 12 {
			t.Fatalf("12 spread instances placed %d, on %d hosts: %v (leased %d hosts)", len(h.committed), len(on), on, h.leased)
		}
		if h.leased >= 40 {
			t.Fatalf("leased the whole cluster (%d hosts)", h.leased)
		}
	})
	t.Run("capped per host", func(t *testing.T) {
		hm, rm := leaseCluster(t, 40, nil)
		h := &recordingHosts{Manager: hm}
		gangs := append(singles(instances("c", 6, func(b *taskBuilder) { b.CPU(0.1).MaxPerHost(1) })...),
			resmgr.NewGang(instances("c", 6, func(b *taskBuilder) { b.CPU(0.1).MaxPerHost(1) })...))
		for i, task := range gangs[6].Tasks {
			task.Instance = uint32(6 + i)
		}
		NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(gangs, false)
		if len(h.committed) != 12 || len(hostsOf(h.committed)) != 12 || h.acquires != 1 {
			t.Fatalf("12 instances capped at 1 per host: placed %d on %d hosts, with %d calls to AcquireHosts, %d hosts in all",
				len(h.committed), len(hostsOf(h.committed)), h.acquires, h.leased)
		}
	})
}

// TestSpreadAcrossDomainsLeasesEveryDomain: the rotation knows nothing of
// failure domains, and here hosts are named zone by zone, so a lease in
// proportion to the demand would see one zone only. A round that spreads
// over several domains leases as before, and the job's instances are
// balanced across the zones.
func TestSpreadAcrossDomainsLeasesEveryDomain(t *testing.T) {
	hm, rm := leaseCluster(t, 30, func(i int) map[string]string { return map[string]string{"zone": string(rune('a' + i/10))} })
	h := &recordingHosts{Manager: hm}
	NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(singles(instances("w", 6, func(b *taskBuilder) { b.CPU(0.1).Spread() })...), false)
	perZone := map[byte]int{}
	for _, a := range h.committed {
		perZone['a'+(a.Host[1]-'0')]++
	}
	if len(h.committed) != 6 || perZone['a'] != 2 || perZone['b'] != 2 || perZone['c'] != 2 {
		t.Fatalf("6 spread instances over zones a, b, c: %v", perZone)
	}
}

// TestRoundLeasesMoreForWhatDidNotFit: a task that found no room in the
// round's lease (here: the one host matching its constraint was not in
// it) is placed in the same round on hosts added to the lease, rather
// than waiting for a round that happens to lease its host.
func TestRoundLeasesMoreForWhatDidNotFit(t *testing.T) {
	hm, rm := leaseCluster(t, 30, func(i int) map[string]string {
		if i == 29 {
			return map[string]string{"disk": "ssd"}
		}
		return nil
	})
	h := &recordingHosts{Manager: hm}
	gangs := singles(append(instances("b", 4, nil), MakeTask("s", 0).Where("disk", opEq, "ssd").Obj())...)
	NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(gangs, false)
	on := map[string]string{}
	for _, a := range h.committed {
		on[a.TaskID] = a.Host
	}
	if len(h.committed) != 5 || on[gangs[4].Tasks[0].RunTaskID()] != "h29" {
		t.Fatalf("placed %v (%d calls to AcquireHosts, %d hosts)", on, h.acquires, h.leased)
	}
	if h.acquires != 2 {
		t.Fatalf("called AcquireHosts %d times, want once for the lease and once to add to it", h.acquires)
	}
}

// TestLeftover: what a round placed is taken off the hosts it was placed on,
// free and per-job counts alike, without changing the offers it started
// from.
func TestLeftover(t *testing.T) {
	offers := []hostmgr.HostOffer{MakeHost("a").CPU(4).Running("w", 1).Obj(), MakeHost("b").CPU(4).Obj()}
	before := fmt.Sprint(offers)
	placed := []resmgr.Placement{
		{Task: MakeTask("w", 0).CPU(1).Spread().Obj(), Host: "a"},
		{Task: MakeTask("w", 1).CPU(1).Spread().Obj(), Host: "b"},
		{Task: MakeTask("p", 0).CPU(2).Obj(), Host: "b"},
	}
	got := leftover(offers, placed)
	if fmt.Sprint(offers) != before {
		t.Fatalf("leftover changed its input: %v", offers)
	}
	if got[0].Free.MilliCPU != 3000 || got[0].JobCounts["w"] != 2 || got[1].Free.MilliCPU != 1000 ||
		got[1].JobCounts["w"] != 1 || len(got[1].JobCounts) != 1 {
		t.Fatalf("leftover: %+v", got)
	}
}

// TestRoundLeasesMoreKeepsWhatItPlaced: the second try sees what the first
// placed. A task bound to h00 takes most of it; a task that only h00 and
// h29 match finds no room in the first lease, and in the second try goes
// to h29, not onto h00 again as if nothing were there; hostmgr accepts the
// whole round.
func TestRoundLeasesMoreKeepsWhatItPlaced(t *testing.T) {
	hm, rm := leaseCluster(t, 30, func(i int) map[string]string {
		if i == 0 || i == 29 {
			return map[string]string{"disk": "ssd"}
		}
		return nil
	})
	h := &recordingHosts{Manager: hm}
	gangs := singles(MakeTask("s", 0).CPU(3).Bound("h00").Obj(), MakeTask("f", 0).CPU(2).Where("disk", opEq, "ssd").Obj())
	NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(gangs, false)
	on := map[string]string{}
	for _, a := range h.committed {
		on[a.TaskID] = a.Host
	}
	if len(on) != 2 || on["s-0-1"] != "h00" || on["f-0-1"] != "h29" || h.acquires != 2 {
		t.Fatalf("placed %v with %d calls to AcquireHosts", on, h.acquires)
	}
}

// TestPackRoundsFillTheSameHosts: PACK keeps whole hosts free for large
// tasks by filling hosts already in use. A lease of a few hosts taken where
// the last one stopped would move each round on to fresh hosts; a round
// that packs leases from the first hosts instead, so successive rounds of
// small tasks share the same host, as they did when every round leased
// the cluster.
func TestPackRoundsFillTheSameHosts(t *testing.T) {
	hm, rm := leaseCluster(t, 40, nil)
	h := &recordingHosts{Manager: hm}
	e := NewEngine(rm, h, EngineOptions{Logger: quiet})
	for i := range 3 {
		e.placeRound(singles(MakeTask(fmt.Sprintf("j%d", i), 0).Obj()), false)
		// resmgr does not know the task, so it drops the placement and
		// hostmgr releases it: hold it again, as a launched run would.
		a := h.committed[len(h.committed)-1]
		hm.Recover(a.TaskID, a.Host, a.Resources)
	}
	if on := hostsOf(h.committed); len(on) != 1 {
		t.Fatalf("three rounds of one small task each: placed on %v, want one host", on)
	}
}

// TestPreviousHostsAreLeasedByName: a task goes back to its previous host
// if it fits there. A lease of a few hosts would seldom hold that host, so
// the round asks for previous hosts by name, after the bound ones.
func TestPreviousHostsAreLeasedByName(t *testing.T) {
	f := hostFilter(singles(MakeTask("s", 0).Bound("h1").Prev("h9").Obj(), MakeTask("a", 0).Prev("h7").Obj(),
		MakeTask("a", 1).Prev("h1").Obj(), MakeTask("a", 2).Obj()), 100)
	if fmt.Sprint(f.Hosts) != "[h1 h7]" {
		t.Fatalf("hosts by name: %v, want the bound h1, then the previous h7", f.Hosts)
	}
	hm, rm := leaseCluster(t, 40, nil)
	h := &recordingHosts{Manager: hm}
	NewEngine(rm, h, EngineOptions{Logger: quiet}).placeRound(singles(MakeTask("a", 0).Prev("h30").Obj(), MakeTask("b", 0).Obj()), false)
	if len(h.committed) != 2 || h.committed[0].Host != "h30" || h.leased >= 40 {
		t.Fatalf("placed %v on %d leased hosts, want a-0 back on h30", h.committed, h.leased)
	}
}
