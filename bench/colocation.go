package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/advisor"
	"github.com/peloton-sched/peloton/hostagent"
)

// ScenarioColocation is `peloton bench colocation`.
const ScenarioColocation = "colocation"

var colocationFigures = []string{"segregatedMachines", "segregatedStateless", "segregatedBatch", "colocatedMachines",
	"machinesSavedPct", "sloViolationMinutesPct", "segregatedSloViolationMinutesPct", "batchCoreHours",
	"revocableCoreHoursPct", "lostCoreHours", "lostToMovesCoreHours", "lostToMovesPctOfBacklog", "moves", "qosKills"}

// ColocationConfig sizes the co-location scenario: simulated days in
// minute steps. See docs/benchmarks.md ("colocation") for the model.
type ColocationConfig struct {
	// HostCores is every host's CPU.
	HostCores int
	// ServicePeakCores is the services' CPU use at their peak. With the
	// cosine day the trough is TroughFraction of it, at 04:00, the peak at
	// 16:00; a trace is scaled so that its largest sample is the peak.
	ServicePeakCores float64
	TroughFraction   float64
	// BatchCoreHours is each day's batch backlog, in core-hours of tasks
	// of one core each, lasting 10 to 240 minutes, due by the day's end;
	// BatchUse is the share of its core a batch task really uses.
	BatchCoreHours float64
	BatchUse       float64
	// Seed makes the backlog.
	Seed uint64
	// Trace names the services' load curve: TraceCosine or a built-in
	// trace (TraceNames). TraceFile, if set, is a CSV of the user's own
	// instead: a header line, then a sample of column TraceColumn every
	// TraceStep.
	Trace       string
	TraceFile   string
	TraceColumn string
	TraceStep   time.Duration
	// Plot, if set, is where an SVG of the co-located run is written.
	Plot string
	// The advisor's ways to lose less to moves (docs/benchmarks.md):
	// MoveDrain, the drain window of a move from batch; Lead, how far
	// ahead it reads the services' daily profile; Headroom, the multiple
	// of a host's largest recent rise of its own CPU kept free of
	// revocable work. All 0: the advisor as it was before them.
	MoveDrain time.Duration
	Lead      time.Duration
	Headroom  float64

	// trace is the curve Validate loaded (nil: the cosine day), and loads
	// the services' CPU for every minute of it.
	trace *Trace
	loads []float64
}

// DefaultColocationConfig is the size docs/benchmarks.md quotes.
func DefaultColocationConfig() ColocationConfig {
	return ColocationConfig{HostCores: 32, ServicePeakCores: 1200, TroughFraction: 0.3, BatchCoreHours: 20000, BatchUse: 0.7, Seed: 1,
		Trace: TraceCosine, TraceColumn: "cpu", TraceStep: 300 * time.Second,
		MoveDrain: 15 * time.Minute, Lead: time.Hour, Headroom: 2}
}

// Validate names the first bad flag, and loads the trace.
func (c *ColocationConfig) Validate() error {
	if err := c.validateSizes(); err != nil {
		return err
	}
	return c.loadTrace()
}

