package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The three built-in traces parse whole, cover the days their sources say,
// and scale to the peak asked for.
func TestBuiltinTraces(t *testing.T) {
	for name, want := range map[string]struct{ samples, days int }{
		"alibaba2018": {2243, 7}, // 7.8 days: the part day is left out
		"google2019":  {8064, 28},
		"azure2019":   {8640, 30},
	} {
		tr, err := LoadTrace(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.CPU) != want.samples || tr.Minutes() != want.days*dayMinutes || tr.Step != 300*time.Second {
			t.Errorf("%s: %d samples, %d minutes, step %s; want %d samples, %d days, 5m", name, len(tr.CPU), tr.Minutes(), tr.Step, want.samples, want.days)
		}
		if !strings.Contains(tr.Cite, "github.com/") || !strings.Contains(tr.Cite, "10.5281/zenodo.14564847") {
			t.Errorf("%s: citation %q lacks its source or the aggregation's DOI", name, tr.Cite)
		}
		loads := tr.scaled(1200)
		if top := slices.Max(loads); math.Abs(top-1200) > 1e-6 {
			t.Errorf("%s: scaled peak %g, want 1200", name, top)
		}
		if lo := slices.Min(loads); !(lo > 0 && lo < 1200) {
			t.Errorf("%s: scaled trough %g", name, lo)
		}
	}
	if _, err := LoadTrace("borg"); err == nil || !strings.Contains(err.Error(), "want one of cosine, alibaba2018, azure2019, google2019") {
		t.Errorf("unknown trace: %v", err)
	}
}

// Minutes between two samples are interpolated on the straight line.
func TestTraceInterpolates(t *testing.T) {
	tr := &Trace{Step: 10 * time.Minute, CPU: make([]float64, 144)}
	for i := range tr.CPU {
		tr.CPU[i] = float64(i % 2 * 10) // 0, 10, 0, 10, ...
	}
	got := tr.scaled(100)
	if len(got) != dayMinutes {
		t.Fatalf("%d minutes, want a day", len(got))
	}
	for m, want := range map[int]float64{0: 0, 5: 50, 10: 100, 13: 70, 20: 0, 1439: 100} {
		if math.Abs(got[m]-want) > 1e-9 {
			t.Errorf("minute %d: %g, want %g", m, got[m], want)
		}
	}
}

// A bad CSV is refused naming the file, the line and the column.
func TestParseTraceCSVErrors(t *testing.T) {
	for body, want := range map[string]string{
		"":                        "f.csv: empty; want a header line naming the column \"cpu\"",
		"load\n1\n":               "f.csv: line 1: no column \"cpu\" (the header has load)",
		"t,cpu\n0,1\n300,x\n":     "f.csv: line 3, column \"cpu\": \"x\" is not a number >= 0",
		"t,cpu\n0,1\n300,-2\n":    "f.csv: line 3, column \"cpu\": \"-2\" is not a number >= 0",
		"t,cpu\n0,NaN\n":          "f.csv: line 2, column \"cpu\": \"NaN\" is not a number >= 0",
		"t,cpu\n0,1\n":            "f.csv: 1 samples in column \"cpu\"; want at least 2",
		"t,cpu\n0,0\n1,0\n":       "f.csv: column \"cpu\" is 0 throughout",
		"t,cpu\n0,1\n300,2,3\n":   "f.csv: record on line 3: wrong number of fields",
		"t,cpu\n0,1\n300, 2 \n9,": "f.csv: line 4, column \"cpu\": \"\" is not a number >= 0",
	} {
		_, err := ParseTraceCSV(strings.NewReader(body), "f.csv", "cpu")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v; want %q", body, err, want)
		}
	}
}

// writeTrace writes a user's trace of days days: a daily wave, one sample
// every 5 minutes.
func writeTrace(t *testing.T, days int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("time,cpu\n")
	for i := range days * 288 {
		fmt.Fprintf(&b, "%d,%.3f\n", i*300, 50+40*math.Sin(2*math.Pi*float64(i)/288))
	}
	p := filepath.Join(t.TempDir(), "mine.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestColocationTraceFlags(t *testing.T) {
	short := writeTrace(t, 1)
	if err := os.WriteFile(short, []byte("time,cpu\n0,1\n300,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		f    func(*ColocationConfig)
		want string
	}{
		"unknown": {func(c *ColocationConfig) { c.Trace = "borg" }, "invalid --trace: unknown trace \"borg\""},
		"both":    {func(c *ColocationConfig) { c.Trace, c.TraceFile = "google2019", short }, "invalid --trace-file: give --trace or --trace-file, not both"},
		"short":   {func(c *ColocationConfig) { c.TraceFile = short }, "covers less than a day"},
		"missing": {func(c *ColocationConfig) { c.TraceFile = filepath.Join(t.TempDir(), "none.csv") }, "invalid --trace-file: open "},
		"column":  {func(c *ColocationConfig) { c.TraceFile, c.TraceColumn = short, "load" }, "line 1: no column \"load\""},
		"step":    {func(c *ColocationConfig) { c.TraceFile, c.TraceStep = short, 0 }, "invalid --trace-step 0s"},
	} {
		cfg := DefaultColocationConfig()
		c.f(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// On a trace the scenario runs every whole day, each with its backlog, and
// gives the same figures twice; the plot spans the days.
func TestColocationOnTraces(t *testing.T) {
	figures := func(c ColocationConfig) map[string]float64 {
		t.Helper()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		r, err := Colocation(context.Background(), Env{}, c)
		if err != nil {
			t.Fatal(err)
		}
		f := map[string]float64{}
		for _, x := range r.Figures {
			f[x.Name] = x.Value
		}
		return f
	}
	small := func() ColocationConfig {
		c := DefaultColocationConfig()
		c.HostCores, c.ServicePeakCores, c.BatchCoreHours = 16, 240, 2000
		return c
	}
	c := small()
	c.TraceFile, c.Plot = writeTrace(t, 3), filepath.Join(t.TempDir(), "days.svg")
	f := figures(c)
	if f["segregatedStateless"] != 20 || f["colocatedMachines"] > f["segregatedMachines"] {
		t.Errorf("figures %v", f)
	}
	// Three days of the backlog ran (plus what kills and moves threw away).
	if f["batchCoreHours"] < 3*2000 || f["lostToMovesCoreHours"] > f["lostCoreHours"] {
		t.Errorf("batch %g core-h (want >= 6000), lost to moves %g of %g", f["batchCoreHours"], f["lostToMovesCoreHours"], f["lostCoreHours"])
	}
	if g := figures(c); fmt.Sprint(g) != fmt.Sprint(f) {
		t.Errorf("two runs differ:\n%v\n%v", f, g)
	}
	svg, err := os.ReadFile(c.Plot)
	if err != nil || !strings.Contains(string(svg), "3 days of file mine.csv") || !strings.Contains(string(svg), "day 3") {
		t.Errorf("plot: %v %.200q", err, svg)
	}
	// A built-in trace runs whole at a small size.
	c = small()
	c.Trace = "alibaba2018"
	if f := figures(c); f["colocatedMachines"] == 0 || f["colocatedMachines"] > f["segregatedMachines"] {
		t.Errorf("alibaba2018: %v", f)
	}
}
