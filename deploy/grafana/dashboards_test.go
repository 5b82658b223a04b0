package grafana

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/promcheck"
)

// TestCommittedDashboardsAreGenerated: the JSON files are what the code
// here builds; after a change, run go generate ./deploy/grafana.
func TestCommittedDashboardsAreGenerated(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("%d dashboards", len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v (go generate ./deploy/grafana writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what dashboards.go builds: run go generate ./deploy/grafana", name)
		}
	}
}

// TestDashboardQueries parses every query of both dashboards with
// Prometheus' PromQL parser and checks each selects only metrics the docs
// list (the e2e metrics test checks them against a live /metrics), and
// that the dashboards are usable on any Prometheus: every query through
// the $datasource variable, every panel with a unit.
func TestDashboardQueries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := promcheck.ParseDocTables(string(data))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]bool{}
	for _, r := range rows {
		for _, n := range promcheck.SeriesNames(r.Name, r.Type) {
			docs[n] = true
		}
	}
	for _, name := range []string{"partition-health.json", "scheduling.json"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := promcheck.DashboardQueries(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(qs) < 15 {
			t.Errorf("%s: only %d queries", name, len(qs))
		}
		for _, q := range qs {
			names, err := promcheck.MetricNames(q.Expr)
			if err != nil {
				t.Errorf("%s %s: %v", name, q.Where, err)
			}
			for _, n := range names {
				if !docs[n] {
					t.Errorf("%s %s: %s is not a metric docs/operations.md lists", name, q.Where, n)
				}
			}
		}
		var d struct {
			Templating struct {
				List []struct{ Type, Name string } `json:"list"`
			} `json:"templating"`
			Panels []struct {
				Type, Title string
				Datasource  struct{ UID string } `json:"datasource"`
				FieldConfig struct {
					Defaults struct{ Unit string } `json:"defaults"`
				} `json:"fieldConfig"`
				Targets []struct {
					Datasource struct{ UID string } `json:"datasource"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Name != "datasource" {
			t.Errorf("%s: the first variable must be the data source: %+v", name, d.Templating.List)
		}
		for _, p := range d.Panels {
			if p.Type == "row" {
				continue
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s %q: no unit", name, p.Title)
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("%s %q: data source %q, want ${datasource}", name, p.Title, p.Datasource.UID)
			}
			for _, tg := range p.Targets {
				if tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s %q: a query's data source is %q", name, p.Title, tg.Datasource.UID)
				}
			}
		}
		if !strings.Contains(string(data), `"label_values(`) {
			t.Errorf("%s: no label variable ($partition or $cluster)", name)
		}
	}
}