// loadTrace reads the trace the flags name and works out each minute's load.
func (c *ColocationConfig) loadTrace() error {
	c.trace, c.loads = nil, nil
	switch {
	case c.TraceFile != "":
		if c.Trace != "" && c.Trace != TraceCosine {
			return fmt.Errorf("invalid --trace-file: give --trace or --trace-file, not both")
		}
		if c.TraceStep < time.Second || c.TraceStep > 24*time.Hour {
			return fmt.Errorf("invalid --trace-step %s: must be 1s to 24h", c.TraceStep)
		}
		raw, err := os.ReadFile(c.TraceFile)
		if err != nil {
			return fmt.Errorf("invalid --trace-file: %w", err)
		}
		cpu, err := ParseTraceCSV(bytes.NewReader(raw), c.TraceFile, c.TraceColumn)
		if err != nil {
			return fmt.Errorf("invalid --trace-file: %w", err)
		}
		c.trace = &Trace{Name: "file " + filepath.Base(c.TraceFile), Cite: "the user's own trace " + c.TraceFile, Step: c.TraceStep, CPU: cpu}
	case c.Trace == "" || c.Trace == TraceCosine:
		return nil
	default:
		t, err := LoadTrace(c.Trace)
		if err != nil {
			return fmt.Errorf("invalid --trace: %w", err)
		}
		c.trace = t
	}
	if c.trace.Minutes() < dayMinutes {
		return fmt.Errorf("invalid --trace-file: %s covers less than a day (%d samples %s apart)", c.trace.Name, len(c.trace.CPU), c.trace.Step)
	}
	c.loads = c.trace.scaled(c.ServicePeakCores)
	if slices.Max(c.loads) <= 0 || math.IsNaN(c.loads[0]) {
		return fmt.Errorf("invalid --trace-file: %s is 0 throughout its whole days", c.trace.Name)
	}
	return nil
}

// validateSizes names the first bad size flag.
func (c *ColocationConfig) validateSizes() error {
	switch {
	case c.HostCores < 2 || c.HostCores > 1024:
		return fmt.Errorf("invalid --host-cores %d: must be 2 to 1024", c.HostCores)
	case !(c.ServicePeakCores > 0 && c.ServicePeakCores <= 1e6):
		return fmt.Errorf("invalid --service-peak-cores %g: must be > 0 and at most 1000000", c.ServicePeakCores)
	case !(c.TroughFraction > 0 && c.TroughFraction <= 1):
		return fmt.Errorf("invalid --trough %g: must be in (0, 1]", c.TroughFraction)
	case !(c.BatchCoreHours >= 0 && c.BatchCoreHours <= 1e7):
		return fmt.Errorf("invalid --batch-core-hours %g: must be 0 to 10000000", c.BatchCoreHours)
	case !(c.BatchUse > 0 && c.BatchUse <= 1):
		return fmt.Errorf("invalid --batch-use %g: must be in (0, 1]", c.BatchUse)
	case c.MoveDrain < 0 || c.MoveDrain > advisor.MaxMoveDrain:
		return fmt.Errorf("invalid --move-drain-seconds %d: must be 0 to %d", int64(c.MoveDrain/time.Second), int64(advisor.MaxMoveDrain/time.Second))
	case c.Lead < 0 || c.Lead > 24*time.Hour:
		return fmt.Errorf("invalid --lead %s: must be 0 to 24h", c.Lead)
	case !(c.Headroom >= 0 && c.Headroom <= 10):
		return fmt.Errorf("invalid --headroom %g: must be 0 to 10", c.Headroom)
	}
	return nil
}

// The model's constants (docs/benchmarks.md argues them).
const (
	dayMinutes = 24 * 60
	// A service instance's P99 is latencyBase/(1-ρ), ρ its host's CPU
	// use; the SLO is sloFactor × latencyBase, so a host over ρ = 0.75
	// breaks it.
	sloFactor = 4.0
	// A service's instances hold serviceAlloc of each stateless host.
	serviceAlloc = 0.75
	// slackMargin is hostmgr's default; advisorEvery the advisor's
	// interval in simulated minutes.
	slackMargin  = 0.1
	advisorEvery = 5
)

// ServiceLoad is the services' CPU use at minute t of the run.
func (c ColocationConfig) ServiceLoad(t int) float64 {
	if c.loads != nil {
		return c.loads[t]
	}
	phase := 2 * math.Pi * float64(t-4*60) / dayMinutes
	return c.ServicePeakCores * (c.TroughFraction + (1-c.TroughFraction)*(0.5-0.5*math.Cos(phase)))
}

// minutes is how long the run is: the trace's whole days, or one day.
func (c ColocationConfig) minutes() int {
	if c.loads != nil {
		return len(c.loads)
	}
	return dayMinutes
}

