// Package bench holds Peloton's benchmark scenarios: each one starts the
// whole stack in this process (cluster.Run on the sim backend, an embedded
// etcd in a temp dir, loopback listeners on ports the kernel picks), drives
// it through the public gRPC API as a user would, and reports a handful of
// figures as a Result. `peloton bench <scenario>` is the command line around
// it, and docs/benchmarks.md records what the scenarios measured, so every
// performance claim in the project is one command away from being checked.
//
// The placement scenario is the exception: it measures the pure placement
// core alone (placement.Place over a synthetic snapshot), without etcd or
// the API. The kubernetes scenario is the other: it starts a real
// kube-apiserver with kwok nodes (binaries from `make kube-tools`), runs
// kube-scheduler as a child process, and runs the stack on the kubernetes
// backend against that cluster. The control plane is the test harness
// internal/testing/kubetest, which bench does not import: it reaches it through
// KubeHarness, registered by bench/kubeharness in a peloton built with
// -tags kubebench, so that the release binary links no test code.
//
// What a scenario may read besides the API, and why: the in-process metrics
// registry (internal/metrics) for counters the API does not expose, such as
// preemption decisions and store writes, and the embedded etcd for the bytes
// a job costs at rest. It never reaches into a component's internals.
//
// Timing claims live here and in docs/benchmarks.md, never in test
// assertions. This package must not be imported by any component: only the
// CLI and tests import it.
package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenario names, as the CLI spells them.
const (
	ScenarioReclaim   = "reclaim"
	ScenarioBatch     = "batch"
	ScenarioLargeJob  = "large-job"
	ScenarioPlacement = "placement"
	ScenarioGang      = "gang"
	ScenarioUpdate    = "update"
	// ScenarioKubernetes runs against a real kube-apiserver with kwok nodes
	// (the binaries of `make kube-tools`), side by side with kube-scheduler.
	ScenarioKubernetes = "kubernetes"
)

// Scenario describes one benchmark: its name, a one-line summary and the
// figures every successful run at the default sizes reports (the smoke test
// checks them all; the kubernetes scenario's --qps and --bind-modes name
// its phases, and so its figures).
type Scenario struct {
	Name    string
	Short   string
	Figures []string
}

// Scenarios lists every scenario in the order the docs present them.
func Scenarios() []Scenario {
	return []Scenario{
		{ScenarioReclaim, "time for a starved pool to get its entitlement back by preemption", reclaimFigures},
		{ScenarioBatch, "throughput of many batch jobs of short tasks through the whole stack, against the store's own write ceiling measured in the same run", batchFigures},
		{ScenarioEngines, "the batch scenario with 1, 2 and 4 active-active placement engines in one run: launch rate and lease conflicts", enginesFigures},
		{ScenarioLargeJob, "cost of one very large job: submit latency, task creation, bytes at rest", largeJobFigures},
		{ScenarioPlacement, "the placement core alone on a synthetic host snapshot", placementFigures},
		{ScenarioGang, "64-member gangs of whole hosts arriving in a stream of small tasks: each gang's wait, reserved-but-idle capacity, small-task throughput against the stream alone (--scenario fragment: gang placement on a fragmented cluster)", gangStreamFigures()},
		{ScenarioUpdate, "a rolling update of a large service: scheduler overhead per batch", updateFigures},
		{ScenarioKubernetes, "pods bound and running on a real kube-apiserver with kwok nodes: raw ceiling, kube-scheduler and Peloton side by side", kubernetesFigures},
		{ScenarioFederation, "the federation over many in-process clusters: registry CPU and memory, pool propagation, job dispatch rate", federationFigures},
		{ScenarioAgentReports, "the stack taking the reports of many host agents (simulated hosts): CPU per report and the reports' delay", agentReportsFigures},
		{ScenarioHostAgent, "what a host agent costs its host: CPU and memory of `peloton serve hostagent` with many runs, and its reports' delay", hostAgentFigures},
		{ScenarioColocation, "a simulated day of services and batch: machines needed segregated vs co-located with the advisor, oversubscription and QoS, and the SLO kept", colocationFigures},
		{ScenarioLifetime, "many short batch jobs through a cluster that archives finished jobs after a short time to live: etcd size, memory, restart after kill -9, job list and archived reads, flat as the history grows", lifetimeFigures},
		{ScenarioMesos, "runs launched per second through Mesos offers on the protocol-level test master, next to the sim backend", mesosFigures},
	}
}

// Figure is one measured number.
type Figure struct {
	// Name is the camelCase key in the JSON output.
	Name  string
	Value float64
	// Unit is shown in the table only (the name already says it for JSON).
	Unit string
	// Note says what the number is compared with, e.g. a goal.
	Note string
}

// Param is one input of a run, echoed in the output so a result says how it
// was produced.
type Param struct {
	Name  string
	Value any
}

// Result is what one run of a scenario measured.
type Result struct {
	Scenario string
	Params   []Param
	Figures  []Figure
	// Notes say how something was measured, when the name cannot.
	Notes   []string
	Machine Machine
	Started time.Time
	Elapsed time.Duration
}

