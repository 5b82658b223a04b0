package advisor

import (
	"strings"
	"testing"
	"time"
)

func host(name, partition string, cpu float64, tasks int) Host {
	return Host{Name: name, Partition: partition, InService: true, Reading: Reading{Fresh: true, CPU: cpu, OwnCPU: cpu}, Tasks: tasks}
}

func testConfig() Config {
	c := DefaultConfig()
	c.Cooling, c.HoldDown = time.Minute, 5*time.Minute
	c.Thresholds = map[string]Thresholds{"stateless": func() Thresholds { t := DefaultThresholds(); t.MinDwell = 0; return t }()}
	return c
}

// A hot stateless partition takes the cheapest batch host: fewest runs,
// no gang; pressure counts hosts and services.
func TestMoveToStatelessWhenHot(t *testing.T) {
	c := NewCore(testConfig())
	b1 := host("b1", "batch", 0.5, 3)
	b2 := host("b2", "batch", 0.5, 1)
	b3 := host("b3", "batch", 0.1, 0)
	b3.GangTasks = 1 // cheapest, but a gang would break
	d := c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 2), host("s2", "stateless", 0.3, 2), b1, b2, b3},
		Services: []Service{{Job: "web", Partition: "stateless", P99: 0.05, SLO: 0.1}}})
	p := d.Pressures["stateless"]
	if p.Hot != 1 || p.Known != 2 || p.Value != 0.5 || p.Services != 1 || p.Over != 0 {
		t.Fatalf("stateless pressure %+v; want 1 of 2 hot, value 0.5, 1 service none over", p)
	}
	if len(d.Moves) != 1 || d.Moves[0].Host != "b2" || d.Moves[0].To != "stateless" {
		t.Fatalf("moves %+v; want b2 (fewest runs, no gang) to stateless", d.Moves)
	}
	if r := d.Moves[0].Reason; !strings.Contains(r, "stateless pressure 0.50 >= 0.30 (1 of 2 hosts orange or red, 0 of 1 services over SLO)") ||
		!strings.Contains(r, "1 runs to move") {
		t.Errorf("reason %q does not give the numbers", r)
	}
}

// A host hot because of the revocable work on it is not pressure: the
// QoS controller kills that work.
func TestRevocableHeatIsNotPressure(t *testing.T) {
	c := NewCore(testConfig())
	s1 := host("s1", "stateless", 0.95, 1)
	s1.Reading.OwnCPU = 0.5
	d := c.Round(Input{Now: at(0), Hosts: []Host{s1, host("b1", "batch", 0.2, 0), host("b2", "batch", 0.2, 0)}})
	if p := d.Pressures["stateless"]; p.Hot != 0 || p.Value != 0 || d.Zones["s1"].Zone != Red || len(d.Moves) != 0 {
		t.Fatalf("pressure %+v, zone %v, moves %+v; want a red host that is no pressure", p, d.Zones["s1"], d.Moves)
	}
}

// Of full batch hosts, the one whose runs have done the least work goes:
// a drain throws that work away.
func TestMoveTheHostWithLeastWorkAtRisk(t *testing.T) {
	c := NewCore(testConfig())
	b1, b2, b3 := host("b1", "batch", 0.9, 32), host("b2", "batch", 0.9, 32), host("b3", "batch", 0.9, 30)
	b1.WorkAtRisk, b2.WorkAtRisk, b3.WorkAtRisk = 32*3600, 32*600, 30*7200
	d := c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 1), b1, b2, b3}})
	if len(d.Moves) != 1 || d.Moves[0].Host != "b2" || !strings.Contains(d.Moves[0].Reason, "5.3 core-hours of batch work at risk") {
		t.Fatalf("moves %+v; want b2, whose runs have done the least", d.Moves)
	}
}

// Services over their SLO are pressure even on cool hosts.
func TestSLOPressure(t *testing.T) {
	c := NewCore(testConfig())
	d := c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.2, 1), host("b1", "batch", 0.2, 0), host("b2", "batch", 0.2, 0)},
		Services: []Service{{Job: "a", Partition: "stateless", P99: 0.3, SLO: 0.2}, {Job: "b", Partition: "stateless", P99: 0.1, SLO: 0.2},
			{Job: "c", Partition: "stateless"}}})
	if v := d.Pressures["stateless"].Value; v < 0.33 || v > 0.34 {
		t.Errorf("pressure %g; want 1/3 (one of three services over)", v)
	}
	if len(d.Moves) != 1 {
		t.Errorf("moves %+v; want one", d.Moves)
	}
}

