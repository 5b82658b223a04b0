package advisor

import (
	"fmt"
	"math"
	"time"
)

// The advisor learns the stateless partition's daily profile: for each
// profileStep of the day, an exponentially weighted average over the days
// of the CPU its services use (non-revocable, in hosts' worth: the sum of
// the hosts' own CPU fractions). A rise it has seen at that time of day
// is moved for ahead of time (Config.Lead), and a host does not go back to
// batch just before one.

// profileStep is the profile's resolution.
const profileStep = 5 * time.Minute

// profileAlpha is the weight of the newest day.
const profileAlpha = 0.3

type dailyProfile struct {
	// avg and seen are per step of the day; cur the step being gathered,
	// curSum and curN its readings so far.
	avg    []float64
	seen   []int
	cur    int64 // absolute step number; -1 before the first reading
	curSum float64
	curN   int
	first  time.Time
}

func newProfile() *dailyProfile {
	n := int(24 * time.Hour / profileStep)
	return &dailyProfile{avg: make([]float64, n), seen: make([]int, n), cur: -1}
}

func stepOf(t time.Time) int64 { return t.UnixNano() / int64(profileStep) }

func (p *dailyProfile) slot(step int64) int {
	n := int64(len(p.avg))
	return int(((step % n) + n) % n)
}

// add records the demand read at now.
func (p *dailyProfile) add(now time.Time, demand float64) {
	if p.first.IsZero() {
		p.first = now
	}
	s := stepOf(now)
	if s != p.cur {
		p.close()
		p.cur, p.curSum, p.curN = s, 0, 0
	}
	p.curSum += demand
	p.curN++
}

// close folds the step being gathered into the profile.
func (p *dailyProfile) close() {
	if p.cur < 0 || p.curN == 0 {
		return
	}
	i, v := p.slot(p.cur), p.curSum/float64(p.curN)
	if p.seen[i] == 0 {
		p.avg[i] = v
	} else {
		p.avg[i] += profileAlpha * (v - p.avg[i])
	}
	p.seen[i]++
}

// peak is the largest demand the profile expects in (now, now+lead], and
// when; ok is false until the profile has a whole day behind it and has
// seen every step of that span.
func (p *dailyProfile) peak(now time.Time, lead time.Duration) (demand float64, at time.Time, ok bool) {
	if lead <= 0 || p.first.IsZero() || now.Sub(p.first) < 24*time.Hour {
		return 0, time.Time{}, false
	}
	demand = math.Inf(-1)
	for s := stepOf(now) + 1; s <= stepOf(now.Add(lead)); s++ {
		i := p.slot(s)
		if p.seen[i] == 0 {
			return 0, time.Time{}, false
		}
		if p.avg[i] > demand {
			demand, at = p.avg[i], time.Unix(0, s*int64(profileStep)).UTC()
		}
	}
	return demand, at, !math.IsInf(demand, -1)
}

// days is how many days the profile has learnt, for reasons.
func (p *dailyProfile) days(now time.Time) float64 { return now.Sub(p.first).Hours() / 24 }

// statelessDemand is the stateless partition's own CPU in hosts' worth,
// and how many of its hosts are settled there with a fresh reading.
func statelessDemand(hosts []Host, stateless string) (float64, int) {
	var own float64
	n := 0
	for _, h := range hosts {
		if h.Partition == stateless && h.Target == "" && h.Reading.Fresh {
			own += h.Reading.OwnCPU
			n++
		}
	}
	return own, n
}

// target is the own CPU per stateless host the advisor plans for: the
// orange level less the hysteresis, as for moves back.
func (c *Core) target() float64 {
	th := c.cfg.thresholds(c.cfg.Stateless)
	if c.cfg.PlanCPU > 0 {
		return c.cfg.PlanCPU
	}
	return th.CPUOrange - th.Hysteresis
}

// ahead is how many batch hosts to move now for the rise the profile
// expects within the lead, and why; 0 when none.
func (c *Core) ahead(in Input) (int, string) {
	peak, at, ok := c.profile.peak(in.Now, c.cfg.Lead)
	if !ok {
		return 0, ""
	}
	size := size(in.Hosts, c.cfg.Stateless)
	per := c.target()
	need := int(math.Ceil(peak / per))
	if need <= size {
		return 0, ""
	}
	return need - size, fmt.Sprintf("%s expected to need %d hosts by %s (its services' CPU %.1f hosts' worth then, by its daily profile learnt over %.1f days, at most %.2f of a host each); it has %d",
		c.cfg.Stateless, need, at.Format("15:04"), peak, c.profile.days(in.Now), per, size)
}

// statelessRise is the stateless hosts' mean headroom: the rise of their
// own CPU they are to be ready for.
func (c *Core) statelessRise(in Input, d *Decision) float64 {
	var sum float64
	n := 0
	for _, h := range in.Hosts {
		if h.Partition == c.cfg.Stateless && h.Target == "" && h.Reading.Fresh {
			sum += d.Headroom[h.Name]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
