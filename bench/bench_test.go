package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPercentileIsNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ q, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}, {10, 1}, {11, 2}} {
		if got := percentile(xs, tc.q); got != tc.want {
			t.Errorf("p%g = %g, want %g", tc.q, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %g, want 0", got)
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its input in place")
	}
}

func TestScenarioFiguresAreCamelCaseAndUnique(t *testing.T) {
	camel := regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	names := map[string]bool{}
	for _, sc := range Scenarios() {
		if names[sc.Name] {
			t.Errorf("scenario %s listed twice", sc.Name)
		}
		names[sc.Name] = true
		if sc.Short == "" || len(sc.Figures) == 0 {
			t.Errorf("scenario %s: needs a summary and figures", sc.Name)
		}
		seen := map[string]bool{}
		for _, f := range sc.Figures {
			if !camel.MatchString(f) || seen[f] {
				t.Errorf("scenario %s: figure %q is not camelCase or is listed twice", sc.Name, f)
			}
			seen[f] = true
		}
	}
}

func sampleResult() *Result {
	r := newResult("demo")
	r.param("hosts", 20)
	r.param("taskCpu", 0.5)
	r.add("zFirst", 1.23456, "ms", "goal <= 2")
	r.add("aSecond", math.NaN(), "", "")
	r.add("peakRssMb", 12, "MiB", "")
	r.note("measured %s", "somehow")
	r.Elapsed = 1500 * time.Millisecond
	return r
}

func TestResultJSONIsOneCamelCaseObjectInReportOrder(t *testing.T) {
	b, err := json.Marshal(sampleResult())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	figs := got["figures"].(map[string]any)
	if figs["zFirst"] != 1.235 || figs["aSecond"] != nil || figs["peakRssMb"] != 12.0 {
		t.Errorf("figures = %v", figs)
	}
	// Report order, not sorted: zFirst comes before aSecond.
	if i, j := bytes.Index(b, []byte(`"zFirst"`)), bytes.Index(b, []byte(`"aSecond"`)); i < 0 || j < i {
		t.Errorf("figures out of report order: %s", b)
	}
	m := got["machine"].(map[string]any)
	for _, k := range []string{"cpus", "cpuModel", "goVersion", "memoryMb"} {
		if _, ok := m[k]; !ok {
			t.Errorf("machine lacks %s: %v", k, m)
		}
	}
	if got["scenario"] != "demo" || got["elapsedMs"] != 1500.0 || got["params"].(map[string]any)["taskCpu"] != 0.5 {
		t.Errorf("header = %v", got)
	}
	if n := got["notes"].([]any); len(n) != 1 || n[0] != "measured somehow" {
		t.Errorf("notes = %v", n)
	}
}

func TestResultTableShowsEveryFigure(t *testing.T) {
	var b bytes.Buffer
	if err := sampleResult().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"scenario: demo hosts=20 taskCpu=0.5", "machine:", "zFirst", "1.235 ms", "goal <= 2", "peakRssMb", "note: measured somehow"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestProcParsing(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, []byte("Name:\tpeloton\nVmHWM:\t  204800 kB\nVmRSS:\t  1024 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := procKB(status, "VmHWM"); got != 204800 {
		t.Errorf("VmHWM = %d kB, want 204800", got)
	}
	if got := procKB(status, "VmSwap"); got != 0 {
		t.Errorf("absent key = %d, want 0", got)
	}
	cpuinfo := filepath.Join(dir, "cpuinfo")
	if err := os.WriteFile(cpuinfo, []byte("processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := procField(cpuinfo, "model name", ':'); got != "Some CPU @ 2.0GHz" {
		t.Errorf("model name = %q", got)
	}
	if m := MachineInfo(); m.CPUs < 1 || m.GoVersion == "" || m.CPUModel == "" {
		t.Errorf("MachineInfo() = %+v", m)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	batch := DefaultBatchConfig()
	batch.JobSize = 0
	reclaim := DefaultReclaimConfig()
	reclaim.ReclaimDelay = 0
	big := DefaultReclaimConfig()
	big.Hosts = 10000 // half of 320,000 tasks is over one job's limit
	large := DefaultLargeJobConfig()
	large.Tasks = 100001
	place := DefaultPlacementConfig()
	place.GangSize = 0
	gang := DefaultGangConfig()
	gang.GangsPerSize = 100 // more gang members than the holes hold
	gangMin := DefaultGangConfig()
	gangMin.MinGang = 1
	engines := DefaultEnginesConfig()
	engines.Rounds = 0
	for _, tc := range []struct {
		name string
		err  error
		flag string
	}{
		{"batch", batch.Validate(), "--job-size"},
		{"reclaim", reclaim.Validate(), "--reclaim-delay"},
		{"reclaim default size", big.Validate(), "--tasks-per-pool"},
		{"large-job", large.Validate(), "--tasks"},
		{"placement", place.Validate(), "--gang-size"},
		{"gang fit", gang.Validate(), "--gangs-per-size"},
		{"gang min", gangMin.Validate(), "--min-gang"},
		{"engines rounds", engines.Validate(), "--rounds"},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.flag) {
			t.Errorf("%s: err %v, want one starting with %s", tc.name, tc.err, tc.flag)
		}
	}
	for _, err := range []error{
		ptr(DefaultBatchConfig()).Validate(), ptr(DefaultReclaimConfig()).Validate(), ptr(DefaultLargeJobConfig()).Validate(),
		ptr(DefaultPlacementConfig()).Validate(), ptr(DefaultGangConfig()).Validate(), ptr(DefaultEnginesConfig()).Validate(),
	} {
		if err != nil {
			t.Errorf("a default config is invalid: %v", err)
		}
	}
}

// The placement scenario is pure, so it can run here in full: every task
// fits, and the utilization is exactly what was placed.
func TestPlacementScenario(t *testing.T) {
	cfg := PlacementConfig{Hosts: 10, Tasks: 250, Round: 40, GangSize: 5, HostCPU: 32, HostMemoryMB: 4096, TaskCPU: 1, TaskMemoryMB: 128}
	var lines []string
	r, err := Placement(context.Background(), Env{Progress: func(s string) { lines = append(lines, s) }}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range placementFigures {
		if _, ok := r.Figure(f); !ok {
			t.Errorf("figure %s missing", f)
		}
	}
	if v, _ := r.Figure("placed"); v != 250 {
		t.Errorf("placed %g, want 250", v)
	}
	if v, _ := r.Figure("rounds"); v != 2 { // 50 gangs in rounds of 40
		t.Errorf("rounds %g, want 2", v)
	}
	if v, _ := r.Figure("hostUtilization"); math.Abs(v-250.0/320) > 1e-9 {
		t.Errorf("hostUtilization %g, want %g", v, 250.0/320)
	}
	if len(lines) == 0 {
		t.Error("no progress reported")
	}

	// A cluster too small leaves tasks unplaced rather than failing.
	cfg.Hosts = 1
	r, err = Placement(context.Background(), Env{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Figure("unplaced"); v != 250-30 { // 32 CPUs hold 6 gangs of 5
		t.Errorf("unplaced %g, want 220", v)
	}
}

func TestPlacementScenarioStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Placement(ctx, Env{}, DefaultPlacementConfig()); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("err = %v, want the context's", err)
	}
}

func TestCounterSumAddsEveryLabel(t *testing.T) {
	before := counterSum(testCounter)
	testCounter.WithLabelValues("a").Add(2)
	testCounter.WithLabelValues("b").Inc()
	if got := counterSum(testCounter) - before; got != 3 {
		t.Fatalf("sum grew by %g, want 3", got)
	}
}

var testCounter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_test_total", Help: "test"}, []string{"kind"})