func TestMoveLimits(t *testing.T) {
	hotStateless := []Host{host("s1", "stateless", 0.95, 1)}
	tests := []struct {
		name   string
		cfg    func(*Config)
		hosts  []Host
		want   int
		reason string
	}{
		{"min size of batch", nil, append(hotStateless, host("b1", "batch", 0.1, 0)), 0, "batch has 1 hosts (min 1)"},
		{"max size of stateless", func(c *Config) { c.MaxSize = map[string]int{"stateless": 1} }, append(hotStateless, host("b1", "batch", 0, 0), host("b2", "batch", 0, 0)), 0, "stateless 1 (max 1)"},
		{"max moves per round", func(c *Config) { c.MaxMoves = 2 }, append(hotStateless, host("b1", "batch", 0, 0), host("b2", "batch", 0, 0), host("b3", "batch", 0, 0)), 2, ""},
		{"a move under way", nil, append(hotStateless, host("b1", "batch", 0, 0), host("b2", "batch", 0, 0), Host{Name: "b3", Partition: "batch", Target: "stateless"}), 0, "host b3 is moving to stateless"},
		{"not in service", nil, append(hotStateless, Host{Name: "b1", Partition: "batch", Reading: Reading{Fresh: true}}, Host{Name: "b2", Partition: "batch", Reading: Reading{Fresh: true}}), 0, "no batch host may move"},
	}
	for _, tt := range tests {
		cfg := testConfig()
		if tt.cfg != nil {
			tt.cfg(&cfg)
		}
		d := NewCore(cfg).Round(Input{Now: at(0), Hosts: tt.hosts})
		if len(d.Moves) != tt.want || !strings.Contains(d.Waiting, tt.reason) {
			t.Errorf("%s: moves %+v, waiting %q; want %d moves, waiting %q", tt.name, d.Moves, d.Waiting, tt.want, tt.reason)
		}
	}
}

// The stateless partition cools: after the cooling period a green host
// goes back (those the advisor moved in first), one per cooling period,
// and not within its hold-down.
func TestMoveBackAfterCooling(t *testing.T) {
	cfg := testConfig()
	cfg.HoldDown = 90 * time.Second
	c := NewCore(cfg)
	hosts := func(s1cpu float64, b2part string) []Host {
		return []Host{host("s1", "stateless", s1cpu, 1), host("b1", "batch", 0.2, 0), host("b2", b2part, 0.1, 0), host("b3", "batch", 0.2, 0)}
	}
	d := c.Round(Input{Now: at(0), Hosts: hosts(0.95, "batch")})
	if len(d.Moves) != 1 || d.Moves[0].Host != "b1" {
		t.Fatalf("hot: moves %+v; want b1", d.Moves)
	}
	// b1 is now stateless; the load ends. s1 is in maintenance, so that
	// b1 is the one host that may go back.
	after := func(sec int, s1cpu float64) Decision {
		s1 := host("s1", "stateless", s1cpu, 1)
		s1.InService = false
		return c.Round(Input{Now: at(sec), Hosts: []Host{s1, host("b1", "stateless", 0.0, 0),
			host("b2", "batch", 0.1, 0), host("b3", "batch", 0.2, 0)}})
	}
	if d := after(10, 0.0); len(d.Moves) != 0 {
		t.Fatalf("cool for 0s: moves %+v", d.Moves)
	}
	if d := after(60, 0.0); len(d.Moves) != 0 {
		t.Fatalf("cool for 50s (cooling 60s): moves %+v", d.Moves)
	}
	// Cool long enough, but b1 is held down until 90s.
	if d := after(75, 0.0); len(d.Moves) != 0 {
		t.Fatalf("within the hold-down: moves %+v", d.Moves)
	}
	d = after(95, 0.0)
	if len(d.Moves) != 1 || d.Moves[0].Host != "b1" || d.Moves[0].To != "batch" || !strings.Contains(d.Moves[0].Reason, "stateless pressure 0.00 < 0.10 for") {
		t.Fatalf("cool and past the hold-down: moves %+v; want b1 back to batch", d.Moves)
	}
	// s1 is the last stateless host: it stays (the minimum size).
	if d := c.Round(Input{Now: at(400), Hosts: []Host{host("s1", "stateless", 0, 1), host("b1", "batch", 0, 0)}}); len(d.Moves) != 0 {
		t.Errorf("moves %+v; want none: s1 is stateless's last host", d.Moves)
	}
}

