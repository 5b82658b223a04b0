package sim

import (
	"hash/fnv"
	"math"
	"strconv"
	"time"
)

// Usage: a simulated run's use of its host, for a simulated host agent
// (cluster's sim agents), so that slack, revocable work and QoS can be run
// at thousands of hosts. Each run follows a curve: a base fraction of what
// it asked for, CPU and memory apart, swinging ±25% around it over a minute
// from a phase of its own,
//
//	use(t) = request × base × (1 + 0.25 sin(2π (t - start) / 60 s + phase))
//
// The base is the run's to declare, PELOTON_SIM_CPU and PELOTON_SIM_MEMORY
// in its environment (fractions; 2 is twice what it asked for), else 0.5
// of its CPU and 0.6 of its memory.
const (
	defaultCPUUse    = 0.5
	defaultMemoryUse = 0.6
	usageSwing       = 0.25
	usagePeriod      = time.Minute
)

// usageModel is what the usage of one run follows; it is set at launch.
type usageModel struct {
	cpu, mem  float32 // the base fractions
	phase     float32 // radians
	started   time.Time
	revocable bool
	priority  uint32
}

func newUsageModel(taskID string, env map[string]string, now time.Time) usageModel {
	frac := func(key string, def float64) float32 {
		if v, err := strconv.ParseFloat(env[key], 64); err == nil && v >= 0 && v <= 100 {
			return float32(v)
		}
		return float32(def)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(taskID))
	prio, _ := strconv.ParseUint(env["PELOTON_PRIORITY"], 10, 32)
	return usageModel{cpu: frac("PELOTON_SIM_CPU", defaultCPUUse), mem: frac("PELOTON_SIM_MEMORY", defaultMemoryUse),
		phase: float32(h.Sum32()%6283) / 1000, started: now,
		revocable: env["PELOTON_REVOCABLE"] == "true", priority: uint32(prio)}
}

// at is the fraction of its request the run uses at now, CPU and memory.
func (u usageModel) at(now time.Time) (cpu, mem float64) {
	swing := 1 + usageSwing*math.Sin(2*math.Pi*now.Sub(u.started).Seconds()/usagePeriod.Seconds()+float64(u.phase))
	return float64(u.cpu) * swing, float64(u.mem) * swing
}

// RunUsage is one live run's simulated use.
type RunUsage struct {
	TaskID string
	// CPU in cores and memory in MiB, now.
	CPU      float64
	MemoryMB int64
	// Revocable and Priority as the run was launched (PELOTON_REVOCABLE,
	// PELOTON_PRIORITY); Started when.
	Revocable bool
	Priority  uint32
	Started   time.Time
}

// HostUsage is what the live runs on host use at now, by their curves.
func (b *Backend) HostUsage(host string, now time.Time) []RunUsage {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := b.byHost[host]
	out := make([]RunUsage, 0, len(ids))
	for id := range ids {
		t := b.tasks[id]
		if t == nil || t.terminal() {
			continue
		}
		cpu, mem := t.use.at(now)
		out = append(out, RunUsage{TaskID: id, CPU: cpu * float64(t.res.MilliCPU) / 1000, MemoryMB: int64(mem * float64(t.res.MemoryMB)),
			Revocable: t.use.revocable, Priority: t.use.priority, Started: t.use.started})
	}
	return out
}