// p99OverSLO is a host's services' P99 over their SLO at CPU use rho.
func p99OverSLO(rho float64) float64 {
	if rho >= 0.99 {
		return 100 / sloFactor
	}
	return 1 / (1 - rho) / sloFactor
}

// simTask is one batch task.
type simTask struct {
	id        int
	dur, done int // minutes
}

// simHost is one host of the simulated fleet.
type simHost struct {
	name      string
	stateless bool
	// moving: to the other partition, its runs preempted and the host
	// changing sides at minute moveAt (at once without a drain window),
	// or once it is empty.
	moving bool
	moveAt int
	batch  []*simTask // non-revocable
	rev    []*simTask // revocable
	qos    hostagent.QoSState
	use    float64 // cores, last minute
}

// colocRun is one simulated run's outcome.
type colocRun struct {
	done                bool // every day's backlog finished within its day
	coreHours, revHours float64
	// lostHours is work lost to QoS kills and moves, lostMoves the part
	// moves threw away (a moved host's runs end with its drain).
	lostHours, lostMoves float64
	sloBad, sloAll       int // stateless host-minutes over SLO, and all
	moves, kills         int
	// per minute, for the plot
	stateless []int
	worst     []float64
}

// colocate simulates the run on hosts hosts, stateless of them in the
// stateless partition at the start; with advise the advisor moves hosts
// and revocable batch runs on slack, otherwise the partitions are fixed
// and batch runs only on batch hosts. Each day's backlog arrives at its
// midnight and must be done by the next: the run stops at the first day
// that is not (done false).
func (c ColocationConfig) colocate(hosts, stateless int, advise bool, backlog []int) colocRun {
	s := c.newSim(hosts, stateless, advise)
	for t := range c.minutes() {
		if t%dayMinutes == 0 {
			if len(s.queue) > 0 || s.running() > 0 {
				return s.r
			}
			for _, d := range backlog {
				s.queue = append(s.queue, &simTask{id: s.nextID, dur: d})
				s.nextID++
			}
		}
		s.settleMoves(t)
		svc := c.ServiceLoad(t) / float64(max(1, s.statelessHosts()))
		s.place(svc)
		s.runMinute(svc)
		if advise && t%advisorEvery == 0 {
			s.advise(t)
		}
	}
	s.r.done = len(s.queue) == 0 && s.running() == 0
	return s.r
}

// colocSim is one simulated run in progress.
type colocSim struct {
	c        ColocationConfig
	fleet    []*simHost
	byName   map[string]*simHost
	queue    []*simTask
	nextID   int
	advising bool
	core     *advisor.Core
	factor   map[string]float64
	room     map[string]float64 // the advisor's headroom, a share of a host
	t0       time.Time
	cores    float64
	qosB     hostagent.QoSPolicy
	qosS     hostagent.QoSPolicy
	r        colocRun
}

