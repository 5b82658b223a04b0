package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Gang scenario modes, as --scenario spells them.
const (
	GangModeStream   = "stream"
	GangModeFragment = "fragment"
)

// reservationIdleMetric is resmgr's counter of core-seconds reserved for
// a gang but running nothing (summed over its pool label).
const reservationIdleMetric = "peloton_reservation_idle_core_seconds_total"

// gangStreamFigures are the stream mode's figures.
func gangStreamFigures() []string {
	f := []string{
		"gangsSubmitted", "gangsStarted", "gangsNotStarted", "gangsOverBound",
		"gangWaitP50Sec", "gangWaitP99Sec", "gangWaitMaxSec", "gangCapacityShare", "reservedIdleShare",
	}
	return append(f, "smallTasksPerMinBaseline", "smallTasksPerMinWithGangs", "smallThroughputRatio",
		"smallThroughputRatioOfCapacityLeft", "smallUtilizationBaseline", "smallUtilizationWithGangs")
}

// GangStreamConfig sizes the gang scenario's stream mode. Durations and
// seconds are simulated time: the run takes them times TimeScale of the
// wall clock (sleeps, gang arrivals, the reservation delay, the window),
// and every figure is given back in simulated time.
type GangStreamConfig struct {
	Hosts   int
	HostCPU float64
	// SmallCPU, SmallTaskSeconds: each small task (a BATCH task running
	// `sleep`) and how long it runs on average: instance runs are spread
	// evenly over SmallTaskSeconds times 1 ± SmallSpread, so that tasks
	// started together do not end together.
	SmallCPU         float64
	SmallTaskSeconds float64
	SmallSpread      float64
	// SmallJobSize tasks per small job; jobs are submitted while fewer than
	// (1+Backlog) times the cluster's small-task capacity are unfinished.
	SmallJobSize int
	Backlog      float64
	// A gang job of GangSize members of GangCPU each, running GangSeconds,
	// arrives every GangEvery from the window's start while at least
	// WaitBound of the window is left.
	GangSize    int
	GangCPU     float64
	GangSeconds float64
	GangEvery   time.Duration
	// Duration is the measured window; WaitBound the goal for a
	// gang's wait, and how long before the end the last gang arrives.
	Duration  time.Duration
	WaitBound time.Duration
	// ReservationAfter is the stack's --reservation-after (simulated).
	ReservationAfter time.Duration
	// TimeScale is wall-clock seconds per simulated second.
	TimeScale float64
	// Poll is the wall-clock pause of the scenario's loop, which feeds the
	// stream and checks every waiting gang once per round.
	Poll time.Duration
}

// DefaultGangStreamConfig is issue 33's benchmark: 200 hosts of 8 CPUs, a
// stream of 1-CPU tasks, a 64-member gang of whole hosts every minute, at
// a fifth of real time (two runs of a 10-minute window: about 5 minutes).
func DefaultGangStreamConfig() GangStreamConfig {
	return GangStreamConfig{Hosts: 200, HostCPU: 8, SmallCPU: 1, SmallTaskSeconds: 30, SmallSpread: 0.5, SmallJobSize: 200, Backlog: 0.25,
		GangSize: 64, GangCPU: 8, GangSeconds: 30, GangEvery: time.Minute, Duration: 10 * time.Minute,
		WaitBound: 2 * time.Minute, ReservationAfter: time.Minute, TimeScale: 0.2, Poll: 100 * time.Millisecond}
}

