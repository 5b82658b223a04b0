package advisor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Config is the advisor's policy.
type Config struct {
	// Batch and Stateless name the two partitions hosts move between.
	Batch, Stateless string
	// Thresholds classify hosts, by partition; a partition not named
	// takes DefaultThresholds.
	Thresholds map[string]Thresholds
	// The stateless partition is hot at or above PressureHigh, and cool
	// below PressureLow; after Cooling spent cool, a host goes back to
	// batch (one per Cooling).
	PressureHigh, PressureLow float64
	Cooling                   time.Duration
	// MinSize and MaxSize bound each partition's hosts (0 max: no bound).
	MinSize, MaxSize map[string]int
	// MaxMoves is the most moves started in one round; none starts while
	// one is under way, so that each is judged on the capacity the last
	// one brought.
	MaxMoves int
	// HoldDown is how long a host the advisor moved stays where it went.
	HoldDown time.Duration
	// Settle is how long after a move the next waits, so that the zones
	// show what the last one changed (default: the stateless partition's
	// MinDwell).
	Settle time.Duration
	// Oversubscription of batch hosts for revocable work (oversub.go).
	Oversub OversubConfig
	// MoveDrain is the drain window of a move from batch (at most
	// MaxMoveDrain; 0: none): the host takes no new work at once, its runs
	// expected to end within the window finish, the rest are preempted at
	// its end. The advisor picks the batch host whose move is expected to
	// throw away the least work with it (runs.go).
	MoveDrain time.Duration
	// Lead is how far ahead the stateless partition's daily profile is
	// read (profile.go): a rise it expects within Lead is moved for now,
	// and no host goes back to batch ahead of one. 0: off.
	Lead time.Duration
	// PlanCPU is the own CPU per stateless host the profile plans for
	// (default: the stateless orange CPU level less the hysteresis).
	PlanCPU float64
	// BackRise is how many times the stateless hosts' headroom (their
	// recent largest rise, Oversub.Headroom) the rest must still have
	// free after a host goes back to batch (0: none).
	BackRise float64
}

// MaxMoveDrain bounds Config.MoveDrain (hostmgr's bound).
const MaxMoveDrain = time.Hour

// DefaultConfig is the advisor's default policy.
func DefaultConfig() Config {
	return Config{Batch: "batch", Stateless: "stateless", PressureHigh: 0.3, PressureLow: 0.1,
		Cooling: 5 * time.Minute, MaxMoves: 1, HoldDown: 10 * time.Minute, Lead: 30 * time.Minute, BackRise: 1,
		MinSize: map[string]int{"batch": 1, "stateless": 1}, Oversub: DefaultOversubConfig()}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.Batch == "" || c.Stateless == "" || c.Batch == c.Stateless:
		return fmt.Errorf("partitions: want two different names, got batch %q and stateless %q", c.Batch, c.Stateless)
	case !(c.PressureLow >= 0 && c.PressureLow < c.PressureHigh && c.PressureHigh <= 1):
		return fmt.Errorf("pressure: want 0 <= low (%g) < high (%g) <= 1", c.PressureLow, c.PressureHigh)
	case c.Cooling < 0 || c.HoldDown < 0 || c.Settle < 0:
		return fmt.Errorf("cooling %s, hold-down %s, settle %s: want >= 0", c.Cooling, c.HoldDown, c.Settle)
	case c.MaxMoves < 1:
		return fmt.Errorf("max moves %d: want at least 1", c.MaxMoves)
	case c.MoveDrain < 0 || c.MoveDrain > MaxMoveDrain:
		return fmt.Errorf("move drain %s: want 0 to %s", c.MoveDrain, MaxMoveDrain)
	case c.Lead < 0 || c.Lead > 24*time.Hour:
		return fmt.Errorf("lead %s: want 0 to 24h", c.Lead)
	case c.PlanCPU < 0 || c.PlanCPU > 1:
		return fmt.Errorf("plan CPU %g: want 0 (the orange level less the hysteresis) to 1", c.PlanCPU)
	case c.BackRise < 0 || c.BackRise > 10:
		return fmt.Errorf("back rise %g: want 0 to 10", c.BackRise)
	}
	for p, t := range c.Thresholds {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("thresholds of %s: %w", p, err)
		}
	}
	for p, min := range c.MinSize {
		if max := c.MaxSize[p]; min < 0 || max < 0 || max > 0 && max < min {
			return fmt.Errorf("size of %s: want 0 <= min (%d) <= max (%d)", p, min, max)
		}
	}
	return c.Oversub.Validate()
}