// Of green stateless hosts, one the advisor brought over goes back first.
func TestMoveBackPrefersHostsMovedIn(t *testing.T) {
	c := NewCore(testConfig())
	c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 0), host("s2", "stateless", 0.95, 0), host("b1", "batch", 0.2, 3), host("b2", "batch", 0.2, 0)}})
	var d Decision
	for sec := 400; sec <= 600; sec += 100 {
		d = c.Round(Input{Now: at(sec), Hosts: []Host{host("s1", "stateless", 0.1, 0), host("s2", "stateless", 0.1, 0), host("b2", "stateless", 0.1, 0), host("b1", "batch", 0.2, 3)}})
		if len(d.Moves) > 0 {
			break
		}
	}
	if len(d.Moves) != 1 || d.Moves[0].Host != "b2" {
		t.Fatalf("moves %+v; want b2, which the advisor moved over", d.Moves)
	}
}

// A host goes back only if the rest would stay cool without it: their
// own CPU, revocable work left out, over one host fewer.
func TestMoveBackOnlyIfTheRestStaysCool(t *testing.T) {
	cfg := testConfig()
	c := NewCore(cfg)
	c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 1), host("b1", "batch", 0.2, 0), host("b2", "batch", 0.2, 0)}})
	// b1 moved over; stateless cools to 0.55 own CPU per host: on one
	// host fewer that is 1.1, hot again. Revocable work (CPU above own)
	// does not count.
	warm := func(sec int, own float64) Decision {
		s1 := host("s1", "stateless", 0.58, 1)
		s1.Reading.OwnCPU = own
		b1 := host("b1", "stateless", 0.58, 0)
		b1.Reading.OwnCPU = own
		return c.Round(Input{Now: at(sec), Hosts: []Host{s1, b1, host("b2", "batch", 0.2, 0)}})
	}
	warm(400, 0.4) // cool from now on
	for sec := 500; sec < 1000; sec += 100 {
		if d := warm(sec, 0.4); len(d.Moves) != 0 || !strings.Contains(d.Waiting, "would be 0.80 on one host fewer") {
			t.Fatalf("at %ds: moves %+v, waiting %q; want none: the rest would run hot", sec, d.Moves, d.Waiting)
		}
	}
	if d := warm(1100, 0.2); len(d.Moves) != 1 || d.Moves[0].Host != "b1" {
		t.Fatalf("own CPU 0.2 a host (0.4 on one): moves %+v, waiting %q; want b1 back", d.Moves, d.Waiting)
	}
}

// Pressure between the levels neither moves nor counts as cooling.
func TestBetweenLevelsNoMove(t *testing.T) {
	c := NewCore(testConfig())
	in := func(sec int) Input {
		return Input{Now: at(sec), Hosts: []Host{host("s1", "stateless", 0.95, 1), host("s2", "stateless", 0.1, 1),
			host("s3", "stateless", 0.1, 1), host("s4", "stateless", 0.1, 1), host("s5", "stateless", 0.1, 1), host("b1", "batch", 0, 0), host("b2", "batch", 0, 0)}}
	}
	for sec := 0; sec < 600; sec += 60 {
		if d := c.Round(in(sec)); len(d.Moves) != 0 || d.Pressures["stateless"].Value != 0.2 {
			t.Fatalf("at %ds: pressure %g, moves %+v; want 0.2 and none", sec, d.Pressures["stateless"].Value, d.Moves)
		}
	}
}

