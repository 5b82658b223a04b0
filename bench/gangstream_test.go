package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func TestGangStreamValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		set  func(*GangStreamConfig)
	}{
		{"--hosts", func(c *GangStreamConfig) { c.Hosts = 0 }},
		{"--host-cpu", func(c *GangStreamConfig) { c.HostCPU = 0 }},
		{"--small-cpu", func(c *GangStreamConfig) { c.SmallCPU = 9 }},
		{"--small-task-seconds", func(c *GangStreamConfig) { c.SmallTaskSeconds = 0 }},
		{"--small-task-spread", func(c *GangStreamConfig) { c.SmallSpread = 1 }},
		{"--small-job-size", func(c *GangStreamConfig) { c.SmallJobSize = 0 }},
		{"--backlog", func(c *GangStreamConfig) { c.Backlog = -1 }},
		{"--gang-cpu", func(c *GangStreamConfig) { c.GangCPU = 16 }},
		{"--gang-size", func(c *GangStreamConfig) { c.GangSize = 1 }},
		{"--gang-size", func(c *GangStreamConfig) { c.GangSize = 201 }}, // 200 hosts hold 200 members of 8 CPU
		{"--gang-seconds", func(c *GangStreamConfig) { c.GangSeconds = 0 }},
		{"--gang-every", func(c *GangStreamConfig) { c.GangEvery = 0 }},
		{"--duration", func(c *GangStreamConfig) { c.Duration = 0 }},
		{"--gang-wait-bound", func(c *GangStreamConfig) { c.WaitBound = c.Duration }},
		{"--reservation-after", func(c *GangStreamConfig) { c.ReservationAfter = -time.Second }},
		{"--time-scale", func(c *GangStreamConfig) { c.TimeScale = 0 }},
		{"--time-scale", func(c *GangStreamConfig) { c.TimeScale = 2 }},
		{"--poll", func(c *GangStreamConfig) { c.Poll = 0 }},
	} {
		c := DefaultGangStreamConfig()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("%s: err %v, want one starting with it", tc.flag, err)
		}
	}
	c := DefaultGangStreamConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("the default config is invalid: %v", err)
	}
	// The run: a gang every minute of a 10-minute window, the last
	// one 2 minutes before its end.
	if got := c.gangArrivals(); got != 9 {
		t.Errorf("default arrivals = %d, want 9 (minutes 0..8)", got)
	}
	c.Duration = 10*time.Minute + time.Second
	if got := c.gangArrivals(); got != 9 {
		t.Errorf("arrivals in 10m1s = %d, want 9", got)
	}
	if c.WaitBound = 0; c.gangArrivals() != 11 {
		t.Errorf("arrivals without a bound = %d, want 11 (minutes 0..10)", c.gangArrivals())
	}
}

