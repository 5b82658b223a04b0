package hostmgr

import (
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
)

func offerNames(os []HostOffer) string {
	var b strings.Builder
	for _, o := range os {
		b.WriteString(o.Name)
	}
	return b.String()
}

// TestAcquireHostsInProportionToDemand: with a demand, a lease takes hosts
// in the rotation's order until what they have free covers the demand with
// headroom, and at least the floor of hosts (or MinHosts); so two rounds in
// a row both get hosts, and not the same ones. Without a demand it takes
// up to Max, as before.
func TestAcquireHostsInProportionToDemand(t *testing.T) {
	// 20 hosts a..t of 4 CPUs and 4 GiB each.
	m := newTestManager(t, 20, resources.Resources{MilliCPU: 4000, MemoryMB: 4096})
	cpus := func(n int64) resources.Resources { return resources.Resources{MilliCPU: n * 1000, MemoryMB: 1} }

	// 24 CPUs of demand, 36 with headroom: nine hosts of 4.
	l1, o1 := m.AcquireHosts(HostFilter{Max: 100, Demand: cpus(24)})
	if got := offerNames(o1); got != "abcdefghi" {
		t.Fatalf("demand 24 CPUs: leased %q, want the nine hosts a..i", got)
	}
	// A small demand still gets the floor of hosts, the next ones in turn,
	// while the first lease is held.
	l2, o2 := m.AcquireHosts(HostFilter{Max: 100, Demand: cpus(1)})
	if got := offerNames(o2); got != "jklmnopq"[:leaseFloor] {
		t.Fatalf("demand 1 CPU: leased %q, want the floor of %d hosts from j", got, leaseFloor)
	}
	// Memory counts as much as CPU: 10 GiB, 15 with headroom, would be
	// four hosts; only r, s and t are left, and a lease takes what there is.
	l3, o3 := m.AcquireHosts(HostFilter{Max: 100, Demand: resources.Resources{MilliCPU: 1, MemoryMB: 10 << 10}, MinHosts: 1})
	if got := offerNames(o3); got != "rst" {
		t.Fatalf("memory demand with three hosts left: leased %q, want r, s and t", got)
	}
	for _, l := range []string{l1, l2, l3} {
		m.ReleaseLease(l)
	}

	// Memory counts as much as CPU: 40 GiB, 60 with headroom, is 15 hosts.
	l, o := m.AcquireHosts(HostFilter{Max: 100, Demand: resources.Resources{MilliCPU: 1, MemoryMB: 40 << 10}})
	if len(o) != 15 {
		t.Fatalf("demand 40 GiB: leased %q, want 15 hosts", offerNames(o))
	}
	m.ReleaseLease(l)

	// Max still caps a demand no lease could cover.
	l, o = m.AcquireHosts(HostFilter{Max: 5, Demand: cpus(1000)})
	if len(o) != 5 {
		t.Fatalf("Max 5 under a large demand: leased %q", offerNames(o))
	}
	m.ReleaseLease(l)

	// MinHosts raises the floor (with the same headroom): a job that must
	// go on 10 hosts leases 15.
	l, o = m.AcquireHosts(HostFilter{Max: 100, Demand: cpus(1), MinHosts: 10})
	if len(o) != 15 {
		t.Fatalf("MinHosts 10: leased %d hosts (%q), want 15", len(o), offerNames(o))
	}
	m.ReleaseLease(l)

	// Hosts asked for by name do not count towards the demand.
	l, o = m.AcquireHosts(HostFilter{Max: 100, Demand: cpus(1), MinHosts: 1, Hosts: []string{"a", "b", "c"}})
	if len(o) != 3+leaseFloor || offerNames(o)[:3] != "abc" {
		t.Fatalf("named hosts and a small demand: leased %q, want abc then %d more", offerNames(o), leaseFloor)
	}
	m.ReleaseLease(l)

	// Without a demand, up to Max, as before.
	l, o = m.AcquireHosts(HostFilter{Max: 100})
	if len(o) != 20 {
		t.Fatalf("no demand: leased %d hosts, want all 20", len(o))
	}
	m.ReleaseLease(l)
}

// TestDemandCountsOnlyFree: hosts count for what they have free, not their
// capacity, so a busy cluster leases more hosts for the same demand.
func TestDemandCountsOnlyFree(t *testing.T) {
	m := newTestManager(t, 20, resources.Resources{MilliCPU: 4000, MemoryMB: 4096})
	for i := range 20 {
		m.Recover("busy-"+itoa(i)+"-1", string(rune('a'+i)), resources.Resources{MilliCPU: 3000, MemoryMB: 1})
	}
	// 6 CPUs of demand, 9 with headroom, 1 CPU free a host: nine hosts.
	_, o := m.AcquireHosts(HostFilter{Max: 100, Demand: resources.Resources{MilliCPU: 6000, MemoryMB: 1}})
	if len(o) != 9 {
		t.Fatalf("leased %d hosts (%q), want 9", len(o), offerNames(o))
	}
}

