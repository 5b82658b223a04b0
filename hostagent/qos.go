package hostagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The QoS controller. Revocable runs live on slack, the resources other
// work holds but does not use; when that work wants them back, the host
// runs hot, and the agent kills revocable runs at once rather than wait
// for the control plane, which may be slow or away. The decision is a
// pure function (QoSPolicy.Decide) over one reading; the Agent drives it
// each interval and carries out its answer (Agent.qos).

// Resources is an amount of CPU and memory: a host's capacity, or what a
// host or a run uses.
type Resources struct {
	// CPU is in cores.
	CPU float64
	// MemoryMB is in MiB.
	MemoryMB int64
}

// QoSPolicy says when a host runs hot and how far to cool it. Each kind,
// CPU and memory, has a pair of thresholds, fractions of the host's
// capacity: at or above High the host is hot; when it has been hot for
// Samples readings in a row, revocable runs are killed until the use
// projected without them is below Low. The gap between the two keeps one
// kill from being followed by another as soon as the host warms a little,
// and the count of readings keeps a short spike from killing anything.
//
// A kind whose High is 0 is not watched.
type QoSPolicy struct {
	// CPUHigh and CPULow are fractions of the host's cores, e.g. 0.9 and
	// 0.75.
	CPUHigh, CPULow float64
	// MemHigh and MemLow are fractions of the host's memory.
	MemHigh, MemLow float64
	// Samples is how many hot readings in a row it takes to act.
	// Default DefaultQoSSamples.
	Samples int
}

// DefaultQoSSamples is QoSPolicy.Samples' default: one hot reading is a
// spike, two are a trend.
const DefaultQoSSamples = 2

// Validate says what is wrong with p, in the words of the config.
func (p QoSPolicy) Validate() error {
	var errs []error
	check := func(kind string, high, low float64) {
		switch {
		case high == 0 && low == 0:
		case high < 0 || high > 1:
			errs = append(errs, fmt.Errorf("qos.%sHigh: %v is not a fraction of capacity in (0, 1]", kind, high))
		case high == 0:
			errs = append(errs, fmt.Errorf("qos.%sLow: %v set without %sHigh", kind, low, kind))
		case !(low > 0 && low < high):
			errs = append(errs, fmt.Errorf("qos.%sLow: %v must be > 0 and below %sHigh %v", kind, low, kind, high))
		}
	}
	check("cpu", p.CPUHigh, p.CPULow)
	check("mem", p.MemHigh, p.MemLow)
	if p.CPUHigh == 0 && p.MemHigh == 0 {
		errs = append(errs, errors.New("qos: neither cpuHigh nor memHigh set: nothing to watch"))
	}
	if p.Samples < 0 {
		errs = append(errs, fmt.Errorf("qos.samples: %d must be >= 0", p.Samples))
	}
	return errors.Join(errs...)
}

// QoSState is what Decide remembers between readings.
type QoSState struct {
	// Hot counts the hot readings in a row so far.
	Hot int
}

// QoSInput is one reading, as Decide sees it.
type QoSInput struct {
	// Capacity is the host's: its cores and memory. A kind of capacity 0
	// is not watched.
	Capacity Resources
	// Use is the host's use over the reading's interval.
	Use Resources
	// Fresh is false when the reading failed or is stale; then Decide
	// kills nothing and forgets the hot readings counted.
	Fresh bool
	// Runs are the host's runs with their use over the same interval;
	// only the revocable ones may be chosen.
	Runs []QoSRun
}

// QoSRun is one run, as Decide sees it.
type QoSRun struct {
	ID        string
	Revocable bool
	// Priority is the job's; lower goes first.
	Priority uint32
	// Started orders runs by age (any clock; RunInfo's is time since
	// boot); of equal priority, the youngest goes first.
	Started time.Duration
	// Use is what the run used over the interval. Use the run gave back
	// is what killing it is expected to free.
	Use Resources
}

// Kinds of resource a host runs hot in: the kind a victim was chosen for
// (QoSVictim.Resource), as the report names it to the stack.
const (
	ResourceCPU    = "cpu"
	ResourceMemory = "memory"
)

// QoSVictim is a run Choose kills, and why.
type QoSVictim struct {
	ID string
	// Resource is ResourceMemory when the run was chosen to free memory
	// (memory was hot and still at or above MemLow, and the run uses
	// some), else ResourceCPU.
	Resource string
}

// Decide is Choose with the victims' ids only.
func (p QoSPolicy) Decide(st QoSState, in QoSInput) (QoSState, []string) {
	st, vs := p.Choose(st, in)
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	return st, ids
}

