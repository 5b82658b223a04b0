package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var gangFigures = []string{
	"gangs", "gangTasks", "freeCpuBeforeGangs", "allGangsLaunchedMs", "gangsPlacedPerSec", "partialGangsSeen", "pollsPerGang",
}

// GangConfig sizes the gang scenario.
type GangConfig struct {
	Hosts   int
	HostCPU float64
	// FillCPU sizes the filler tasks that first take every host whole.
	FillCPU float64
	// KillFraction of the fillers is then killed at random, leaving holes.
	KillFraction float64
	// Gangs of MinGang, 2*MinGang, ... up to MaxGang members, GangsPerSize
	// of each, every member TaskCPU.
	MinGang, MaxGang int
	GangsPerSize     int
	TaskCPU          float64
	Seed             uint64
	// Poll is the pause between two ListTasks of one gang job, until all its
	// members are launched (default 20ms). Every gang has its own poller.
	Poll time.Duration
}

// DefaultGangConfig: 1,000 hosts of 32 CPUs, gangs of 8 to 512 members.
func DefaultGangConfig() GangConfig {
	return GangConfig{Hosts: 1000, HostCPU: 32, FillCPU: 4, KillFraction: 0.35, MinGang: 8, MaxGang: 512,
		GangsPerSize: 8, TaskCPU: 1, Seed: 1, Poll: 20 * time.Millisecond}
}

// Validate checks the config; every error names the flag at fault.
func (c *GangConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.HostCPU <= 0:
		return fmt.Errorf("--host-cpu %g: must be > 0", c.HostCPU)
	case c.FillCPU <= 0 || c.FillCPU > c.HostCPU:
		return fmt.Errorf("--fill-cpu %g: must be in (0, host-cpu]", c.FillCPU)
	case c.KillFraction <= 0 || c.KillFraction > 1:
		return fmt.Errorf("--kill-fraction %g: must be in (0, 1]", c.KillFraction)
	case c.MinGang < 2 || c.MaxGang < c.MinGang || c.MaxGang > maxInstances:
		return fmt.Errorf("--min-gang %d, --max-gang %d: want 2 <= min <= max <= %d", c.MinGang, c.MaxGang, maxInstances)
	case c.GangsPerSize < 1 || c.GangsPerSize > 1000:
		return fmt.Errorf("--gangs-per-size %d: must be 1..1000", c.GangsPerSize)
	case c.TaskCPU <= 0 || c.TaskCPU > c.HostCPU:
		return fmt.Errorf("--task-cpu %g: must be in (0, host-cpu]", c.TaskCPU)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %s: must be > 0", c.Poll)
	}
	_, err := c.plan()
	return err
}

// gangPlan is what a GangConfig implies.
type gangPlan struct {
	perHost, fillers, kills int
	sizes                   []int
	gangTasks               int
	freeCPU                 float64
}

func (c *GangConfig) plan() (gangPlan, error) {
	var p gangPlan
	p.perHost = int(math.Floor(c.HostCPU/c.FillCPU + 1e-9))
	p.fillers = c.Hosts * p.perHost
	if p.fillers > maxInstances {
		return p, fmt.Errorf("--hosts %d with --fill-cpu %g needs %d filler tasks, more than one job may have (%d)", c.Hosts, c.FillCPU, p.fillers, maxInstances)
	}
	p.kills = int(math.Round(float64(p.fillers) * c.KillFraction))
	for s := c.MinGang; s <= c.MaxGang; s *= 2 {
		p.sizes = append(p.sizes, s)
		p.gangTasks += s * c.GangsPerSize
	}
	p.freeCPU = float64(c.Hosts)*c.HostCPU - float64(p.fillers-p.kills)*c.FillCPU
	if need := float64(p.gangTasks) * c.TaskCPU; need > p.freeCPU {
		return p, fmt.Errorf("--gangs-per-size %d: the gangs need %g CPU but only %g is free after the fill; lower --gangs-per-size or --max-gang, or raise --kill-fraction", c.GangsPerSize, need, p.freeCPU)
	}
	return p, nil
}