// Validate checks the config; every error names the flag at fault.
func (c *GangStreamConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.HostCPU <= 0:
		return fmt.Errorf("--host-cpu %g: must be > 0", c.HostCPU)
	case c.SmallCPU <= 0 || c.SmallCPU > c.HostCPU:
		return fmt.Errorf("--small-cpu %g: must be in (0, host-cpu]", c.SmallCPU)
	case c.SmallTaskSeconds <= 0:
		return fmt.Errorf("--small-task-seconds %g: must be > 0", c.SmallTaskSeconds)
	case c.SmallSpread < 0 || c.SmallSpread >= 1:
		return fmt.Errorf("--small-task-spread %g: must be in [0, 1)", c.SmallSpread)
	case c.SmallJobSize < 1 || c.SmallJobSize > maxInstances:
		return fmt.Errorf("--small-job-size %d: must be 1..%d", c.SmallJobSize, maxInstances)
	case c.Backlog < 0 || c.Backlog > 10:
		return fmt.Errorf("--backlog %g: must be in [0, 10]", c.Backlog)
	case c.GangCPU <= 0 || c.GangCPU > c.HostCPU:
		return fmt.Errorf("--gang-cpu %g: must be in (0, host-cpu]", c.GangCPU)
	case c.GangSize < 2 || c.GangSize > c.Hosts*int(math.Floor(c.HostCPU/c.GangCPU+1e-9)):
		return fmt.Errorf("--gang-size %d: must be at least 2 and fit the cluster (%d members of %g CPU)",
			c.GangSize, c.Hosts*int(math.Floor(c.HostCPU/c.GangCPU+1e-9)), c.GangCPU)
	case c.GangSeconds <= 0:
		return fmt.Errorf("--gang-seconds %g: must be > 0", c.GangSeconds)
	case c.GangEvery <= 0:
		return fmt.Errorf("--gang-every %s: must be > 0", c.GangEvery)
	case c.Duration <= 0:
		return fmt.Errorf("--duration %s: must be > 0", c.Duration)
	case c.WaitBound < 0 || c.WaitBound >= c.Duration:
		return fmt.Errorf("--gang-wait-bound %s: must be in [0, duration): the last gang arrives that long before the window ends", c.WaitBound)
	case c.ReservationAfter < 0:
		return fmt.Errorf("--reservation-after %s: must be >= 0", c.ReservationAfter)
	case c.TimeScale <= 0 || c.TimeScale > 1:
		return fmt.Errorf("--time-scale %g: must be in (0, 1]", c.TimeScale)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %s: must be > 0", c.Poll)
	}
	return nil
}

// real turns simulated time into wall-clock time.
func (c *GangStreamConfig) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.TimeScale)
}

// simSec turns wall-clock time into simulated seconds.
func (c *GangStreamConfig) simSec(d time.Duration) float64 { return d.Seconds() / c.TimeScale }

func (c *GangStreamConfig) capacityCPU() float64 { return float64(c.Hosts) * c.HostCPU }

// gangArrivals is how many gangs arrive in the window: one every GangEvery
// from its start, the last at least WaitBound before its end.
func (c *GangStreamConfig) gangArrivals() int {
	return int((c.Duration-c.WaitBound)/c.GangEvery) + 1
}

// GangStream runs the stream twice on fresh stacks, first without gangs
// (the baseline) then with them, and compares. See docs/benchmarks.md's
// gang section for what each figure is.
func GangStream(ctx context.Context, env Env, cfg GangStreamConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioGang)
	r.param("scenario", GangModeStream)
	r.param("hosts", cfg.Hosts)
	r.param("hostCpu", cfg.HostCPU)
	r.param("smallCpu", cfg.SmallCPU)
	r.param("smallTaskSeconds", cfg.SmallTaskSeconds)
	r.param("smallTaskSpread", cfg.SmallSpread)
	r.param("gangSize", cfg.GangSize)
	r.param("gangCpu", cfg.GangCPU)
	r.param("gangSeconds", cfg.GangSeconds)
	r.param("gangEvery", cfg.GangEvery.String())
	r.param("duration", cfg.Duration.String())
	r.param("gangWaitBound", cfg.WaitBound.String())
	r.param("timeScale", cfg.TimeScale)
	r.param("reservationAfter", cfg.ReservationAfter.String())

	base, err := runGangStreamPhase(ctx, env, &cfg, false)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline run: %w", err)
	}
	if base.smallDone == 0 {
		return nil, fmt.Errorf("--duration %s: the baseline finished no small task in the window; lengthen it or shorten --small-task-seconds", cfg.Duration)
	}
	with, err := runGangStreamPhase(ctx, env, &cfg, true)
	if err != nil {
		return nil, fmt.Errorf("bench: run with gangs: %w", err)
	}
	reportGangStream(r, &cfg, base, with)
	return r.finish(), nil
}

// streamGang is one gang job of a phase.
type streamGang struct {
	id      string
	arrived time.Duration // since the window's start, wall clock
	started time.Duration // since the window's start, wall clock; < 0 if not started
}

// streamPhase is what one run of the stream measured, in wall-clock time.
type streamPhase struct {
	window    time.Duration
	smallDone int // small tasks that succeeded in the window
	gangs     []*streamGang
	// idleCoreSec is the reserved-idle metric's growth over the window,
	// NaN when resmgr exports no such metric.
	idleCoreSec float64
}

