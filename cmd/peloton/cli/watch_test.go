package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// background runs the CLI against the stack in ctx, as Ctrl-C would end
// it when ctx is cancelled; the result comes on the channel.
func (s *stack) background(ctx context.Context, args ...string) (*syncBuffer, <-chan result) {
	out, errb := &syncBuffer{}, &syncBuffer{}
	a := newApp(out, errb)
	a.getenv = func(string) string { return "" }
	a.poll = 10 * time.Millisecond
	a.updatePoll = 20 * time.Millisecond
	done := make(chan result, 1)
	go func() {
		root := a.rootCommand()
		root.SetArgs(append([]string{"--server", s.addr}, args...))
		_, err := root.ExecuteContextC(ctx)
		done <- result{stdout: out.String(), stderr: errb.String(), code: exitCode(err)}
	}()
	return out, done
}

// until waits for the background command's output to hold want, then
// ends it as Ctrl-C would, and returns what it did.
func (s *stack) until(within time.Duration, cancel context.CancelFunc, out *syncBuffer, done <-chan result, want func(string) bool) result {
	s.t.Helper()
	testutil.Eventually(s.t, within, "watch output", func() bool {
		select {
		case r := <-done:
			s.t.Fatalf("the watch ended by itself: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		default:
		}
		return want(out.String())
	})
	cancel()
	return <-done
}

const batchYAML = `name: short
type: BATCH
pool: /default
instanceCount: 2
defaultSpec:
  command: ["sleep", "1"]
  resources: {cpu: 0.1, memoryMb: 16}
`

// task list --watch and job get --watch print the state, then the changes
// as they come, until Ctrl-C, which ends them with exit 0; -o yaml prints a
// document per change; --timeout bounds a watch.
func TestWatchCommandsOnAStack(t *testing.T) {
	s := startStack(t)
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "short.yaml", batchYAML)))

	ctx, cancel := context.WithCancel(context.Background())
	tasksOut, tasksDone := s.background(ctx, "task", "list", job, "--watch")
	ctx2, cancel2 := context.WithCancel(context.Background())
	jobOut, jobDone := s.background(ctx2, "job", "get", job, "-w", "-o", "yaml")

	r := s.until(60*time.Second, cancel, tasksOut, tasksDone, func(out string) bool {
		return strings.Count(out, "SUCCEEDED") >= 2
	})
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("task list --watch ended by Ctrl-C: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if !strings.HasPrefix(lines[0], "INSTANCE") || strings.Count(r.stdout, "INSTANCE") != 1 {
		t.Errorf("task list --watch: want the header once, first; got\n%s", r.stdout)
	}
	if len(lines) < 5 {
		t.Errorf("task list --watch: want both instances, then their changes; got\n%s", r.stdout)
	}

	r = s.until(60*time.Second, cancel2, jobOut, jobDone, func(out string) bool {
		return strings.Contains(out, "state: JOB_SUCCEEDED")
	})
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "id: "+job) || !strings.Contains(r.stdout, "\n---\nid: "+job) {
		t.Errorf("job get -w -o yaml: exit %d, stderr %q; want YAML documents of the job separated by ---; got\n%s", r.code, r.stderr, r.stdout)
	}

	// --timeout bounds a watch: it ends by itself, with exit 0, after
	// printing the table.
	for _, args := range [][]string{{"job", "list", "-w"}, {"task", "get", job, "0", "-w"}} {
		out := s.ok(append(args, "--timeout", "500ms")...)
		if !strings.Contains(out, job) {
			t.Errorf("peloton %s --timeout 500ms: %q", strings.Join(args, " "), out)
		}
	}
	s.fails(exitUsage, "Error: --watch and --archived: archived jobs no longer change", "job", "list", "-w", "--archived")

	// job events --watch prints the events so far, then those that
	// happen next (here a scale and the new instance's start).
	svc := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "web.yaml", serviceYAML("300", 1))))
	ctx3, cancel3 := context.WithCancel(context.Background())
	evOut, evDone := s.background(ctx3, "job", "events", svc, "--watch")
	testutil.Eventually(t, 30*time.Second, "the events table", func() bool { return strings.HasPrefix(evOut.String(), "TIME") })
	s.ok("job", "scale", svc, "2")
	r = s.until(60*time.Second, cancel3, evOut, evDone, func(out string) bool {
		return strings.Contains(out, "scaled from 1 to 2 instances") && strings.Contains(out, "instance 1 ")
	})
	if r.code != exitOK || strings.Count(r.stdout, "TIME") != 1 {
		t.Errorf("job events --watch: exit %d, stderr %q; want the header once, then rows; got\n%s", r.code, r.stderr, r.stdout)
	}
	s.fails(exitError, "Error: NotFound: job nope does not exist...", "task", "list", "nope", "-w")
}