// Gang is the gang scenario's fragment mode: it fragments the cluster, then places gangs on it through the whole
// stack and watches every gang job for a partial start.
//
// Fragmenting: a filler job of FillCPU-sized `sleep 3600` tasks takes every
// host whole (host-cpu/fill-cpu per host, which any placement policy fits),
// then KillFraction of them, chosen at random, are killed: every host is
// left with a random number of holes. This does not depend on the placement
// policy, which a pre-fill of mixed sizes would.
//
// Then GangsPerSize gang jobs of each size (MinGang, doubling, up to MaxGang)
// are submitted, sizes interleaved, each with sla.minimumRunningInstances
// equal to its instance count, so the whole job is one gang. Each gang job
// has its own poller calling ListTasks until all members are launched; a
// gang is partial if at some poll some of its members are LAUNCHED or later
// while others wait on their first run (see isWaiting). A poll is a
// sample, so partialGangsSeen can miss a short partial window; pollsPerGang
// says how closely each gang was watched.
func Gang(ctx context.Context, env Env, cfg GangConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pl, err := cfg.plan()
	if err != nil {
		return nil, err
	}
	perHost, fillers, kills, sizes, gangTasks, freeCPU := pl.perHost, pl.fillers, pl.kills, pl.sizes, pl.gangTasks, pl.freeCPU
	clusterCPU := float64(cfg.Hosts) * cfg.HostCPU

	r := newResult(ScenarioGang)
	r.param("scenario", GangModeFragment)
	r.param("hosts", cfg.Hosts)
	r.param("hostCpu", cfg.HostCPU)
	r.param("fillCpu", cfg.FillCPU)
	r.param("killFraction", cfg.KillFraction)
	r.param("minGang", cfg.MinGang)
	r.param("maxGang", cfg.MaxGang)
	r.param("gangsPerSize", cfg.GangsPerSize)
	r.param("taskCpu", cfg.TaskCPU)
	r.param("seed", cfg.Seed)

	env.progress("gang: starting the stack with %d simulated hosts", cfg.Hosts)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, HostCPU: cfg.HostCPU})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	env.progress("gang: filling every host with %d tasks of %g CPU", perHost, cfg.FillCPU)
	fillID, err := s.createJob(ctx, &pelotonv1.JobSpec{
		Name: "bench-gang-fill", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: uint32(fillers),
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"},
			Resources: &pelotonv1.Resources{Cpu: cfg.FillCPU, MemoryMb: 64}, KillGracePeriodSeconds: 1},
	})
	if err != nil {
		return nil, err
	}
	if err := s.waitRunning(ctx, fillID, uint32(fillers)); err != nil {
		return nil, err
	}
	env.progress("gang: killing %d of the %d fillers at random", kills, fillers)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9a4e))
	if err := s.killInstances(ctx, fillID, rng.Perm(fillers)[:kills]); err != nil {
		return nil, err
	}
	wantAlloc := float64(fillers-kills) * cfg.FillCPU
	err = waitFor(ctx, 100*time.Millisecond, "waiting for the killed fillers to free their hosts", func() (bool, string, error) {
		hl, err := s.api.Hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
		if err != nil {
			return false, "", fmt.Errorf("ListHosts: %w", err)
		}
		var alloc float64
		for _, h := range hl.Hosts {
			alloc += h.GetAllocated().GetCpu()
		}
		return math.Abs(alloc-wantAlloc) < 1e-6, fmt.Sprintf("%g CPU allocated, want %g", alloc, wantAlloc), nil
	})
	if err != nil {
		return nil, err
	}

	type gangJob struct {
		id       string
		size     int
		partial  string // what the first partial poll saw
		polls    int
		launched time.Duration
	}
	total := len(sizes) * cfg.GangsPerSize
	// One poller per gang, started as soon as its CreateJob returns, so that
	// every gang is watched as closely as the machine allows, however many
	// others are still waiting.
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
		start    time.Time // the first CreateJob call; set before any poller starts
	)
	watch := func(g *gangJob) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := waitFor(watchCtx, cfg.Poll, "waiting for gang job "+g.id+" to launch", func() (bool, string, error) {
				resp, err := s.api.Tasks.ListTasks(watchCtx, &pelotonv1.ListTasksRequest{JobId: g.id})
				if err != nil {
					return false, "", fmt.Errorf("ListTasks %s: %w", g.id, err)
				}
				at := time.Since(start)
				g.polls++
				launched, waiting := 0, 0
				for _, t := range resp.Tasks {
					st := t.GetStatus()
					switch {
					case isLaunchedOrLater(st.GetState()):
						launched++
					case st.GetRunId() <= 1 && isWaiting(st):
						waiting++
					}
				}
				if launched > 0 && waiting > 0 && g.partial == "" {
					g.partial = fmt.Sprintf("gang job %s (%d members) at %s: %d launched while %d waited",
						g.id, g.size, at.Round(time.Millisecond), launched, waiting)
				}
				status := fmt.Sprintf("%d of %d members launched", launched, g.size)
				if launched < g.size {
					return false, status, nil
				}
				g.launched = at
				mu.Lock()
				done++
				if done%max(1, total/4) == 0 {
					env.progress("gang: %d of %d gangs launched", done, total)
				}
				mu.Unlock()
				return true, status, nil
			})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancelWatch() // one failure ends the run; the others stop polling
			}
		}()
	}
	var gangs []*gangJob
	env.progress("gang: submitting %d gangs (%d tasks) of sizes %v", len(sizes)*cfg.GangsPerSize, gangTasks, sizes)
	start = time.Now()
	for round := range cfg.GangsPerSize {
		for _, size := range sizes {
			id, err := s.createJob(ctx, &pelotonv1.JobSpec{
				Name: fmt.Sprintf("bench-gang-%d-%d", size, round), Type: pelotonv1.JobType_BATCH, Pool: "/default",
				InstanceCount: uint32(size),
				Sla:           &pelotonv1.SlaSpec{MinimumRunningInstances: uint32(size)},
				DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"},
					Resources: &pelotonv1.Resources{Cpu: cfg.TaskCPU, MemoryMb: 64}, KillGracePeriodSeconds: 1},
			})
			if err != nil {
				cancelWatch()
				wg.Wait()
				return nil, err
			}
			g := &gangJob{id: id, size: size}
			gangs = append(gangs, g)
			watch(g)
		}
	}

	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	var last time.Duration
	for _, g := range gangs {
		last = max(last, g.launched)
	}
	partial, polls := 0, 0
	for _, g := range gangs {
		if g.partial != "" {
			partial++
			r.note("partial: %s", g.partial)
		}
		polls += g.polls
	}

	r.add("gangs", float64(len(gangs)), "", fmt.Sprintf("sizes %v, %d of each", sizes, cfg.GangsPerSize))
	r.add("gangTasks", float64(gangTasks), "tasks", "")
	r.add("freeCpuBeforeGangs", freeCPU, "CPU", fmt.Sprintf("of %g, in holes of %g CPU", clusterCPU, cfg.FillCPU))
	r.add("allGangsLaunchedMs", ms(last), "ms", "first CreateJob call to every member of every gang LAUNCHED or later")
	r.add("gangsPlacedPerSec", perSec(len(gangs), last), "gangs/s", "")
	r.add("partialGangsSeen", float64(partial), "gangs", "must be 0: some members started while others waited")
	r.add("pollsPerGang", float64(polls)/float64(len(gangs)), "", "ListTasks samples per gang before it was all launched")
	return r.finish(), nil
}

