package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLifetimeValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		edit func(*LifetimeConfig)
		flag string
	}{
		{func(c *LifetimeConfig) { c.Checkpoints = nil }, "--checkpoints"},
		{func(c *LifetimeConfig) { c.Checkpoints = []int{50, 10} }, "--checkpoints"},
		{func(c *LifetimeConfig) { c.Checkpoints = []int{10, 10} }, "--checkpoints"},
		{func(c *LifetimeConfig) { c.Checkpoints = []int{2_000_000} }, "--checkpoints"},
		{func(c *LifetimeConfig) { c.Hosts = 10 }, "--live-jobs"}, // 10,000 tasks of 0.1 CPU on 320 CPUs
		{func(c *LifetimeConfig) { c.TTL = -time.Second }, "--ttl"},
		{func(c *LifetimeConfig) { c.Rate = -1 }, "--rate"},
		{func(c *LifetimeConfig) { c.MaxInFlight = 0 }, "--max-in-flight"},
		{func(c *LifetimeConfig) { c.Instances = 0 }, "--instances"},
		{func(c *LifetimeConfig) { c.Samples = 0 }, "--samples"},
	} {
		c := DefaultLifetimeConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("config %+v: err %v, want one starting with %s", c, err, tc.flag)
		}
	}
	c := DefaultLifetimeConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("the default config is invalid: %v", err)
	}
}

func TestLifetimeFigureNames(t *testing.T) {
	for n, want := range map[int]string{10000: "10k", 200000: "200k", 1000000: "1m", 1500: "1500", 20: "20"} {
		if got := checkpointName(n); got != want {
			t.Errorf("checkpointName(%d) = %q, want %q", n, got, want)
		}
	}
	figs := LifetimeFigures([]int{10000, 50000, 200000})
	for _, f := range []string{"etcdDbBytes10k", "restartToReadyMs200k", "archivedGetMsP9950k", "etcdDbBytes200kOver10k", "jobListMsP99200kOver10k", "jobsCollected"} {
		if !slices.Contains(figs, f) {
			t.Errorf("figures lack %s: %q", f, figs)
		}
	}
	if one := LifetimeFigures([]int{20}); slices.ContainsFunc(one, func(f string) bool { return strings.Contains(f, "Over") }) {
		t.Errorf("one checkpoint has no ratios: %q", one)
	}
}

func TestLifetimeMetricSum(t *testing.T) {
	text := `# HELP peloton_store_db_bytes Size.
# TYPE peloton_store_db_bytes gauge
peloton_store_db_bytes{cluster="default"} 1.2e+06
peloton_store_db_bytes_total 7
peloton_store_db_in_use_bytes{cluster="default"} 5
peloton_jobs_collected_total 12
peloton_jobs_collected_total_other 3
`
	for name, want := range map[string]float64{"peloton_store_db_bytes": 1.2e6, "peloton_jobs_collected_total": 12, "peloton_absent": 0} {
		if got, err := metricSum(text, name); err != nil || got != want {
			t.Errorf("%s = %g, %v; want %g", name, got, err, want)
		}
	}
	if _, err := metricSum("peloton_x{a=\"b\"} notanumber\n", "peloton_x"); err == nil {
		t.Error("a bad value was read as a number")
	}
}
