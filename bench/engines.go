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
	// Rounds is how many times each engine count runs (default 2). The
	// counts go in order in even rounds and in reverse in odd ones, so a
	// drift over the run (the machine, the process's heap) weighs on every
	// count alike; each count's rate is the mean over its rounds.
	Rounds int
}

// DefaultEnginesConfig is the issue's: 50,000 tasks on 5,000 hosts, with 1,
// 2 and 4 engines, without the store-ceiling probe (the batch scenario
// has it), in two rounds: 1, 2, 4, then 4, 2, 1.
func DefaultEnginesConfig() EnginesConfig {
	b := DefaultBatchConfig()
	b.CeilingFor = 0
	return EnginesConfig{Batch: b, Engines: []int{1, 2, 4}, Rounds: 2}
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
	if c.Rounds < 1 || c.Rounds > 20 {
		return fmt.Errorf("--rounds %d: must be 1..20", c.Rounds)
	}
	b := c.Batch
	b.Engines = 1
	return b.Validate()
}

// enginesSettle is the pause between two stacks, for the last one's
// goroutines and etcd to go before the next is timed.
const enginesSettle = time.Second

// Engines runs Batch Rounds times per engine count, each on a fresh stack.
func Engines(ctx context.Context, env Env, cfg EnginesConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioEngines)
	r.param("hosts", cfg.Batch.Hosts)
	r.param("tasks", cfg.Batch.Tasks)
	r.param("jobSize", cfg.Batch.JobSize)
	r.param("engines", fmt.Sprint(cfg.Engines))
	r.param("rounds", cfg.Rounds)
	counts := slices.Compact(slices.Clone(cfg.Engines))
	rates, conflicts := map[int][]float64{}, map[int][]float64{}
	for round := range cfg.Rounds {
		order := slices.Clone(counts)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range order {
			b := cfg.Batch
			b.Engines = n
			env.progress("placement-engines: round %d of %d, %d engine(s)", round+1, cfg.Rounds, n)
			res, err := Batch(ctx, env, b)
			if err != nil {
				return nil, fmt.Errorf("with %d engines: %w", n, err)
			}
			rates[n] = append(rates[n], res.figure("tasksLaunchedPerSec"))
			conflicts[n] = append(conflicts[n], res.figure("placementConflictRate"))
			select {
			case <-time.After(enginesSettle):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	one := mean(rates[1])
	for _, n := range counts {
		rate := mean(rates[n])
		r.add(fmt.Sprintf("tasksLaunchedPerSec%d", n), rate, "tasks/s",
			fmt.Sprintf("batch scenario with %d placement engine(s), mean of %d rounds", n, cfg.Rounds))
		if n == 1 {
			continue
		}
		r.add(fmt.Sprintf("conflictRate%d", n), mean(conflicts[n]), "", "placement rounds whose commit was refused, per round")
		r.add(fmt.Sprintf("speedup%d", n), ratio(rate, one), "×", "launch rate over one engine's, same run; must not be < 1")
	}
	return r.finish(), nil
}
