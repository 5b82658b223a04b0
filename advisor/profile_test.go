package advisor

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// profileConfig: stateless keeps at least 4 hosts and turns orange at 0.9
// own CPU, so that the rise of day one moves nothing by itself.
func profileConfig() Config {
	c := testConfig()
	th := DefaultThresholds()
	th.MinDwell, th.CPUOrange, th.CPURed = 0, 0.9, 0.95
	c.Thresholds = map[string]Thresholds{"stateless": th}
	c.MinSize = map[string]int{"batch": 1, "stateless": 4}
	c.Lead = 30 * time.Minute
	return c
}

// statelessDay: 4 stateless hosts at 0.2 own CPU but from 12:00 to 13:00,
// when they run at 0.85 (3.4 hosts' worth: 5 hosts at the plan's 0.8).
func statelessAt(now time.Time) []Host {
	cpu := 0.2
	if h := now.Hour(); h == 12 {
		cpu = 0.85
	}
	var hs []Host
	for i := range 4 {
		hs = append(hs, host(fmt.Sprintf("s%d", i), "stateless", cpu, 1))
	}
	return hs
}

// The advisor learns the rise at noon on day one and, on day two, moves a
// batch host over before it (by the lead), saying so with the numbers.
func TestMoveAheadOfADailyRise(t *testing.T) {
	c := NewCore(profileConfig())
	batch := []Host{host("b1", "batch", 0.5, 2), host("b2", "batch", 0.5, 3)}
	var first *Move
	var firstAt time.Time
	for step := 0; step < 36*12 && first == nil; step++ { // 5-minute rounds, 36 hours
		now := t0.Add(time.Duration(step) * 5 * time.Minute)
		d := c.Round(Input{Now: now, Hosts: append(statelessAt(now), batch...)})
		if len(d.Moves) > 0 {
			first, firstAt = &d.Moves[0], now
		}
	}
	if first == nil {
		t.Fatal("no move in 36 hours")
	}
	noon2 := time.Date(t0.Year(), t0.Month(), t0.Day()+1, 12, 0, 0, 0, time.UTC)
	if !firstAt.Before(noon2) || firstAt.Before(noon2.Add(-c.cfg.Lead)) || first.To != "stateless" {
		t.Fatalf("first move %+v at %s; want one to stateless within the lead before %s", first, firstAt, noon2)
	}
	if !strings.Contains(first.Reason, "stateless expected to need 5 hosts by 12:00 (its services' CPU 3.4 hosts' worth then, by its daily profile learnt over 1.") ||
		!strings.Contains(first.Reason, "at most 0.80 of a host each); it has 4") {
		t.Errorf("reason %q does not give the numbers", first.Reason)
	}
}

// A cool stateless partition keeps a host its daily profile says it will
// need within the lead.
func TestNoMoveBackBeforeARise(t *testing.T) {
	cfg := profileConfig()
	cfg.MinSize = map[string]int{"batch": 1, "stateless": 1}
	cfg.Cooling = 0
	c := NewCore(cfg)
	// Day one: 4 hosts at 0.5 from 12:00 to 13:00 (2 hosts' worth), idle
	// otherwise; the move back is blocked by a size the test lifts after.
	for step := 0; step < 24*12; step++ {
		now := t0.Add(time.Duration(step) * 5 * time.Minute)
		cpu := 0.05
		if now.Hour() == 12 {
			cpu = 0.5
		}
		c.moved = map[string]time.Time{} // not held down
		c.lastMove = time.Time{}
		var hs []Host
		for i := range 4 {
			hs = append(hs, host(fmt.Sprintf("s%d", i), "stateless", cpu, 1))
		}
		c.cfg.MinSize["stateless"] = 4
		c.Round(Input{Now: now, Hosts: append(hs, host("b1", "batch", 0.5, 1))})
	}
	c.cfg.MinSize["stateless"] = 1
	hs := []Host{host("s0", "stateless", 0.05, 1), host("s1", "stateless", 0.05, 1), host("s2", "stateless", 0.05, 1), host("b1", "batch", 0.5, 1)}
	// Day two at 11:45: cool, but 2 hosts' worth is due at 12:00 and would
	// be 1.0 of a host on 2.
	d := c.Round(Input{Now: t0.Add(27*time.Hour + 45*time.Minute), Hosts: hs}) // t0 is 08:00
	if len(d.Moves) != 0 || !strings.Contains(d.Waiting, "daily profile expects its services' CPU at 2.0 hosts' worth by 12:00") {
		t.Fatalf("moves %+v, waiting %q; want none, held by the profile", d.Moves, d.Waiting)
	}
	// At 08:00 nothing is due within the lead: one goes back.
	c.lastMove = time.Time{}
	d = c.Round(Input{Now: t0.Add(24 * time.Hour), Hosts: hs})
	if len(d.Moves) != 1 || d.Moves[0].To != "batch" {
		t.Fatalf("moves %+v, waiting %q; want one back to batch", d.Moves, d.Waiting)
	}
}

// The headroom is the largest rise of a host's own CPU in the window.
func TestHeadroomFromRecentRises(t *testing.T) {
	cfg := testConfig()
	cfg.Oversub.MinSamples = 3
	c := NewCore(cfg)
	var d Decision
	for i, own := range []float64{0.3, 0.35, 0.6, 0.4, 0.45} {
		d = c.Round(Input{Now: at(60 * i), Hosts: []Host{host("s1", "stateless", own, 1), host("b1", "batch", 0.2, 1)}})
	}
	if got := d.Headroom["s1"]; got < 0.25-1e-9 || got > 0.25+1e-9 {
		t.Errorf("headroom %g, want 0.25 (0.35 to 0.6)", got)
	}
	cfg.Oversub.Headroom = 0
	c = NewCore(cfg)
	for i := range 5 {
		d = c.Round(Input{Now: at(60 * i), Hosts: []Host{host("s1", "stateless", 0.1*float64(i), 1)}})
	}
	if d.Headroom["s1"] != 0 {
		t.Errorf("headroom %g with it off", d.Headroom["s1"])
	}
}
