package cli

import (
	"strings"
	"testing"
	"time"
)

// TestFederationScripting: -l on the federation's lists, id prefixes of
// federated jobs and services, -o name of their objects, and completion
// of clusters and federated job ids, against a real federation.
func TestFederationScripting(t *testing.T) {
	env := startFedEnv(t)
	env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"], "--labels", "region=east")
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"], "--labels", "region=west,zone=b")
	if got := env.ok("cluster", "list", "-l", "region=west", "-o", "name"); got != "cluster/b\n" {
		t.Errorf("cluster list -l region=west -o name: %q", got)
	}
	if got := env.ok("cluster", "list", "-l", "!zone", "--no-headers", "-o", "custom-columns=NAME:.name,REGION:.labels.region"); got != "a   east\n" {
		t.Errorf("cluster list -l !zone custom-columns: %q", got)
	}
	if got := env.ok("cluster", "get", "a", "--no-headers"); !strings.HasPrefix(got, "name:") {
		t.Errorf("cluster get --no-headers lost its first field: %q", got)
	}
	env.waitFor(10*time.Second, "both clusters READY", func() (bool, string) {
		out := env.ok("cluster", "list", "-o", "jsonpath={.clusters[*].state}")
		return out == "CLUSTER_READY CLUSTER_READY", out
	})

	data := writeSpec(t, "data.yaml", strings.Replace(sleeper, "labels: {}", "labels: {team: data}", 1))
	other := writeSpec(t, "other.yaml", sleeper)
	idData := strings.TrimSpace(env.ok("fed", "job", "create", "-f", data))
	env.ok("fed", "job", "create", "-f", other)
	if got := env.ok("fed", "job", "list", "-l", "team=data", "-o", "name"); got != "fedjob/"+idData+"\n" {
		t.Errorf("fed job list -l team=data -o name: %q", got)
	}
	if got := env.ok("fed", "job", "get", idData[:7], "-o", "jsonpath={.id}"); got != idData {
		t.Errorf("fed job get %s: %q", idData[:7], got)
	}
	if got := env.ok("__complete", "fed", "job", "kill", idData[:5]); !strings.Contains(got, idData+"\tsleeper") {
		t.Errorf("completion of a federated job id: %q", got)
	}
	if got := env.ok("__complete", "--cluster", ""); !strings.Contains(got, "a\nb\n") {
		t.Errorf("completion of --cluster: %q", got)
	}

	svcSpec := writeSpec(t, "svc.yaml", `placement:
  clusters:
  - {selector: {region: east}, weight: 1}
job:
  name: fed-web
  type: SERVICE
  pool: /default
  instanceCount: 1
  labels: {tier: web}
  defaultSpec:
    command: ["sleep", "3600"]
    resources: {cpu: 0.1, memoryMb: 32}
`)
	svc := strings.TrimSpace(env.ok("fed", "service", "create", "-f", svcSpec))
	if got := env.ok("fed", "service", "get", svc[:6], "-o", "name"); got != "fedservice/"+svc+"\n" {
		t.Errorf("fed service get %s -o name: %q", svc[:6], got)
	}
	if got := env.ok("fed", "service", "list", "-l", "nosuchlabel", "-o", "name"); got != "" {
		t.Errorf("fed service list -l nosuchlabel: %q", got)
	}
	if got := env.ok("fed", "service", "list", "-l", "tier=web", "-o", "name"); got != "fedservice/"+svc+"\n" {
		t.Errorf("fed service list -l tier=web: %q", got)
	}
	if got := env.ok("fed", "service", "delete", svc[:6], "-o", "name"); got != "fedservice/"+svc+"\n" {
		t.Errorf("fed service delete %s -o name: %q", svc[:6], got)
	}
}