// The stream at a tiny size, on two real stacks: every figure is there and
// the figures agree with each other. How long anything took is not checked.
func TestGangStreamScenarioFiguresAgree(t *testing.T) {
	cfg := GangStreamConfig{Hosts: 6, HostCPU: 4, SmallCPU: 1, SmallTaskSeconds: 10, SmallSpread: 0.5, SmallJobSize: 10, Backlog: 0.5,
		GangSize: 3, GangCPU: 4, GangSeconds: 10, GangEvery: 20 * time.Second, Duration: 80 * time.Second,
		WaitBound: 20 * time.Second, ReservationAfter: 30 * time.Second, TimeScale: 0.05, Poll: 20 * time.Millisecond}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := GangStream(ctx, Env{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fig := map[string]float64{}
	for _, f := range r.Figures {
		fig[f.Name] = f.Value
	}
	for _, name := range gangStreamFigures() {
		if v, ok := fig[name]; !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("figure %s missing or not a number: %v", name, v)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
	if sub := fig["gangsSubmitted"]; sub != 4 || fig["gangsStarted"]+fig["gangsNotStarted"] != sub {
		t.Errorf("gangs: %g submitted (want 4: at 0, 20, 40, 60 s), %g started, %g not", sub, fig["gangsStarted"], fig["gangsNotStarted"])
	}
	if o := fig["gangsOverBound"]; o < fig["gangsNotStarted"] || o > fig["gangsSubmitted"] {
		t.Errorf("gangsOverBound %g: want between the gangs not started and those submitted", o)
	}
	if p50, p99, mx := fig["gangWaitP50Sec"], fig["gangWaitP99Sec"], fig["gangWaitMaxSec"]; p50 < 0 || p50 > p99 || p99 > mx {
		t.Errorf("waits p50 %g, p99 %g, max %g: want 0 <= p50 <= p99 <= max", p50, p99, mx)
	}
	if fig["gangsOverBound"] == 0 && fig["gangWaitMaxSec"] > cfg.WaitBound.Seconds() {
		t.Errorf("max wait %g over the bound, but no gang counted over it", fig["gangWaitMaxSec"])
	}
	share := fig["gangCapacityShare"]
	// At most every gang running its whole time: 4 gangs x 3 x 4 CPU x 10 s
	// over 24 CPU x 80 s.
	if share < 0 || share > 480.0/1920+1e-9 || (fig["gangsStarted"] > 0) != (share > 0) {
		t.Errorf("gangCapacityShare %g with %g gangs started", share, fig["gangsStarted"])
	}
	if v := fig["reservedIdleShare"]; v < 0 || v > 1 {
		t.Errorf("reservedIdleShare %g: want a share of the cluster's core-seconds", v)
	}
	base, with := fig["smallTasksPerMinBaseline"], fig["smallTasksPerMinWithGangs"]
	if base <= 0 || !near(fig["smallThroughputRatio"], with/base) || !near(fig["smallThroughputRatioOfCapacityLeft"], with/base/(1-share)) {
		t.Errorf("throughput %g and %g tasks/min, ratio %g, of capacity left %g", base, with, fig["smallThroughputRatio"], fig["smallThroughputRatioOfCapacityLeft"])
	}
	// Utilization is the same count in core-seconds: tasks/min x 1 CPU x
	// 10 s / 60 s over 24 CPUs.
	for _, p := range []struct{ util, perMin string }{{"smallUtilizationBaseline", "smallTasksPerMinBaseline"}, {"smallUtilizationWithGangs", "smallTasksPerMinWithGangs"}} {
		if u := fig[p.util]; !near(u, fig[p.perMin]*10/60/24) || u > 1.2 {
			t.Errorf("%s %g from %s %g", p.util, u, p.perMin, fig[p.perMin])
		}
	}
}

func TestSpreadPointsCoverTheIntervalEvenly(t *testing.T) {
	for _, start := range []int{0, 7, 100_000} {
		var sum float64
		buckets := make([]int, 10)
		for k := start; k < start+200; k++ {
			p := spreadPoint(k)
			if p < 0 || p >= 1 {
				t.Fatalf("point %d = %g, outside [0, 1)", k, p)
			}
			sum += p
			buckets[int(p*10)]++
		}
		if m := sum / 200; math.Abs(m-0.5) > 0.01 {
			t.Errorf("from %d: mean %g, want 0.5 ± 0.01", start, m)
		}
		for i, n := range buckets {
			if n < 18 || n > 22 {
				t.Errorf("from %d: tenth %d holds %d of 200 points, want 20 ± 2", start, i, n)
			}
		}
	}
}

// A gang that never started counts as waiting until the window's end, is
// over the bound, and the wait figures say they are a lower bound.
func TestGangStreamUnstartedGangIsALowerBound(t *testing.T) {
	cfg := DefaultGangStreamConfig()
	cfg.TimeScale = 1
	r := newResult(ScenarioGang)
	with := &streamPhase{window: 10 * time.Minute, smallDone: 100, idleCoreSec: math.NaN(), gangs: []*streamGang{
		{arrived: 0, started: 30 * time.Second},
		{arrived: time.Minute, started: -1},
	}}
	reportGangStream(r, &cfg, with, with)
	for name, want := range map[string]float64{"gangsStarted": 1, "gangsNotStarted": 1, "gangsOverBound": 1,
		"gangWaitP50Sec": 30, "gangWaitMaxSec": 540, "gangCapacityShare": 30 * 64 * 8 / (1600 * 600.0)} {
		if got, _ := r.Figure(name); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	for _, f := range r.Figures {
		if f.Name == "gangWaitMaxSec" && !strings.Contains(f.Note, "LOWER BOUND: 1 gangs did not start") {
			t.Errorf("gangWaitMaxSec note %q does not say it is a lower bound", f.Note)
		}
	}
}

// The fragment mode, which the e2e smoke test no longer runs (it runs the
// default, stream): at a tiny size it completes, reports every figure and
// sees no gang run partially.
func TestGangFragmentScenario(t *testing.T) {
	cfg := DefaultGangConfig()
	cfg.Hosts, cfg.MinGang, cfg.MaxGang, cfg.GangsPerSize = 20, 8, 16, 1
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Gang(ctx, Env{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range gangFigures {
		if _, ok := r.Figure(name); !ok {
			t.Errorf("figure %s missing", name)
		}
	}
	if v, _ := r.Figure("gangs"); v != 2 {
		t.Errorf("gangs = %g, want 2 (one of 8, one of 16)", v)
	}
	if v, _ := r.Figure("partialGangsSeen"); v != 0 {
		t.Errorf("partialGangsSeen = %g: %q", v, r.Notes)
	}
}
