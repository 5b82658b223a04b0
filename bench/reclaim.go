package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var reclaimFigures = []string{
	"fillMs", "demandToPreemptionMs", "demandToEntitledMs", "preemptions", "entitledCpu", "reclaimDelayMs",
}

// DefaultReclaimDelay is resmgr's default reclaim hysteresis (what
// `peloton up` runs with unless --reclaim-delay says otherwise). Keep the two
// in step.
const DefaultReclaimDelay = time.Second

// ReclaimConfig sizes the reclaim scenario (the resource-manager issue).
type ReclaimConfig struct {
	Hosts int
	// TasksPerPool is how many tasks each pool submits; 0 means enough for
	// two pools to fill the whole cluster between them.
	TasksPerPool int
	HostCPU      float64
	TaskCPU      float64
	TaskMemoryMB float64
	// ReservationPct is the share of the cluster each of the three pools
	// reserves (default 20%).
	ReservationPct int
	// ReclaimDelay is the stack's reclaim hysteresis (cluster.Config.ReclaimDelay).
	ReclaimDelay time.Duration
}

// DefaultReclaimConfig is the set-up: 100 hosts of 32 CPUs.
func DefaultReclaimConfig() ReclaimConfig {
	return ReclaimConfig{Hosts: 100, HostCPU: 32, TaskCPU: 1, TaskMemoryMB: 128, ReservationPct: 20, ReclaimDelay: DefaultReclaimDelay}
}

// Validate checks the config; every error names the flag at fault.
func (c *ReclaimConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.HostCPU <= 0:
		return fmt.Errorf("--host-cpu %g: must be > 0", c.HostCPU)
	case c.TaskCPU <= 0 || c.TaskCPU > c.HostCPU || c.TaskMemoryMB <= 0:
		return fmt.Errorf("--task-cpu must be in (0, host-cpu] and --task-memory-mb > 0")
	case c.TasksPerPool < 0 || c.TasksPerPool > maxInstances:
		return fmt.Errorf("--tasks-per-pool %d: must be 0..%d", c.TasksPerPool, maxInstances)
	case c.ReclaimDelay <= 0:
		return fmt.Errorf("--reclaim-delay %s: must be > 0", c.ReclaimDelay)
	case c.ReservationPct < 0 || c.ReservationPct > 33:
		return fmt.Errorf("--reservation-pct %d: must be 0..33 (three pools share the cluster)", c.ReservationPct)
	}
	_, err := c.tasksPerPool()
	return err
}

// tasksPerPool is TasksPerPool, or when 0, half of what the cluster holds.
func (c *ReclaimConfig) tasksPerPool() (int, error) {
	if c.TasksPerPool > 0 {
		return c.TasksPerPool, nil
	}
	n := c.Hosts * int(math.Floor(c.HostCPU/c.TaskCPU+1e-9)) / 2
	switch {
	case n > maxInstances:
		return 0, fmt.Errorf("--tasks-per-pool: the default (half the cluster, %d) is over %d; give it explicitly", n, maxInstances)
	case n < 1:
		return 0, fmt.Errorf("--tasks-per-pool: the cluster holds no task of --task-cpu %g", c.TaskCPU)
	}
	return n, nil
}

