package cli

import (
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fed job wait reaches a state or fails fast; fed service update --wait
// and fed service watch follow a rollout cluster by cluster to its end.
func TestFedWaitAndRolloutWatch(t *testing.T) {
	env := startFedEnv(t)
	env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"])
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"])
	env.waitFor(20*time.Second, "both clusters READY", func() (bool, string) {
		out := env.ok("cluster", "list")
		a, b := rowOf(out, "a"), rowOf(out, "b")
		return len(a) > 1 && a[1] == "CLUSTER_READY" && len(b) > 1 && b[1] == "CLUSTER_READY", out
	})
	env.ok("fed", "pool", "create", "/w", "-f", writeSpec(t, "w.yaml", "reservation: {cpu: 4, memoryMb: 400}\n"))

	job := func(name, command string) string {
		return writeSpec(t, name+".yaml", "name: "+name+"\ntype: BATCH\npool: /w\ninstanceCount: 1\n"+
			"defaultSpec: {command: "+command+", resources: {cpu: 1, memoryMb: 64}}\n")
	}
	ok := strings.TrimSpace(env.ok("fed", "job", "create", "-f", job("ok", `[sleep, "1"]`)))
	out := env.ok("fed", "job", "wait", ok, "--for", "SUCCEEDED", "--timeout", "60s")
	if !strings.HasPrefix(out, "federated job "+ok+" is JOB_SUCCEEDED in cluster ") {
		t.Errorf("fed job wait: %q", out)
	}
	bad := strings.TrimSpace(env.ok("fed", "job", "create", "-f", job("bad", `[exit, "3"]`)))
	env.fails(exitUnreachable, "Error: federated job "+bad+" is JOB_FAILED in cluster ...", "fed", "job", "wait", bad, "--for", "SUCCEEDED", "--timeout", "60s")
	env.fails(exitUsage, `Error: invalid --for: unknown job state "later"...`, "fed", "job", "wait", bad, "--for", "later")

	svc := writeSpec(t, "svc.yaml", "job:\n  name: web\n  type: SERVICE\n  pool: /w\n  instanceCount: 2\n"+
		"  sla: {maximumUnavailableInstances: 2}\n  defaultSpec: {command: [sleep, \"3600\"], resources: {cpu: 0.5, memoryMb: 64}}\n")
	id := strings.TrimSpace(env.ok("fed", "service", "create", "-f", svc))
	if out := env.ok("fed", "service", "watch", id); out != "service "+id+" has no rollout\n" {
		t.Errorf("fed service watch with no rollout: %q", out)
	}
	env.waitFor(60*time.Second, "the service running", func() (bool, string) {
		var s pelotonv1.FederatedService
		env.get(&s, "fed", "service", "get", id)
		return s.GetRunning() == 2, s.String()
	})
	v2 := writeSpec(t, "v2.yaml", "name: web\ntype: SERVICE\npool: /w\ninstanceCount: 2\n"+
		"sla: {maximumUnavailableInstances: 2}\ndefaultSpec: {command: [sleep, \"3601\"], resources: {cpu: 0.5, memoryMb: 64}}\n")
	out = env.ok("fed", "service", "update", id, "-f", v2, "--wait", "--wait-timeout", "120s")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "service "+id+" rollout 1 (spec version 1 -> 2): ") ||
		!strings.HasPrefix(lines[len(lines)-1], "service "+id+" rollout 1 (spec version 1 -> 2): SUCCEEDED") {
		t.Errorf("fed service update --wait: want the rollout's lines, the last saying it SUCCEEDED; got\n%s", out)
	}
	for _, c := range []string{"a", "b"} {
		if !strings.Contains(out, "  cluster "+c+": DONE") {
			t.Errorf("fed service update --wait: no line with cluster %s DONE in\n%s", c, out)
		}
	}
	// Watching the rollout that ended prints where it ended, exit 0.
	if out := env.ok("fed", "service", "watch", id); !strings.Contains(out, "rollout 1 (spec version 1 -> 2): SUCCEEDED") {
		t.Errorf("fed service watch of an ended rollout: %q", out)
	}
}
