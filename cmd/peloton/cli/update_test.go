package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// serviceYAML is a SERVICE job of n instances of `sleep secs` that allows
// one instance down at a time.
func serviceYAML(secs string, n int) string {
	return fmt.Sprintf(`name: web
type: SERVICE
pool: /default
instanceCount: %d
sla: {maximumUnavailableInstances: 1}
defaultSpec:
  command: ["sleep", "%s"]
  resources: {cpu: 0.1, memoryMb: 16}
  killGracePeriodSeconds: 1
  restartPolicy: {backoffSeconds: 1, maxBackoffSeconds: 2}
`, n, secs)
}

// tasks lists a job's tasks through the CLI.
func (s *stack) tasks(job string) []*pelotonv1.Task {
	s.t.Helper()
	var resp pelotonv1.ListTasksResponse
	s.get(&resp, "task", "list", job)
	return resp.GetTasks()
}

// waitRunning waits until the job has exactly n instances, all RUNNING.
func (s *stack) waitRunning(job string, n int) []*pelotonv1.Task {
	s.t.Helper()
	var ts []*pelotonv1.Task
	s.waitFor(60*time.Second, fmt.Sprintf("%d instances of %s running", n, job), func() (bool, string) {
		ts = s.tasks(job)
		var states []string
		running := 0
		for _, tk := range ts {
			states = append(states, tk.GetStatus().GetState().String())
			if tk.GetStatus().GetState() == pelotonv1.TaskState_RUNNING {
				running++
			}
		}
		return len(ts) == n && running == n, strings.Join(states, " ")
	})
	return ts
}

// rows splits a table into the fields of each line, header first.
func rows(out string) [][]string {
	var rs [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rs = append(rs, strings.Fields(l))
	}
	return rs
}

