package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/placement"
	"github.com/peloton-sched/peloton/resmgr"
)

var placementFigures = []string{
	"placementsPerSec", "p50DecisionUs", "p99DecisionUs", "rounds", "placed", "unplaced", "hostUtilization", "hostsUsed", "peakRssMb",
}

// PlacementConfig sizes the placement scenario (the placement core alone).
type PlacementConfig struct {
	Hosts int
	Tasks int
	// Round is how many gangs one Place call gets (the engine's batch size).
	Round int
	// GangSize is the number of tasks per gang (1: every task alone).
	GangSize     int
	HostCPU      float64
	HostMemoryMB int64
	TaskCPU      float64
	TaskMemoryMB int64
}

// DefaultPlacementConfig is the size: 50,000 tasks onto 5,000 hosts
// of 32 CPUs, in rounds of 1,000 gangs, like the engine's default batch.
func DefaultPlacementConfig() PlacementConfig {
	return PlacementConfig{Hosts: 5000, Tasks: 50000, Round: 1000, GangSize: 1, HostCPU: 32, HostMemoryMB: 131072, TaskCPU: 1, TaskMemoryMB: 128}
}

// Validate checks the config; every error names the flag at fault.
func (c *PlacementConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.Tasks < 1 || c.Tasks > maxTasks:
		return fmt.Errorf("--tasks %d: must be 1..%d", c.Tasks, maxTasks)
	case c.Round < 1:
		return fmt.Errorf("--round %d: must be >= 1", c.Round)
	case c.GangSize < 1 || c.GangSize > c.Tasks:
		return fmt.Errorf("--gang-size %d: must be 1..tasks", c.GangSize)
	case c.HostCPU <= 0 || c.HostMemoryMB <= 0:
		return fmt.Errorf("--host-cpu and --host-memory-mb: must be > 0")
	case c.TaskCPU <= 0 || c.TaskMemoryMB <= 0:
		return fmt.Errorf("--task-cpu and --task-memory-mb: must be > 0")
	}
	return nil
}

// Placement measures the pure placement core: it builds a snapshot of Hosts
// idle hosts and Tasks/GangSize gangs, and calls placement.Place in rounds of
// Round gangs, applying each round's decisions to the hosts' free resources
// before the next round, the way the engine's leases and commits would. Only
// the Place calls are timed. No etcd, no API, no goroutines.
func Placement(ctx context.Context, env Env, cfg PlacementConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioPlacement)
	r.param("hosts", cfg.Hosts)
	r.param("tasks", cfg.Tasks)
	r.param("round", cfg.Round)
	r.param("gangSize", cfg.GangSize)
	r.param("hostCpu", cfg.HostCPU)
	r.param("taskCpu", cfg.TaskCPU)
	rssReset := resetPeakRSS()

	capacity := resources.Resources{MilliCPU: int64(math.Round(cfg.HostCPU * 1000)), MemoryMB: cfg.HostMemoryMB}
	hosts := make([]hostmgr.HostOffer, cfg.Hosts)
	index := make(map[string]int, cfg.Hosts)
	labels := map[string]string{"peloton.io/backend": "bench"}
	for i := range hosts {
		name := fmt.Sprintf("bench-%05d", i)
		hosts[i] = hostmgr.HostOffer{Name: name, Free: capacity, Capacity: capacity, Labels: labels, Partition: "default"}
		index[name] = i
	}
	taskRes := resources.Resources{MilliCPU: int64(math.Round(cfg.TaskCPU * 1000)), MemoryMB: cfg.TaskMemoryMB}
	var gangs []*resmgr.Gang
	for inst := 0; inst < cfg.Tasks; {
		n := min(cfg.GangSize, cfg.Tasks-inst)
		members := make([]*resmgr.Task, n)
		for k := range members {
			members[k] = &resmgr.Task{JobID: fmt.Sprintf("bench-job-%d", inst/maxInstances), Instance: uint32(inst % maxInstances),
				RunID: 1, Pool: "/default", Preemptible: true, Resources: taskRes}
			inst++
		}
		gangs = append(gangs, resmgr.NewGang(members...))
	}

	env.progress("placement: %d gangs onto %d hosts in rounds of %d", len(gangs), cfg.Hosts, cfg.Round)
	var (
		offers   = make([]hostmgr.HostOffer, 0, len(hosts))
		rounds   []float64 // microseconds per Place call
		total    time.Duration
		placed   int
		unplaced int
	)
	for start := 0; start < len(gangs); start += cfg.Round {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: placement round %d: %w", len(rounds), err)
		}
		batch := gangs[start:min(start+cfg.Round, len(gangs))]
		// The snapshot a lease would give: every host with anything free
		// (hostmgr.AcquireHosts skips hosts with no CPU and no memory left).
		offers = offers[:0]
		for _, h := range hosts {
			if h.Free.MilliCPU != 0 || h.Free.MemoryMB != 0 {
				offers = append(offers, h)
			}
		}
		t := time.Now()
		d := placement.Place(batch, offers)
		el := time.Since(t)
		total += el
		rounds = append(rounds, float64(el)/float64(time.Microsecond))
		for _, p := range d.Placed {
			i, ok := index[p.Host]
			if !ok {
				return nil, fmt.Errorf("bench: Place chose %q, which is not in the snapshot", p.Host)
			}
			if !p.Task.Resources.FitsIn(hosts[i].Free) {
				return nil, fmt.Errorf("bench: Place over-committed host %s", p.Host)
			}
			hosts[i].Free = hosts[i].Free.Sub(p.Task.Resources)
		}
		placed += len(d.Placed)
		for _, u := range d.Unplaced {
			unplaced += len(u.Gang.Tasks)
		}
	}
	var used, capCPU int64
	hostsUsed := 0
	for _, h := range hosts {
		capCPU += h.Capacity.MilliCPU
		used += h.Capacity.MilliCPU - h.Free.MilliCPU
		if h.Free != h.Capacity {
			hostsUsed++
		}
	}

	r.add("placementsPerSec", perSec(placed, total), "tasks/s", "tasks placed per second of Place time")
	r.add("p50DecisionUs", percentile(rounds, 50), "µs", fmt.Sprintf("one Place call of %d gangs", cfg.Round))
	r.add("p99DecisionUs", percentile(rounds, 99), "µs", "")
	r.add("rounds", float64(len(rounds)), "", "")
	r.add("placed", float64(placed), "tasks", "")
	r.add("unplaced", float64(unplaced), "tasks", "")
	r.add("hostUtilization", float64(used)/float64(capCPU), "", "CPU placed / CPU of all hosts at the end")
	r.add("hostsUsed", float64(hostsUsed), "hosts", fmt.Sprintf("of %d", cfg.Hosts))
	r.add("peakRssMb", PeakRSSMB(), "MiB", "")
	if !rssReset {
		r.note("peakRssMb is the process's peak since it started (/proc/self/clear_refs was not writable)")
	}
	return r.finish(), nil
}
