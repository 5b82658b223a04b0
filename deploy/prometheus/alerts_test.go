// Package alerts holds Peloton's Prometheus alert rules (alerts.yaml) and
// the test that validates them; test/e2e/metrics_test.go also holds every
// metric they use against a live /metrics.
package alerts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/promcheck"
)

// documented is every series name the metrics tables of docs/operations.md
// name (histograms with their _bucket, _sum and _count).
func documented(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := promcheck.ParseDocTables(string(data))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range rows {
		for _, n := range promcheck.SeriesNames(r.Name, r.Type) {
			out[n] = true
		}
	}
	return out
}

// TestAlertRules loads alerts.yaml with Prometheus' rule parser (which
// parses every expression and checks durations, names and templates), and
// checks that each alert says how bad it is and what happened, and selects
// only documented metrics.
func TestAlertRules(t *testing.T) {
	qs, rgs, err := promcheck.RuleQueries("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := documented(t)
	alerts := map[string]bool{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert", g.Name)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a summary and a description", r.Alert)
			}
		}
	}
	for _, want := range []string{"PelotonPartitionHot", "PelotonPartitionMovesStuck", "PelotonHostAgentStale",
		"PelotonServiceSLOBurn", "PelotonClusterUnreachable", "PelotonUnwrittenEvents", "PelotonPlacementsStuck"} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	for _, q := range qs {
		names, err := promcheck.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, n := range names {
			if !docs[n] {
				t.Errorf("%s: %s is not a metric docs/operations.md lists", q.Where, n)
			}
		}
	}
}

// TestAlertRulesRejectBadInput: the parser the test relies on does refuse a
// broken expression and an unknown field.
func TestAlertRulesRejectBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"expr.yaml":  "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]\n",
		"field.yaml": "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: x > 1\n    severity: warning\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := promcheck.RuleQueries(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