func (c Config) thresholds(partition string) Thresholds {
	if t, ok := c.Thresholds[partition]; ok {
		return t
	}
	return DefaultThresholds()
}

// Host is what a round knows of one host.
type Host struct {
	Name, Partition string
	// InService: up, settled in its partition, schedulable.
	InService bool
	// Target is where the host is moving, empty when it is not.
	Target string
	// Reading is its heat; CPUUtil repeats the CPU fraction for the
	// oversubscription window (only fresh readings count).
	Reading Reading
	// Tasks, GangTasks and ServiceTasks count the non-revocable runs it
	// holds: all, members of gangs, instances of long-running jobs.
	Tasks, GangTasks, ServiceTasks int
	// AllocatedCPU is what non-revocable runs hold, in cores.
	AllocatedCPU float64
	// WorkAtRisk is the work, in core-seconds, a drain of the host would
	// throw away: what its non-revocable batch runs have done so far (a
	// service instance moves without losing work).
	WorkAtRisk float64
	// Runs are its non-revocable batch runs, if known: with them the
	// advisor learns the jobs' run times and prefers hosts whose runs end
	// soonest (runs.go).
	Runs []Run
}

// Service is one latency-sensitive service's P99 against its SLO in one
// partition (seconds; P99 0 when none of its instances has a reading).
type Service struct {
	Job, Partition string
	P99, SLO       float64
}

// Over says whether the service is over its SLO.
func (s Service) Over() bool { return s.P99 > 0 && s.P99 > s.SLO }

// Input is one round's input.
type Input struct {
	Now      time.Time
	Hosts    []Host
	Services []Service
	// Cancelled says when a move of each host was last cancelled (by an
	// operator, `peloton host move --cancel`). The advisor leaves such a
	// host where it is for HoldDown from then, in either direction: the
	// cancel is a person's word that the host should stay, and the
	// pressure that caused the move is likely still there, so moving it
	// again at once would undo the cancel.
	Cancelled map[string]time.Time
}

// Pressure is one partition's heat.
type Pressure struct {
	// Hosts in the partition; Known those with a fresh reading; Hot
	// those orange or red by their own work (revocable work using at most
	// the hysteresis of their CPU).
	Hosts, Known, Hot int
	// Services latency-sensitive in the partition; Over those over SLO.
	Services, Over int
	// Value is the larger of Hot/Known and Over/Services.
	Value float64
	// Zones counts the partition's hosts by zone.
	Zones map[Zone]int
}

// Move is a move the advisor decided.
type Move struct {
	Host, From, To string
	// Reason says why, with the numbers.
	Reason string
	// Drain is the move's drain window (Config.MoveDrain for a batch host
	// with runs expected to end within it, else 0), and Finish those runs
	// (their IDs): the host's other runs are drained at once.
	Drain  time.Duration
	Finish []string
}

// Decision is one round's output.
type Decision struct {
	Zones     map[string]ZoneState
	Pressures map[string]*Pressure
	// Factors are the hosts' oversubscription factors (1: none).
	Factors map[string]float64
	// Headroom is, per host, the share of its CPU revocable work should
	// leave free for the next rise of its own work (oversub.go).
	Headroom map[string]float64
	Moves    []Move
	// Waiting says why no move was made when one was wanted (a move under
	// way, a size bound, no candidate), empty otherwise.
	Waiting string
}