// TestExtendLease: a caller adds hosts to the lease it holds; the lease
// then commits on hosts of either part and releases them all, and a lease
// that is gone cannot be added to.
func TestExtendLease(t *testing.T) {
	m := newTestManager(t, 12, resources.Resources{MilliCPU: 4000, MemoryMB: 4096})
	small := resources.Resources{MilliCPU: 1000, MemoryMB: 1}
	id, o1 := m.AcquireHosts(HostFilter{Max: 100, Demand: small})
	if len(o1) != leaseFloor {
		t.Fatalf("first part: leased %q", offerNames(o1))
	}
	id2, o2 := m.AcquireHosts(HostFilter{Max: 100, Lease: id})
	if id2 != id || offerNames(o2) != "ijkl" {
		t.Fatalf("added to lease %s: %s %q, want the same lease and i..l", id, id2, offerNames(o2))
	}
	if _, o := m.AcquireHosts(HostFilter{Max: 100}); len(o) != 0 {
		t.Fatalf("every host is in the lease, yet %q were leased again", offerNames(o))
	}
	as := []Assignment{{TaskID: "j-0-1", JobID: "j", Host: "a", Resources: small}, {TaskID: "j-1-1", JobID: "j", Host: "l", Resources: small}}
	if err := m.Commit(id, as); err != nil {
		t.Fatalf("commit on hosts of both parts: %v", err)
	}
	if _, o := m.AcquireHosts(HostFilter{Max: 100, Lease: id}); len(o) != 0 {
		t.Fatalf("added %q to a lease that ended", offerNames(o))
	}
	if _, o := m.AcquireHosts(HostFilter{Max: 100}); len(o) != 12 {
		t.Fatalf("after the commit: leased %q, want all 12 hosts", offerNames(o))
	}
}

// TestFillFirstLeases: a lease that fills first scans from the first host,
// not where the last lease stopped, and leaves the rotation where it was;
// a lease held at the same time still gets other hosts.
func TestFillFirstLeases(t *testing.T) {
	m := newTestManager(t, 20, resources.Resources{MilliCPU: 4000, MemoryMB: 4096})
	small := resources.Resources{MilliCPU: 1000, MemoryMB: 1}
	l, _ := m.AcquireHosts(HostFilter{Max: 3})
	m.ReleaseLease(l) // the rotation now starts at d
	l1, o1 := m.AcquireHosts(HostFilter{Max: 100, Demand: small, FillFirst: true})
	l2, o2 := m.AcquireHosts(HostFilter{Max: 100, Demand: small, FillFirst: true})
	if offerNames(o1) != "abcdefgh" || offerNames(o2) != "ijklmnop" {
		t.Fatalf("two leases held at once: %q and %q, want a..h and i..p", offerNames(o1), offerNames(o2))
	}
	m.ReleaseLease(l1)
	m.ReleaseLease(l2)
	if _, o := m.AcquireHosts(HostFilter{Max: 100, Demand: small, FillFirst: true}); offerNames(o) != "abcdefgh" {
		t.Fatalf("after both ended: %q, want a..h again", offerNames(o))
	}
	if _, o := m.AcquireHosts(HostFilter{Max: 2}); offerNames(o) != "ij" {
		t.Fatalf("rotation after fill-first leases: %q, want i and j (it stands at d, and a..h are leased)", offerNames(o))
	}
}

// TestDemandWithoutGPUsPassesGPUHostsBy: hosts with GPUs do not count
// towards a demand for none. PACK puts other work there only when no other
// host fits, so a lease whose hosts without GPUs cover the demand lets it
// keep them free; those leased along the way stay the fallback.
func TestDemandWithoutGPUsPassesGPUHostsBy(t *testing.T) {
	var hs []HostInfo
	for i := range 20 {
		c := resources.Resources{MilliCPU: 4000, MemoryMB: 4096}
		if i%2 == 1 {
			c.GPU = 1
		}
		hs = append(hs, HostInfo{Name: string(rune('a' + i)), Capacity: c})
	}
	m := NewManager(&fixedHosts{hs}, Options{LeaseTTL: time.Minute})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	l, o := m.AcquireHosts(HostFilter{Max: 100, Demand: resources.Resources{MilliCPU: 1000, MemoryMB: 1}, FillFirst: true})
	if got := offerNames(o); got != "abcdefghijklmno" {
		t.Fatalf("demand without GPUs: leased %q, want a..o (eight hosts without GPUs, and the GPU hosts between)", got)
	}
	m.ReleaseLease(l)
	if _, o := m.AcquireHosts(HostFilter{Max: 100, Demand: resources.Resources{MilliCPU: 1000, MemoryMB: 1, GPU: 1}, FillFirst: true}); offerNames(o) != "abcdefgh" {
		t.Fatalf("demand with a GPU: leased %q, want a..h", offerNames(o))
	}
}
