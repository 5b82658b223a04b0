package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServiceLoadCurve(t *testing.T) {
	c := DefaultColocationConfig()
	if got := c.ServiceLoad(4 * 60); math.Abs(got-0.3*1200) > 1e-6 {
		t.Errorf("load at 04:00 = %g, want the trough %g", got, 0.3*1200)
	}
	if got := c.ServiceLoad(16 * 60); math.Abs(got-1200) > 1e-6 {
		t.Errorf("load at 16:00 = %g, want the peak 1200", got)
	}
	for m := 0; m < dayMinutes; m += 7 {
		if l := c.ServiceLoad(m); l < 360-1e-6 || l > 1200+1e-6 {
			t.Fatalf("load at minute %d = %g, outside the trough and the peak", m, l)
		}
	}
}

// The scenario at a small size: the segregated fleet is sized as the model
// says, the co-located one is no larger and keeps the SLO, the run is the
// same twice, and the plot is written.
func TestColocationSmall(t *testing.T) {
	c := ColocationConfig{HostCores: 16, ServicePeakCores: 240, TroughFraction: 0.3, BatchCoreHours: 2000, BatchUse: 0.7, Seed: 1,
		Plot: filepath.Join(t.TempDir(), "day.svg")}
	get := func() map[string]float64 {
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
	f := get()
	if f["segregatedStateless"] != 20 { // 240 / (0.75 x 16)
		t.Errorf("segregated stateless %g, want 20", f["segregatedStateless"])
	}
	if f["colocatedMachines"] > f["segregatedMachines"] || f["sloViolationMinutesPct"] >= 1 || f["segregatedSloViolationMinutesPct"] != 0 {
		t.Errorf("figures %v: co-located larger than segregated, or the SLO broken", f)
	}
	if g := get(); g["colocatedMachines"] != f["colocatedMachines"] || g["moves"] != f["moves"] {
		t.Errorf("two runs differ: %v and %v", f, g)
	}
	svg, err := os.ReadFile(c.Plot)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "stateless hosts") {
		t.Errorf("plot: %v %.80q", err, svg)
	}
}

func TestColocationConfigValidate(t *testing.T) {
	for name, f := range map[string]func(*ColocationConfig){
		"cores":  func(c *ColocationConfig) { c.HostCores = 1 },
		"peak":   func(c *ColocationConfig) { c.ServicePeakCores = 0 },
		"trough": func(c *ColocationConfig) { c.TroughFraction = 1.5 },
		"batch":  func(c *ColocationConfig) { c.BatchCoreHours = -1 },
		"use":    func(c *ColocationConfig) { c.BatchUse = 0 },
	} {
		c := DefaultColocationConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