// runGangStreamPhase starts a stack, feeds it small work until it is full,
// then measures one window: small tasks finished and, withGangs, each gang's
// wait. One loop does everything, a round per Poll: feed the stream, submit
// a gang when one is due, check each waiting gang.
func runGangStreamPhase(ctx context.Context, env Env, cfg *GangStreamConfig, withGangs bool) (*streamPhase, error) {
	name := "baseline"
	if withGangs {
		name = "with gangs"
	}
	env.progress("gang (%s): starting the stack with %d simulated hosts of %g CPU", name, cfg.Hosts, cfg.HostCPU)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, HostCPU: cfg.HostCPU, ReservationAfter: cfg.real(cfg.ReservationAfter)})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	feed := &smallFeeder{s: s, cfg: cfg, target: int(math.Ceil(cfg.capacityCPU() / cfg.SmallCPU * (1 + cfg.Backlog)))}
	if err := feed.fill(ctx, env, name); err != nil {
		return nil, err
	}
	// Every task of the fill started at once; the window starts once the
	// longest of them has ended, with the stream's ends spread out.
	warm := cfg.real(time.Duration(cfg.SmallTaskSeconds * (1 + cfg.SmallSpread) * float64(time.Second)))
	env.progress("gang (%s): the cluster is full; warming up for %s of wall clock", name, warm)
	if err := feed.keep(ctx, warm); err != nil {
		return nil, err
	}
	p := &streamPhase{window: cfg.real(cfg.Duration)}
	done0 := feed.succeeded
	idle0 := readIdleMetric()
	start := time.Now()
	arrivals := 0
	if withGangs {
		arrivals = cfg.gangArrivals()
	}
	env.progress("gang (%s): measuring %s (%s of wall clock), %d gangs", name, cfg.Duration, p.window, arrivals)
	for {
		now := time.Since(start)
		if now >= p.window {
			break
		}
		if err := feed.tick(ctx); err != nil {
			return nil, err
		}
		if len(p.gangs) < arrivals && now >= time.Duration(len(p.gangs))*cfg.real(cfg.GangEvery) {
			g, err := submitStreamGang(ctx, s, cfg, len(p.gangs))
			if err != nil {
				return nil, err
			}
			g.arrived = time.Since(start)
			p.gangs = append(p.gangs, g)
		}
		for i, g := range p.gangs {
			if g.started >= 0 {
				continue
			}
			ok, err := gangStarted(ctx, s, g.id, cfg.GangSize)
			if err != nil {
				return nil, err
			}
			if ok {
				g.started = time.Since(start)
				env.progress("gang (%s): gang %d started after %.1fs (simulated)", name, i+1, cfg.simSec(g.started-g.arrived))
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: gang (%s) window: %w", name, ctx.Err())
		case <-time.After(cfg.Poll):
		}
	}
	if err := feed.tick(ctx); err != nil {
		return nil, err
	}
	p.window = time.Since(start)
	p.smallDone = feed.succeeded - done0
	p.idleCoreSec = readIdleMetric() - idle0
	return p, nil
}

// submitStreamGang creates the i-th gang job: one gang of all its instances.
func submitStreamGang(ctx context.Context, s *stack, cfg *GangStreamConfig, i int) (*streamGang, error) {
	id, err := s.createJob(ctx, &pelotonv1.JobSpec{
		Name: fmt.Sprintf("bench-gang-%d", i), Type: pelotonv1.JobType_BATCH, Pool: "/default",
		InstanceCount: uint32(cfg.GangSize),
		Gang:          &pelotonv1.GangSpec{Size: uint32(cfg.GangSize)},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", sleepArg(cfg.GangSeconds * cfg.TimeScale)},
			Resources: &pelotonv1.Resources{Cpu: cfg.GangCPU, MemoryMb: 64}, KillGracePeriodSeconds: 1},
	})
	if err != nil {
		return nil, err
	}
	return &streamGang{id: id, started: -1}, nil
}

// gangStarted: every member of the gang job has been launched (its current
// run LAUNCHED or later).
func gangStarted(ctx context.Context, s *stack, id string, size int) (bool, error) {
	j, err := s.getJob(ctx, id)
	if err != nil {
		return false, err
	}
	if err := notFailed(j); err != nil {
		return false, err
	}
	return launchedOrLater(j.GetStatus().GetTaskCounts()) >= uint32(size), nil
}