// Reclaim: three pools with equal reservations; two of them fill the whole
// cluster with long-running preemptible tasks (sleep 3600), then the third
// submits as much demand. It measures, from the moment the third pool's
// CreateJob returns:
//
//   - demandToPreemptionMs: until resmgr decides the first preemption. This
//     is read from the decision itself, the in-process counter
//     peloton_preemptions_total (internal/metrics.Preemptions) polled every
//     millisecond, not from task states, which show PREEMPTING only after
//     jobmgr has acted on the decision.
//   - demandToEntitledMs: until the third pool's allocation reaches its
//     entitlement (GetPool every 10ms): no further task of the pool fits in
//     its entitlement.
//
// Both include the reclaim hysteresis (reclaimDelayMs), which resmgr waits
// on purpose before preempting anyone.
func Reclaim(ctx context.Context, env Env, cfg ReclaimConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := cfg.tasksPerPool()
	if err != nil {
		return nil, err
	}
	cfg.TasksPerPool = n
	r := newResult(ScenarioReclaim)
	r.param("hosts", cfg.Hosts)
	r.param("hostCpu", cfg.HostCPU)
	r.param("tasksPerPool", cfg.TasksPerPool)
	r.param("taskCpu", cfg.TaskCPU)
	r.param("reservationPct", cfg.ReservationPct)
	r.param("reclaimDelayMs", cfg.ReclaimDelay.Milliseconds())

	env.progress("reclaim: starting the stack with %d simulated hosts", cfg.Hosts)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, HostCPU: cfg.HostCPU, ReclaimDelay: cfg.ReclaimDelay})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	clusterCPU := float64(cfg.Hosts) * cfg.HostCPU
	clusterMem := float64(cfg.Hosts) * 131072
	resv := &pelotonv1.Resources{
		Cpu:      math.Floor(clusterCPU * float64(cfg.ReservationPct) / 100),
		MemoryMb: math.Floor(clusterMem * float64(cfg.ReservationPct) / 100),
	}
	pools := []string{"/bench-reclaim-a", "/bench-reclaim-b", "/bench-reclaim-c"}
	for _, p := range pools {
		_, err := s.api.Pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: p, Spec: &pelotonv1.PoolSpec{Reservation: resv}})
		if err != nil {
			return nil, fmt.Errorf("CreatePool %s: %w", p, err)
		}
	}
	spec := func(name, pool string) *pelotonv1.JobSpec {
		return &pelotonv1.JobSpec{
			Name: name, Type: pelotonv1.JobType_BATCH, Pool: pool, InstanceCount: uint32(cfg.TasksPerPool),
			Sla: &pelotonv1.SlaSpec{Preemptible: ptr(true)},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"},
				Resources: &pelotonv1.Resources{Cpu: cfg.TaskCPU, MemoryMb: cfg.TaskMemoryMB}, KillGracePeriodSeconds: 1},
		}
	}

	env.progress("reclaim: filling the cluster from %s and %s (%d tasks each)", pools[0], pools[1], cfg.TasksPerPool)
	fillStart := time.Now()
	var fillers []string
	for i, p := range pools[:2] {
		id, err := s.createJob(ctx, spec(fmt.Sprintf("bench-reclaim-fill-%d", i), p))
		if err != nil {
			return nil, err
		}
		fillers = append(fillers, id)
	}
	for _, id := range fillers {
		if err := s.waitRunning(ctx, id, uint32(cfg.TasksPerPool)); err != nil {
			return nil, err
		}
	}
	fillTime := time.Since(fillStart)

	env.progress("reclaim: %s submits %d tasks", pools[2], cfg.TasksPerPool)
	preempt0 := counterSum(metrics.Preemptions)
	if _, err := s.createJob(ctx, spec("bench-reclaim-demand", pools[2])); err != nil {
		return nil, err
	}
	t0 := time.Now()

	// The first decision, watched from its own goroutine at 1ms resolution
	// while the main loop polls the pool over the API.
	firstPreempt := make(chan time.Duration, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if counterSum(metrics.Preemptions) > preempt0 {
				firstPreempt <- time.Since(t0)
				return
			}
			select {
			case <-watchCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	var toEntitled time.Duration
	var entitled *pelotonv1.Pool
	demand := float64(cfg.TasksPerPool) * cfg.TaskCPU
	err = waitFor(ctx, 10*time.Millisecond, "waiting for "+pools[2]+" to reach its entitlement", func() (bool, string, error) {
		p, err := s.getPool(ctx, pools[2])
		if err != nil {
			return false, "", err
		}
		st := p.GetStatus()
		ent, alloc := st.GetEntitlement().GetCpu(), st.GetAllocation().GetCpu()
		status := fmt.Sprintf("allocation %g CPU, entitlement %g CPU, demand %g CPU", alloc, ent, st.GetDemand().GetCpu())
		// Entitled once the whole demand is known and no further task of
		// the pool fits in its entitlement.
		if st.GetDemand().GetCpu() >= demand-1e-9 && alloc > 0 && alloc+cfg.TaskCPU > ent+1e-9 {
			toEntitled, entitled = time.Since(t0), p
			return true, status, nil
		}
		return false, status, nil
	})
	if err != nil {
		return nil, err
	}
	var toPreempt time.Duration
	select {
	case toPreempt = <-firstPreempt:
	default:
		// Entitled without any preemption: impossible when the cluster was
		// full, unless the fill did not take the whole of it.
		return nil, fmt.Errorf("bench: %s reached its entitlement without a preemption; was the cluster full?", pools[2])
	}
	// Let the decisions settle for one more hysteresis period, so that
	// preemptions counts every victim of this reclaim, including any excess.
	select {
	case <-time.After(cfg.ReclaimDelay + 500*time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	preemptions := counterSum(metrics.Preemptions) - preempt0

	r.add("fillMs", ms(fillTime), "ms", fmt.Sprintf("two pools to %d running tasks each", cfg.TasksPerPool))
	r.add("demandToPreemptionMs", ms(toPreempt), "ms", "CreateJob returned to the first preemption decision (peloton_preemptions_total)")
	r.add("demandToEntitledMs", ms(toEntitled), "ms", "CreateJob returned to allocation at entitlement (GetPool); goal <= 2000")
	r.add("preemptions", preemptions, "tasks", fmt.Sprintf("decisions, counted %s after entitlement", cfg.ReclaimDelay+500*time.Millisecond))
	r.add("entitledCpu", entitled.GetStatus().GetEntitlement().GetCpu(), "CPU", fmt.Sprintf("of %g in the cluster", clusterCPU))
	r.add("reclaimDelayMs", ms(cfg.ReclaimDelay), "ms", "resmgr's reclaim hysteresis, included in both times above")
	return r.finish(), nil
}
