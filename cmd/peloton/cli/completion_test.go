package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDynamicCompletion: job ids, hosts, pools, partitions, states and -o
// values are offered; with no server to ask, nothing is offered and
// nothing is printed but the directive.
func TestDynamicCompletion(t *testing.T) {
	s := startStack(t)
	id := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "s.yaml", sleeper)))

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"job", "get", ""}, []string{id + "\tsleeper "}},
		{[]string{"task", "logs", id[:4]}, []string{id + "\t"}},
		{[]string{"host", "drain", "local-0", ""}, []string{"local-0\n", "local-1\n"}},
		{[]string{"host", "move", "local-0", "--partition", ""}, []string{"default\n"}},
		{[]string{"job", "list", "--pool", "/"}, []string{"/default\n"}},
		{[]string{"pool", "get", ""}, []string{"/default\n"}},
		{[]string{"job", "wait", id, "--for", "SUCC"}, []string{"SUCCEEDED\n"}},
		{[]string{"task", "list", id, "--state", "RUN"}, []string{"RUNNING\n"}},
		{[]string{"job", "list", "-o", "j"}, []string{"json\n", "jsonpath=\n", ":6\n"}},
	} {
		out := s.ok(append([]string{"__complete"}, tc.args...)...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("complete %q: %q lacks %q", tc.args, out, w)
			}
		}
	}
	// A job get takes one id: nothing more is offered after it.
	if out := s.ok("__complete", "job", "get", id, ""); strings.Contains(out, id) {
		t.Errorf("complete after the one JOBID: %q", out)
	}

	// No server: no candidates, no error text.
	r := runCLI(t, "", "--server", "127.0.0.1:1", "__complete", "job", "get", "")
	if r.code != exitOK || r.stdout != ":4\n" || strings.Contains(r.stderr, "Error") {
		t.Errorf("completion with no server: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestContextCompletion: --context and use-context complete to the config
// file's contexts, read from the file with no server asked.
func TestContextCompletion(t *testing.T) {
	env := map[string]string{"PELOTON_CONFIG": filepath.Join(t.TempDir(), "config.yaml")}
	for _, name := range []string{"prod", "staging"} {
		if r := runEnv(t, env, "config", "set-context", name, "--server", "127.0.0.1:5391"); r.code != exitOK {
			t.Fatalf("set-context %s: %d %s", name, r.code, r.stderr)
		}
	}
	for _, args := range [][]string{{"__complete", "--context", "p"}, {"__complete", "config", "use-context", "p"}} {
		r := runEnv(t, env, args...)
		if r.code != exitOK || r.stdout != "prod\n:4\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}
