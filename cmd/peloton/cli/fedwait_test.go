package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// A service's rollout steps, kept with it, hold its update: fed service
// get says what the rollout waits for, fed service approve lets it go on
// (and refuses when nothing waits for approval).
func TestFedServiceApprove(t *testing.T) {
	env := startFedEnv(t)
	env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"])
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"])
	env.waitFor(20*time.Second, "both clusters READY", func() (bool, string) {
		out := env.ok("cluster", "list")
		a, b := rowOf(out, "a"), rowOf(out, "b")
		return len(a) > 1 && a[1] == "CLUSTER_READY" && len(b) > 1 && b[1] == "CLUSTER_READY", out
	})
	svc := writeSpec(t, "svc.yaml", "job:\n  name: web\n  type: SERVICE\n  pool: /default\n  instanceCount: 2\n"+
		"  sla: {maximumUnavailableInstances: 2}\n  defaultSpec: {command: [sleep, \"3600\"], resources: {cpu: 0.5, memoryMb: 64}}\n"+
		"rollout: {steps: [{clusters: [b], approval: true}]}\n")
	id := strings.TrimSpace(env.ok("fed", "service", "create", "-f", svc))
	env.waitFor(60*time.Second, "the service running", func() (bool, string) {
		var s pelotonv1.FederatedService
		env.get(&s, "fed", "service", "get", id)
		return s.GetRunning() == 2, s.String()
	})
	env.fails(exitError, "Error: FailedPrecondition: federated service "+id+" has no rollout (it was never updated)", "fed", "service", "approve", id)
	v2 := writeSpec(t, "v2.yaml", "name: web\ntype: SERVICE\npool: /default\ninstanceCount: 2\n"+
		"sla: {maximumUnavailableInstances: 2}\ndefaultSpec: {command: [sleep, \"3601\"], resources: {cpu: 0.5, memoryMb: 64}}\n")
	env.ok("fed", "service", "update", id, "-f", v2)
	env.waitFor(60*time.Second, "the rollout waiting for approval", func() (bool, string) {
		out := env.ok("fed", "service", "get", id)
		return regexp.MustCompile(`rollout waits for: +approval of step 1 \(clusters b\) \(peloton fed service approve\) \(since 20`).MatchString(out), out
	})
	out := env.ok("fed", "service", "approve", id)
	if !strings.Contains(out, "step 1 approved by the user") {
		t.Errorf("fed service approve:\n%s", out)
	}
	if out := env.ok("fed", "service", "watch", id); !strings.Contains(out, "rollout 1 (spec version 1 -> 2): SUCCEEDED") {
		t.Errorf("fed service watch after the approval: %q", out)
	}
	env.fails(exitError, "Error: FailedPrecondition: rollout 1 of federated service "+id+" is ROLLOUT_SUCCEEDED; it waits for no approval (waiting for: nothing)", "fed", "service", "approve", id)
}

// fed service watch's rollout line says what the rollout waits for.
func TestRolloutLinesWaiting(t *testing.T) {
	since := time.Date(2026, 1, 2, 12, 20, 0, 0, time.UTC)
	r := &pelotonv1.ServiceRollout{Id: 2, FromVersion: 1, ToVersion: 2, State: pelotonv1.RolloutState_ROLLOUT_ROLLING,
		Waiting: "soak of step 1 (clusters a) until 12:30:00 UTC", WaitingSince: timestamppb.New(since)}
	want := "service s-1 rollout 2 (spec version 1 -> 2): ROLLING; waits for soak of step 1 (clusters a) until 12:30:00 UTC (since 2026-01-02T12:20:00Z)"
	if got := rolloutLines("s-1", r)[0]; got != want {
		t.Errorf("rollout line:\n%s\nwant:\n%s", got, want)
	}
}

// fed service update's flags override the rollout field by field: only
// the flags given are sent, over the file's rollout; the federation fills
// the rest from the service's.
func TestRolloutFromFlags(t *testing.T) {
	var uf updateFlags
	var order []string
	var parallel uint32
	fs := pflag.NewFlagSet("update", pflag.ContinueOnError)
	uf.register(fs)
	fs.StringSliceVar(&order, "order", nil, "")
	fs.Uint32Var(&parallel, "parallel-clusters", 0, "")
	if err := fs.Parse([]string{"-f", "x.yaml", "--rollback-on-failure", "--batch-size", "2"}); err != nil {
		t.Fatal(err)
	}
	us, err := uf.spec(fs)
	if err != nil {
		t.Fatal(err)
	}
	file := &pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{{Clusters: []string{"a"}, Approval: true}}}
	rs := rolloutFromFlags(fs, file, us, order, parallel)
	if len(rs.Steps) != 1 || !rs.RollbackOnFailure || rs.Update.GetBatchSize() != 2 || rs.Update.GetRollbackOnFailure() || len(rs.Order) != 0 {
		t.Errorf("rollout %v", rs)
	}
	fs = pflag.NewFlagSet("update", pflag.ContinueOnError)
	uf = updateFlags{}
	uf.register(fs)
	_ = fs.Parse([]string{"-f", "x.yaml"})
	us, _ = uf.spec(fs)
	if rs := rolloutFromFlags(fs, nil, us, nil, 0); rs.Update != nil || rs.RollbackOnFailure {
		t.Errorf("no flags: %v", rs)
	}
}

// fed service rebalance starts the pending rebalance of a MANUAL service
// whose clusters changed; fed service get says what is pending and, after,
// what was moved; a service with nothing pending is refused, naming why.
func TestFedServiceRebalance(t *testing.T) {
	env := startFedEnv(t)
	env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"])
	svc := writeSpec(t, "svc.yaml", "job:\n  name: web\n  type: SERVICE\n  pool: /default\n  instanceCount: 2\n"+
		"  sla: {maximumUnavailableInstances: 1}\n  defaultSpec: {command: [sleep, \"3600\"], resources: {cpu: 0.5, memoryMb: 64}}\n"+
		"placement: {rebalance: MANUAL}\n")
	id := strings.TrimSpace(env.ok("fed", "service", "create", "-f", svc))
	env.fails(exitError, "Error: NotFound: federated service nope does not exist", "fed", "service", "rebalance", "nope")
	env.fails(exitError, "Error: FailedPrecondition: federated service "+id+" has no rebalance pending: its clusters are those of its last split (a)", "fed", "service", "rebalance", id)
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"])
	env.waitFor(30*time.Second, "the rebalance pending", func() (bool, string) {
		out := env.ok("fed", "service", "get", id)
		return regexp.MustCompile(`rebalance: +1: pending \(cluster b joins\), a=2 -> a=1 b=1, 0 moved`).MatchString(out) &&
			regexp.MustCompile("rebalance waits for: +`peloton fed service rebalance "+id+"` \\(placement.rebalance is MANUAL\\) \\(since 20").MatchString(out), out
	})
	env.ok("fed", "service", "rebalance", id)
	env.waitFor(60*time.Second, "the rebalance done", func() (bool, string) {
		out := env.ok("fed", "service", "get", id)
		return regexp.MustCompile(`rebalance: +1: DONE \(cluster b joins\), a=2 -> a=1 b=1, 1 moved`).MatchString(out), out
	})
}