func TestFactor(t *testing.T) {
	o := DefaultOversubConfig()
	tests := []struct {
		use  []float64
		want float64
	}{
		{[]float64{0.3, 0.3, 0.3, 0.3, 0.3, 0.3}, 1.5},            // 0.9/0.3 = 3, capped
		{[]float64{0.6, 0.6, 0.6, 0.6, 0.6, 0.6}, 1.5},            // 0.9/0.6 = 1.5
		{[]float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.75}, 1.2}, // p95 is the spike: 0.9/0.75
		{[]float64{0.95, 0.95, 0.95}, 1},                          // busy: none
	}
	for _, tt := range tests {
		if got := Factor(tt.use, o); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("Factor(%v) = %g, want %g", tt.use, got, tt.want)
		}
	}
	// Only batch hosts with enough readings are oversubscribed.
	c := NewCore(testConfig())
	for i := range 6 {
		d := c.Round(Input{Now: at(i * 10), Hosts: []Host{host("b1", "batch", 0.3, 0), host("s1", "stateless", 0.3, 0)}})
		want := 1.0
		if i == 5 {
			want = 1.5
		}
		if d.Factors["b1"] != want || d.Factors["s1"] != 1 {
			t.Errorf("round %d: factors %v; want b1 %g, s1 1", i, d.Factors, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Config){
		"same partitions": func(c *Config) { c.Stateless = "batch" },
		"low above high":  func(c *Config) { c.PressureLow = 0.5 },
		"no moves":        func(c *Config) { c.MaxMoves = 0 },
		"min above max": func(c *Config) {
			c.MaxSize = map[string]int{"batch": 0, "stateless": 0}
			c.MinSize = map[string]int{"batch": 3}
			c.MaxSize["batch"] = 2
		},
		"factor below 1": func(c *Config) { c.Oversub.MaxFactor = 0.5 },
		"drain over 1h":  func(c *Config) { c.MoveDrain = MaxMoveDrain + time.Second },
		"drain below 0":  func(c *Config) { c.MoveDrain = -time.Second },
		"lead over 24h":  func(c *Config) { c.Lead = 25 * time.Hour },
		"plan CPU":       func(c *Config) { c.PlanCPU = 1.5 },
		"headroom":       func(c *Config) { c.Oversub.Headroom = -1 },
	} {
		c := DefaultConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A host whose move an operator cancelled stays where it is for the
// hold-down from the cancel, whichever way the advisor would move it; then
// it may move again.
func TestCancelledMoveIsNotRedone(t *testing.T) {
	c := NewCore(testConfig())
	hosts := []Host{host("s1", "stateless", 0.95, 2), host("s2", "stateless", 0.95, 2), host("b1", "batch", 0.2, 0), host("b2", "batch", 0.2, 0)}
	cancelled := map[string]time.Time{"b1": at(0), "b2": at(0)}
	d := c.Round(Input{Now: at(60), Hosts: hosts, Cancelled: cancelled})
	if len(d.Moves) != 0 || !strings.Contains(d.Waiting, "cancelled lately") {
		t.Fatalf("moves %+v, waiting %q; want none, saying why", d.Moves, d.Waiting)
	}
	d = c.Round(Input{Now: at(300), Hosts: hosts, Cancelled: cancelled})
	if len(d.Moves) != 1 || d.Moves[0].To != "stateless" {
		t.Fatalf("moves after the hold-down %+v", d.Moves)
	}
}

// A host goes back only if the rest keep room for a rise as large as their
// recent ones (BackRise times the headroom): on a load that swings between
// 0.2 and 0.45 of a host on each of two, its lows alone would let one go
// back, only for it to be needed at the next high.
func TestMoveBackKeepsRoomForARise(t *testing.T) {
	run := func(backRise float64) (moved bool, waiting string) {
		cfg := testConfig()
		cfg.Lead = 0 // no daily profile: the rise alone decides
		cfg.BackRise = backRise
		cfg.Oversub.MinSamples = 3
		c := NewCore(cfg)
		c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 1), host("b1", "batch", 0.2, 0), host("b2", "batch", 0.2, 0)}})
		for i := 2; i <= 20; i++ {
			own := 0.45
			if i%2 == 0 {
				own = 0.2
			}
			d := c.Round(Input{Now: at(60 * i), Hosts: []Host{host("s1", "stateless", own, 1), host("b1", "stateless", own, 0), host("b2", "batch", 0.2, 0)}})
			if len(d.Moves) > 0 {
				if d.Moves[0].To != "batch" {
					t.Fatalf("back rise %g: moves %+v; want one back to batch or nothing", backRise, d.Moves)
				}
				return true, d.Waiting
			}
			if own == 0.2 && d.Waiting != "" {
				waiting = d.Waiting
			}
		}
		return false, waiting
	}
	if moved, waiting := run(1); moved || !strings.Contains(waiting, "0.40 on one host fewer, 0.65 with a rise as large as their recent ones") {
		t.Errorf("back rise 1: moved %v, waiting %q; want both hosts kept for the next rise (0.4 + 0.25)", moved, waiting)
	}
	if moved, waiting := run(0); !moved {
		t.Errorf("back rise 0: no host went back (waiting %q); the lows alone (0.4 on one host) let one", waiting)
	}
}
