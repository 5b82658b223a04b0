package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/mesos"
	"github.com/peloton-sched/peloton/hostmgr/sim"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScenarioMesos measures launches through Mesos offers on the test master,
// next to the sim backend in the same run.
const ScenarioMesos = "mesos"

var mesosFigures = []string{"mesosLaunchesPerSec", "simLaunchesPerSec", "mesosToSim", "mesosAcceptedPerSec", "tasksPerAccept",
	"stackMesosRunningPerSec", "stackSimRunningPerSec", "stackMesosToSim"}

// MesosConfig sizes the mesos scenario: Tasks runs launched on Agents
// agents (in blocks of Tasks/Agents, as placement packs a batch job), Concurrency launches in flight at once as
// jobmgr's launchers keep them, first on the sim backend, then on the
// mesos backend against the protocol-level test master (mesostest, not a
// real Mesos) with its framework ID and run records in an embedded etcd.
type MesosConfig struct {
	Agents      int
	AgentCPU    float64
	AgentMemMB  float64
	Tasks       int
	Concurrency int
	ContentType string
	// StackTasks runs, in jobs of StackJobSize, go through the whole stack
	// (jobmgr, resmgr, placement, hostmgr) on sim, then on mesos.
	StackTasks, StackJobSize int
}

// DefaultMesosConfig is the size docs/benchmarks.md quotes.
func DefaultMesosConfig() MesosConfig {
	return MesosConfig{Agents: 1000, AgentCPU: 32, AgentMemMB: 131072, Tasks: 20000, Concurrency: 256, ContentType: mesos.ContentTypeProtobuf,
		StackTasks: 10000, StackJobSize: 1000}
}

// Validate names the first bad flag.
func (c *MesosConfig) Validate() error {
	switch {
	case c.Agents < 1 || c.Agents > maxHosts:
		return fmt.Errorf("invalid --agents %d: must be 1 to %d", c.Agents, maxHosts)
	case c.Tasks < 1 || c.Tasks > maxTasks:
		return fmt.Errorf("invalid --tasks %d: must be 1 to %d", c.Tasks, maxTasks)
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("invalid --concurrency %d: must be 1 to 10000", c.Concurrency)
	case c.StackTasks < 1 || c.StackTasks > maxTasks:
		return fmt.Errorf("invalid --stack-tasks %d: must be 1 to %d", c.StackTasks, maxTasks)
	case c.StackJobSize < 1 || c.StackJobSize > maxInstances:
		return fmt.Errorf("invalid --stack-job-size %d: must be 1 to %d", c.StackJobSize, maxInstances)
	case float64(c.StackTasks)*0.1 > float64(c.Agents)*c.AgentCPU:
		return fmt.Errorf("invalid --stack-tasks %d: the agents hold at most %d runs of 0.1 CPU", c.StackTasks, int(float64(c.Agents)*c.AgentCPU*10))
	case c.AgentCPU <= 0 || c.AgentMemMB <= 0:
		return fmt.Errorf("invalid --agent-cpu %g / --agent-memory-mb %g: must be > 0", c.AgentCPU, c.AgentMemMB)
	case float64(c.Tasks)*0.1 > float64(c.Agents)*c.AgentCPU:
		return fmt.Errorf("invalid --tasks %d: %d agents of %g CPUs hold at most %d runs of 0.1 CPU", c.Tasks, c.Agents, c.AgentCPU, int(float64(c.Agents)*c.AgentCPU*10))
	}
	if _, err := mesos.Codec(c.ContentType); err != nil {
		return fmt.Errorf("invalid %v", err)
	}
	return nil
}

// launchRun is what both phases measured.
type launchRun struct {
	accepted, running time.Duration
}

