package advisor

import (
	"fmt"
	"slices"
	"time"
)

// OversubConfig derives batch hosts' oversubscription factors: revocable
// work may hold up to capacity x factor of a host's CPU, where factor is
// (1 - Margin) over the Percentile of the host's CPU use (a fraction of
// capacity) in the last Window, between 1 and MaxFactor. A host with
// fewer than MinSamples fresh readings in the window gets 1. No factor is
// learned for memory: an overcommitted page is an OOM kill, not a slow
// request, so memory is oversubscribed only by what other work holds idle,
// within hostmgr's fixed cap (Options.MemoryOversubscription), with the
// agents' QoS controller killing revocable runs when memory runs hot.
type OversubConfig struct {
	MaxFactor  float64
	Margin     float64
	Percentile float64
	Window     time.Duration
	MinSamples int
	// Headroom sizes the CPU each host keeps free of revocable work for a
	// rise of its own (Decision.Headroom): this many times the largest
	// rise of its own CPU between two readings in the Window (0: none).
	Headroom float64
}

// DefaultOversubConfig is the default: at most 1.5, 10% margin, p95 over
// 30 minutes.
func DefaultOversubConfig() OversubConfig {
	return OversubConfig{MaxFactor: 1.5, Margin: 0.1, Percentile: 0.95, Window: 30 * time.Minute, MinSamples: 6, Headroom: 1}
}

// Validate names the first bad setting.
func (o OversubConfig) Validate() error {
	switch {
	case o.MaxFactor < 1:
		return fmt.Errorf("oversubscription max factor %g: want >= 1 (1: off)", o.MaxFactor)
	case o.Margin < 0 || o.Margin >= 1:
		return fmt.Errorf("oversubscription margin %g: want 0 <= margin < 1", o.Margin)
	case o.Percentile <= 0 || o.Percentile > 1:
		return fmt.Errorf("oversubscription percentile %g: want 0 < p <= 1", o.Percentile)
	case o.Headroom < 0 || o.Headroom > 10:
		return fmt.Errorf("oversubscription headroom %g: want 0 (none) to 10", o.Headroom)
	case o.Window <= 0 || o.MinSamples < 1:
		return fmt.Errorf("oversubscription window %s / min samples %d: want > 0", o.Window, o.MinSamples)
	}
	return nil
}

// window is a host's recent CPU use, oldest first.
type window struct {
	at  []time.Time
	use []float64
}

// windowMax bounds a window's samples, whatever the interval.
const windowMax = 4096

func (w *window) add(now time.Time, use float64, span time.Duration) {
	w.at, w.use = append(w.at, now), append(w.use, use)
	drop := 0
	for drop < len(w.at) && (now.Sub(w.at[drop]) > span || len(w.at)-drop > windowMax) {
		drop++
	}
	w.at, w.use = w.at[drop:], w.use[drop:]
}

// factor records h's reading and returns its factor: 1 but for batch
// hosts with enough fresh readings.
func (c *Core) factor(h Host, now time.Time) float64 {
	o := c.cfg.Oversub
	w := c.windows[h.Name]
	if w == nil {
		w = &window{}
		c.windows[h.Name] = w
	}
	if h.Reading.Fresh {
		w.add(now, h.Reading.CPU, o.Window)
	}
	if h.Partition != c.cfg.Batch || h.Target != "" || o.MaxFactor <= 1 || len(w.use) < o.MinSamples {
		return 1
	}
	return Factor(w.use, o)
}

// Factor is the oversubscription factor of a host whose CPU use samples
// (fractions of its capacity) are use.
func Factor(use []float64, o OversubConfig) float64 {
	s := slices.Clone(use)
	slices.Sort(s)
	i := int(o.Percentile*float64(len(s))+0.5) - 1
	p := s[max(0, min(i, len(s)-1))]
	if p <= 0 {
		return o.MaxFactor
	}
	return max(1, min(o.MaxFactor, (1-o.Margin)/p))
}

// headroom records h's own CPU and returns the share of its CPU revocable
// work should leave free for the next rise of its services' load: for a
// stateless host, Headroom times the largest rise of its own CPU between
// two readings in the window (0 until MinSamples).
func (c *Core) headroom(h Host, now time.Time) float64 {
	o := c.cfg.Oversub
	w := c.owns[h.Name]
	if w == nil {
		w = &window{}
		c.owns[h.Name] = w
	}
	if h.Reading.Fresh {
		w.add(now, h.Reading.OwnCPU, o.Window)
	}
	// A batch host's own work rises when non-revocable work is placed on
	// it, which the scheduler decides, not the load: no headroom there.
	if o.Headroom <= 0 || h.Partition != c.cfg.Stateless || len(w.use) < o.MinSamples {
		return 0
	}
	rise := 0.0
	for i := 1; i < len(w.use); i++ {
		rise = max(rise, w.use[i]-w.use[i-1])
	}
	return min(1, o.Headroom*rise)
}