// TestUpdateCommandsOnAService drives every update command against the real
// stack: bad input first, then a paused update that is resumed, paused,
// watched and aborted, a plain update watched to the end, and its rollback.
func TestUpdateCommandsOnAService(t *testing.T) {
	s := startStack(t)
	v1 := writeSpec(t, "v1.yaml", serviceYAML("300", 3))
	v2 := writeSpec(t, "v2.yaml", serviceYAML("301", 3))
	v3 := writeSpec(t, "v3.yaml", serviceYAML("302", 3))
	renamed := writeSpec(t, "renamed.yaml", strings.Replace(serviceYAML("301", 3), "name: web", "name: api", 1))
	job := strings.TrimSpace(s.ok("job", "create", "-f", v1))
	s.waitRunning(job, 3)

	// Bad input. Flags and arguments are checked before any call and named;
	// the server's refusals are printed in its words.
	s.fails(exitUsage, "Error: missing --file (-f): the new job spec", "update", "start", job)
	s.fails(exitUsage, "Error: missing JOBID", "update", "start", "-f", v2)
	s.fails(exitUsage, "Error: invalid --batch-size 0: must be >= 1 (leave it out for the default, 1)",
		"update", "start", job, "-f", v2, "--batch-size", "0")
	s.fails(exitUsage, "Error: invalid --max-unavailable 0: must be >= 1 (leave it out for the default, --batch-size)",
		"update", "start", job, "-f", v2, "--max-unavailable", "0")
	s.fails(exitUsage, `Error: --batch-size: "-1" is not a non-negative integer`,
		"update", "start", job, "-f", v2, "--batch-size", "-1")
	s.fails(exitUsage, "Error: invalid --job-version 0: spec versions start at 1",
		"update", "start", job, "-f", v2, "--job-version", "0")
	s.fails(exitError, "Error: InvalidArgument: updateSpec.batchSize: at most the job's 3 instances, got 4",
		"update", "start", job, "-f", v2, "--batch-size", "4")
	s.fails(exitError, `Error: InvalidArgument: spec.name: cannot change in an update ("web" -> "api")`,
		"update", "start", job, "-f", renamed)
	s.fails(exitError, "Error: NotFound: job nope does not exist", "update", "start", "nope", "-f", v2)
	s.fails(exitError, "Error: Aborted: job "+job+" is at spec version 1, not 7; get it again and retry",
		"update", "start", job, "-f", v2, "--job-version", "7")
	s.fails(exitError, "Error: NotFound: update nope does not exist", "update", "get", "nope")
	s.fails(exitError, "Error: NotFound: update nope does not exist", "update", "watch", "nope", "--timeout", "5s")
	s.fails(exitError, "Error: NotFound: job nope does not exist", "update", "list", "--job", "nope")
	s.fails(exitUsage, "Error: invalid --timeout 0s: must be > 0", "update", "watch", "x", "--timeout", "0s")
	s.fails(exitUsage, "Error: missing UPDATEID", "update", "pause")
	if out := s.ok("update", "list", "-o", "json"); out != "{\n  \"updates\": []\n}\n" {
		t.Fatalf("a refused update left something behind: %s", out)
	}

	// Every flag reaches the server.
	var u pelotonv1.Update
	s.get(&u, "update", "start", job, "-f", v2, "--start-paused", "--batch-size", "2", "--max-unavailable", "1",
		"--in-place", "--rollback-on-failure", "--max-instance-retries", "2", "--max-tolerable-failures", "1",
		"--min-ready-seconds", "600", "--job-version", "1")
	want := &pelotonv1.UpdateSpec{BatchSize: 2, MaxUnavailable: 1, InPlace: true, RollbackOnFailure: true,
		MaxInstanceRetries: 2, MaxTolerableFailures: 1, StartPaused: true, MinReadySeconds: 600}
	if !proto.Equal(u.GetSpec(), want) || u.GetStatus().GetState() != pelotonv1.UpdateState_UPDATE_PAUSED ||
		u.GetFromVersion() != 1 || u.GetToVersion() != 2 || u.GetStatus().GetInstancesTotal() != 3 {
		t.Fatalf("update start -o json = %v; want spec %v, paused, 1 -> 2, 3 instances", &u, want)
	}
	paused := u.GetId()

	// One update at a time, and no scale beside it.
	s.fails(exitError, "Error: FailedPrecondition: job "+job+" has update "+paused+" in progress; abort it or wait for it to finish",
		"update", "start", job, "-f", v3)
	s.fails(exitError, "Error: FailedPrecondition: job "+job+" has update "+paused+" in progress; scale it in the update's spec, or wait",
		"job", "scale", job, "4")

	state := func(out string) string {
		t.Helper()
		rs := rows(out)
		if len(rs) != 2 || len(rs[1]) < 7 {
			t.Fatalf("want a header and one update, got:\n%s", out)
		}
		return rs[1][2]
	}
	// A unique prefix of an update id will do, as for job ids.
	if got := s.ok("update", "pause", paused[:8], "-o", "jsonpath={.id}"); got != paused {
		t.Errorf("update pause %s: %q, want %s", paused[:8], got, paused)
	}
	out := s.ok("update", "get", paused)
	rs := rows(out)
	if got, want := strings.Join(rs[0], " "), "ID JOB STATE VERSIONS DONE FAILED CURRENT MESSAGE"; got != want {
		t.Errorf("update get header = %q, want %q", got, want)
	}
	if got, want := strings.Join(rs[1], " "), paused+" "+job+" UPDATE_PAUSED 1->2 0/3 0 - created paused; resume it to start"; got != want {
		t.Errorf("update get row = %q, want %q", got, want)
	}
	if st := state(s.ok("update", "pause", paused)); st != "UPDATE_PAUSED" {
		t.Errorf("pausing a paused update: %s", st)
	}
	if st := state(s.ok("update", "resume", paused)); st != "UPDATE_ROLLING_FORWARD" {
		t.Errorf("resume: %s", st)
	}
	// min-ready-seconds 600 holds the first batch in place.
	s.waitFor(30*time.Second, "the first instance being replaced", func() (bool, string) {
		var cur pelotonv1.Update
		s.get(&cur, "update", "get", paused)
		return len(cur.GetStatus().GetInstancesCurrent()) > 0, protojson.Format(cur.GetStatus())
	})
	if st := state(s.ok("update", "pause", paused)); st != "UPDATE_PAUSED" {
		t.Errorf("pause: %s", st)
	}
	r := s.run("update", "watch", paused, "--timeout", "300ms")
	if r.code != exitError || r.stderr != "Error: update "+paused+" is UPDATE_PAUSED, 0/3 done (timed out after 300ms; the update goes on)\n" ||
		!strings.HasPrefix(r.stdout, "UPDATE_PAUSED 0/3 done, 0 failed, replacing ") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("watching a paused update: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if st := state(s.ok("update", "abort", paused)); st != "UPDATE_ABORTED" {
		t.Errorf("abort: %s", st)
	}
	r = s.fails(exitError, "Error: update "+paused+" is UPDATE_ABORTED: aborted by user", "update", "watch", paused)
	if r.stdout != "UPDATE_ABORTED 0/3 done, 0 failed: aborted by user\n" {
		t.Errorf("watching an aborted update printed %q", r.stdout)
	}
	s.fails(exitError, "Error: FailedPrecondition: update "+paused+" is UPDATE_ABORTED, not paused", "update", "resume", paused)
	s.fails(exitError, "Error: FailedPrecondition: update "+paused+" is UPDATE_ABORTED; only a rolling update can be paused", "update", "pause", paused)
	s.fails(exitError, "Error: FailedPrecondition: update "+paused+" is UPDATE_ABORTED; only an update in progress can be aborted", "update", "abort", paused)

	// A plain update: only its ID on stdout, the summary on stderr; watch
	// follows it to the end and exits 0.
	// It may roll back on failure; the rollback below is still the user's.
	r = s.run("update", "start", job, "-f", v3, "--rollback-on-failure")
	rolled := strings.TrimSpace(r.stdout)
	if r.code != exitOK || r.stdout != rolled+"\n" || len(rolled) != 36 ||
		r.stderr != "update "+rolled+" of job "+job+": spec version 2 -> 3, 3 instances to replace, batch size 1, UPDATE_ROLLING_FORWARD\n" {
		t.Fatalf("update start: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	out = s.ok("update", "watch", rolled, "--timeout", "60s")
	if !strings.HasSuffix(out, "UPDATE_SUCCEEDED 3/3 done, 0 failed\nupdate "+rolled+" is UPDATE_SUCCEEDED\n") {
		t.Errorf("update watch:\n%s", out)
	}
	for _, tk := range s.waitRunning(job, 3) {
		if v := tk.GetStatus().GetSpecVersion(); v != 3 {
			t.Errorf("instance %d runs spec version %d after the update, want 3", tk.GetInstanceId(), v)
		}
	}

	// Rolling back: a new version copying the one before; the user asked
	// for it, so watch exits 0 once it is rolled back.
	var back pelotonv1.Update
	s.get(&back, "update", "rollback", rolled)
	if back.GetRollbackVersion() != 4 || !slices.Contains([]pelotonv1.UpdateState{
		pelotonv1.UpdateState_UPDATE_ROLLING_BACK, pelotonv1.UpdateState_UPDATE_ROLLED_BACK}, back.GetStatus().GetState()) {
		t.Errorf("update rollback -o json = %v", &back)
	}
	r = s.run("update", "watch", rolled, "--timeout", "60s")
	if r.code != exitOK || !strings.Contains(r.stdout, "UPDATE_ROLLED_BACK 3/3 done, 0 failed") || !strings.HasSuffix(r.stdout, "update "+rolled+" is UPDATE_ROLLED_BACK, as asked\n") {
		t.Errorf("watching a rollback printed:\n%s", r.stdout)
	}
	s.fails(exitError, "Error: FailedPrecondition: update "+rolled+" is already UPDATE_ROLLED_BACK", "update", "rollback", rolled)
	s.fails(exitError, "Error: FailedPrecondition: job "+job+" moved on to spec version 4 since update "+paused+"; roll back the later change instead",
		"update", "rollback", paused)

	// Lists, newest first, in every format.
	rs = rows(s.ok("update", "list", "--job", job))
	if len(rs) != 3 || rs[1][0] != rolled || rs[1][3] != "2->3->4" || rs[2][0] != paused || rs[2][2] != "UPDATE_ABORTED" {
		t.Errorf("update list:\n%v", rs)
	}
	var list pelotonv1.ListUpdatesResponse
	y := s.ok("update", "list", "-o", "yaml")
	if js, err := yaml.YAMLToJSON([]byte(y)); err != nil || protojson.Unmarshal(js, &list) != nil || len(list.GetUpdates()) != 2 {
		t.Errorf("update list -o yaml: %v\n%s", err, y)
	}

	// The job's history: every version with its cause; -o yaml has the specs.
	rs = rows(s.ok("job", "versions", job))
	causes := []string{"created", "update " + paused, "update " + rolled, "rollback of update " + rolled}
	if len(rs) != len(causes)+1 || strings.Join(rs[0], " ") != "VERSION CREATED INSTANCES CAUSE" {
		t.Fatalf("job versions:\n%v", rs)
	}
	for i, c := range causes {
		if got := rs[i+1]; got[0] != fmt.Sprint(i+1) || got[2] != "3" || strings.Join(got[3:], " ") != c {
			t.Errorf("version %d: %v, want cause %q", i+1, got, c)
		}
	}
	var vs pelotonv1.ListJobVersionsResponse
	y = s.ok("job", "versions", job, "-o", "yaml")
	if js, err := yaml.YAMLToJSON([]byte(y)); err != nil || protojson.Unmarshal(js, &vs) != nil ||
		len(vs.GetVersions()) != 4 || vs.GetVersions()[2].GetSpec().GetDefaultSpec().GetCommand()[1] != "302" {
		t.Errorf("job versions -o yaml: %v\n%s", err, y)
	}

	// Each instance shows the version it runs.
	ts := s.waitRunning(job, 3)
	rs = rows(s.ok("task", "get", job, "0"))
	if got, want := strings.Join(rs[0], " "), "INSTANCE TASK ID STATE HOST EXIT REASON SPEC VERSION HEALTH BOUND HOST PORTS CPU USED MEM USED P99"; got != want {
		t.Errorf("task get header = %q, want %q", got, want)
	}
	// The instance's row, then its history.
	if len(rs) < 5 || rs[3][0] != "HISTORY" || len(rs[1]) != 13 || rs[1][1] != ts[0].GetTaskId() || rs[1][6] != "4" || rs[1][7] != "-" || rs[1][9] != "-" {
		t.Errorf("task get: %v", rs)
	}
	rs = rows(s.ok("task", "list", job, "-o", "wide"))
	if got := strings.Join(rs[0], " "); got != "INSTANCE TASK ID STATE HOST EXIT REASON GOAL RUN FAILURES SPEC VERSION HEALTH BOUND HOST PORTS CPU USED MEM USED P99 MESSAGE" {
		t.Errorf("task list -o wide header = %q", got)
	}
	for _, r := range rs[1:] {
		// Fields: instance, task ID, state, host, exit, reason, goal, run,
		// failures, spec version, ...
		if len(r) < 10 || r[9] != "4" {
			t.Errorf("task list -o wide row %v: want spec version 4", r)
		}
	}
}

// TestJobScaleAndVersions scales a service up and down, with and without a
// version check, reads its history, and refuses bad input in the flag's or
// the server's words.
func TestJobScaleAndVersions(t *testing.T) {
	s := startStack(t)
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "web.yaml", serviceYAML("300", 3))))
	s.waitRunning(job, 3)

	if out := s.ok("job", "scale", job, "5"); out != "job "+job+": 5 instances, spec version 2\n" {
		t.Errorf("job scale: %q", out)
	}
	for _, tk := range s.waitRunning(job, 5) {
		if want := uint64(1 + tk.GetInstanceId()/3); tk.GetStatus().GetSpecVersion() != want {
			t.Errorf("instance %d runs spec version %d, want %d", tk.GetInstanceId(), tk.GetStatus().GetSpecVersion(), want)
		}
	}
	s.fails(exitError, "Error: Aborted: job "+job+" is at spec version 2, not 1; get it again and retry",
		"job", "scale", job, "2", "--version", "1")
	var resp pelotonv1.ScaleJobResponse
	s.get(&resp, "job", "scale", job, "2", "--version", "2")
	if resp.GetSpecVersion() != 3 {
		t.Errorf("job scale -o json: %v", &resp)
	}
	s.waitRunning(job, 2)

	s.fails(exitError, "Error: InvalidArgument: instanceCount: must be > 0 (cancel the job to stop every instance)", "job", "scale", job, "0")
	s.fails(exitError, "Error: NotFound: job nope does not exist", "job", "scale", "nope", "2")
	s.fails(exitUsage, `Error: invalid COUNT "two": want a number of instances`, "job", "scale", job, "two")
	s.fails(exitUsage, "Error: invalid --version 0: spec versions start at 1", "job", "scale", job, "3", "--version", "0")
	s.fails(exitUsage, "Error: missing COUNT", "job", "scale", job)

	rs := rows(s.ok("job", "versions", job))
	want := [][]string{{"1", "3", "created"}, {"2", "5", "scaled from 3 to 5 instances"}, {"3", "2", "scaled from 5 to 2 instances"}}
	if len(rs) != len(want)+1 {
		t.Fatalf("job versions:\n%v", rs)
	}
	for i, w := range want {
		if got := rs[i+1]; got[0] != w[0] || got[2] != w[1] || strings.Join(got[3:], " ") != w[2] {
			t.Errorf("version row %v, want %v", got, w)
		}
	}
	if out := s.ok("job", "versions", job, "-o", "wide"); !strings.Contains(out, "COMMAND") || strings.Count(out, "sleep 300") != 3 {
		t.Errorf("job versions -o wide:\n%s", out)
	}
	s.fails(exitError, "Error: NotFound: job nope does not exist", "job", "versions", "nope")

	// Batch jobs are scaled, not updated.
	hello := strings.TrimSpace(s.ok("job", "create", "-f", "../../../examples/hello.yaml"))
	s.fails(exitError, "Error: FailedPrecondition: job "+hello+" is BATCH; updates roll out SERVICE, STATEFUL and DAEMON jobs (scale a batch job with `job scale`)",
		"update", "start", hello, "-f", "../../../examples/hello.yaml")
}
