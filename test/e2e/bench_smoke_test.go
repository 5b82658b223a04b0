package e2e

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/bench"
	// The kubernetes scenario needs the kube test harness, which only a
	// binary built with -tags kubebench links; a test may link it.
	_ "github.com/peloton-sched/peloton/bench/kubeharness"
	// So does the mesos scenario's test master (-tags mesosbench).
	_ "github.com/peloton-sched/peloton/bench/mesosharness"
	"github.com/peloton-sched/peloton/cmd/peloton/cli"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// benchSmokeArgs are tiny sizes of every scenario: enough to go through
// every step (fill, kill, preempt, launch, watch), small enough that all of
// them together take a few seconds.
var benchSmokeArgs = map[string][]string{
	bench.ScenarioReclaim:      {"--hosts", "4", "--host-cpu", "8", "--reclaim-delay", "200ms"},
	bench.ScenarioBatch:        {"--hosts", "20", "--tasks", "200", "--job-size", "50", "--poll", "20ms", "--ceiling-for", "500ms", "--ceiling-writers", "64"},
	bench.ScenarioEngines:      {"--hosts", "20", "--tasks", "200", "--job-size", "50", "--poll", "20ms", "--engines", "1,2,4"},
	bench.ScenarioLargeJob:     {"--tasks", "200", "--override-every", "10", "--hosts", "2", "--settle", "200ms"},
	bench.ScenarioPlacement:    {"--hosts", "20", "--tasks", "200", "--round", "50"},
	bench.ScenarioGang:         {"--hosts", "6", "--host-cpu", "4", "--gang-size", "3", "--gang-cpu", "4", "--small-task-seconds", "10", "--small-job-size", "10", "--gang-seconds", "10", "--gang-every", "20s", "--duration", "80s", "--gang-wait-bound", "20s", "--time-scale", "0.05", "--poll", "20ms"},
	bench.ScenarioUpdate:       {"--instances", "100", "--batch-size", "20", "--hosts", "10"},
	bench.ScenarioKubernetes:   {"--nodes", "20", "--pods", "100"},
	bench.ScenarioAgentReports: {"--hosts", "20", "--runs-per-host", "2", "--interval", "200ms", "--warmup", "300ms", "--window", "1s"},
	bench.ScenarioHostAgent:    {"--runs", "20", "--interval", "200ms", "--warmup", "300ms", "--window", "1s"},
	bench.ScenarioColocation:   {"--service-peak-cores", "200", "--batch-core-hours", "1500"},
	bench.ScenarioMesos:        {"--agents", "20", "--tasks", "200", "--concurrency", "32", "--stack-tasks", "100", "--stack-job-size", "50"},
	bench.ScenarioFederation: {"--registry-clusters", "3", "--registry-window", "1s", "--clusters", "4", "--pool-changes", "5",
		"--jobs", "20", "--concurrency", "8", "--services", "9", "--service-budget", "3", "--service-toleration", "1s",
		"--fair-share-window", "3s", "--fair-share-task", "1s", "--rebalance", "8", "--rebalance-budget", "2", "--timeout", "3m"}, // the services phase waits out a rollout and a failover
	bench.ScenarioLifetime: {"--hosts", "20", "--checkpoints", "20,40", "--live-jobs", "5", "--ttl", "500ms", "--max-in-flight", "15", "--samples", "10",
		"--timeout", "2m"}, // two checkpoints, each waiting out a reading of the store
}

// TestBenchScenariosSmoke runs every `peloton bench` scenario at a tiny size
// through the CLI, exactly as a user would, so the scenarios cannot rot. It
// checks only that each completes and reports every figure it declares:
// timing claims belong in docs/benchmarks.md, never in assertions.
func TestBenchScenariosSmoke(t *testing.T) {
	for _, sc := range bench.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			args, ok := benchSmokeArgs[sc.Name]
			if !ok {
				t.Fatalf("no smoke-test size for scenario %s; add one to benchSmokeArgs", sc.Name)
			}
			if sc.Name == bench.ScenarioHostAgent {
				// The agent runs as the daemon it is, from its own binary,
				// and from the peloton binary's serve hostagent.
				args = append(slices.Clone(args), "--agent-bin", buildHostAgent(t), "--full-bin", buildPeloton(t))
			}
			figures := sc.Figures
			if sc.Name == bench.ScenarioLifetime {
				// `peloton up` runs as a child process; its figures are
				// named by the checkpoints.
				args = append(slices.Clone(args), "--peloton-bin", buildPeloton(t))
				figures = bench.LifetimeFigures([]int{20, 40})
			}
			if sc.Name == bench.ScenarioKubernetes {
				// Like every kubetest user: skipped only where the binaries
				// are not built (make test always builds them).
				if _, err := kubetest.Tools(); err != nil {
					t.Skip(err.Error())
				}
				// Peloton runs as `peloton up` in a process of its own; this
				// test binary is not one.
				args = append(slices.Clone(args), "--peloton-bin", buildPeloton(t))
			}
			var out, errb bytes.Buffer
			root := cli.NewRootCommand(&out, &errb)
			root.SetArgs(append([]string{"bench", sc.Name, "-o", "json", "-q", "--timeout", "60s"}, args...))
			start := time.Now()
			if err := root.Execute(); err != nil {
				t.Fatalf("peloton bench %s: %v\nstderr:\n%s", sc.Name, err, errb.String())
			}
			t.Logf("%s took %s", sc.Name, time.Since(start).Round(time.Millisecond))
			var got struct {
				Scenario string              `json:"scenario"`
				Figures  map[string]*float64 `json:"figures"`
				Machine  map[string]any      `json:"machine"`
				Notes    []string            `json:"notes"`
			}
			dec := json.NewDecoder(strings.NewReader(out.String()))
			if err := dec.Decode(&got); err != nil || dec.More() {
				t.Fatalf("stdout is not one JSON object (%v):\n%s", err, out.String())
			}
			if got.Scenario != sc.Name {
				t.Errorf("scenario = %q, want %q", got.Scenario, sc.Name)
			}
			for _, f := range figures {
				if v, ok := got.Figures[f]; !ok || v == nil {
					t.Errorf("figure %s missing or not a number in %s", f, out.String())
				}
			}
			for _, k := range []string{"cpus", "cpuModel", "goVersion"} {
				if got.Machine[k] == nil {
					t.Errorf("machine.%s missing", k)
				}
			}
			for _, n := range got.Notes {
				t.Logf("note: %s", n)
			}
		})
	}
}
