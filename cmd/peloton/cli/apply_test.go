package cli

import (
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestJobApply: apply creates a job, leaves an unchanged one alone, shows
// the diff of a change and rolls it out as an update (only the diff with
// --dry-run), refuses to change a BATCH job, and refuses a name that more
// than one unfinished job in the pool has, naming them.
func TestJobApply(t *testing.T) {
	s := startStack(t)
	v1 := writeSpec(t, "v1.yaml", strings.Replace(serviceYAML("300", 2), "pool: /default", "pool: default", 1))
	out := s.ok("job", "apply", "-f", v1)
	if !strings.Contains(out, "--- (none)\n+++ "+v1+"\n") || !strings.Contains(out, "+name: web\n") || !strings.Contains(out, "+pool: /default\n") {
		t.Errorf("job apply of a new job shows no creation diff:\n%s", out)
	}
	last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
	id, ok := strings.CutPrefix(strings.TrimSpace(last), "created job ")
	if !ok {
		t.Fatalf("job apply of a new job ends %q; want created job ID", last)
	}
	if out := s.ok("job", "apply", "-f", v1); out != "job "+id+" unchanged (spec version 1)\n" {
		t.Errorf("job apply of the same spec printed %q", out)
	}
	s.waitRunning(id, 2)

	v2 := writeSpec(t, "v2.yaml", serviceYAML("301", 2))
	diff := "--- job " + id + " (spec version 1)\n+++ " + v2 + "\n"
	out = s.ok("job", "apply", "-f", v2, "--dry-run")
	if !strings.HasPrefix(out, diff) || !strings.Contains(out, "\n-  - \"300\"\n+  - \"301\"\n") ||
		!strings.HasSuffix(out, "dry run: an update of job "+id+" would go from spec version 1 to 2, replacing 2 instances (batch size 1); nothing was created\n") {
		t.Errorf("job apply --dry-run printed:\n%s", out)
	}
	if out := s.ok("update", "list", "--job", id); strings.Contains(out, id) {
		t.Errorf("job apply --dry-run created an update:\n%s", out)
	}
	out = s.ok("job", "apply", "-f", v2)
	if !strings.HasPrefix(out, diff) || !strings.Contains(out, "of job "+id+": spec version 1 -> 2, 2 instances to replace") {
		t.Errorf("job apply of a change printed:\n%s", out)
	}
	var j pelotonv1.Job
	s.get(&j, "job", "get", id)
	if j.GetStatus().GetSpecVersion() != 2 || j.GetSpec().GetDefaultSpec().GetCommand()[1] != "301" {
		t.Errorf("after apply job %s is at version %d running %v", id, j.GetStatus().GetSpecVersion(), j.GetSpec().GetDefaultSpec().GetCommand())
	}

	batch := func(secs string) string {
		return strings.NewReplacer("name: web", "name: crunch", "type: SERVICE", "type: BATCH").Replace(serviceYAML(secs, 1))
	}
	b1 := writeSpec(t, "b1.yaml", batch("300"))
	out = s.ok("job", "apply", "-f", b1)
	bid := strings.TrimPrefix(strings.TrimSpace(out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]), "created job ")
	r := s.fails(exitError, "Error: job "+bid+" is a BATCH job, whose spec cannot be updated: cancel it and create the new spec, or change only its instance count with `job scale`",
		"job", "apply", "-f", writeSpec(t, "b2.yaml", batch("301")))
	if !strings.Contains(r.stdout, "-  - \"300\"\n+  - \"301\"\n") {
		t.Errorf("job apply of a changed BATCH job shows no diff:\n%s", r.stdout)
	}

	other := strings.TrimSpace(s.ok("job", "create", "-f", b1))
	first, second := bid, other
	r = s.run("job", "apply", "-f", b1)
	if r.code != exitError || !strings.Contains(r.stderr, `2 unfinished jobs are named "crunch" in pool /default: `) ||
		!strings.Contains(r.stderr, first) || !strings.Contains(r.stderr, second) {
		t.Errorf("job apply with two jobs of the name: exit %d, %q", r.code, r.stderr)
	}
}
