package advisor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// runsOf are n runs of job j that have run for elapsed, one core each.
func runsOf(prefix, j string, n int, elapsed time.Duration) []Run {
	var rs []Run
	for i := range n {
		rs = append(rs, Run{ID: fmt.Sprintf("%s-%d", prefix, i), Job: j, Elapsed: elapsed, CPU: 1})
	}
	return rs
}

// batchHost is a busy batch host holding rs.
func batchHost(name string, rs []Run) Host {
	h := host(name, "batch", 0.9, len(rs))
	h.Runs = rs
	for _, r := range rs {
		h.WorkAtRisk += r.Elapsed.Seconds() * r.CPU
		h.AllocatedCPU += r.CPU
	}
	return h
}

// learnHourRuns has c see 12 runs of job j end after an hour: the runs'
// distribution it learns.
func learnHourRuns(c *Core, j string) {
	s1 := host("s1", "stateless", 0.3, 1)
	c.Round(Input{Now: at(0), Hosts: []Host{s1, batchHost("b0", runsOf("old", j, 12, 59*time.Minute))}})
	c.Round(Input{Now: at(60), Hosts: []Host{s1, batchHost("b0", nil)}})
}

// With a drain window, the host to move is the one whose runs are expected
// to end within it, by the job's observed run times, though its runs have
// done more work than another host's: they lose nothing, the other's lose
// all they did.
func TestMoveTheHostWhoseRunsEndSoonest(t *testing.T) {
	cfg := testConfig()
	cfg.MoveDrain = 10 * time.Minute
	c := NewCore(cfg)
	learnHourRuns(c, "j")
	ending := batchHost("b1", runsOf("late", "j", 4, 55*time.Minute)) // 4 min left each
	young := batchHost("b2", runsOf("young", "j", 4, 20*time.Minute)) // 39 min left each
	if ending.WorkAtRisk <= young.WorkAtRisk {
		t.Fatal("the test wants the ending host to have done more work")
	}
	d := c.Round(Input{Now: at(120), Hosts: []Host{host("s1", "stateless", 0.95, 1), young, ending}})
	if len(d.Moves) != 1 || d.Moves[0].Host != "b1" || d.Moves[0].Drain != 10*time.Minute {
		t.Fatalf("moves %+v; want b1 with the 10 min window", d.Moves)
	}
	if r := d.Moves[0].Reason; !strings.Contains(r, "4 of 4 runs expected to end within the 10m0s drain window (from the job's observed run times) and left to finish, the rest drained at once: 0.0 core-hours of batch work expected lost, free in 4m0s") {
		t.Errorf("reason %q does not give the numbers", r)
	}
	if f := d.Moves[0].Finish; !slices.Equal(f, []string{"late-0", "late-1", "late-2", "late-3"}) {
		t.Errorf("runs to finish %v", f)
	}

	// Without the window every run is lost: the host whose runs did the
	// least goes, as before.
	cfg.MoveDrain = 0
	c = NewCore(cfg)
	learnHourRuns(c, "j")
	d = c.Round(Input{Now: at(120), Hosts: []Host{host("s1", "stateless", 0.95, 1), young, ending}})
	if len(d.Moves) != 1 || d.Moves[0].Host != "b2" || d.Moves[0].Drain != 0 {
		t.Fatalf("moves without a window %+v; want b2", d.Moves)
	}
}

// Too few runs seen to end: a run is guessed to go on as long again as it
// has run, and the reason says the figures are guessed.
func TestRunTimesGuessedUntilLearnt(t *testing.T) {
	var rt *runTimes
	if left, ok := rt.remaining(30 * time.Minute); ok || left != 30*time.Minute {
		t.Errorf("remaining with nothing learnt: %s %v", left, ok)
	}
	rt = &runTimes{}
	for i := range 20 {
		rt.add(time.Duration(10+i) * time.Minute) // 10..29 min
	}
	if left, ok := rt.remaining(15 * time.Minute); !ok || left != 8*time.Minute { // median of 16..29 is 23
		t.Errorf("remaining at 15 min: %s %v; want 8m", left, ok)
	}
	if _, ok := rt.remaining(28 * time.Minute); ok {
		t.Error("a run that outlived nearly all those seen has no estimate")
	}
	cfg := testConfig()
	cfg.MoveDrain = 5 * time.Minute
	c := NewCore(cfg)
	d := c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.95, 1), batchHost("b1", runsOf("r", "new", 2, time.Minute)), batchHost("b2", runsOf("q", "new", 3, time.Minute))}})
	if len(d.Moves) != 1 || !strings.Contains(d.Moves[0].Reason, "some guessed: too few run times observed") {
		t.Fatalf("moves %+v", d.Moves)
	}
}

// A run that leaves a host the advisor is moving was drained, not ended:
// it teaches nothing.
func TestDrainedRunsAreNotRunTimes(t *testing.T) {
	c := NewCore(testConfig())
	b := batchHost("b0", runsOf("r", "j", 12, time.Minute))
	c.Round(Input{Now: at(0), Hosts: []Host{host("s1", "stateless", 0.3, 1), b}})
	b.Runs, b.Target = nil, "stateless"
	c.Round(Input{Now: at(60), Hosts: []Host{host("s1", "stateless", 0.3, 1), b}})
	if rt := c.runTimes["j"]; rt != nil {
		t.Fatalf("learnt %v from drained runs", rt.seen)
	}
}