func newResult(scenario string) *Result {
	return &Result{Scenario: scenario, Machine: MachineInfo(), Started: time.Now()}
}

func (r *Result) param(name string, v any) { r.Params = append(r.Params, Param{name, v}) }

// figure is the value of the named figure, 0 if there is none.
func (r *Result) figure(name string) float64 {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value
		}
	}
	return 0
}

func (r *Result) add(name string, v float64, unit, note string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Note: note})
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Figure returns the named figure's value.
func (r *Result) Figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// finish stamps the elapsed time.
func (r *Result) finish() *Result {
	r.Elapsed = time.Since(r.Started)
	return r
}

// round3 keeps three decimals: the noise of every figure here is far larger.
func round3(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	return math.Round(v*1000) / 1000
}

// MarshalJSON writes the result as one JSON object with camelCase keys, the
// params and figures in the order the scenario reported them.
func (r *Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"scenario":`)
	writeJSON(&b, r.Scenario)
	b.WriteString(`,"startedAt":`)
	writeJSON(&b, r.Started.UTC().Format(time.RFC3339))
	b.WriteString(`,"elapsedMs":`)
	writeJSON(&b, r.Elapsed.Milliseconds())
	b.WriteString(`,"params":{`)
	for i, p := range r.Params {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, p.Name)
		b.WriteByte(':')
		writeJSON(&b, p.Value)
	}
	b.WriteString(`},"figures":{`)
	for i, f := range r.Figures {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, f.Name)
		b.WriteByte(':')
		v := round3(f.Value)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.WriteString("null") // JSON has no NaN; a missing figure is a bug the smoke test catches
		} else {
			b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	b.WriteString(`},"machine":`)
	m, err := json.Marshal(r.Machine)
	if err != nil {
		return nil, err
	}
	b.Write(m)
	if len(r.Notes) > 0 {
		b.WriteString(`,"notes":`)
		writeJSON(&b, r.Notes)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, v any) {
	j, err := json.Marshal(v)
	if err != nil {
		j, _ = json.Marshal(fmt.Sprint(v))
	}
	b.Write(j)
}

// WriteTable writes the result for people: the run's inputs and machine on
// top, then one figure per line.
func (r *Result) WriteTable(w io.Writer) error {
	params := make([]string, len(r.Params))
	for i, p := range r.Params {
		params[i] = fmt.Sprintf("%s=%v", p.Name, p.Value)
	}
	fmt.Fprintf(w, "scenario: %s %s\n", r.Scenario, strings.Join(params, " "))
	fmt.Fprintf(w, "machine:  %s\n", r.Machine)
	fmt.Fprintf(w, "run:      %s, started %s\n\n", r.Elapsed.Round(time.Millisecond), r.Started.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tNOTE")
	for _, f := range r.Figures {
		v := strconv.FormatFloat(round3(f.Value), 'f', -1, 64)
		if f.Unit != "" {
			v += " " + f.Unit
		}
		note := f.Note
		if note == "" {
			note = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, v, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// Machine is what a figure depends on besides the code.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpuModel"`
	MemoryMB   int64  `json:"memoryMb"`
	GoVersion  string `json:"goVersion"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	// Revision is the VCS revision the binary was built from, when the Go
	// toolchain stamped it (go build in a checkout does; go run and go test
	// do not), with "+dirty" for uncommitted changes.
	Revision string `json:"revision,omitempty"`
}

func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s, %.1f GiB, %s %s/%s",
		m.CPUs, m.GOMAXPROCS, m.CPUModel, float64(m.MemoryMB)/1024, m.GoVersion, m.OS, m.Arch)
	if m.Revision != "" {
		s += ", built from " + m.Revision
	}
	return s
}

// MachineInfo reads the machine's facts (Linux /proc; elsewhere the CPU model
// and memory stay unknown).
func MachineInfo() Machine {
	m := Machine{
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel: "unknown", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
	}
	if v := procField("/proc/cpuinfo", "model name", ':'); v != "" {
		m.CPUModel = v
	}
	if kb := procKB("/proc/meminfo", "MemTotal"); kb > 0 {
		m.MemoryMB = kb / 1024
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			m.Revision = rev + dirty
		}
	}
	return m
}

// procField returns the value of the first "key<sep> value" line of a /proc
// file, or "".
func procField(path, key string, sep byte) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), string(sep))
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// procKB reads a "Key:   123 kB" line of a /proc file; 0 if absent.
func procKB(path, key string) int64 {
	v := strings.TrimSuffix(procField(path, key, ':'), " kB")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

// PeakRSSMB is the process's peak resident set (VmHWM) in MiB, or 0 where
// /proc/self/status does not exist.
func PeakRSSMB() float64 { return float64(procKB("/proc/self/status", "VmHWM")) / 1024 }

// resetPeakRSS gives garbage back to the OS and restarts the kernel's peak
// RSS count (Linux 4.0+: "5" > /proc/self/clear_refs), so that a scenario's
// peakRssMb is its own even when an earlier scenario ran in this process.
// It reports whether the reset took.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// percentile is the nearest-rank percentile (0 < q <= 100) of xs; 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// mean is the arithmetic mean of xs; 0 for none.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
