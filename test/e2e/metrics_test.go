package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/promcheck"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// scrape reads url (a /metrics) and parses it with Prometheus' parser.
func scrape(t *testing.T, url string) map[string]promcheck.Family {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	fams, err := promcheck.ParseScrape(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// missing says which of the documented metrics rows the scrape lacks (a
// family, or one of a label's documented values), skipping skip.
func missing(rows []promcheck.DocMetric, fams map[string]promcheck.Family, skip func(promcheck.DocMetric) bool) []string {
	var out []string
	for _, r := range rows {
		if skip(r) {
			continue
		}
		f, ok := fams[r.Name]
		if !ok {
			out = append(out, r.Name)
			continue
		}
		for l, vs := range r.Values {
			for _, v := range vs {
				if !f.Labels[l][v] {
					out = append(out, fmt.Sprintf("%s{%s=%q}", r.Name, l, v))
				}
			}
		}
	}
	return out
}

// TestMetricsMatchTheDocs starts `peloton up` (a cluster stack with two
// local hosts and their host agents, and the federation, in one fresh
// process), scrapes its /metrics over HTTP and holds it against the metrics
// tables of docs/operations.md, the dashboards of deploy/grafana and the
// alert rules of deploy/prometheus:
//
//   - before any work, every documented metric whose labels all take fixed,
//     documented values is there with each value (counters at 0, not only
//     after their first event);
//   - once the stack has a pool, a job and agents' reports, every
//     documented metric is there with exactly the documented labels, type
//     and values, and every peloton_* metric it exports is documented;
//   - every metric a dashboard or an alert selects is exported.
//
// The federation's series come from the same process (peloton up runs the
// federation in it, on the same registry) with its one cluster, "local",
// and so do the host advisor's (in observe mode, every 200ms), with a
// latency-sensitive service for its services' gauges.
func TestMetricsMatchTheDocs(t *testing.T) {
	md, err := os.ReadFile(repoPath("docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := promcheck.ParseDocTables(string(md))
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]promcheck.DocMetric{}
	for _, r := range rows {
		doc[r.Name] = r
	}

	bin := buildPeloton(t)
	d := startDaemon(t, "peloton up", bin, "peloton is ready: grpc ", "up", "--data-dir", t.TempDir(),
		"--hosts", "2", "--host-cpu", "2", "--host-memory-mb", "2048",
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--host-agent-interval", "200ms", "--advisor-mode", "observe", "--advisor-interval", "200ms", "--log-level", "warn")
	url := strings.TrimSuffix(d.http, ",") + "/metrics"
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("no loopback HTTP address in the ready line: %q", d.http)
	}

	// Before any work: what has no data labels is there, at every value.
	dataFree := func(r promcheck.DocMetric) bool {
		for _, l := range r.Labels {
			if len(r.Values[l]) == 0 {
				return false
			}
		}
		return true
	}
	start := scrape(t, url)
	testutil.Eventually(t, 10*time.Second, "the metrics without data labels in /metrics before any work", func() error {
		if m := missing(rows, start, func(r promcheck.DocMetric) bool { return !dataFree(r) }); len(m) > 0 {
			start = scrape(t, url)
			return fmt.Errorf("missing %v", m)
		}
		return nil
	})
	for _, c := range []string{`peloton_preemptions_total{reason="reclaim"} 0`, `peloton_update_restarts_total{how="in-place"} 0`} {
		name, lv, _ := strings.Cut(strings.TrimSuffix(c, " 0"), "{")
		l, v, _ := strings.Cut(strings.TrimSuffix(lv, "}"), "=")
		if !start[name].Labels[l][strings.Trim(v, `"`)] {
			t.Errorf("%s is not in /metrics before the first event", c)
		}
	}

	// Data: a job in /default (the pool), and the agents' reports.
	api, err := client.New(d.addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := api.Jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "metrics", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}}); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	// A latency-sensitive service: its SLO and where its P99 is read (the
	// advisor counts it from its runs, a reading or not).
	if _, err := api.Jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "metrics-web", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 1,
		Sla: &pelotonv1.SlaSpec{LatencySloMs: 200},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16},
			Ports:   []*pelotonv1.PortSpec{{Name: "http"}},
			Metrics: &pelotonv1.MetricsSpec{Port: "http", Path: "/metrics", LatencyHistogram: "request_seconds"}}}}); err != nil {
		t.Fatalf("CreateJob of the service: %v", err)
	}
	var fams map[string]promcheck.Family
	testutil.Eventually(t, 60*time.Second, "every documented metric in /metrics", func() error {
		fams = scrape(t, url)
		if m := missing(rows, fams, func(promcheck.DocMetric) bool { return false }); len(m) > 0 {
			return fmt.Errorf("missing %v", m)
		}
		return nil
	})

	// Labels, types and values exactly as documented.
	for _, r := range rows {
		f, ok := fams[r.Name]
		if !ok {
			continue // missing, reported above
		}
		if f.Type != r.Type {
			t.Errorf("%s: type %s, documented %s (docs/operations.md:%d)", r.Name, f.Type, r.Type, r.Line)
		}
		var got []string
		for l := range f.Labels {
			got = append(got, l)
		}
		sort.Strings(got)
		want := slices.Clone(r.Labels)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, documented %v (docs/operations.md:%d)", r.Name, got, want, r.Line)
		}
		for l, vs := range r.Values {
			var live []string
			for v := range f.Labels[l] {
				live = append(live, v)
			}
			sort.Strings(live)
			vs = slices.Clone(vs)
			sort.Strings(vs)
			if !slices.Equal(live, vs) {
				t.Errorf("%s: %s takes %v, documented %v (docs/operations.md:%d)", r.Name, l, live, vs, r.Line)
			}
		}
	}
	// Nothing of Peloton's undocumented.
	exported := map[string]bool{}
	for name, f := range fams {
		for _, n := range promcheck.SeriesNames(name, f.Type) {
			exported[n] = true
		}
		if strings.HasPrefix(name, "peloton_") {
			if _, ok := doc[name]; !ok {
				t.Errorf("%s is exported but not documented in docs/operations.md", name)
			}
		}
	}

	// Dashboards and alerts select only what is exported.
	var queries []promcheck.Query
	for _, name := range []string{"partition-health.json", "scheduling.json"} {
		data, err := os.ReadFile(repoPath(filepath.Join("deploy", "grafana", name)))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := promcheck.DashboardQueries(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, q := range qs {
			queries = append(queries, promcheck.Query{Where: name + " " + q.Where, Expr: q.Expr})
		}
	}
	rules, _, err := promcheck.RuleQueries(repoPath("deploy/prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	queries = append(queries, rules...)
	if len(queries) < 40 {
		t.Fatalf("only %d queries in the dashboards and alerts", len(queries))
	}
	for _, q := range queries {
		names, err := promcheck.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s: %s is not in /metrics", q.Where, n)
			}
		}
	}
}