func sleepArg(sec float64) string { return fmt.Sprintf("%.3f", sec) }

// smallFeeder keeps the stream going: it submits jobs of small tasks while
// fewer than target are unfinished, and counts the ones that succeeded.
type smallFeeder struct {
	s      *stack
	cfg    *GangStreamConfig
	target int
	// active jobs, with the tasks of each that succeeded so far.
	active    []smallJob
	submitted int
	succeeded int // in every job, finished or not
	finished  int // succeeded tasks of jobs no longer active
	seq       int
}

type smallJob struct {
	id        string
	n, doneAt int
}

// tick reads each active job's succeeded count and submits jobs until the
// target of unfinished tasks is met.
func (f *smallFeeder) tick(ctx context.Context) error {
	live := f.active[:0]
	active := 0
	for _, sj := range f.active {
		j, err := f.s.getJob(ctx, sj.id)
		if err != nil {
			return err
		}
		if err := notFailed(j); err != nil {
			return err
		}
		sj.doneAt = int(j.GetStatus().GetTaskCounts()[pelotonv1.TaskState_SUCCEEDED.String()])
		if sj.doneAt >= sj.n {
			f.finished += sj.n
			continue
		}
		active += sj.doneAt
		live = append(live, sj)
	}
	f.active = live
	f.succeeded = f.finished + active
	for f.submitted-f.succeeded < f.target {
		n := f.cfg.SmallJobSize
		spec := &pelotonv1.JobSpec{
			Name: fmt.Sprintf("bench-small-%d", f.seq), Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: uint32(n),
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", sleepArg(f.cfg.SmallTaskSeconds * f.cfg.TimeScale)},
				Resources: &pelotonv1.Resources{Cpu: f.cfg.SmallCPU, MemoryMb: 64}, KillGracePeriodSeconds: 1},
		}
		if f.cfg.SmallSpread > 0 {
			spec.InstanceSpecs = make(map[uint32]*pelotonv1.TaskSpec, n)
			for i := range n {
				sec := f.cfg.SmallTaskSeconds * (1 + f.cfg.SmallSpread*(2*spreadPoint(f.submitted+i)-1))
				spec.InstanceSpecs[uint32(i)] = &pelotonv1.TaskSpec{Command: []string{"sleep", sleepArg(sec * f.cfg.TimeScale)}}
			}
		}
		id, err := f.s.createJob(ctx, spec)
		if err != nil {
			return err
		}
		f.seq++
		f.active = append(f.active, smallJob{id: id, n: n})
		f.submitted += n
	}
	return nil
}

// spreadPoint is the k-th point of the golden-ratio sequence in [0, 1):
// any run of consecutive points covers the interval evenly, so every job,
// and the stream as a whole, has small tasks of every length in the
// spread, averaging SmallTaskSeconds.
func spreadPoint(k int) float64 {
	_, frac := math.Modf(float64(k) * 0.6180339887498949)
	return frac
}

// keep feeds the stream for d.
func (f *smallFeeder) keep(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := f.tick(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: feeding the small-task stream: %w", ctx.Err())
		case <-time.After(f.cfg.Poll):
		}
	}
	return nil
}

// fullShare is how much of the cluster's CPU the stream must hold for the
// window to start.
const fullShare = 0.95

// fill feeds the stream until small tasks hold fullShare of the cluster's
// CPU, bounded by ten small-task lifetimes (at least 30 s of wall clock).
func (f *smallFeeder) fill(ctx context.Context, env Env, name string) error {
	limit := max(30*time.Second, 10*f.cfg.real(time.Duration(f.cfg.SmallTaskSeconds*float64(time.Second))))
	env.progress("gang (%s): filling the cluster with %g-CPU tasks of %gs", name, f.cfg.SmallCPU, f.cfg.SmallTaskSeconds)
	fctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	capacity := f.cfg.capacityCPU()
	return waitFor(fctx, f.cfg.Poll, fmt.Sprintf("filling the cluster to %g%% with small tasks", 100*fullShare), func() (bool, string, error) {
		if err := f.tick(fctx); err != nil {
			return false, "", err
		}
		hl, err := f.s.api.Hosts.ListHosts(fctx, &pelotonv1.ListHostsRequest{})
		if err != nil {
			return false, "", fmt.Errorf("ListHosts: %w", err)
		}
		var alloc float64
		for _, h := range hl.Hosts {
			alloc += h.GetAllocated().GetCpu()
		}
		return alloc >= fullShare*capacity, fmt.Sprintf("%g of %g CPU allocated", alloc, capacity), nil
	})
}