func (c ColocationConfig) newSim(hosts, stateless int, advise bool) *colocSim {
	s := &colocSim{c: c, fleet: make([]*simHost, hosts), byName: map[string]*simHost{}, advising: advise,
		factor: map[string]float64{}, room: map[string]float64{}, t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		cores: float64(c.HostCores)}
	for i := range s.fleet {
		s.fleet[i] = &simHost{name: fmt.Sprintf("h%04d", i), stateless: i < stateless}
		s.byName[s.fleet[i].name] = s.fleet[i]
	}
	cfg := advisor.DefaultConfig()
	th := advisor.DefaultThresholds()
	th.MinDwell = 10 * time.Minute
	// Stateless hosts are filled with revocable work up to ρ 0.675 (the
	// slack's bound; P99 at 0.77 of the SLO): orange from 0.9 of the SLO,
	// so that a host can cool below the hysteresis band with it.
	// The services' SLO is the stateless hosts' signal: their CPU levels
	// sit above the latency's (ρ 0.72 is 0.9 of the SLO).
	st := th
	st.LatencyOrange, st.LatencyRed = 0.9, 1.0
	st.CPUOrange, st.CPURed = 0.8, 0.95
	cfg.Thresholds = map[string]advisor.Thresholds{"batch": th, "stateless": st}
	cfg.Cooling, cfg.HoldDown, cfg.MaxMoves = 20*time.Minute, 30*time.Minute, 2
	cfg.MinSize = map[string]int{"batch": 1, "stateless": 1}
	cfg.Oversub.Window, cfg.Oversub.MinSamples = 3*time.Hour, 6
	cfg.MoveDrain, cfg.Lead, cfg.Oversub.Headroom = c.MoveDrain, c.Lead, c.Headroom
	// A host goes back to batch only if the rest keep twice their
	// headroom free: on a flat, noisy load it would soon be needed again.
	cfg.BackRise = 2
	s.core = advisor.NewCore(cfg)
	// The agents' QoS: batch hosts kill revocable work at 0.9 of their
	// CPU; stateless hosts, whose services' P99 reaches the SLO at 0.75,
	// at 0.7 (the agents of a partition run with its own --qos-cpu-*).
	s.qosB = hostagent.QoSPolicy{CPUHigh: 0.9, CPULow: 0.8, Samples: 2}
	s.qosS = hostagent.QoSPolicy{CPUHigh: 0.7, CPULow: 0.6, Samples: 2}
	return s
}

func (s *colocSim) running() int {
	n := 0
	for _, h := range s.fleet {
		n += len(h.batch) + len(h.rev)
	}
	return n
}

func (s *colocSim) statelessHosts() int {
	n := 0
	for _, h := range s.fleet {
		if h.stateless {
			n++
		}
	}
	return n
}

// settleMoves changes the sides of the moving hosts whose drain window is
// over, or that are empty: their runs left are preempted and wait again.
func (s *colocSim) settleMoves(t int) {
	for _, h := range s.fleet {
		if !h.moving || t < h.moveAt && len(h.batch)+len(h.rev) > 0 {
			continue
		}
		s.preempt(h.batch, func(*simTask) bool { return false })
		s.preempt(h.rev, func(*simTask) bool { return false })
		h.batch, h.rev, h.moving = nil, nil, false
		h.stateless = !h.stateless
	}
}

// place places the waiting batch work: non-revocable on batch hosts' free
// capacity first, then revocable on every host's slack, less the headroom
// the advisor keeps for a rise of the host's own work. A moving host takes
// nothing new.
func (s *colocSim) place(svc float64) {
	c := s.c
	for _, h := range s.fleet {
		for !h.stateless && !h.moving && len(s.queue) > 0 && len(h.batch) < c.HostCores {
			h.batch, s.queue = append(h.batch, s.queue[0]), s.queue[1:]
		}
	}
	if !s.advising {
		return
	}
	for _, h := range s.fleet {
		if h.moving {
			continue
		}
		alloc, own := float64(len(h.batch)), float64(len(h.batch))*c.BatchUse
		f := 1.0
		if h.stateless {
			alloc, own = serviceAlloc*s.cores, svc
		} else if v := s.factor[h.name]; v > 1 {
			f = v
		}
		held := alloc + (f-1)*s.cores
		slack := math.Min((1-slackMargin)*held, (1-slackMargin)*s.cores) - own - float64(len(h.rev)) - s.room[h.name]*s.cores
		for slack >= 1 && len(s.queue) > 0 {
			h.rev, s.queue = append(h.rev, s.queue[0]), s.queue[1:]
			slack--
		}
	}
}