// isWaiting: the instance has not been placed yet. A PENDING instance
// without a pending reason is not waiting: the API overlays resmgr's READY,
// PLACING and PLACED on PENDING, but not LAUNCHING, which resmgr enters
// (with an empty reason) when jobmgr takes the placement and which lasts
// until jobmgr has written LAUNCHED. A queued instance always has a reason.
func isWaiting(st *pelotonv1.TaskStatus) bool {
	switch st.GetState() {
	case pelotonv1.TaskState_INITIALIZED, pelotonv1.TaskState_READY, pelotonv1.TaskState_PLACING:
		return true
	case pelotonv1.TaskState_PENDING:
		return st.GetPendingReason() != ""
	}
	return false
}

// killInstances kills the given instances of a job, a few calls at a time.
func (s *stack) killInstances(ctx context.Context, jobID string, insts []int) error {
	const workers = 16
	ch := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for inst := range ch {
				_, err := s.api.Tasks.KillTask(ctx, &pelotonv1.KillTaskRequest{JobId: jobID, InstanceId: uint32(inst)})
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("KillTask %s %d: %w", jobID, inst, err) })
				}
			}
		}()
	}
	for _, inst := range insts {
		if ctx.Err() != nil {
			break
		}
		ch <- inst
	}
	close(ch)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
