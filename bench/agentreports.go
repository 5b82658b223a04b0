package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScenarioAgentReports measures the stack taking many host agents' reports.
const ScenarioAgentReports = "agent-reports"

var agentReportsFigures = []string{"reportsPerSec", "processCpuPctOfCore", "cpuUsPerReport", "reportDelayP50Ms", "reportDelayP99Ms"}

// AgentReportsConfig sizes the agent-reports scenario: Hosts simulated
// hosts, each with a simulated agent (in this process, over loopback gRPC,
// the stack's own report path) and RunsPerHost runs whose use follows the
// sim backend's curves.
type AgentReportsConfig struct {
	Hosts, RunsPerHost int
	Interval           time.Duration
	Warmup, Window     time.Duration
}

// DefaultAgentReportsConfig is the size docs/benchmarks.md quotes.
func DefaultAgentReportsConfig() AgentReportsConfig {
	return AgentReportsConfig{Hosts: 5000, RunsPerHost: 4, Interval: 5 * time.Second, Warmup: 15 * time.Second, Window: 60 * time.Second}
}

// Validate names the first bad flag.
func (c *AgentReportsConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("invalid --hosts %d: must be 1 to %d", c.Hosts, maxHosts)
	case c.RunsPerHost < 0 || c.Hosts*c.RunsPerHost > maxInstances:
		return fmt.Errorf("invalid --runs-per-host %d: at most %d runs in all", c.RunsPerHost, maxInstances)
	case c.Interval < 100*time.Millisecond:
		return fmt.Errorf("invalid --interval %s: must be at least 100ms", c.Interval)
	case c.Warmup < 0:
		return fmt.Errorf("invalid --warmup %s: must be >= 0", c.Warmup)
	case c.Window < c.Interval:
		return fmt.Errorf("invalid --window %s: must be at least one --interval", c.Window)
	}
	return nil
}

// AgentReports runs the scenario. The process's CPU over the window
// covers both ends of every report (the agents' reading and sending, the
// stack's taking), so cpuUsPerReport is an upper bound of the stack's
// share; the delay is from each agent's reading to the stack taking it
// (peloton_host_usage_report_delay_seconds, interpolated in its buckets).
func AgentReports(ctx context.Context, env Env, cfg AgentReportsConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioAgentReports)
	r.param("hosts", cfg.Hosts)
	r.param("runsPerHost", cfg.RunsPerHost)
	r.param("intervalMs", cfg.Interval.Milliseconds())
	r.param("windowSec", cfg.Window.Seconds())
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, AgentInterval: cfg.Interval})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if n := cfg.Hosts * cfg.RunsPerHost; n > 0 {
		id, err := s.createJob(ctx, &pelotonv1.JobSpec{Name: "agent-reports", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: uint32(n),
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 256}}})
		if err != nil {
			return nil, err
		}
		env.progress("agent-reports: %d runs on %d hosts", n, cfg.Hosts)
		if err := s.waitRunning(ctx, id, uint32(n)); err != nil {
			return nil, err
		}
	}
	env.progress("agent-reports: warming up for %s", cfg.Warmup)
	if err := sleepCtx(ctx, cfg.Warmup); err != nil {
		return nil, err
	}
	taken0, delay0 := counterValue(metrics.HostReports.WithLabelValues("taken")), histogramOf()
	cpu0, t0 := processCPU(), time.Now()
	env.progress("agent-reports: measuring for %s", cfg.Window)
	if err := sleepCtx(ctx, cfg.Window); err != nil {
		return nil, err
	}
	cpu1, t1 := processCPU(), time.Now()
	taken := counterValue(metrics.HostReports.WithLabelValues("taken")) - taken0
	delay := histogramOf().minus(delay0)
	if taken == 0 {
		return nil, fmt.Errorf("bench: the stack took no report")
	}
	elapsed := t1.Sub(t0).Seconds()
	r.add("reportsPerSec", taken/elapsed, "/s", fmt.Sprintf("reports taken (%d hosts every %s would be %.0f/s)", cfg.Hosts, cfg.Interval, float64(cfg.Hosts)/cfg.Interval.Seconds()))
	r.add("processCpuPctOfCore", 100*(cpu1-cpu0).Seconds()/elapsed, "%", "the whole process: the agents' reading and sending and the stack taking, of one core")
	r.add("cpuUsPerReport", float64((cpu1-cpu0).Microseconds())/taken, "µs", "the process's CPU per report taken (an upper bound of the stack's share)")
	r.add("reportDelayP50Ms", 1000*delay.quantile(0.5), "ms", "from an agent's reading to the stack taking it")
	r.add("reportDelayP99Ms", 1000*delay.quantile(0.99), "ms", "the same, p99 (interpolated in the histogram's buckets)")
	return r.finish(), nil
}

// hist is a cumulative histogram's buckets (upper bound, count).
type hist struct {
	bounds []float64
	counts []float64
}

func histogramOf() hist {
	var m dto.Metric
	if metrics.HostReportDelay.Write(&m) != nil || m.Histogram == nil {
		return hist{}
	}
	var h hist
	for _, b := range m.Histogram.Bucket {
		h.bounds = append(h.bounds, b.GetUpperBound())
		h.counts = append(h.counts, float64(b.GetCumulativeCount()))
	}
	h.bounds = append(h.bounds, math.Inf(1))
	h.counts = append(h.counts, float64(m.Histogram.GetSampleCount()))
	return h
}

func (h hist) minus(o hist) hist {
	out := hist{bounds: h.bounds, counts: append([]float64(nil), h.counts...)}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile interpolates q in the buckets, as Prometheus' histogram_quantile
// does; past the last finite bound it answers that bound.
func (h hist) quantile(q float64) float64 {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return 0
	}
	rank := q * h.counts[len(h.counts)-1]
	lower, below := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return lower
			}
			if c == below {
				return h.bounds[i]
			}
			return lower + (h.bounds[i]-lower)*(rank-below)/(c-below)
		}
		lower, below = h.bounds[i], c
	}
	return lower
}