// Core keeps the state rounds carry (zones, when hosts moved, how long
// the stateless partition has been cool, the usage windows). It is for
// one goroutine.
type Core struct {
	cfg       Config
	zones     map[string]ZoneState
	moved     map[string]time.Time // when the advisor last moved each host
	movedIn   map[string]bool      // hosts it moved from batch to stateless
	coolSince time.Time
	lastMove  time.Time
	windows   map[string]*window
	owns      map[string]*window // own CPU, for the headroom
	// runs are the batch runs the last round saw, runTimes the run times
	// learnt by job (runs.go); profile the stateless partition's daily
	// profile (profile.go).
	runs     map[string]runSeen
	runTimes map[string]*runTimes
	profile  *dailyProfile
}

// NewCore returns a core with cfg, which must be valid.
func NewCore(cfg Config) *Core {
	return &Core{cfg: cfg, zones: map[string]ZoneState{}, moved: map[string]time.Time{}, movedIn: map[string]bool{},
		windows: map[string]*window{}, owns: map[string]*window{}, runs: map[string]runSeen{}, runTimes: map[string]*runTimes{},
		profile: newProfile()}
}

// Round classifies the hosts, measures the partitions and decides moves
// and factors. The moves it returns are taken as made (hold-down starts);
// a caller that fails to make one calls Unmove.
func (c *Core) Round(in Input) Decision {
	d := Decision{Zones: make(map[string]ZoneState, len(in.Hosts)), Pressures: map[string]*Pressure{},
		Factors: make(map[string]float64, len(in.Hosts)), Headroom: make(map[string]float64, len(in.Hosts))}
	seen := make(map[string]bool, len(in.Hosts))
	for _, h := range in.Hosts {
		seen[h.Name] = true
		st := c.cfg.thresholds(h.Partition).Classify(c.zones[h.Name], h.Reading, in.Now)
		c.zones[h.Name] = st
		d.Zones[h.Name] = st
		p := d.pressure(h.Partition)
		p.Hosts++
		p.Zones[st.Zone]++
		if st.Zone != Unknown {
			p.Known++
			// A host hot with revocable work on it is the QoS controller's
			// to cool (it kills that work), not a reason to move hosts.
			if st.Zone >= Orange && h.Reading.CPU-h.Reading.OwnCPU <= c.cfg.thresholds(h.Partition).Hysteresis {
				p.Hot++
			}
		}
		d.Factors[h.Name] = c.factor(h, in.Now)
		d.Headroom[h.Name] = c.headroom(h, in.Now)
	}
	for name := range c.zones {
		if !seen[name] {
			delete(c.zones, name)
			delete(c.windows, name)
			delete(c.owns, name)
			delete(c.movedIn, name)
		}
	}
	for _, s := range in.Services {
		p := d.pressure(s.Partition)
		p.Services++
		if s.Over() {
			p.Over++
		}
	}
	for _, p := range d.Pressures {
		if p.Known > 0 {
			p.Value = float64(p.Hot) / float64(p.Known)
		}
		if p.Services > 0 {
			p.Value = max(p.Value, float64(p.Over)/float64(p.Services))
		}
	}
	c.learnRuns(in)
	if own, n := statelessDemand(in.Hosts, c.cfg.Stateless); n > 0 {
		c.profile.add(in.Now, own)
	}
	c.decideMoves(in, &d)
	return d
}

// Unmove forgets that host was moved (its move failed).
func (c *Core) Unmove(host string) {
	delete(c.moved, host)
	delete(c.movedIn, host)
}

func (d *Decision) pressure(partition string) *Pressure {
	p := d.Pressures[partition]
	if p == nil {
		p = &Pressure{Zones: map[Zone]int{}}
		d.Pressures[partition] = p
	}
	return p
}

// size is a partition's hosts counting moves: those moving in count, those
// moving out do not.
func size(hosts []Host, partition string) int {
	n := 0
	for _, h := range hosts {
		if h.Target == partition || h.Target == "" && h.Partition == partition {
			n++
		}
	}
	return n
}