// runMinute runs a minute: use, latency, QoS, progress.
func (s *colocSim) runMinute(svc float64) {
	c := s.c
	worst := 0.0
	r := &s.r
	for _, h := range s.fleet {
		h.use = float64(len(h.batch)+len(h.rev)) * c.BatchUse
		if h.stateless {
			h.use += svc
		}
		rho := math.Min(1, h.use/s.cores)
		if h.stateless {
			over := p99OverSLO(rho)
			worst = math.Max(worst, over)
			r.sloAll++
			if over > 1 {
				r.sloBad++
			}
		}
		if s.advising {
			s.qos(h)
		}
		keep := func(ts []*simTask, revocable bool) []*simTask {
			out := ts[:0]
			for _, tk := range ts {
				tk.done++
				r.coreHours += 1.0 / 60
				if revocable {
					r.revHours += 1.0 / 60
				}
				if tk.done < tk.dur {
					out = append(out, tk)
				}
			}
			return out
		}
		h.batch, h.rev = keep(h.batch, false), keep(h.rev, true)
	}
	r.stateless = append(r.stateless, s.statelessHosts())
	r.worst = append(r.worst, worst)
}

// qos is the host agent's QoS controller on h: it kills revocable work
// while the host runs hot.
func (s *colocSim) qos(h *simHost) {
	qos := s.qosB
	if h.stateless {
		qos = s.qosS
	}
	if len(h.rev) == 0 || h.use < qos.CPUHigh*s.cores && h.qos.Hot == 0 {
		return
	}
	in := hostagent.QoSInput{Capacity: hostagent.Resources{CPU: s.cores}, Use: hostagent.Resources{CPU: h.use}, Fresh: true}
	for i := range h.rev {
		in.Runs = append(in.Runs, hostagent.QoSRun{ID: fmt.Sprint(i), Revocable: true, Started: time.Duration(i), Use: hostagent.Resources{CPU: s.c.BatchUse}})
	}
	var victims []string
	h.qos, victims = qos.Decide(h.qos, in)
	idx := make([]int, 0, len(victims))
	for _, v := range victims {
		var i int
		_, _ = fmt.Sscan(v, &i)
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range slices.Backward(idx) {
		tk := h.rev[i]
		s.r.lostHours += float64(tk.done) / 60
		tk.done = 0
		s.queue = append(s.queue, tk)
		h.rev = slices.Delete(h.rev, i, i+1)
		s.r.kills++
	}
}

// advise runs an advisor round at minute t and starts the moves it decides.
func (s *colocSim) advise(t int) {
	in := advisor.Input{Now: s.t0.Add(time.Duration(t) * time.Minute)}
	var worstSvc float64
	for _, h := range s.fleet {
		part := "batch"
		reading := advisor.Reading{Fresh: true, CPU: math.Min(1, h.use/s.cores),
			OwnCPU: math.Min(1, (h.use-float64(len(h.rev))*s.c.BatchUse)/s.cores)}
		if h.stateless {
			part = "stateless"
			reading.Latency = p99OverSLO(reading.CPU)
			worstSvc = math.Max(worstSvc, reading.Latency)
		}
		target := ""
		if h.moving {
			target = map[bool]string{true: "batch", false: "stateless"}[h.stateless]
		}
		risk := 0.0
		runs := make([]advisor.Run, 0, len(h.batch))
		for _, tk := range h.batch {
			risk += float64(tk.done) * 60
			runs = append(runs, advisor.Run{ID: strconv.Itoa(tk.id), Job: "batch", Elapsed: time.Duration(tk.done) * time.Minute, CPU: 1})
		}
		in.Hosts = append(in.Hosts, advisor.Host{Name: h.name, Partition: part, InService: !h.moving, Target: target,
			Reading: reading, Tasks: len(h.batch), AllocatedCPU: float64(len(h.batch)), WorkAtRisk: risk, Runs: runs})
	}
	in.Services = []advisor.Service{{Job: "services", Partition: "stateless", P99: worstSvc, SLO: 1}}
	d := s.core.Round(in)
	s.factor, s.room = d.Factors, d.Headroom
	for _, mv := range d.Moves {
		h := s.byName[mv.Host]
		h.moving, h.moveAt = true, t+1+int(mv.Drain/time.Minute)
		s.r.moves++
		if mv.Drain > 0 {
			// hostmgr drains at once the runs not left to finish.
			keep := make(map[string]bool, len(mv.Finish))
			for _, id := range mv.Finish {
				keep[id] = true
			}
			h.batch = s.preempt(h.batch, func(tk *simTask) bool { return keep[strconv.Itoa(tk.id)] })
			h.rev = s.preempt(h.rev, func(*simTask) bool { return false })
		}
	}
}

// preempt sends back to the queue the tasks of ts that keep does not
// keep, their work lost to a move, and returns the rest.
func (s *colocSim) preempt(ts []*simTask, keep func(*simTask) bool) []*simTask {
	out := ts[:0]
	for _, tk := range ts {
		if keep(tk) {
			out = append(out, tk)
			continue
		}
		s.r.lostHours += float64(tk.done) / 60
		s.r.lostMoves += float64(tk.done) / 60
		tk.done = 0
		s.queue = append(s.queue, tk)
	}
	return out
}

// backlog is the batch backlog: task durations in minutes.
func (c ColocationConfig) backlog() []int {
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	var out []int
	left := c.BatchCoreHours * 60
	for left > 0 {
		d := 10 + rng.IntN(231)
		out = append(out, d)
		left -= float64(d)
	}
	return out
}

// smallest is the least n in [lo, hi] for which ok holds, ok being
// monotone; hi+1 if none.
func smallest(lo, hi int, ok func(int) bool) int {
	for lo <= hi {
		mid := (lo + hi) / 2
		if ok(mid) {
			hi = mid - 1
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Colocation runs the scenario: the segregated fleet (a stateless
// partition sized for the services' peak, a batch partition sized to
// finish the backlog in the day) against the smallest co-located fleet
// that finishes the same backlog with under 1% of service-minutes over
// SLO, the advisor, oversubscription and QoS on.
func Colocation(ctx context.Context, env Env, cfg ColocationConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioColocation)
	r.param("hostCores", cfg.HostCores)
	r.param("servicePeakCores", cfg.ServicePeakCores)
	r.param("troughFraction", cfg.TroughFraction)
	r.param("batchCoreHours", cfg.BatchCoreHours)
	r.param("batchUse", cfg.BatchUse)
	r.param("moveDrainSeconds", int(cfg.MoveDrain/time.Second))
	r.param("lead", cfg.Lead.String())
	r.param("headroom", cfg.Headroom)
	days := cfg.minutes() / dayMinutes
	if cfg.trace != nil {
		r.param("trace", cfg.trace.Name)
		r.param("days", days)
	} else {
		r.param("trace", TraceCosine)
	}
	backlog := cfg.backlog()
	cores := float64(cfg.HostCores)
	// Segregated: no stateless host over ρ 0.75 at the peak.
	nS := int(math.Ceil(cfg.ServicePeakCores / (serviceAlloc * cores)))
	limit := nS + int(math.Ceil(cfg.BatchCoreHours/24/cores))*4 + 4
	env.progress("colocation: sizing the segregated batch partition")
	// Its batch hosts see no service and every day the same backlog: one
	// day sizes them.
	oneDay := cfg
	if oneDay.loads != nil {
		oneDay.loads = oneDay.loads[:dayMinutes]
	}
	nB := smallest(0, limit, func(n int) bool {
		return ctx.Err() != nil || cfg.BatchCoreHours == 0 || n > 0 && oneDay.colocate(nS+n, nS, false, backlog).done
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if nB > limit {
		return nil, fmt.Errorf("bench: no batch partition of at most %d hosts finishes the backlog in a day", limit)
	}
	seg := cfg.colocate(nS+nB, nS, false, backlog)
	env.progress("colocation: segregated %d+%d hosts; sizing the co-located fleet", nS, nB)
	nC, best, sloMet := cfg.sizeColocated(ctx, nS+nB, backlog)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if nC > nS+nB {
		return nil, fmt.Errorf("bench: no co-located fleet up to the segregated %d hosts finishes the backlog", nS+nB)
	}
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(max(1, b)) }
	r.add("segregatedMachines", float64(nS+nB), "hosts", "stateless sized for the peak + batch sized to finish the backlog in the day")
	r.add("segregatedStateless", float64(nS), "hosts", "no host over ρ 0.75 (P99 = SLO) at the peak")
	r.add("segregatedBatch", float64(nB), "hosts", "the fewest that finish the backlog by midnight")
	if sloMet {
		r.add("colocatedMachines", float64(nC), "hosts", "the fewest that finish the same backlog with < 1% of service-minutes over SLO")
	} else {
		r.add("colocatedMachines", float64(nC), "hosts", "no fleet up to the segregated one keeps the SLO: the fewest that finish the same backlog")
	}
	r.add("machinesSavedPct", 100*float64(nS+nB-nC)/float64(nS+nB), "%", "goal >= 25 (Borg: segregation needs 20-30% more machines)")
	r.add("sloViolationMinutesPct", pct(best.sloBad, best.sloAll), "%", "co-located: stateless host-minutes with P99 over SLO (goal < 1)")
	r.add("segregatedSloViolationMinutesPct", pct(seg.sloBad, seg.sloAll), "%", "the same, segregated")
	r.add("batchCoreHours", best.coreHours, "core-h", "batch work run co-located (the backlog, plus work lost to kills and moves run again)")
	r.add("revocableCoreHoursPct", 100*best.revHours/math.Max(best.coreHours, 1e-9), "%", "of it, run as revocable work on slack")
	r.add("lostCoreHours", best.lostHours, "core-h", "work lost to QoS kills and moves, run again")
	r.add("lostToMovesCoreHours", best.lostMoves, "core-h", "of it, lost to moves (a moved host's runs end with its drain)")
	r.add("lostToMovesPctOfBacklog", 100*best.lostMoves/math.Max(cfg.BatchCoreHours*float64(days), 1e-9), "%", "work lost to moves, as a share of the backlog")
	r.add("moves", float64(best.moves), "", "hosts the advisor moved between the partitions")
	r.add("qosKills", float64(best.kills), "", "revocable tasks the QoS controller killed")
	if cfg.trace != nil {
		lo := slices.Min(cfg.loads)
		r.note("model: %d days in 1-minute steps; services' CPU follows %s, interpolated to minutes and scaled so that its largest sample is %.0f cores (its smallest: %.0f), spread evenly over the stateless hosts; P99 = base/(1-ρ), SLO = %.0f x base; batch: each day %d tasks of one core (%.0f%% used), 10-240 min, due by midnight", days, cfg.trace.Name, cfg.ServicePeakCores, lo, sloFactor, len(backlog), 100*cfg.BatchUse)
		r.note("load curve: %s", cfg.trace.Cite)
	} else {
		r.note("model: %d-minute days in 1-minute steps; services' CPU %.0f..%.0f cores (trough 04:00, peak 16:00) spread evenly over the stateless hosts; P99 = base/(1-ρ), SLO = %.0f x base; batch: %d tasks of one core (%.0f%% used), 10-240 min", dayMinutes, cfg.ServiceLoad(4*60), cfg.ServicePeakCores, sloFactor, len(backlog), 100*cfg.BatchUse)
	}
	if cfg.Plot != "" {
		if err := os.WriteFile(cfg.Plot, []byte(colocationSVG(cfg, best, nC)), 0o644); err != nil {
			return nil, fmt.Errorf("invalid --plot %q: %w", cfg.Plot, err)
		}
		r.note("plot written to %s", cfg.Plot)
	}
	return r.finish(), nil
}

// sizeColocated finds the smallest co-located fleet, up to most hosts,
// that finishes the backlog with under 1% of service-minutes over SLO
// (sloMet), or failing that the smallest that finishes it; more than most
// when none does. It returns that fleet's run.
func (c ColocationConfig) sizeColocated(ctx context.Context, most int, backlog []int) (int, colocRun, bool) {
	cores := float64(c.HostCores)
	// The stateless partition starts sized for the first minute's load.
	start := func(n int) int { return min(n-1, max(1, int(math.Ceil(c.ServiceLoad(0)/(0.6*cores))))) }
	fits := func(slo bool) func(int) bool {
		return func(n int) bool {
			if ctx.Err() != nil {
				return true
			}
			run := c.colocate(n, start(n), true, backlog)
			return run.done && (!slo || float64(run.sloBad) < 0.01*float64(run.sloAll))
		}
	}
	sloMet := true
	n := smallest(2, most, fits(true))
	if n > most {
		sloMet = false
		n = smallest(2, most, fits(false))
	}
	if n > most || ctx.Err() != nil {
		return n, colocRun{}, false
	}
	return n, c.colocate(n, start(n), true, backlog), sloMet
}

// colocationSVG plots the co-located day: the stateless partition's size,
// the services' load (in hosts' worth at ρ 0.75) and the worst P99/SLO.
func colocationSVG(cfg ColocationConfig, run colocRun, hosts int) string {
	const w, h, pad, legendW = 1140, 360, 50, 260
	total := cfg.minutes()
	x := func(t int) float64 { return pad + float64(t)*(w-legendW-2*pad)/float64(total) }
	every := max(5, total/1000)
	y := func(v, top float64) float64 { return h - pad - v*(h-2*pad)/top }
	top := float64(hosts)
	line := func(vals func(int) float64, scale float64, color string) string {
		var b strings.Builder
		for t := 0; t < total; t += every {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(t), y(vals(t), scale))
		}
		return fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, color, b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`, w, h)
	what := "a simulated day"
	if cfg.trace != nil {
		what = fmt.Sprintf("%d days of %s", total/dayMinutes, cfg.trace.Name)
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">peloton bench colocation: %s on %d co-located hosts</text>`, pad, what, hosts)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, pad, h-pad, w-legendW-pad, h-pad)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, pad, pad, pad, h-pad)
	if total == dayMinutes {
		for hr := 0; hr <= 24; hr += 4 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%02d:00</text>`, x(hr*60), h-pad+16, hr)
		}
	} else {
		days := total / dayMinutes
		tick := max(1, days/8)
		for d := 0; d <= days; d += tick {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">day %d</text>`, x(d*dayMinutes), h-pad+16, d)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`, pad-4, y(top, top), hosts)
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">0</text>`, pad-4, y(0, top))
	cores := float64(cfg.HostCores)
	b.WriteString(line(func(t int) float64 { return float64(run.stateless[t]) }, top, "#1f77b4"))
	b.WriteString(line(func(t int) float64 { return float64(hosts - run.stateless[t]) }, top, "#2ca02c"))
	b.WriteString(line(func(t int) float64 { return cfg.ServiceLoad(t) / (serviceAlloc * cores) }, top, "#ff7f0e"))
	// The worst P99 of each plotted step's minutes, cut at the plot's top.
	b.WriteString(line(func(t int) float64 { return min(2, slices.Max(run.worst[t:min(t+every, total)])) }, 2, "#d62728"))
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d62728" stroke-dasharray="4 4"/>`, pad, y(1, 2), w-legendW-pad, y(1, 2))
	legend := []struct{ color, text string }{
		{"#1f77b4", "stateless hosts"}, {"#2ca02c", "batch hosts"},
		{"#ff7f0e", "service load (hosts at ρ 0.75)"}, {"#d62728", "worst P99 / SLO (0..2; dashed: the SLO)"},
	}
	for i, l := range legend {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, w-legendW, pad+i*18, l.color, w-legendW+18, pad+i*18+10, l.text)
	}
	b.WriteString(`</svg>` + "\n")
	return b.String()
}
