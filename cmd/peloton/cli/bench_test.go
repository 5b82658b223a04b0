package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/bench"
)

func TestBenchListsEveryScenario(t *testing.T) {
	r := runCLI(t, "", "bench")
	if r.code != exitOK {
		t.Fatalf("bench: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, sc := range bench.Scenarios() {
		if !strings.Contains(r.stdout, sc.Name) {
			t.Errorf("bench help does not list %s:\n%s", sc.Name, r.stdout)
		}
	}
	r = runCLI(t, "", "bench", "nope")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "nope"`) {
		t.Errorf("bench nope: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// Bad input is a usage error that names the flag, before anything starts
// (the runner in runCLI fails the test if a cluster is started).
func TestBenchRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "batch", "--hosts", "0"}, "--hosts"},
		{[]string{"bench", "batch", "--job-size", "200000"}, "--job-size"},
		{[]string{"bench", "reclaim", "--reclaim-delay", "0s"}, "--reclaim-delay"},
		{[]string{"bench", "large-job", "--tasks", "100001"}, "--tasks"},
		{[]string{"bench", "gang", "--scenario", "fragment", "--gangs-per-size", "100"}, "--gangs-per-size"},
		{[]string{"bench", "gang", "--scenario", "fragment", "--kill-fraction", "0"}, "--kill-fraction"},
		{[]string{"bench", "gang", "--scenario", "fragment", "--hosts", "0"}, "--hosts"},
		{[]string{"bench", "gang", "--scenario", "burst"}, "--scenario"},
		{[]string{"bench", "gang", "--gang-size", "1"}, "--gang-size"},
		{[]string{"bench", "gang", "--hosts", "10"}, "--gang-size"}, // 64 whole-host members on 10 hosts
		{[]string{"bench", "gang", "--host-cpu", "4"}, "--gang-cpu"},
		{[]string{"bench", "gang", "--time-scale", "0"}, "--time-scale"},
		{[]string{"bench", "gang", "--small-task-seconds", "0"}, "--small-task-seconds"},
		{[]string{"bench", "gang", "--poll", "0s"}, "--poll"},
		{[]string{"bench", "placement", "--timeout", "0s"}, "--timeout"},
		{[]string{"bench", "placement", "--log-level", "loud"}, "--log-level"},
		{[]string{"bench", "placement", "-o", "xml"}, "--output"},
		{[]string{"bench", "placement", "extra"}, "extra"},
		{[]string{"bench", "kubernetes", "--bind-modes", "binding,nodeName"}, "--bind-modes"},
		{[]string{"bench", "kubernetes", "--qps", "200,200"}, "--qps"},
		{[]string{"bench", "kubernetes", "--kwok-pod-workers", "-1"}, "--kwok-pod-workers"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.flag) {
			t.Errorf("peloton %q: exit %d, stderr %q; want exit 2 naming %s", tc.args, r.code, r.stderr, tc.flag)
		}
	}
}

// The placement scenario needs no stack, so the whole command path runs
// here: one JSON object on stdout with every figure, progress on stderr.
func TestBenchPlacementJSON(t *testing.T) {
	r := runCLI(t, "", "bench", "placement", "--hosts", "20", "--tasks", "200", "--round", "50", "-o", "json")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got struct {
		Scenario string             `json:"scenario"`
		Params   map[string]any     `json:"params"`
		Figures  map[string]float64 `json:"figures"`
		Machine  map[string]any     `json:"machine"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON object:\n%s", r.stdout)
	}
	if got.Scenario != "placement" || got.Params["hosts"] != 20.0 || got.Machine["goVersion"] == nil {
		t.Errorf("result = %+v", got)
	}
	for _, sc := range bench.Scenarios() {
		if sc.Name != "placement" {
			continue
		}
		for _, f := range sc.Figures {
			if _, ok := got.Figures[f]; !ok {
				t.Errorf("figure %s missing from %v", f, got.Figures)
			}
		}
	}
	if got.Figures["placed"] != 200 {
		t.Errorf("placed = %g, want 200", got.Figures["placed"])
	}
	if !strings.Contains(r.stderr, "placement: 200 gangs onto 20 hosts") {
		t.Errorf("no progress on stderr: %q", r.stderr)
	}

	r = runCLI(t, "", "bench", "placement", "--hosts", "20", "--tasks", "200", "-q")
	if r.code != exitOK || r.stderr != "" || !strings.Contains(r.stdout, "placementsPerSec") {
		t.Errorf("table with -q: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// The CLI's own build links no kube test harness (see
// cmd/peloton/deps_test.go): the kubernetes scenario then says how to get a
// binary that has it, before starting anything.
func TestBenchKubernetesWithoutHarness(t *testing.T) {
	r := runCLI(t, "", "bench", "kubernetes", "-q")
	if r.code != exitError || !strings.Contains(r.stderr, "go build -tags kubebench") {
		t.Errorf("bench kubernetes without the harness: exit %d, stderr %q; want exit 1 saying how to build one with it", r.code, r.stderr)
	}
}
