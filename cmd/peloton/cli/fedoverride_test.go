package cli

import (
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestFedServiceOverrideCLI: a spec file's per-cluster override reaches
// the service; fed service get shows the fields it overrides (the table and
// -o yaml); fed service update with a spec file may change an override but
// not where the service runs, in the federation's words.
func TestFedServiceOverrideCLI(t *testing.T) {
	env := startFedEnv(t)
	env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"])
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"])
	env.waitFor(20*time.Second, "both clusters READY", func() (bool, string) {
		out := env.ok("cluster", "list")
		a, b := rowOf(out, "a"), rowOf(out, "b")
		return len(a) > 1 && a[1] == "CLUSTER_READY" && len(b) > 1 && b[1] == "CLUSTER_READY", out
	})
	spec := func(weight, command string) string {
		return "job:\n  name: web\n  type: SERVICE\n  pool: /default\n  instanceCount: 2\n" +
			"  defaultSpec: {command: [sleep, \"3600\"], env: {MODE: main}, resources: {cpu: 0.5, memoryMb: 64}}\n" +
			"placement:\n  clusters:\n  - {name: a, weight: " + weight + "}\n" +
			"  - {name: b, weight: 1, override: {command: [sleep, \"" + command + "\"], env: {MODE: canary}}}\n"
	}
	id := strings.TrimSpace(env.ok("fed", "service", "create", "-f", writeSpec(t, "svc.yaml", spec("1", "3602"))))
	out := env.ok("fed", "service", "get", id)
	if !strings.Contains(out, "CLUSTER   OVERRIDDEN") || rowOf(out, "b") == nil || !strings.Contains(out, "defaultSpec.command, defaultSpec.env.MODE") {
		t.Errorf("fed service get: no overridden fields for b in\n%s", out)
	}
	yaml := env.ok("fed", "service", "get", id, "-o", "yaml")
	for _, want := range []string{"overridden:", "- defaultSpec.command", "override:", "MODE: canary"} {
		if !strings.Contains(yaml, want) {
			t.Errorf("fed service get -o yaml: no %q in\n%s", want, yaml)
		}
	}
	env.fails(exitError, "Error: InvalidArgument: placement: an update may change the clusters' overrides only...",
		"fed", "service", "update", id, "-f", writeSpec(t, "moved.yaml", spec("2", "3602")))
	env.ok("fed", "service", "update", id, "-f", writeSpec(t, "v2.yaml", spec("1", "3603")))
	var s pelotonv1.FederatedService
	env.get(&s, "fed", "service", "get", id)
	if s.GetSpecVersion() != 2 || s.GetSpec().GetPlacement().GetClusters()[1].GetOverride().GetCommand()[1] != "3603" {
		t.Errorf("after the update: spec version %d, placement %v", s.GetSpecVersion(), s.GetSpec().GetPlacement())
	}
}
