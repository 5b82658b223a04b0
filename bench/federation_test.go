package bench

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFederationValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		change func(*FederationConfig)
		flag   string
	}{
		{func(c *FederationConfig) { c.RegistryClusters = -1 }, "--registry-clusters"},
		{func(c *FederationConfig) { c.RegistryWindow = 0 }, "--registry-window"},
		{func(c *FederationConfig) { c.Clusters = 0 }, "--clusters"},
		{func(c *FederationConfig) { c.PoolChanges = -1 }, "--pool-changes"},
		{func(c *FederationConfig) { c.Jobs = maxFedJobs + 1 }, "--jobs"},
		{func(c *FederationConfig) { c.Concurrency = 0 }, "--concurrency"},
		{func(c *FederationConfig) { c.HostsPerCluster = 0 }, "--hosts-per-cluster"},
		{func(c *FederationConfig) { c.Etcds = -1 }, "--etcds"},
		{func(c *FederationConfig) { c.Etcds = maxFedEtcds + 1 }, "--etcds"},
		{func(c *FederationConfig) { c.CheckEvery = 0 }, "--check-every"},
		{func(c *FederationConfig) { c.Services = 1 }, "--services"},
		{func(c *FederationConfig) { c.Services = 20; c.ServiceBudget = 0 }, "--service-budget"},
		{func(c *FederationConfig) { c.Services = 20; c.ServiceBudget = 5; c.ServiceToleration = 0 }, "--service-toleration"},
		{func(c *FederationConfig) { c.FairShareWindow = -time.Second }, "--fair-share-window"},
		{func(c *FederationConfig) { c.FairShareTask = 0 }, "--fair-share-task"},
		{func(c *FederationConfig) { c.Rebalance = -1 }, "--rebalance"},
		{func(c *FederationConfig) { c.Rebalance = 20; c.Clusters = 3 }, "--rebalance"},
		{func(c *FederationConfig) { c.Rebalance = 3 }, "--rebalance"},
		{func(c *FederationConfig) { c.Rebalance = 20; c.RebalanceBudget = 21 }, "--rebalance-budget"},
	} {
		c := DefaultFederationConfig()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("err %v, want one starting with %s", err, tc.flag)
		}
	}
	c := DefaultFederationConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("the default config is invalid: %v", err)
	}
	// Every phase can be skipped, and a skipped registry phase needs no window.
	c = FederationConfig{Clusters: 1, Jobs: 1, Concurrency: 1, HostsPerCluster: 1, CheckEvery: time.Second}
	if err := c.Validate(); err != nil {
		t.Errorf("dispatch alone: %v", err)
	}
}

// The whole scenario at tiny sizes: every figure is there and sane. How
// fast anything was is not checked here (timing claims live in the docs).
func TestFederationScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven cluster stacks")
	}
	cfg := FederationConfig{
		RegistryClusters: 3, RegistryWindow: 500 * time.Millisecond,
		Clusters: 4, PoolChanges: 5, Jobs: 20, Concurrency: 8,
		HostsPerCluster: 1, CheckEvery: time.Second,
		Services: 9, ServiceBudget: 3, ServiceToleration: time.Second,
		FairShareWindow: 3 * time.Second, FairShareTask: time.Second,
		Rebalance: 8, RebalanceBudget: 2,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var lines []string
	r, err := Federation(ctx, Env{Progress: func(s string) { lines = append(lines, s) }}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s\n\n%s", strings.Join(lines, "\n"), table.String())
	fig := func(name string) float64 {
		t.Helper()
		v, ok := r.Figure(name)
		if !ok {
			t.Fatalf("figure %s missing", name)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("figure %s = %g", name, v)
		}
		return v
	}
	for _, f := range federationFigures {
		fig(f)
	}
	if v := fig("registryClusters"); v != 3 {
		t.Errorf("registryClusters %g, want 3", v)
	}
	// The federation's CPU share is a difference of two noisy windows and
	// its RSS a difference of two readings: either may come out below 0.
	for _, f := range []string{"registryStartSec", "registryReadyMs", "registryBaselineCpuPctOfCore", "peakRssMb"} {
		if v := fig(f); v <= 0 {
			t.Errorf("%s = %g, want > 0", f, v)
		}
	}
	p50, p99, pmax := fig("propagationP50Ms"), fig("propagationP99Ms"), fig("propagationMaxMs")
	if p50 <= 0 || p50 > p99 || p99 > pmax {
		t.Errorf("propagation p50 %g, p99 %g, max %g: want 0 < p50 <= p99 <= max", p50, p99, pmax)
	}
	if c, d := fig("createJobsPerSec"), fig("dispatchJobsPerSec"); c <= 0 || d <= 0 {
		t.Errorf("createJobsPerSec %g, dispatchJobsPerSec %g: want both > 0", c, d)
	}
	if r50, r99 := fig("createToRunningP50Ms"), fig("createToRunningP99Ms"); r50 <= 0 || r50 > r99 {
		t.Errorf("createToRunning p50 %g, p99 %g: want 0 < p50 <= p99", r50, r99)
	}
	// 8 instances over 3 clusters (3, 3, 2), then 2 each over 4: one
	// moves from each of the first two.
	if v, m := fig("rebalanceBudgetViolations"), fig("rebalanceMoved"); v != 0 || m != 2 {
		t.Errorf("rebalanceBudgetViolations %g, rebalanceMoved %g: want 0 and 2", v, m)
	}
	if v := fig("rebalanceMinRunning"); v < 6 {
		t.Errorf("rebalanceMinRunning %g, below the count less the budget (6)", v)
	}
	if v := fig("serviceBudgetViolations"); v != 0 {
		t.Errorf("serviceBudgetViolations %g: the rollout took down more than the budget", v)
	}
	for _, f := range []string{"serviceCreateToRunningSec", "serviceRolloutSec"} {
		if v := fig(f); v <= 0 {
			t.Errorf("%s = %g, want > 0", f, v)
		}
	}
	// Equal shares, both pools asking more than half: half each.
	if v := fig("fairShareOtherEntitledPct"); math.Abs(v-50) > 1 {
		t.Errorf("fairShareOtherEntitledPct %g, want 50", v)
	}
	if v := fig("fairShareOtherDispatchedPct"); v <= 0 || v > 101 {
		t.Errorf("fairShareOtherDispatchedPct %g, want 0 < it <= 100: the pool got nothing, or more than its entitlement", v)
	}
	if len(lines) == 0 {
		t.Error("no progress reported")
	}
	if len(r.Notes) == 0 {
		t.Error("no notes: the figures' methods are not said")
	}
}

// TestFederationScenarioOnEtcdsOfTheirOwn: with --etcds, the federation and
// the clusters on etcds of their own (as in production), jobs dispatch.
func TestFederationScenarioOnEtcdsOfTheirOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two cluster stacks and three etcds")
	}
	cfg := DefaultFederationConfig()
	cfg.RegistryClusters, cfg.PoolChanges, cfg.FairShareWindow = 0, 0, 0
	cfg.Clusters, cfg.Jobs, cfg.Concurrency, cfg.HostsPerCluster, cfg.Etcds = 2, 10, 4, 1, 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Federation(ctx, Env{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Figure("dispatchJobsPerSec"); !ok || !(v > 0) {
		t.Errorf("dispatchJobsPerSec %g (%v), want > 0", v, ok)
	}
	if !slices.Contains(r.Params, Param{"etcds", 3}) {
		t.Errorf("params %v: want etcds 3", r.Params)
	}
}
