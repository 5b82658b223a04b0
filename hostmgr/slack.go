package hostmgr

import (
	"context"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
)

// Slack: revocable work (sla.revocable) runs on what the other work holds
// but does not use, as the host agents measure it, not on capacity. Per
// host and kind, for CPU and memory:
//
//	own    = used - what the host's revocable runs use   (the rest of the host's use)
//	slack  = min((1 - margin) × allocated, (1 - margin) × capacity) - own
//
// floored at zero, where allocated is what non-revocable runs hold, and
// memory slack at most
//
//	memFactor × capacity - allocated
//
// so that what a host has committed, its allocations and what revocable
// runs may take, stays within its memory oversubscription factor
// (Options.MemoryOversubscription; 1 offers only memory nobody holds).
// CPU over-committed is slower work; memory over-committed is an OOM kill
// of whatever the kernel picks, so memory has a hard cap as well as the
// agent's QoS controller, which kills revocable runs, largest first, when
// a host's memory use nears its capacity (hostagent/qos.go). The
// margin keeps part of every allocation for its own spikes: room for the
// other work's use to grow before the next report (and the agent's QoS
// controller to act); the second term keeps slack inside what the machine
// has free, after the same margin, even where allocations are off.
// Disk and GPUs are not oversubscribed: their slack is what nobody holds.
// A host with no report, or whose last report is older than StaleAfter,
// has no slack at all: revocable work is placed only on measured hosts.
// What revocable runs already hold on the host is taken from its slack
// before new ones are placed there.
//
// Revocable runs hold their resources apart from the others (host.revocable):
// they never make a host look full to non-revocable work, which displaces
// them when the host runs hot (the agent's QoS controller kills them).

// Default slack policy.
const (
	DefaultSlackMargin            = 0.1
	DefaultUsageStaleAfter        = 15 * time.Second
	DefaultMemoryOversubscription = 1.5
)

// slackPolicy is what hostSlack needs besides the host's numbers.
type slackPolicy struct {
	// margin is the fraction of each allocation and of capacity kept out.
	margin float64
	// cpuFactor is the advisor's CPU oversubscription factor for the host
	// (1: none); memFactor caps what the host commits of its memory.
	cpuFactor, memFactor float64
	// cpuHeadroom is the share of the host's CPU the advisor keeps free of
	// revocable work for a rise of the host's own work (0: none).
	cpuHeadroom float64
}

// hostSlack is a host's slack as defined above, before what revocable runs
// already hold is taken from it. It is pure.
func hostSlack(capacity, allocated, used, revocableUsed resources.Resources, p slackPolicy) resources.Resources {
	own := used.Sub(revocableUsed)
	keep := func(r resources.Resources) resources.Resources {
		return resources.Resources{MilliCPU: int64((1 - p.margin) * float64(r.MilliCPU)), MemoryMB: int64((1 - p.margin) * float64(r.MemoryMB))}
	}
	// Oversubscription (the advisor's factor, batch hosts' CPU only): what
	// nobody holds, up to (factor - 1) x capacity, counts as held but idle.
	held := allocated
	if p.cpuFactor > 1 {
		held.MilliCPU += int64((p.cpuFactor - 1) * float64(capacity.MilliCPU))
	}
	s := keep(held).Min(keep(capacity)).Sub(own)
	s.MilliCPU = max(0, s.MilliCPU-int64(p.cpuHeadroom*float64(capacity.MilliCPU)))
	memCap := int64(p.memFactor*float64(capacity.MemoryMB)) - allocated.MemoryMB
	s.MemoryMB = max(0, min(s.MemoryMB, memCap))
	s.DiskMB = capacity.Sub(allocated).DiskMB
	s.GPU = capacity.Sub(allocated).GPU
	return s
}

// usageResources is a report's usage in resource units.
func usageResources(cpu float64, memMB int64) resources.Resources {
	return resources.Resources{MilliCPU: int64(cpu*1000 + 0.5), MemoryMB: memMB}
}

// slackLocked is what revocable work may still take on h at now: its
// slack less what its revocable runs hold. Caller holds hm.mu.
func (us *Usage) slackLocked(h *host, now time.Time) resources.Resources {
	return us.totalSlackLocked(h, now).Sub(h.revocable)
}

// totalSlackLocked is h's slack at now, before what its revocable runs
// hold is taken from it. Caller holds hm.mu (the reports' lock is taken after).
func (us *Usage) totalSlackLocked(h *host, now time.Time) resources.Resources {
	if !h.inService() || h.info.Unschedulable || h.gone {
		return resources.Resources{}
	}
	b := &us.book
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := b.hosts[h.info.Name]
	if rep == nil || now.Sub(rep.usage.ReceiveTime.AsTime()) > us.staleAfter {
		return resources.Resources{}
	}
	var revUsed resources.Resources
	for id, t := range h.tasks {
		if t.revocable {
			if u := b.runs[id]; u != nil {
				revUsed = revUsed.Add(usageResources(u.Cpu, u.MemoryUsedMb))
			}
		}
	}
	used := usageResources(rep.usage.Cpu, rep.usage.MemoryUsedMb)
	_, factor := us.hostAdvice(h.info.Name, now)
	factor = h.capFactor(factor)
	return hostSlack(h.info.Capacity, h.allocated, used, revUsed, slackPolicy{margin: us.slackMargin, cpuFactor: factor,
		memFactor: us.memOversub, cpuHeadroom: us.hostHeadroom(h.info.Name, now)})
}

// ClusterSlack is the slack of every host in service, before what
// revocable runs hold is taken from it: what revocable work may hold in
// all (resmgr admits revocable work against it).
func (us *Usage) ClusterSlack() resources.Resources {
	us.hm.mu.Lock()
	defer us.hm.mu.Unlock()
	now := us.hm.now()
	var total, held resources.Resources
	for name, h := range us.hm.hosts {
		s := us.totalSlackLocked(h, now)
		total = total.Add(s)
		held = held.Add(h.revocable)
		left := s.Sub(h.revocable)
		metrics.HostSlackCPU.WithLabelValues(name).Set(float64(left.MilliCPU) / 1000)
		metrics.HostSlackMemory.WithLabelValues(name).Set(float64(left.MemoryMB) * (1 << 20))
	}
	// The gauges of hosts that left go with them.
	for name := range us.slackGauged {
		if us.hm.hosts[name] == nil {
			metrics.HostSlackCPU.DeleteLabelValues(name)
			metrics.HostSlackMemory.DeleteLabelValues(name)
			delete(us.slackGauged, name)
		}
	}
	if us.slackGauged == nil {
		us.slackGauged = map[string]bool{}
	}
	for name := range us.hm.hosts {
		us.slackGauged[name] = true
	}
	metrics.RevocableCapacity.WithLabelValues("cpu").Set(float64(total.MilliCPU) / 1000)
	metrics.RevocableCapacity.WithLabelValues("memory").Set(float64(total.MemoryMB) * (1 << 20))
	metrics.RevocableAllocated.WithLabelValues("cpu").Set(float64(held.MilliCPU) / 1000)
	metrics.RevocableAllocated.WithLabelValues("memory").Set(float64(held.MemoryMB) * (1 << 20))
	return total
}

// slackLoop tells OnSlack the cluster's slack every second, when it
// changed: reports arrive, allocations change, and readings go stale
// without any event.
func (us *Usage) slackLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last resources.Resources
	first := true
	for {
		if s := us.ClusterSlack(); first || s != last {
			us.onSlack(s)
			last, first = s, false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
