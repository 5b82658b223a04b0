// Package promcheck reads what Peloton promises about its metrics - the
// metrics tables of docs/operations.md, the Grafana dashboards and the
// Prometheus alert rules in deploy/ - so that tests can hold each of them
// against the others and against a live /metrics. It is for tests; no
// daemon links it.
package promcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// DocMetric is one metric of a metrics table: a row names one or more
// metrics in backticks, their type, and their labels, each in backticks and
// optionally followed by "= v1, v2" (the values it takes, all of them).
type DocMetric struct {
	Name   string
	Type   string // counter, gauge, histogram
	Labels []string
	Values map[string][]string // label -> documented values, where listed
	Line   int
}

var backticked = regexp.MustCompile("`([^`]*)`")

// ParseDocTables reads every table of md whose header is
// "| metric | type | labels | ...".
func ParseDocTables(md string) ([]DocMetric, error) {
	var out []DocMetric
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= 3 && cells[0] == "metric" && cells[1] == "type" && cells[2] == "labels" {
			in = true
			continue
		}
		if !in || strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) < 3 {
			return nil, fmt.Errorf("line %d: a metrics row needs metric, type and labels: %q", n, line)
		}
		names := backticked.FindAllStringSubmatch(cells[0], -1)
		if len(names) == 0 {
			return nil, fmt.Errorf("line %d: no metric name in backticks: %q", n, cells[0])
		}
		typ := cells[1]
		switch typ {
		case "counter", "gauge", "histogram":
		default:
			return nil, fmt.Errorf("line %d: type %q is not counter, gauge or histogram", n, typ)
		}
		labels, values, err := parseLabels(cells[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		for _, nm := range names {
			out = append(out, DocMetric{Name: nm[1], Type: typ, Labels: labels, Values: values, Line: n})
		}
	}
	return out, sc.Err()
}

// parseLabels reads "`a`, `b` = x, y, `c`": labels a, b, c; b takes x and y.
func parseLabels(cell string) ([]string, map[string][]string, error) {
	var labels []string
	values := map[string][]string{}
	idx := backticked.FindAllStringSubmatchIndex(cell, -1)
	if len(idx) == 0 && strings.TrimSpace(cell) != "" {
		return nil, nil, fmt.Errorf("labels %q: name each in backticks", cell)
	}
	for i, m := range idx {
		name := cell[m[2]:m[3]]
		labels = append(labels, name)
		end := len(cell)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		rest := strings.TrimSpace(cell[m[1]:end])
		rest = strings.TrimSpace(strings.TrimSuffix(rest, ","))
		if rest == "" {
			continue
		}
		v, ok := strings.CutPrefix(rest, "=")
		if !ok {
			return nil, nil, fmt.Errorf("labels %q: after `%s` want `=` and its values, got %q", cell, name, rest)
		}
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				values[name] = append(values[name], x)
			}
		}
	}
	return labels, values, nil
}

// Family is one metric family of a scrape: its type and, per label name,
// the values seen.
type Family struct {
	Type   string // counter, gauge, histogram, summary, untyped
	Labels map[string]map[string]bool
}

// ParseScrape parses a /metrics answer in the Prometheus text format with
// Prometheus' own parser.
func ParseScrape(r io.Reader) (map[string]Family, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]Family{}
	for name, mf := range mfs {
		f := Family{Type: typeName(mf.GetType()), Labels: map[string]map[string]bool{}}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if f.Labels[lp.GetName()] == nil {
					f.Labels[lp.GetName()] = map[string]bool{}
				}
				f.Labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		out[name] = f
	}
	return out, nil
}

func typeName(t dto.MetricType) string {
	switch t {
	case dto.MetricType_COUNTER:
		return "counter"
	case dto.MetricType_GAUGE:
		return "gauge"
	case dto.MetricType_HISTOGRAM:
		return "histogram"
	case dto.MetricType_SUMMARY:
		return "summary"
	}
	return "untyped"
}

// SeriesNames are the names a query may select for a family: a histogram's
// _bucket, _sum and _count (and its own name, for native histograms).
func SeriesNames(name, typ string) []string {
	switch typ {
	case "histogram":
		return []string{name, name + "_bucket", name + "_sum", name + "_count"}
	case "summary":
		return []string{name, name + "_sum", name + "_count"}
	}
	return []string{name}
}

// Query is one PromQL expression and where it was found.
type Query struct {
	Where string
	Expr  string
}

// grafanaVar is a Grafana built-in interval variable; PromQL has no such
// syntax, so a duration stands in for it before parsing.
var grafanaVar = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

// labelValues is a Grafana template query, label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// DashboardQueries finds every PromQL expression of a Grafana dashboard:
// each target's expr (panels, rows' panels, at any depth) and each query
// variable's label_values selector.
func DashboardQueries(data []byte) ([]Query, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var out []Query
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if t, ok := v["title"].(string); ok && t != "" {
				where += "/" + t
			}
			if e, ok := v["expr"].(string); ok {
				out = append(out, Query{Where: where, Expr: e})
			}
			if v["type"] == "query" {
				q := v["query"]
				if m, ok := q.(map[string]any); ok {
					q = m["query"]
				}
				if s, ok := q.(string); ok {
					name, _ := v["name"].(string)
					if m := labelValues.FindStringSubmatch(s); m != nil {
						out = append(out, Query{Where: where + "/$" + name, Expr: m[1]})
					} else {
						out = append(out, Query{Where: where + "/$" + name, Expr: s})
					}
				}
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if k != "expr" {
					walk(v[k], where)
				}
			}
		case []any:
			for _, x := range v {
				walk(x, where)
			}
		}
	}
	walk(doc, "")
	return out, nil
}

// RuleQueries loads a Prometheus rule file with Prometheus' own rule
// parser, which also parses and checks every expression, and returns each
// rule's expression.
func RuleQueries(path string) ([]Query, *rulefmt.RuleGroups, error) {
	rgs, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%v", errs)
	}
	var out []Query
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, Query{Where: g.Name + "/" + name, Expr: r.Expr})
		}
	}
	return out, rgs, nil
}

// MetricNames parses expr with Prometheus' PromQL parser and returns the
// metric names it selects, sorted. A selector without a fixed name (a
// regular expression on __name__) is an error: it could not be checked.
func MetricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVar.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type.String() == "=" {
				name = m.Value
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s names no metric", vs)
			return nil
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	sort.Strings(names)
	return names, nil
}