func (c *Core) decideMoves(in Input, d *Decision) {
	cfg := c.cfg
	st := d.Pressures[cfg.Stateless]
	if st == nil {
		c.coolSince = time.Time{}
		return
	}
	hot := st.Value >= cfg.PressureHigh
	cool := st.Value < cfg.PressureLow
	switch {
	case hot:
		c.coolSince = time.Time{}
	case cool:
		if c.coolSince.IsZero() {
			c.coolSince = in.Now
		}
	default:
		c.coolSince = time.Time{}
	}
	backDue := cool && in.Now.Sub(c.coolSince) >= cfg.Cooling && c.backFits(in, d)
	aheadN, aheadWhy := 0, ""
	if !hot && !backDue {
		aheadN, aheadWhy = c.ahead(in)
	}
	if !hot && !backDue && aheadN == 0 {
		return
	}
	for _, h := range in.Hosts {
		if h.Target != "" && (h.Target == cfg.Batch || h.Target == cfg.Stateless) {
			d.Waiting = fmt.Sprintf("host %s is moving to %s", h.Name, h.Target)
			return
		}
	}
	settle := cfg.Settle
	if settle <= 0 {
		settle = cfg.thresholds(cfg.Stateless).MinDwell
	}
	if !c.lastMove.IsZero() && in.Now.Sub(c.lastMove) < settle {
		d.Waiting = fmt.Sprintf("settling: the last move was %s ago (settle %s)", in.Now.Sub(c.lastMove).Round(time.Second), settle)
		return
	}
	toSt := hot || aheadN > 0 // to stateless
	from, to := cfg.Batch, cfg.Stateless
	if !toSt {
		from, to = cfg.Stateless, cfg.Batch
	}
	nFrom, nTo := size(in.Hosts, from), size(in.Hosts, to)
	room := cfg.MaxMoves
	switch {
	case !toSt:
		room = 1 // back one at a time: each judged on the rest taking over its share
	case !hot:
		room = min(room, aheadN)
	}
	if min := cfg.MinSize[from]; nFrom-room < min {
		room = nFrom - min
	}
	if max := cfg.MaxSize[to]; max > 0 && nTo+room > max {
		room = max - nTo
	}
	if room <= 0 {
		d.Waiting = fmt.Sprintf("%s has %d hosts (min %d), %s %d (max %d)", from, nFrom, cfg.MinSize[from], to, nTo, cfg.MaxSize[to])
		return
	}
	cands := c.candidates(in, d, from, toSt)
	if len(cands) == 0 {
		d.Waiting = fmt.Sprintf("no %s host may move to %s now (held down, its move cancelled lately, holding gangs, or not green)", from, to)
		return
	}
	var why string
	switch {
	case hot:
		why = fmt.Sprintf("%s pressure %.2f >= %.2f (%d of %d hosts orange or red, %d of %d services over SLO)",
			to, st.Value, cfg.PressureHigh, st.Hot, st.Known, st.Over, st.Services)
	case toSt:
		why = aheadWhy
	default:
		why = fmt.Sprintf("%s pressure %.2f < %.2f for %s (%d of %d hosts orange or red, %d of %d services over SLO)",
			from, st.Value, cfg.PressureLow, in.Now.Sub(c.coolSince).Round(time.Second), st.Hot, st.Known, st.Over, st.Services)
	}
	for _, cd := range cands[:min(room, len(cands))] {
		h := cd.h
		mv := Move{Host: h.Name, From: from, To: to}
		if toSt {
			if len(cd.cost.finish) > 0 {
				mv.Drain, mv.Finish = cfg.MoveDrain, cd.cost.finish
			}
			cost := fmt.Sprintf("%d runs to move, %.1f cores held, %.1f core-hours of batch work at risk", h.Tasks, h.AllocatedCPU, h.WorkAtRisk/3600)
			if len(h.Runs) > 0 {
				cost = fmt.Sprintf("%d runs to move, %.1f cores held; %s", h.Tasks, h.AllocatedCPU, cd.cost.String(cfg.MoveDrain))
			}
			mv.Reason = why + "; cheapest " + from + " host: " + cost
		} else {
			mv.Reason = why + "; cheapest " + from + " host: " + fmt.Sprintf("%d service instances to move, green", h.ServiceTasks)
		}
		d.Moves = append(d.Moves, mv)
		c.moved[h.Name] = in.Now
		c.lastMove = in.Now
		if toSt {
			c.movedIn[h.Name] = true
		} else {
			delete(c.movedIn, h.Name)
		}
	}
	if !toSt {
		c.coolSince = in.Now // the next one back waits another cooling period
	}
}