// Mesos runs the scenario. A run's launch is counted when the backend
// reports it RUNNING (for mesos: the master's TASK_RUNNING update came
// back); every run is "sleep 3600", so none ends while measured.
func Mesos(ctx context.Context, env Env, cfg MesosConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h, err := registeredMesosHarness()
	if err != nil {
		return nil, err
	}
	r := newResult(ScenarioMesos)
	r.param("agents", cfg.Agents)
	r.param("tasks", cfg.Tasks)
	r.param("concurrency", cfg.Concurrency)
	r.param("contentType", cfg.ContentType)
	capacity := resources.Resources{MilliCPU: int64(cfg.AgentCPU * 1000), MemoryMB: int64(cfg.AgentMemMB)}

	env.progress("sim: %d runs on %d hosts", cfg.Tasks, cfg.Agents)
	sb, err := sim.New(sim.Config{Hosts: cfg.Agents, HostCapacity: capacity, Logger: env.logger()})
	if err != nil {
		return nil, err
	}
	simRun, err := launchAll(ctx, sb, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench mesos: sim phase: %w", err)
	}

	env.progress("mesos: %d runs on %d agents of the test master", cfg.Tasks, cfg.Agents)
	dir, err := os.MkdirTemp("", "peloton-bench-mesos-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	etcd, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, Logger: env.logger()})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: etcd.Endpoints(), Prefix: "/bench/"})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	master, err := h.StartMaster(cfg.Agents, cfg.AgentCPU, cfg.AgentMemMB)
	if err != nil {
		return nil, err
	}
	defer master.Close()
	mb, err := mesos.New(mesos.Config{Master: master.URL(), ContentType: cfg.ContentType, Store: st, Logger: env.logger()})
	if err != nil {
		return nil, err
	}
	mesosRun, err := launchAll(ctx, mb, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench mesos: mesos phase: %w", err)
	}
	accepts := master.Accepts()
	master.Close()

	env.progress("stack on sim: %d runs in jobs of %d", cfg.StackTasks, cfg.StackJobSize)
	stackSim, err := stackRunning(ctx, env, stackConfig{Hosts: cfg.Agents, HostCPU: cfg.AgentCPU, HostMemoryMB: int64(cfg.AgentMemMB)}, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench mesos: stack on sim: %w", err)
	}
	env.progress("stack on mesos: %d runs in jobs of %d", cfg.StackTasks, cfg.StackJobSize)
	master2, err := h.StartMaster(cfg.Agents, cfg.AgentCPU, cfg.AgentMemMB)
	if err != nil {
		return nil, err
	}
	defer master2.Close()
	stackMesos, err := stackRunning(ctx, env, stackConfig{Mesos: &cluster.MesosConfig{Master: master2.URL(), ContentType: cfg.ContentType}}, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench mesos: stack on mesos: %w", err)
	}

	rate := func(d time.Duration) float64 { return float64(cfg.Tasks) / d.Seconds() }
	r.add("mesosLaunchesPerSec", rate(mesosRun.running), "runs/s", "Launch to RUNNING through offers, batched ACCEPTs (goal >= 5000)")
	r.add("simLaunchesPerSec", rate(simRun.running), "runs/s", "the sim backend, same launches, same run")
	r.add("mesosToSim", rate(mesosRun.running)/rate(simRun.running), "x", "mesos rate / sim rate")
	r.add("mesosAcceptedPerSec", rate(mesosRun.accepted), "runs/s", "Launch calls returned (the master took their ACCEPT)")
	r.add("tasksPerAccept", float64(cfg.Tasks)/float64(max(accepts, 1)), "runs", "LAUNCHes per ACCEPT call")
	stackRate := func(d time.Duration) float64 { return float64(cfg.StackTasks) / d.Seconds() }
	r.add("stackMesosRunningPerSec", stackRate(stackMesos), "runs/s", "whole stack on mesos: first CreateJob to all RUNNING (polled)")
	r.add("stackSimRunningPerSec", stackRate(stackSim), "runs/s", "whole stack on sim, same jobs, same run")
	r.add("stackMesosToSim", stackRate(stackMesos)/stackRate(stackSim), "x", "stack on mesos / stack on sim")
	r.note("the launch phases call each backend's Launch directly (no jobmgr or placement); the stack phases submit %d BATCH jobs of %d runs of sleep 3600 through the API and poll their task counts every 50ms", (cfg.StackTasks+cfg.StackJobSize-1)/cfg.StackJobSize, cfg.StackJobSize)
	r.note("the master is mesostest, the project's protocol-level test master in this process (HTTP on loopback, %s), not a real Mesos; its agents run nothing", cfg.ContentType)
	r.note("mesos run records and the framework ID go to an embedded etcd on this machine's disk")
	return r.finish(), nil
}

// launchAll starts b, launches cfg.Tasks runs "sleep 3600" in blocks on
// its hosts with cfg.Concurrency launches in flight, and waits until all
// are RUNNING; then closes b.
func launchAll(ctx context.Context, b hostmgr.Backend, cfg MesosConfig) (launchRun, error) {
	var running atomic.Int64
	allRunning := make(chan struct{})
	var seen sync.Map
	sink := func(ev hostmgr.TaskEvent) {
		if ev.State == pelotonv1.TaskState_RUNNING {
			if _, dup := seen.LoadOrStore(ev.TaskID, true); !dup && running.Add(1) == int64(cfg.Tasks) {
				close(allRunning)
			}
		}
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := b.Start(bctx, sink); err != nil {
		return launchRun{}, err
	}
	defer b.Close()
	hosts := b.Hosts()
	if len(hosts) < cfg.Agents {
		return launchRun{}, fmt.Errorf("%d hosts of %d", len(hosts), cfg.Agents)
	}
	// Runs go to hosts in blocks, as placement packs a batch job's tasks:
	// run i on host i/perHost.
	perHost := (cfg.Tasks + len(hosts) - 1) / len(hosts)
	next := make(chan int)
	errs := make(chan error, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("bench-%d-0-1", i)
				spec := hostmgr.LaunchSpec{TaskID: id, JobID: fmt.Sprintf("bench-%d", i), RunID: 1, Host: hosts[i/perHost].Name,
					Command: []string{"sleep", "3600"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 32}}
				if err := b.Launch(ctx, spec); err != nil {
					errs <- fmt.Errorf("launch %s: %w", id, err)
					return
				}
			}
		}()
	}
feed:
	for i := range cfg.Tasks {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return launchRun{}, err
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	var out launchRun
	out.accepted = time.Since(start)
	select {
	case err := <-errs:
		return launchRun{}, err
	default:
	}
	select {
	case <-allRunning:
		out.running = time.Since(start)
	case <-ctx.Done():
		return launchRun{}, fmt.Errorf("%d of %d runs RUNNING: %w", running.Load(), cfg.Tasks, ctx.Err())
	}
	return out, nil
}

// stackRunning starts a stack, submits cfg.StackTasks runs of "sleep 3600"
// in jobs of cfg.StackJobSize, and returns the time from the first
// CreateJob until every run is RUNNING (polled every 50ms).
func stackRunning(ctx context.Context, env Env, sc stackConfig, cfg MesosConfig) (time.Duration, error) {
	s, err := startStack(ctx, env, sc)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	var ids []string
	start := time.Now()
	for left, i := cfg.StackTasks, 0; left > 0; i++ {
		n := min(left, cfg.StackJobSize)
		left -= n
		id, err := s.createJob(ctx, &pelotonv1.JobSpec{Name: fmt.Sprintf("bench-mesos-%d", i), Type: pelotonv1.JobType_BATCH,
			Pool: "/default", InstanceCount: uint32(n),
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 32}}})
		if err != nil {
			return 0, err
		}
		ids = append(ids, id)
	}
	err = waitFor(ctx, 50*time.Millisecond, "waiting for the runs to be RUNNING", func() (bool, string, error) {
		running := 0
		for _, id := range ids {
			j, err := s.getJob(ctx, id)
			if err != nil {
				return false, "", err
			}
			running += int(j.Status.TaskCounts[pelotonv1.TaskState_RUNNING.String()])
		}
		return running == cfg.StackTasks, fmt.Sprintf("%d of %d RUNNING", running, cfg.StackTasks), nil
	})
	if err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
