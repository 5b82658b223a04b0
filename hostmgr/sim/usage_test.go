package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/peloton-sched/peloton/internal/resources"
)

// TestHostUsageFollowsCurves: a simulated run uses the base fraction of
// what it asked for that it declares (or the default), swinging around it
// over a minute; revocable runs say so; ended runs use nothing.
func TestHostUsageFollowsCurves(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b := newStarted(t, Config{Clock: clock}, newRecorder().sink)
	dflt := spec("dflt", "sleep", "600")
	dflt.Resources = resources.Resources{MilliCPU: 2000, MemoryMB: 1000}
	busy := spec("busy", "sleep", "600")
	busy.Resources = resources.Resources{MilliCPU: 1000, MemoryMB: 1000}
	busy.Env = map[string]string{"PELOTON_SIM_CPU": "0.9", "PELOTON_SIM_MEMORY": "0.1", "PELOTON_REVOCABLE": "true", "PELOTON_PRIORITY": "7"}
	launch(t, b, dflt)
	launch(t, b, busy)
	host := dflt.Host

	seen := map[string]RunUsage{}
	minCPU, maxCPU := math.Inf(1), 0.0
	for range 60 {
		for _, u := range b.HostUsage(host, clock.Now()) {
			seen[u.TaskID] = u
			if u.TaskID == "dflt" {
				minCPU, maxCPU = min(minCPU, u.CPU), max(maxCPU, u.CPU)
			}
		}
		clock.Advance(time.Second)
	}
	// The default run: half of its 2 cores, ±25% over the minute.
	if minCPU < 0.75-1e-9 || maxCPU > 1.25+1e-9 || maxCPU-minCPU < 0.4 {
		t.Errorf("default run's CPU between %.3f and %.3f; want about 0.75 to 1.25", minCPU, maxCPU)
	}
	if u := seen["busy"]; !u.Revocable || u.Priority != 7 || u.CPU < 0.9*0.75 || u.CPU > 0.9*1.25 || u.MemoryMB > 125 {
		t.Errorf("the declared run: %+v", u)
	}
	if err := b.Kill(context.Background(), "busy", 0); err != nil {
		t.Fatal(err)
	}
	for _, u := range b.HostUsage(host, clock.Now()) {
		if u.TaskID == "busy" {
			t.Errorf("an ended run still uses %+v", u)
		}
	}
}