// job wait: HEALTHY for a service, a fast failure with its own exit code
// when the state can no longer be reached (a SERVICE never SUCCEEDS, a job
// that FAILED never SUCCEEDS, a BATCH job is never HEALTHY), another for a
// timeout, and progress lines on stderr while it waits.
func TestJobWaitOnAStack(t *testing.T) {
	s := startStack(t)
	svc := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "web.yaml", serviceYAML("300", 2))))
	if out := s.ok("job", "wait", svc, "--for", "healthy", "--timeout", "60s"); out != "job "+svc+" is HEALTHY\n" {
		t.Errorf("job wait --for HEALTHY: %q", out)
	}
	s.fails(exitUnreachable, "Error: job "+svc+" is a SERVICE job: it runs until cancelled and never becomes JOB_SUCCEEDED (wait for HEALTHY or RUNNING)",
		"job", "wait", svc, "--for", "SUCCEEDED")

	failing := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "fail.yaml", strings.Replace(batchYAML, `["sleep", "1"]`, `["sh", "-c", "exit 3"]`, 1))))
	s.fails(exitUnreachable, "Error: job "+failing+" is JOB_FAILED, not JOB_SUCCEEDED...", "job", "wait", failing, "--for", "SUCCEEDED", "--timeout", "60s")
	s.fails(exitUnreachable, "Error: job "+failing+" is a BATCH job: HEALTHY is for SERVICE, STATEFUL and DAEMON jobs (wait for RUNNING or SUCCEEDED)",
		"job", "wait", failing, "--for", "HEALTHY")

	// job events: the job's states, its versions and its instances'
	// changes with their reasons, oldest first.
	s.ok("job", "scale", svc, "3")
	out := s.ok("job", "events", svc)
	for _, want := range []string{"TIME", "job", "created", "version 2", "scaled from 2 to 3 instances", "instance 2", "RUNNING"} {
		if !strings.Contains(out, want) {
			t.Errorf("job events of the service: no %q in\n%s", want, out)
		}
	}
	var evs struct{ Events []jobEvent }
	if err := json.Unmarshal([]byte(s.ok("job", "events", failing, "-o", "json")), &evs); err != nil {
		t.Fatal(err)
	}
	var failed, ended bool
	for i, e := range evs.Events {
		if i > 0 && e.Time.Before(evs.Events[i-1].Time) {
			t.Errorf("event %d (%v) is older than the one before (%v)", i, e.Time, evs.Events[i-1].Time)
		}
		failed = failed || (e.Instance != nil && e.Event == "FAILED" && e.Reason != "")
		ended = ended || (e.Object == "job" && e.Event == "JOB_FAILED")
	}
	if !failed || !ended || evs.Events[0].Event != "created" {
		t.Errorf("job events of the failed job: want created first, an instance FAILED with its reason, the job JOB_FAILED; got %+v", evs.Events)
	}

	long := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "long.yaml", strings.Replace(batchYAML, `["sleep", "1"]`, `["sleep", "300"]`, 1))))
	outb, errb := &syncBuffer{}, &syncBuffer{}
	a := newApp(outb, errb)
	a.getenv = func(string) string { return "" }
	a.progress = 20 * time.Millisecond
	code := execute(a, []string{"--server", s.addr, "job", "wait", long, "--for", "SUCCEEDED", "--timeout", "500ms"}, strings.NewReader(""))
	stderr := errb.String()
	if code != exitTimeout || !strings.Contains(stderr, "waiting for job "+long+" to be JOB_SUCCEEDED: ") ||
		!strings.Contains(stderr, "Error: job "+long+" is ") || !strings.HasSuffix(stderr, "not JOB_SUCCEEDED (timed out after 500ms)\n") {
		t.Errorf("job wait that times out: exit %d, stderr %q; want exit %d, progress lines and the timeout", code, stderr, exitTimeout)
	}
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"a\nb\n", 0, ""},
		{"", 3, ""},
		{"\n\n", 1, "\n"},
	} {
		if got := string(lastLines([]byte(tc.in), tc.n)); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// task logs --tail N prints the last N lines; with -f, then the rest of
// the run's output, without repeating what it printed.
func TestTaskLogsTail(t *testing.T) {
	s := startStack(t)
	spec := strings.Replace(batchYAML, `["sleep", "1"]`, `["sh", "-c", "echo a; echo b; echo c; sleep 2; echo d"]`, 1)
	spec = strings.Replace(spec, "instanceCount: 2", "instanceCount: 1", 1)
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "lines.yaml", spec)))
	s.waitFor(60*time.Second, "c written", func() (bool, string) {
		r := s.run("task", "logs", job, "0")
		return strings.Contains(r.stdout, "c\n"), r.stdout + r.stderr
	})
	out := s.ok("task", "logs", job, "0", "--tail", "1", "-f")
	if out != "c\nd\n" && out != "d\n" {
		t.Errorf("task logs --tail 1 -f: %q, want the last line so far, then the rest (c, d)", out)
	}
	if out := s.ok("task", "logs", job, "0", "--tail", "2"); out != "c\nd\n" {
		t.Errorf("task logs --tail 2 of the ended run: %q", out)
	}
	if out := s.ok("task", "logs", job, "0", "--tail", "0"); out != "" {
		t.Errorf("task logs --tail 0: %q", out)
	}
	s.fails(exitUsage, "Error: invalid --tail -1: must be >= 0 (the number of last lines to print)", "task", "logs", job, "0", "--tail", "-1")
}
