package hostmgr

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func cpuMem(milli, mb int64) resources.Resources {
	return resources.Resources{MilliCPU: milli, MemoryMB: mb}
}

func TestHostSlack(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 8000, MemoryMB: 16000, DiskMB: 1000, GPU: 2}
	for _, tc := range []struct {
		name                    string
		allocated, used, revUse resources.Resources
		margin                  float64
		want                    resources.Resources
	}{
		{"idle host, nothing allocated: no slack but unheld disk and GPUs", resources.Resources{}, resources.Resources{}, resources.Resources{}, 0.1,
			resources.Resources{DiskMB: 1000, GPU: 2}},
		{"6 cores held, 2 used, margin 10%", cpuMem(6000, 8000), cpuMem(2000, 3000), resources.Resources{}, 0.1,
			resources.Resources{MilliCPU: 5400 - 2000, MemoryMB: 7200 - 3000, DiskMB: 1000, GPU: 2}},
		{"what revocable runs use is not the others' use", cpuMem(6000, 8000), cpuMem(4000, 5000), cpuMem(2000, 2000), 0.1,
			resources.Resources{MilliCPU: 3400, MemoryMB: 4200, DiskMB: 1000, GPU: 2}},
		{"the others use more than they hold: none", cpuMem(2000, 2000), cpuMem(3000, 9000), resources.Resources{}, 0,
			resources.Resources{DiskMB: 1000, GPU: 2}},
		{"never more than the machine has free", cpuMem(9000, 16000), cpuMem(1000, 1000), resources.Resources{}, 0,
			resources.Resources{MilliCPU: 7000, MemoryMB: 15000, DiskMB: 1000, GPU: 2}},
		{"held disk is not slack", resources.Resources{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 600, GPU: 2}, resources.Resources{}, resources.Resources{}, 0,
			resources.Resources{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 400}},
	} {
		// Memory oversubscription 2 never binds here: allocations are
		// within capacity and slack within free capacity.
		if got := hostSlack(capacity, tc.allocated, tc.used, tc.revUse, slackPolicy{margin: tc.margin, cpuFactor: 1, memFactor: 2}); got != tc.want {
			t.Errorf("%s: slack %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRevocableOnSlack: revocable runs are offered and committed against a
// host's measured slack, held apart from its allocation; a host with no
// report or a stale one has none.
func TestRevocableOnSlack(t *testing.T) {
	var mu sync.Mutex // the slack loop reads the clock and tells OnSlack
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var told []resources.Resources
	m := NewManager(&fixedHosts{[]HostInfo{{Name: "a", Capacity: cpuMem(8000, 16000)}, {Name: "b", Capacity: cpuMem(8000, 16000)}}},
		Options{LeaseTTL: time.Minute, OnSlack: func(s resources.Resources) { mu.Lock(); told = append(told, s); mu.Unlock() }})
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	// a holds 6 cores of regular work, using 2 of them.
	lease, _ := m.AcquireHosts(HostFilter{Max: 1, MinFree: cpuMem(1, 1), Hosts: []string{"a"}})
	if err := m.Commit(lease, []Assignment{{TaskID: "j-0-1", JobID: "j", Host: "a", Resources: cpuMem(6000, 8000)}}); err != nil {
		t.Fatal(err)
	}
	if _, offers := m.AcquireHosts(HostFilter{Max: 2, Revocable: true, MinFree: cpuMem(1, 1)}); len(offers) != 0 {
		t.Fatalf("revocable offers before any report: %v", offers)
	}
	if _, err := m.Usage().TakeUsage(&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: 1,
		Usage: &pelotonv1.HostUsage{Cpu: 2, MemoryUsedMb: 3000}}); err != nil {
		t.Fatal(err)
	}
	want := cpuMem(5400-2000, 7200-3000)
	if got := m.Usage().ClusterSlack(); got != want {
		t.Fatalf("cluster slack %v, want %v", got, want)
	}
	lease, offers := m.AcquireHosts(HostFilter{Max: 2, Revocable: true, MinFree: cpuMem(1, 1)})
	if len(offers) != 1 || offers[0].Name != "a" || offers[0].Free != want {
		t.Fatalf("revocable offers %v, want a with %v", offers, want)
	}
	// More than the slack is refused; what fits is held apart.
	err := m.Commit(lease, []Assignment{{TaskID: "r-0-1", JobID: "r", Host: "a", Resources: cpuMem(2000, 2000), Revocable: true},
		{TaskID: "r-1-1", JobID: "r", Host: "a", Resources: cpuMem(2000, 2000), Revocable: true}})
	if !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("two revocable runs over the slack: %v", err)
	}
	lease, _ = m.AcquireHosts(HostFilter{Max: 2, Revocable: true, MinFree: cpuMem(1, 1)})
	if err := m.Commit(lease, []Assignment{{TaskID: "r-0-1", JobID: "r", Host: "a", Resources: cpuMem(2000, 2000), Revocable: true}}); err != nil {
		t.Fatal(err)
	}
	var a *pelotonv1.Host
	for _, h := range m.ListHosts() {
		if h.Name == "a" {
			a = h
		}
	}
	if a.Allocated.GetCpu() != 6 || a.Revocable.GetCpu() != 2 || a.Slack.GetCpu() != 1.4 {
		t.Fatalf("host a: allocated %v, revocable %v, slack %v", a.Allocated, a.Revocable, a.Slack)
	}
	// Regular work does not see the revocable hold.
	if _, offers := m.AcquireHosts(HostFilter{Max: 2, MinFree: cpuMem(1, 1), Hosts: []string{"a"}}); offers[0].Free != cpuMem(2000, 8000) {
		t.Fatalf("regular offer of a: %v", offers[0])
	}
	m.ReleaseLease(lease)
	// The agent's QoS controller revokes a revocable run; a regular run
	// named with it is not taken for revoked. The kill is counted by the
	// kind the host ran hot in, once however often it is named.
	kills := func(resource string) float64 {
		return testutil.ToFloat64(metrics.HostQoSKills.WithLabelValues("a", resource))
	}
	cpuKills, memKills := kills(metrics.KindCPU), kills(metrics.KindMemory)
	for seq := uint64(2); seq <= 3; seq++ {
		if _, err := m.Usage().TakeUsage(&pelotonv1.UsageReport{Host: "a", AgentId: "x", Sequence: seq,
			Usage: &pelotonv1.HostUsage{Cpu: 2, MemoryUsedMb: 15000}, Revoked: []string{"r-0-1", "j-0-1"},
			RevokedResources: map[string]string{"r-0-1": "memory", "j-0-1": "memory"}}); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Revoked("r-0-1") || m.Revoked("j-0-1") {
		t.Fatalf("revoked: r-0-1 %v (want true), j-0-1 %v (want false)", m.Revoked("r-0-1"), m.Revoked("j-0-1"))
	}
	if c, mem := kills(metrics.KindCPU)-cpuKills, kills(metrics.KindMemory)-memKills; c != 0 || mem != 1 {
		t.Fatalf("QoS kills counted: cpu %v, memory %v; want one for memory", c, mem)
	}
	m.ReleaseTask("r-0-1")
	// Stale: no slack.
	mu.Lock()
	now = now.Add(DefaultUsageStaleAfter + time.Second)
	mu.Unlock()
	if got := m.Usage().ClusterSlack(); !got.IsZero() {
		t.Fatalf("slack of a stale report: %v", got)
	}
	// The loop tells OnSlack within a second or so of a change.
	peltest.Eventually(t, 5*time.Second, "OnSlack told the stale host's 0", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(told) == 0 || !told[len(told)-1].IsZero() {
			return fmt.Errorf("told %v", told)
		}
		return nil
	})
}

// Oversubscription: the advisor's factor lets revocable work hold CPU
// nobody holds, up to (factor - 1) x capacity, within what the machine
// has free; memory never.
func TestHostSlackOversubscribed(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 8000, MemoryMB: 16000}
	// 4 cores held, 2 used; factor 1.5 counts 4 more as held: 8 x 0.9 - 2.
	got := hostSlack(capacity, cpuMem(4000, 8000), cpuMem(2000, 4000), resources.Resources{}, slackPolicy{margin: 0.1, cpuFactor: 1.5, memFactor: 2})
	if want := (resources.Resources{MilliCPU: 7200 - 2000, MemoryMB: 7200 - 4000}); got != want {
		t.Errorf("factor 1.5: slack %v, want %v", got, want)
	}
	// Factor 1.25 adds 2 cores: (4 + 2) x 0.9 - 2.
	got = hostSlack(capacity, cpuMem(4000, 8000), cpuMem(2000, 4000), resources.Resources{}, slackPolicy{margin: 0.1, cpuFactor: 1.25, memFactor: 2})
	if want := (resources.Resources{MilliCPU: 5400 - 2000, MemoryMB: 7200 - 4000}); got != want {
		t.Errorf("factor 1.25: slack %v, want %v", got, want)
	}
}

