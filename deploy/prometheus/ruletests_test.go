package alerts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/internal/testing/promcheck"
)

// envPromtool names the promtool binary (the Makefile sets it; `make test`
// takes it out of Debian's prometheus package first).
const envPromtool = "PELOTON_PROMTOOL"

// ruleTests is the promtool unit-test file of alerts.yaml.
const ruleTests = "alerts.test.yaml"

func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envPromtool); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v; run `make promtool-tools`", envPromtool, p, err)
		}
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Skip("no promtool; run `make promtool-tools` (or `make test`, which does)")
	return ""
}

// TestAlertRulesOnData runs the alert rules' unit tests with promtool: each
// alert is evaluated on input series, and must fire, with the labels and
// annotations written there, exactly where the file says.
func TestAlertRulesOnData(t *testing.T) {
	bin := promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "test", "rules", ruleTests).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", ruleTests, err, out)
	}
}

// ruleTestFile is the part of a promtool test file the coverage check reads.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			AlertName string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `json:"exp_labels"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertHasCases: every alert of alerts.yaml has a case where it
// fires and one where it stays quiet: an evaluation that expects no alert,
// or an input series that no expected alert of that evaluation matches (a
// cool partition beside a hot one).
func TestEveryAlertHasCases(t *testing.T) {
	raw, err := os.ReadFile(ruleTests)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleTestFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", ruleTests, err)
	}
	if len(f.RuleFiles) != 1 || filepath.Clean(f.RuleFiles[0]) != "alerts.yaml" {
		t.Fatalf("%s tests %v; want alerts.yaml", ruleTests, f.RuleFiles)
	}
	_, rgs, err := promcheck.RuleQueries("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for i, tc := range f.Tests {
		var series []map[string]string
		for _, s := range tc.InputSeries {
			ls, err := parser.NewParser(parser.Options{}).ParseMetric(s.Series)
			if err != nil {
				t.Fatalf("%s: test %d: series %q: %v", ruleTests, i, s.Series, err)
			}
			series = append(series, ls.Map())
		}
		for _, e := range tc.AlertRuleTest {
			if len(e.ExpAlerts) == 0 {
				quiet[e.AlertName] = true
				continue
			}
			fires[e.AlertName] = true
			for _, s := range series {
				if !matchesAny(s, e.ExpAlerts) {
					quiet[e.AlertName] = true
				}
			}
		}
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] {
				t.Errorf("alert %s: no case in %s where it fires", r.Alert, ruleTests)
			}
			if !quiet[r.Alert] {
				t.Errorf("alert %s: no case in %s where it stays quiet", r.Alert, ruleTests)
			}
		}
	}
}

// matchesAny: some expected alert agrees with series s on every label
// both have.
func matchesAny(s map[string]string, exp []struct {
	ExpLabels map[string]string `json:"exp_labels"`
}) bool {
	for _, e := range exp {
		agree := true
		for k, v := range e.ExpLabels {
			if sv, ok := s[k]; ok && sv != v {
				agree = false
			}
		}
		if agree {
			return true
		}
	}
	return false
}