// Choose takes one reading and returns the state for the next and the
// runs to kill now, nil for none.
//
// A reading is hot when CPU use is at or above CPUHigh of the cores, or
// memory at or above MemHigh of the memory. Samples hot readings in a row
// choose victims, and the count starts over whatever was chosen: the next
// kill waits for as many hot readings again, the readings after this
// kill. A reading that is not hot, or not fresh, starts the count over
// and kills nothing: numbers that cannot be trusted must not kill work,
// and a gap in them breaks a run of hot readings.
//
// Victims are revocable runs only, lowest priority first. Of equal
// priority, on a host whose memory is hot the run using the most memory
// goes first; otherwise (CPU only) the youngest, which has lost the least
// work. Memory cannot be throttled as CPU is: past the host's memory the
// kernel's OOM killer ends a process of its own choosing, which knows
// nothing of revocable work and prefers the largest, a service as soon as
// a revocable run. Killing the largest revocable run first frees the most
// per kill, so the host is below MemLow with the fewest runs lost and
// within one reading; youngest first could kill many small runs and still
// leave the host near the OOM killer. Then youngest, then by id, so that
// the answer does not depend on the order of in.Runs.
//
// Victims are added until the use projected without them (the host's use
// minus theirs) is below Low in every kind that was hot; a run that uses
// nothing of a kind still above Low is passed over, since killing it
// would not help. When all the revocable runs are not enough, all that
// help are chosen: work that is not revocable is never chosen, however
// hot the host.
func (p QoSPolicy) Choose(st QoSState, in QoSInput) (QoSState, []QoSVictim) {
	if !in.Fresh {
		return QoSState{}, nil
	}
	cpuHot := p.CPUHigh > 0 && in.Capacity.CPU > 0 && in.Use.CPU >= p.CPUHigh*in.Capacity.CPU
	memHot := p.MemHigh > 0 && in.Capacity.MemoryMB > 0 && float64(in.Use.MemoryMB) >= p.MemHigh*float64(in.Capacity.MemoryMB)
	if !cpuHot && !memHot {
		return QoSState{}, nil
	}
	st.Hot++
	samples := p.Samples
	if samples <= 0 {
		samples = DefaultQoSSamples
	}
	if st.Hot < samples {
		return st, nil
	}

	cands := make([]QoSRun, 0, len(in.Runs))
	for _, r := range in.Runs {
		if r.Revocable {
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b QoSRun) int {
		bySize := 0
		if memHot {
			bySize = cmp.Compare(b.Use.MemoryMB, a.Use.MemoryMB)
		}
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), bySize, cmp.Compare(b.Started, a.Started), cmp.Compare(a.ID, b.ID))
	})
	cpu, mem := in.Use.CPU, float64(in.Use.MemoryMB)
	cpuLow, memLow := p.CPULow*in.Capacity.CPU, p.MemLow*float64(in.Capacity.MemoryMB)
	var victims []QoSVictim
	for _, r := range cands {
		needCPU, needMem := cpuHot && cpu >= cpuLow, memHot && mem >= memLow
		if !needCPU && !needMem {
			break
		}
		forCPU, forMem := needCPU && r.Use.CPU > 0, needMem && r.Use.MemoryMB > 0
		if !forCPU && !forMem {
			continue
		}
		v := QoSVictim{ID: r.ID, Resource: ResourceCPU}
		if forMem {
			v.Resource = ResourceMemory
		}
		victims = append(victims, v)
		cpu -= r.Use.CPU
		mem -= float64(r.Use.MemoryMB)
	}
	return QoSState{}, victims
}

// QoSRuns is a RunSource the QoS controller can act on: it says which runs
// are revocable, and kills them. EnvRuns is the one for processes; a
// backend whose runs are not this machine's processes (the sim backend)
// would bring its own.
type QoSRuns interface {
	// RunInfo says what the controller needs of each run, from the same
	// reading as the counters.
	RunInfoSource
	// Kill kills run id as RunInfo found it; a run gone already is no
	// error.
	Kill(id string, run RunInfo) error
}

// DefaultQoSAckWait is Config.QoSAckWait's default.
const DefaultQoSAckWait = time.Second

// qosStaleIntervals is how many intervals a reading may cover and still be
// fresh. A busy agent's ticker drops ticks, and a reading covering two
// intervals is as good an average as one; one covering more means the
// agent was stopped or starved for a while (a paused VM, a stopped
// process), or readings failed in between, and its average mixes in a
// past nobody sees now.
const qosStaleIntervals = 3

// capacitySource is a HostSource that knows its machine's capacity;
// *HostReader is one. An agent with QoS on and no Capacity configured asks
// its Source.
type capacitySource interface {
	Capacity() (Resources, error)
}