// The advisor's headroom keeps that share of the host's CPU free of
// revocable work, for a rise of its own; never below none.
func TestHostSlackHeadroom(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 8000, MemoryMB: 16000}
	// 6 cores held, 2 used: 6 x 0.9 - 2 = 3.4, less a quarter of 8 cores.
	got := hostSlack(capacity, cpuMem(6000, 8000), cpuMem(2000, 4000), resources.Resources{}, slackPolicy{margin: 0.1, memFactor: 1, cpuHeadroom: 0.25})
	if want := (resources.Resources{MilliCPU: 5400 - 2000 - 2000, MemoryMB: 7200 - 4000}); got != want {
		t.Errorf("headroom 0.25: slack %v, want %v", got, want)
	}
	got = hostSlack(capacity, cpuMem(6000, 8000), cpuMem(2000, 4000), resources.Resources{}, slackPolicy{margin: 0.1, memFactor: 1, cpuHeadroom: 0.9})
	if got.MilliCPU != 0 || got.MemoryMB != 7200-4000 {
		t.Errorf("headroom 0.9: slack %v, want no CPU and the memory unchanged", got)
	}
}

// TestHostSlackMemoryOversubscription: memory slack is what non-revocable
// runs hold but do not use, capped so that what the host has committed
// (their allocations and revocable work) stays within memFactor x its
// memory: 1 offers only memory nobody holds.
func TestHostSlackMemoryOversubscription(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 8000, MemoryMB: 16000}
	for _, tc := range []struct {
		name              string
		allocated, used   resources.Resources
		memFactor         float64
		wantCPU, wantMemo int64
	}{
		// All memory held, 2000 used: 14400 − 2000 idle, but 1.5 x
		// 16000 − 16000 = 8000 may be committed beyond the allocations.
		{"held, idle, capped at 1.5", cpuMem(4000, 16000), cpuMem(1000, 2000), 1.5, 3600 - 1000, 8000},
		{"the cap does not bind", cpuMem(4000, 8000), cpuMem(1000, 2000), 1.5, 3600 - 1000, 7200 - 2000},
		// 1: only what nobody holds, 16000 − 12000.
		{"factor 1: no oversubscription", cpuMem(4000, 12000), cpuMem(1000, 1000), 1, 3600 - 1000, 4000},
		{"factor 1, all held: none", cpuMem(4000, 16000), cpuMem(1000, 1000), 1, 3600 - 1000, 0},
		{"allocations above the cap already: none", cpuMem(4000, 20000), cpuMem(1000, 1000), 1.2, 3600 - 1000, 0},
	} {
		got := hostSlack(capacity, tc.allocated, tc.used, resources.Resources{}, slackPolicy{margin: 0.1, cpuFactor: 1, memFactor: tc.memFactor})
		if got.MilliCPU != tc.wantCPU || got.MemoryMB != tc.wantMemo {
			t.Errorf("%s: slack %v, want %d milli-CPU, %d MiB", tc.name, got, tc.wantCPU, tc.wantMemo)
		}
	}
}