// backFits says whether a host may go back to batch: the rest would stay
// cool taking over its share (the stateless hosts' own CPU, spread over
// one host fewer, plus BackRise times their headroom for a rise, below
// the orange level less the hysteresis), now and, by the daily profile,
// through the lead ahead. On a flat but noisy load the headroom keeps a
// host from going back only to be needed again at the next wiggle.
func (c *Core) backFits(in Input, d *Decision) bool {
	cfg := c.cfg
	th := cfg.thresholds(cfg.Stateless)
	own, n := statelessDemand(in.Hosts, cfg.Stateless)
	rise := c.statelessRise(in, d) * cfg.BackRise
	if n <= 1 || own/float64(n-1)+rise >= th.CPUOrange-th.Hysteresis {
		if n > 1 {
			d.Waiting = fmt.Sprintf("%s is cool, but its %d hosts' own CPU (%.2f of a host on average) would be %.2f on one host fewer, %.2f with a rise as large as their recent ones",
				cfg.Stateless, n, own/float64(n), own/float64(n-1), own/float64(n-1)+rise)
		}
		return false
	}
	if peak, at, ok := c.profile.peak(in.Now, cfg.Lead); ok && peak/float64(n-1)+rise >= c.target() {
		d.Waiting = fmt.Sprintf("%s is cool, but its daily profile expects its services' CPU at %.1f hosts' worth by %s: %.2f of a host on one host fewer",
			cfg.Stateless, peak, at.Format("15:04"), peak/float64(n-1))
		return false
	}
	return true
}

// candidate is a host that may move, with what moving it costs.
type candidate struct {
	h    Host
	cost moveCost
}

// candidates are the hosts of from that may move now, cheapest first:
// to stateless (toSt), the least batch work expected lost with the drain
// window, then the soonest free, then the fewest runs, then the least CPU
// held; back to batch, the hosts the advisor brought over first, then the
// fewest service instances to move.
func (c *Core) candidates(in Input, d *Decision, from string, toSt bool) []candidate {
	cfg := c.cfg
	var cands []candidate
	for _, h := range in.Hosts {
		switch {
		case h.Partition != from || !h.InService || h.Target != "":
		case in.Now.Sub(c.moved[h.Name]) < cfg.HoldDown && !c.moved[h.Name].IsZero():
		case in.Now.Sub(in.Cancelled[h.Name]) < cfg.HoldDown && !in.Cancelled[h.Name].IsZero():
		case toSt && h.GangTasks > 0: // a gang would be broken
		case !toSt && d.Zones[h.Name].Zone != Green:
		default:
			cd := candidate{h: h}
			if toSt {
				cd.cost = c.cost(h)
			}
			cands = append(cands, cd)
		}
	}
	slices.SortFunc(cands, func(x, y candidate) int {
		a, b := x.h, y.h
		if !toSt {
			in := func(h Host) int {
				if c.movedIn[h.Name] {
					return 0
				}
				return 1
			}
			return cmp.Or(cmp.Compare(in(a), in(b)), cmp.Compare(a.ServiceTasks, b.ServiceTasks), cmp.Compare(a.AllocatedCPU, b.AllocatedCPU), strings.Compare(a.Name, b.Name))
		}
		return cmp.Or(cmp.Compare(x.cost.lost, y.cost.lost), cmp.Compare(x.cost.ready, y.cost.ready), cmp.Compare(a.Tasks, b.Tasks),
			cmp.Compare(a.AllocatedCPU, b.AllocatedCPU), strings.Compare(a.Name, b.Name))
	})
	return cands
}
