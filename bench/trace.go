package bench

import (
	"bytes"
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The load curves of public production traces (traces/README.md says where
// each comes from and how to cite it): whole-datacenter CPU use, one sample
// per 300 s.
//
//go:embed traces/*.csv
var traceFiles embed.FS

// TraceCosine is the model's own curve: one cosine day, no file.
const TraceCosine = "cosine"

// builtinTrace is one embedded trace: its file, the CPU column and the
// citation a published figure carries.
type builtinTrace struct {
	file, column, cite string
}

var builtinTraces = map[string]builtinTrace{
	"alibaba2018": {"alibaba2018-machine-usage-300s.csv", "cpu_util_percent",
		"Alibaba cluster-trace-v2018 (github.com/alibaba/clusterdata), mean CPU of ~4,000 co-located machines per 300 s"},
	"google2019": {"google2019-instance-usage-300s.csv", "avg_cpu",
		"Google ClusterData 2019 (github.com/google/cluster-data, CC-BY 4.0), mean Borg instance CPU per 300 s"},
	"azure2019": {"azure2019-vm-cpu-300s.csv", "cpu_usage",
		"Azure Public Dataset V2 (github.com/Azure/AzurePublicDataset, CC-BY 4.0), total VM CPU per 300 s"},
}

// traceAggregates is the citation of the aggregation every built-in trace
// went through.
const traceAggregates = "aggregated per 300 s by DataCenter-Traces-Datasets (DOI 10.5281/zenodo.14564847)"

// TraceNames are the names --trace takes.
func TraceNames() []string {
	names := []string{TraceCosine}
	for n := range builtinTraces {
		names = append(names, n)
	}
	slices.Sort(names[1:])
	return names
}

// Trace is a load curve: CPU samples Step apart, in any unit (the scenario
// scales them so that the largest is the services' peak).
type Trace struct {
	Name string
	// Cite is what a figure computed from it must say of its source.
	Cite string
	Step time.Duration
	CPU  []float64
}

// LoadTrace returns the built-in trace name.
func LoadTrace(name string) (*Trace, error) {
	b, ok := builtinTraces[name]
	if !ok {
		return nil, fmt.Errorf("unknown trace %q: want one of %s, or --trace-file", name, strings.Join(TraceNames(), ", "))
	}
	raw, err := traceFiles.ReadFile("traces/" + b.file)
	if err != nil {
		return nil, err
	}
	cpu, err := ParseTraceCSV(bytes.NewReader(raw), b.file, b.column)
	if err != nil {
		return nil, err
	}
	return &Trace{Name: name, Cite: b.cite + "; " + traceAggregates, Step: 300 * time.Second, CPU: cpu}, nil
}

// ParseTraceCSV reads the column of a CSV file with a header line: one
// sample per line, each a finite number >= 0. An error names the file, the
// line and the column.
func ParseTraceCSV(r io.Reader, file, column string) ([]float64, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty; want a header line naming the column %q, then one sample per line", file, column)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	col := slices.Index(header, column)
	if col < 0 {
		return nil, fmt.Errorf("%s: line 1: no column %q (the header has %s)", file, column, strings.Join(header, ", "))
	}
	var out []float64
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rec[col]), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("%s: line %d, column %q: %q is not a number >= 0", file, line, column, rec[col])
		}
		out = append(out, v)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("%s: %d samples in column %q; want at least 2", file, len(out), column)
	}
	if slices.Max(out) <= 0 {
		return nil, fmt.Errorf("%s: column %q is 0 throughout; want a load that rises above 0", file, column)
	}
	return out, nil
}

// Minutes is how many whole days of minutes the trace covers, each sample
// holding for one step (the scenario runs whole days, each with its own
// backlog; a part day at the end is left out).
func (t *Trace) Minutes() int {
	total := time.Duration(len(t.CPU)) * t.Step
	return int(total/(24*time.Hour)) * dayMinutes
}

// scaled is the trace's whole days in minute steps, linearly interpolated
// between its samples, and scaled so that its largest sample in them is
// peak.
func (t *Trace) scaled(peak float64) []float64 {
	n := t.Minutes()
	step := t.Step.Minutes()
	used := min(len(t.CPU), int(math.Ceil(float64(n)/step))+1)
	top := slices.Max(t.CPU[:used])
	out := make([]float64, n)
	for m := range out {
		pos := float64(m) / step
		i := int(pos)
		frac := pos - float64(i)
		v := t.CPU[min(i, len(t.CPU)-1)]
		if i+1 < len(t.CPU) {
			v += frac * (t.CPU[i+1] - t.CPU[i])
		}
		out[m] = peak * v / top
	}
	return out
}