// readIdleMetric is the reserved-idle counter's value.
func readIdleMetric() float64 {
	return registrySum(reservationIdleMetric)
}

// registrySum sums the counter or gauge family of that name in
// metrics.Registry over its labels (0 if it has no series yet). Gather's
// error is ignored: it still returns every family it could gather.
func registrySum(name string) float64 {
	fams, _ := metrics.Registry.Gather()
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// reportGangStream turns the two phases into the figures; times in
// simulated seconds, shares of the cluster's capacity over the window.
func reportGangStream(r *Result, cfg *GangStreamConfig, base, with *streamPhase) {
	capacity := cfg.capacityCPU()
	var waits []float64
	var started, over int
	var gangCoreSec float64 // wall-clock core-seconds the gangs ran in the window
	bound := cfg.WaitBound.Seconds()
	for _, g := range with.gangs {
		wait := cfg.simSec(with.window - g.arrived) // censored: at least this long
		if g.started >= 0 {
			started++
			wait = cfg.simSec(g.started - g.arrived)
			ran := min(time.Duration(cfg.GangSeconds*cfg.TimeScale*float64(time.Second)), with.window-g.started)
			gangCoreSec += ran.Seconds() * float64(cfg.GangSize) * cfg.GangCPU
		}
		if g.started < 0 || wait > bound {
			over++
		}
		waits = append(waits, wait)
	}
	notStarted := len(with.gangs) - started
	waitNote := "simulated seconds, submit to every member launched"
	if notStarted > 0 {
		waitNote = fmt.Sprintf("LOWER BOUND: %d gangs did not start and count as waiting until the window's end", notStarted)
	}
	r.add("gangsSubmitted", float64(len(with.gangs)), "gangs", fmt.Sprintf("one every %s, the last %s before the end", cfg.GangEvery, cfg.WaitBound))
	r.add("gangsStarted", float64(started), "gangs", "every member launched within the window")
	r.add("gangsNotStarted", float64(notStarted), "gangs", "goal 0")
	r.add("gangsOverBound", float64(over), "gangs", fmt.Sprintf("waited over %s or did not start; goal 0", cfg.WaitBound))
	r.add("gangWaitP50Sec", percentile(waits, 50), "s", waitNote)
	r.add("gangWaitP99Sec", percentile(waits, 99), "s", waitNote)
	r.add("gangWaitMaxSec", percentile(waits, 100), "s", fmt.Sprintf("goal <= %g; %s", bound, waitNote))
	gangShare := gangCoreSec / (capacity * with.window.Seconds())
	r.add("gangCapacityShare", gangShare, "", "core-seconds the gangs ran in the window over the cluster's")
	r.add("reservedIdleShare", with.idleCoreSec/(capacity*with.window.Seconds()), "",
		fmt.Sprintf("%s over the window, over the cluster's core-seconds; goal < 0.05", reservationIdleMetric))
	perMin := func(p *streamPhase) float64 { return float64(p.smallDone) / (cfg.simSec(p.window) / 60) }
	util := func(p *streamPhase) float64 {
		return float64(p.smallDone) * cfg.SmallCPU * cfg.SmallTaskSeconds / (capacity * cfg.simSec(p.window))
	}
	ratio := perMin(with) / perMin(base)
	r.add("smallTasksPerMinBaseline", perMin(base), "tasks/min", "small tasks succeeded in the window without gangs, per simulated minute")
	r.add("smallTasksPerMinWithGangs", perMin(with), "tasks/min", "the same with gangs")
	r.add("smallThroughputRatio", ratio, "", "with gangs over baseline; goal >= 0.9")
	r.add("smallThroughputRatioOfCapacityLeft", ratio/(1-gangShare), "", "the ratio over 1 - gangCapacityShare: what small work got of what the gangs left")
	r.add("smallUtilizationBaseline", util(base), "", "small core-seconds finished in the window over the cluster's")
	r.add("smallUtilizationWithGangs", util(with), "", "the same with gangs")
}
