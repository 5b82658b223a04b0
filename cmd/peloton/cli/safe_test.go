package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestJobInitSpecsAreCreated: the starter spec of every type is taken by
// `job create -f` unchanged, first as a dry run and then for real, and its
// instances run (a BATCH job's to success). /default reserves the hosts, as
// on `peloton up`, so that the STATEFUL one runs too.
func TestJobInitSpecsAreCreated(t *testing.T) {
	s := startStack(t, func(c *cluster.Config) { c.DefaultReservesHosts = true })
	for _, typ := range starterTypes() {
		out := s.ok("job", "init", "--type", typ)
		if !strings.HasPrefix(out, "# A "+strings.ToUpper(typ)+" job") {
			t.Errorf("job init --type %s starts %q; want a comment saying what it is", typ, strings.SplitN(out, "\n", 2)[0])
		}
		f := writeSpec(t, typ+".yaml", out)
		if dry := s.ok("job", "create", "-f", f, "--dry-run"); !strings.HasPrefix(dry, "dry run: job \"my-"+typ+"\"") {
			t.Errorf("job create --dry-run of the %s starter: %q", typ, dry)
		}
		id := strings.TrimSpace(s.ok("job", "create", "-f", f))
		want := pelotonv1.JobState_JOB_RUNNING
		if typ == "batch" {
			want = pelotonv1.JobState_JOB_SUCCEEDED
		}
		s.waitFor(60*time.Second, typ+" starter job "+want.String(), func() (bool, string) {
			var j pelotonv1.Job
			s.get(&j, "job", "get", id)
			return j.GetStatus().GetState() == want, j.GetStatus().GetState().String() + " " + j.GetStatus().GetMessage()
		})
		s.ok("job", "cancel", id)
	}
	s.fails(exitUsage, `Error: invalid --type "cron": want one of batch, daemon, service, stateful`, "job", "init", "--type", "cron")
}

// TestDryRunCommands: --dry-run on job create, job scale and update start
// prints what would happen, as the server answers it, and changes nothing;
// a bad request still fails naming the field.
func TestDryRunCommands(t *testing.T) {
	s := startStack(t)
	v1 := writeSpec(t, "v1.yaml", serviceYAML("300", 2))
	if out := s.ok("job", "create", "-f", v1, "--dry-run"); out != "dry run: job \"web\" (SERVICE, 2 instances, pool /default) would be created; nothing was stored\n" {
		t.Errorf("job create --dry-run printed %q", out)
	}
	var dry pelotonv1.CreateJobResponse
	s.get(&dry, "job", "create", "-f", v1, "--dry-run")
	if !dry.DryRun || dry.JobId != "" || dry.Spec.GetName() != "web" {
		t.Errorf("job create --dry-run -o json: %v", &dry)
	}
	if out := s.ok("job", "list"); strings.Contains(out, "web") {
		t.Errorf("job list after dry runs shows a job:\n%s", out)
	}
	bad := writeSpec(t, "bad.yaml", strings.Replace(serviceYAML("300", 2), "pool: /default", "pool: /nosuch", 1))
	s.fails(exitError, "Error: NotFound: spec.pool: ...", "job", "create", "-f", bad, "--dry-run")

	id := strings.TrimSpace(s.ok("job", "create", "-f", v1))
	s.waitRunning(id, 2)
	if out := s.ok("job", "scale", id, "3", "--dry-run"); out != "dry run: job "+id+" would have 3 instances, spec version 2; nothing was changed\n" {
		t.Errorf("job scale --dry-run printed %q", out)
	}
	v2 := writeSpec(t, "v2.yaml", serviceYAML("301", 2))
	want := "dry run: an update of job " + id + " would go from spec version 1 to 2, replacing 2 instances (batch size 1); nothing was created\n"
	if out := s.ok("update", "start", id, "-f", v2, "--dry-run"); out != want {
		t.Errorf("update start --dry-run printed %q, want %q", out, want)
	}
	renamed := writeSpec(t, "renamed.yaml", strings.Replace(serviceYAML("301", 2), "name: web", "name: other", 1))
	s.fails(exitError, "Error: InvalidArgument: spec.name: cannot change in an update...", "update", "start", id, "-f", renamed, "--dry-run")

	// REST: dryRun is a query parameter of POST /v1/jobs (whose body is
	// the spec) and a body field of the scale and the update.
	for _, c := range []struct{ path, body, want string }{
		{"/v1/jobs?dryRun=true", `{"name": "rest", "type": "BATCH", "pool": "/default", "instanceCount": 1, "defaultSpec": {"command": ["true"], "resources": {"cpu": 0.1, "memoryMb": 8}}}`, `"dryRun":true`},
		{"/v1/jobs/" + id + ":scale", `{"instanceCount": 4, "dryRun": true}`, `"specVersion":"2","dryRun":true`},
		{"/v1/jobs/" + id + "/updates", `{"spec": {"name": "web", "type": "SERVICE", "pool": "/default", "instanceCount": 1, "defaultSpec": {"command": ["sleep", "9"], "resources": {"cpu": 0.1, "memoryMb": 8}}}, "dryRun": true}`, `"dryRun":true`},
	} {
		resp, err := http.Post("http://"+s.http+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ReplaceAll(string(b), " ", ""), c.want) {
			t.Errorf("POST %s: %s %s; want 200 with %s", c.path, resp.Status, b, c.want)
		}
	}
	if out := s.ok("job", "list"); strings.Contains(out, "rest") {
		t.Errorf("job list after a REST dry run shows the job:\n%s", out)
	}

	var j pelotonv1.Job
	s.get(&j, "job", "get", id)
	if j.GetStatus().GetSpecVersion() != 1 || j.GetSpec().GetInstanceCount() != 2 {
		t.Errorf("after dry runs job %s is at version %d with %d instances; want 1 and 2", id, j.GetStatus().GetSpecVersion(), j.GetSpec().GetInstanceCount())
	}
	if out := s.ok("update", "list", "--job", id); strings.Contains(out, id) {
		t.Errorf("update list after a dry run:\n%s", out)
	}
}
