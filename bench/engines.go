package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// ScenarioEngines runs the batch scenario with 1, 2 and 4 placement
// engines, one after the other in one run, to show what active-active
// engines add and what their lease conflicts cost.
const ScenarioEngines = "placement-engines"

var enginesFigures = []string{
	"tasksLaunchedPerSec1", "tasksLaunchedPerSec2", "tasksLaunchedPerSec4",
	"conflictRate2", "conflictRate4", "speedup2", "speedup4",
}

// EnginesConfig is the batch workload and the engine counts to compare.
type EnginesConfig struct {
	Batch   BatchConfig
	Engines []int
}

// DefaultEnginesConfig is the issue's: 50,000 tasks on 5,000 hosts, with 1,
// 2 and 4 engines, without the store-ceiling probe (the batch scenario
// has it).
func DefaultEnginesConfig() EnginesConfig {
	b := DefaultBatchConfig()
	b.CeilingFor = 0
	return EnginesConfig{Batch: b, Engines: []int{1, 2, 4}}
}

// Validate checks the config; every error names the flag at fault.
func (c *EnginesConfig) Validate() error {
	if len(c.Engines) == 0 || c.Engines[0] != 1 {
		return fmt.Errorf("--engines %v: must start with 1 (the others are compared with one engine)", c.Engines)
	}
	for _, n := range c.Engines {
		if n < 1 || n > 64 {
			return fmt.Errorf("--engines %v: each must be 1..64", c.Engines)
		}
	}
	b := c.Batch
	b.Engines = 1
	return b.Validate()
}

// Engines runs Batch once per engine count, each on a fresh stack.
func Engines(ctx context.Context, env Env, cfg EnginesConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioEngines)
	r.param("hosts", cfg.Batch.Hosts)
	r.param("tasks", cfg.Batch.Tasks)
	r.param("jobSize", cfg.Batch.JobSize)
	r.param("engines", fmt.Sprint(cfg.Engines))
	var one float64
	for _, n := range slices.Compact(slices.Clone(cfg.Engines)) {
		b := cfg.Batch
		b.Engines = n
		env.progress("placement-engines: %d engine(s)", n)
		res, err := Batch(ctx, env, b)
		if err != nil {
			return nil, fmt.Errorf("with %d engines: %w", n, err)
		}
		rate, conflicts := res.figure("tasksLaunchedPerSec"), res.figure("placementConflictRate")
		r.add(fmt.Sprintf("tasksLaunchedPerSec%d", n), rate, "tasks/s", fmt.Sprintf("batch scenario with %d placement engine(s)", n))
		if n == 1 {
			one = rate
			continue
		}
		r.add(fmt.Sprintf("conflictRate%d", n), conflicts, "", "placement rounds whose commit was refused, per round")
		r.add(fmt.Sprintf("speedup%d", n), ratio(rate, one), "×", "launch rate over one engine's, same run; must not be < 1")
		// Let the previous stack's goroutines and etcd go before the next.
		time.Sleep(time.Second)
	}
	return r.finish(), nil
}
