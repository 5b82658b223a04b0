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
}

// DefaultConfig is the advisor's default policy.
func DefaultConfig() Config {
	return Config{Batch: "batch", Stateless: "stateless", PressureHigh: 0.3, PressureLow: 0.1,
		Cooling: 5 * time.Minute, MaxMoves: 1, HoldDown: 10 * time.Minute,
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
}

// Decision is one round's output.
type Decision struct {
	Zones     map[string]ZoneState
	Pressures map[string]*Pressure
	// Factors are the hosts' oversubscription factors (1: none).
	Factors map[string]float64
	Moves   []Move
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
}

// NewCore returns a core with cfg, which must be valid.
func NewCore(cfg Config) *Core {
	return &Core{cfg: cfg, zones: map[string]ZoneState{}, moved: map[string]time.Time{}, movedIn: map[string]bool{},
		windows: map[string]*window{}}
}

// Round classifies the hosts, measures the partitions and decides moves
// and factors. The moves it returns are taken as made (hold-down starts);
// a caller that fails to make one calls Unmove.
func (c *Core) Round(in Input) Decision {
	d := Decision{Zones: make(map[string]ZoneState, len(in.Hosts)), Pressures: map[string]*Pressure{},
		Factors: make(map[string]float64, len(in.Hosts))}
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
	}
	for name := range c.zones {
		if !seen[name] {
			delete(c.zones, name)
			delete(c.windows, name)
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
	backDue := cool && in.Now.Sub(c.coolSince) >= cfg.Cooling
	if backDue {
		// A host goes back only if the rest would stay cool taking over
		// its share: the stateless hosts' own (non-revocable) CPU, spread
		// over one host fewer, below the orange level less the hysteresis.
		th := cfg.thresholds(cfg.Stateless)
		var own float64
		n := 0
		for _, h := range in.Hosts {
			if h.Partition == cfg.Stateless && h.Target == "" && h.Reading.Fresh {
				own += h.Reading.OwnCPU
				n++
			}
		}
		if n <= 1 || own/float64(n-1) >= th.CPUOrange-th.Hysteresis {
			if n > 1 {
				d.Waiting = fmt.Sprintf("%s is cool, but its %d hosts' own CPU (%.2f of a host on average) would be %.2f on one host fewer",
					cfg.Stateless, n, own/float64(n), own/float64(n-1))
			}
			backDue = false
		}
	}
	if !hot && !backDue {
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
	from, to := cfg.Batch, cfg.Stateless
	if !hot {
		from, to = cfg.Stateless, cfg.Batch
	}
	nFrom, nTo := size(in.Hosts, from), size(in.Hosts, to)
	room := cfg.MaxMoves
	if !hot {
		room = 1 // back one at a time: each judged on the rest taking over its share
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
	var cands []Host
	for _, h := range in.Hosts {
		switch {
		case h.Partition != from || !h.InService || h.Target != "":
		case in.Now.Sub(c.moved[h.Name]) < cfg.HoldDown && !c.moved[h.Name].IsZero():
		case in.Now.Sub(in.Cancelled[h.Name]) < cfg.HoldDown && !in.Cancelled[h.Name].IsZero():
		case hot && h.GangTasks > 0: // a gang would be broken
		case !hot && d.Zones[h.Name].Zone != Green:
		default:
			cands = append(cands, h)
		}
	}
	if len(cands) == 0 {
		d.Waiting = fmt.Sprintf("no %s host may move to %s now (held down, its move cancelled lately, holding gangs, or not green)", from, to)
		return
	}
	// Cheapest first: least batch work thrown away, then fewest runs to
	// move elsewhere, then least CPU held.
	slices.SortFunc(cands, func(a, b Host) int {
		if !hot {
			// Back to batch: hosts the advisor brought over first, then
			// those with the fewest service instances to move.
			in := func(h Host) int {
				if c.movedIn[h.Name] {
					return 0
				}
				return 1
			}
			return cmp.Or(cmp.Compare(in(a), in(b)), cmp.Compare(a.ServiceTasks, b.ServiceTasks), cmp.Compare(a.AllocatedCPU, b.AllocatedCPU), strings.Compare(a.Name, b.Name))
		}
		return cmp.Or(cmp.Compare(a.WorkAtRisk, b.WorkAtRisk), cmp.Compare(a.Tasks, b.Tasks), cmp.Compare(a.AllocatedCPU, b.AllocatedCPU), strings.Compare(a.Name, b.Name))
	})
	why := fmt.Sprintf("%s pressure %.2f >= %.2f (%d of %d hosts orange or red, %d of %d services over SLO)",
		to, st.Value, cfg.PressureHigh, st.Hot, st.Known, st.Over, st.Services)
	if !hot {
		why = fmt.Sprintf("%s pressure %.2f < %.2f for %s (%d of %d hosts orange or red, %d of %d services over SLO)",
			from, st.Value, cfg.PressureLow, in.Now.Sub(c.coolSince).Round(time.Second), st.Hot, st.Known, st.Over, st.Services)
	}
	for _, h := range cands[:min(room, len(cands))] {
		cost := fmt.Sprintf("%d runs to move, %.1f cores held, %.1f core-hours of batch work at risk", h.Tasks, h.AllocatedCPU, h.WorkAtRisk/3600)
		if !hot {
			cost = fmt.Sprintf("%d service instances to move, green", h.ServiceTasks)
		}
		d.Moves = append(d.Moves, Move{Host: h.Name, From: from, To: to, Reason: why + "; cheapest " + from + " host: " + cost})
		c.moved[h.Name] = in.Now
		c.lastMove = in.Now
		if hot {
			c.movedIn[h.Name] = true
		} else {
			delete(c.movedIn, h.Name)
		}
	}
	if !hot {
		c.coolSince = in.Now // the next one back waits another cooling period
	}
}
