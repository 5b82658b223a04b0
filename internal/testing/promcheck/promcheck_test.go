package promcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseDocTables(t *testing.T) {
	md := "text\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `a_total` | counter | `x` = p, q | m |\n" +
		"| `b`, `c` | gauge | `pool`, `type` = r, s, `res` | m |\n" +
		"| `d_seconds` | histogram | | m |\n\n| other | table |\n| `e` | no |\n"
	got, err := ParseDocTables(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d rows: %+v", len(got), got)
	}
	if got[0].Name != "a_total" || got[0].Type != "counter" || !slices.Equal(got[0].Values["x"], []string{"p", "q"}) {
		t.Errorf("row a: %+v", got[0])
	}
	if got[2].Name != "c" || !slices.Equal(got[2].Labels, []string{"pool", "type", "res"}) ||
		!slices.Equal(got[2].Values["type"], []string{"r", "s"}) || got[2].Values["pool"] != nil {
		t.Errorf("row c: %+v", got[2])
	}
	if len(got[3].Labels) != 0 || got[3].Type != "histogram" {
		t.Errorf("row d: %+v", got[3])
	}
	for _, bad := range []string{
		"| metric | type | labels |\n|---|---|---|\n| a | gauge | |\n",         // no backticks
		"| metric | type | labels |\n|---|---|---|\n| `a` | meter | |\n",       // bad type
		"| metric | type | labels |\n|---|---|---|\n| `a` | gauge | `x` p |\n", // values without =
	} {
		if _, err := ParseDocTables(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// TestOperationsDocParses: the real tables parse, name each metric once,
// and list every advisor-set metric.
func TestOperationsDocParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParseDocTables(string(data))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Name] {
			t.Errorf("%s is documented twice", r.Name)
		}
		seen[r.Name] = true
	}
	if len(rows) < 40 {
		t.Errorf("only %d metrics documented", len(rows))
	}
}

func TestMetricNames(t *testing.T) {
	got, err := MetricNames(`histogram_quantile(0.99, sum by (le) (rate(a_bucket{p=~"$partition"}[$__rate_interval]))) / on() b + {__name__="c"} > bool 0 and time() - d offset 5m`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_bucket", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if _, err := MetricNames(`rate(a[5m]`); err == nil {
		t.Error("no error for a broken expression")
	}
	if _, err := MetricNames(`{__name__=~"peloton_.*"}`); err == nil {
		t.Error("no error for a selector with no fixed name")
	}
}

func TestDashboardQueries(t *testing.T) {
	js := `{"templating":{"list":[{"type":"datasource","name":"datasource","query":"prometheus"},
	  {"type":"query","name":"partition","query":{"query":"label_values(up{job=\"x\"}, partition)"}}]},
	  "panels":[{"type":"row","title":"R","panels":[{"title":"P","targets":[{"expr":"rate(a[5m])"}]}]},
	  {"title":"Q","targets":[{"expr":"b"},{"expr":"c"}]}]}`
	qs, err := DashboardQueries([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, q := range qs {
		exprs = append(exprs, q.Where+" "+q.Expr)
	}
	want := []string{"/R/P rate(a[5m])", "/Q b", "/Q c", `/$partition up{job="x"}`}
	slices.Sort(exprs)
	slices.Sort(want)
	if !slices.Equal(exprs, want) {
		t.Errorf("queries:\n%s\nwant:\n%s", strings.Join(exprs, "\n"), strings.Join(want, "\n"))
	}
}