var _ capacitySource = (*HostReader)(nil)

// qosInput turns the interval's report into Decide's input. Runs already
// revoked are left out while they linger (a zombie until its parent reaps
// it): they are being killed, and choosing them again frees nothing.
func (a *Agent) qosInput(use Resources, runUse map[string]Resources, interval time.Duration) QoSInput {
	in := QoSInput{
		Capacity: a.cfg.Capacity,
		Use:      use,
		Fresh:    interval <= qosStaleIntervals*a.cfg.Interval,
		Runs:     make([]QoSRun, 0, len(a.prev.info)),
	}
	for id := range a.killed {
		if _, ok := a.prev.info[id]; !ok {
			delete(a.killed, id)
		}
	}
	for id, info := range a.prev.info {
		if a.killed[id] {
			continue
		}
		// Memory is the run's now; CPU is over the interval, zero for a
		// run first seen, which Decide then does not kill for CPU until
		// it has been measured.
		u := runUse[id]
		u.MemoryMB = mib(info.Sample.MemUsed)
		in.Runs = append(in.Runs, QoSRun{ID: id, Revocable: info.Revocable, Priority: info.Priority, Started: info.Started, Use: u})
	}
	return in
}

// qosKill waits a little for the stack to take the news that victims are
// revoked, from report seq (pending, so sent by now or soon), and kills
// them. A victim is not chosen again while the scan still finds it, killed
// or not: a run that cannot be killed (EPERM) would otherwise be revoked
// anew every interval, and the stack has the news already.
func (a *Agent) qosKill(ctx context.Context, seq uint64, victims []QoSVictim, in QoSInput) {
	// The stack ends a revoked run as preempted work only if it hears
	// before the run dies; a run it sees die first is a failure. So wait
	// for the ack, but not long: the kill is what cools the host, and
	// must not wait on a control plane that may be away.
	if !a.waitAck(ctx, seq, a.cfg.QoSAckWait) {
		a.log.Warn("qos: the stack did not acknowledge the revocation in time; killing anyway",
			"report", seq, "waited", a.cfg.QoSAckWait, "runs", len(victims))
	}
	use := make(map[string]Resources, len(in.Runs))
	for _, r := range in.Runs {
		use[r.ID] = r.Use
	}
	for _, v := range victims {
		id := v.ID
		info := a.prev.info[id]
		a.killed[id] = true
		if err := a.qosRuns.Kill(id, info); err != nil {
			a.log.Error("qos: could not kill revocable run", "run", id, "err", err)
			continue
		}
		now := time.Now()
		a.mu.Lock()
		a.stats.QoSKills++
		if v.Resource == ResourceMemory {
			a.stats.QoSMemoryKills++
		}
		a.stats.LastQoSKill = now
		a.mu.Unlock()
		a.log.Warn("qos: killed revocable run: host runs hot",
			"run", id, "resource", v.Resource, "priority", info.Priority, "processes", len(info.Procs),
			"run_cpu", use[id].CPU, "run_memory_mb", use[id].MemoryMB,
			"host_cpu", in.Use.CPU, "host_memory_mb", in.Use.MemoryMB,
			"capacity_cpu", in.Capacity.CPU, "capacity_memory_mb", in.Capacity.MemoryMB)
	}
}

// waitAck waits until report seq is acknowledged, for at most d; it says
// whether it was.
func (a *Agent) waitAck(ctx context.Context, seq uint64, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		a.mu.Lock()
		if a.stats.LastAcked >= seq {
			a.mu.Unlock()
			return true
		}
		ch := a.ackCh
		a.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			// Stopping: kill without waiting. The stack may have the
			// report, and would count as revoked a run left running.
			return false
		}
	}
}

// revocation is a run revoked: the first report that named it, and the
// kind it was killed for.
type revocation struct {
	first    uint64
	resource string
}

// revokedLocked returns the runs the report seq must name as revoked,
// and what each was killed for: victims, and those revoked before that no
// acknowledged report named. Reports are state, and a newer one replaces
// one not yet sent: a run's revocation must not be lost with the report
// that first carried it, so every report carries it until one that does
// is acknowledged.
func (a *Agent) revokedLocked(seq uint64, victims []QoSVictim) ([]string, map[string]string) {
	for _, v := range victims {
		if _, ok := a.revoking[v.ID]; !ok {
			a.revoking[v.ID] = revocation{first: seq, resource: v.Resource}
		}
	}
	if len(a.revoking) == 0 {
		return nil, nil
	}
	why := make(map[string]string, len(a.revoking))
	for id, r := range a.revoking {
		why[id] = r.resource
	}
	return slices.Sorted(maps.Keys(a.revoking)), why
}
