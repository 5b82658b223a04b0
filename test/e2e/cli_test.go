package e2e

import (
	"bytes"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/cmd/peloton/cli"
)

// runCLI runs one peloton command in-process against the stack.
func (s *stack) runCLI(args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	root := cli.NewRootCommand(&out, &errb)
	root.SetArgs(append([]string{"--server", s.ready.GRPCAddr}, args...))
	err = root.Execute()
	return out.String(), errb.String(), err
}

// TestCLINewcomerSteps follows the README: create the example job, wait for
// it, read instance 0's logs, and see the pool and host views.
func TestCLINewcomerSteps(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{})
	out, errOut, err := s.runCLI("job", "create", "-f", repoPath("examples/hello.yaml"))
	if err != nil {
		t.Fatalf("job create: %v\n%s", err, errOut)
	}
	id := strings.TrimSpace(out)
	if strings.ContainsAny(id, " \n") || len(id) != 36 {
		t.Fatalf("job create must print only the job ID, printed %q", out)
	}
	if _, errOut, err := s.runCLI("job", "wait", id, "--for", "SUCCEEDED", "--timeout", "60s"); err != nil {
		t.Fatalf("job wait: %v\n%s", err, errOut)
	}
	out, _, err = s.runCLI("task", "logs", id, "0")
	if err != nil || !strings.Contains(out, "hello from instance 0") {
		t.Fatalf("task logs: %v %q", err, out)
	}
	out, _, err = s.runCLI("task", "list", id)
	if err != nil || strings.Count(out, "SUCCEEDED") != 3 {
		t.Fatalf("task list: %v\n%s", err, out)
	}
	out, _, err = s.runCLI("pool", "get", "/default", "-o", "json")
	if err != nil || !strings.Contains(out, `"status"`) || !strings.Contains(out, `"allocation"`) {
		t.Fatalf("pool get -o json: %v\n%s", err, out)
	}
	if _, _, err := s.runCLI("pool", "create", "/org", "-f", repoPath("examples/pool.yaml")); err != nil {
		t.Fatalf("pool create with the example: %v", err)
	}
	// Moving a pool: into itself is refused with the field named; elsewhere it works.
	_, errOut, err = s.runCLI("pool", "move", "/org", "--to", "/org")
	if err == nil || !strings.Contains(errOut, "Error: InvalidArgument: newParent:") {
		t.Fatalf("pool move into itself: err=%v stderr=%q", err, errOut)
	}
	if _, _, err := s.runCLI("pool", "create", "/teams", "-f", repoPath("examples/pool.yaml")); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = s.runCLI("pool", "move", "/org", "--to", "/teams", "-o", "json")
	if err != nil || !strings.Contains(out, `"path": "/teams/org"`) {
		t.Fatalf("pool move: %v %s\n%s", err, errOut, out)
	}
	out, _, err = s.runCLI("host", "list")
	if err != nil || !strings.Contains(out, "local-0") || !strings.Contains(out, "local-1") {
		t.Fatalf("host list: %v\n%s", err, out)
	}

	// A job that fails: wait exits non-zero and says which state it reached.
	_, errOut, err = s.runCLI("job", "wait", id, "--for", "FAILED", "--timeout", "5s")
	if err == nil || !strings.Contains(errOut, "JOB_SUCCEEDED") {
		t.Fatalf("wait for the wrong state: err=%v stderr=%q", err, errOut)
	}
	// Bad input: the CLI prints the server's words.
	_, errOut, err = s.runCLI("job", "get", "does-not-exist")
	if err == nil || !strings.Contains(errOut, "Error: NotFound: job does-not-exist does not exist") {
		t.Fatalf("job get unknown: err=%v stderr=%q", err, errOut)
	}
}
