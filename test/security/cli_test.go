package security

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cmd/peloton/cli"
	"github.com/peloton-sched/peloton/internal/store/storetest"
)

// TestCLIHelloWorldSecured follows the README's hello world against a
// secured stack on the local backend (real processes): the CLI with a CA,
// a client certificate and a token creates the job, waits for it and reads
// its logs; the same from a saved context; a user without rights on the
// pool is refused with the server's reason.
func TestCLIHelloWorldSecured(t *testing.T) {
	p := newPKI(t)
	e, _ := storetest.StartEtcd(t)
	s := startStack(t, "hello", e.Endpoints(), p.security(t, ""), func(c *cluster.Config) {
		c.Backend, c.Hosts, c.HostCPU, c.HostMemoryMB, c.HostDiskMB = "local", 1, 2, 2048, 10000
		c.DefaultReservesHosts = true
	})
	t.Setenv("PELOTON_CONFIG", filepath.Join(t.TempDir(), "config.yaml"))
	t.Setenv("PELOTON_TOKEN", "")
	run := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		root := cli.NewRootCommand(&out, &errb)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), errb.String(), err
	}
	tls := []string{"--server", s.info.GRPCAddr, "--ca-file", p.ca.File, "--cert-file", p.cliCert, "--key-file", p.cliKey}
	as := func(who string, args ...string) (string, string, error) {
		return run(append(append(append([]string(nil), tls...), "--token", tokens[who]), args...)...)
	}
	out, errOut, err := as("root", "job", "create", "-f", "../../examples/hello.yaml")
	if err != nil {
		t.Fatalf("job create as root: %v\n%s", err, errOut)
	}
	id := strings.TrimSpace(out)
	if _, errOut, err := as("root", "job", "wait", id, "--for", "SUCCEEDED", "--timeout", "60s"); err != nil {
		t.Fatalf("job wait: %v\n%s", err, errOut)
	}
	if out, errOut, err := as("root", "task", "logs", id, "0"); err != nil || !strings.Contains(out, "hello from instance 0") {
		t.Fatalf("task logs: %v %q %s", err, out, errOut)
	}

	// alice submits in /a/** only.
	_, errOut, err = as("alice", "job", "create", "-f", "../../examples/hello.yaml")
	if err == nil || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "submitter role on pool /default") {
		t.Errorf("alice creating a job in /default: %v, stderr %q; want PermissionDenied naming the role and pool", err, errOut)
	}
	// Without a token: who is this?
	_, errOut, err = run(append(append([]string(nil), tls...), "job", "cancel", id)...)
	if err == nil || !strings.Contains(errOut, "PermissionDenied") {
		t.Errorf("cancelling with the cli certificate alone: %v, stderr %q", err, errOut)
	}

	// The same from a saved context, the token in a file.
	tokenFile := filepath.Join(t.TempDir(), "root.token")
	if err := os.WriteFile(tokenFile, []byte(tokens["root"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := run("config", "set-context", "secured", "--server", s.info.GRPCAddr, "--ca-file", p.ca.File,
		"--cert-file", p.cliCert, "--key-file", p.cliKey, "--token-file", tokenFile); err != nil {
		t.Fatalf("config set-context: %v\n%s", err, errOut)
	}
	if _, errOut, err := run("config", "use-context", "secured"); err != nil {
		t.Fatalf("config use-context: %v\n%s", err, errOut)
	}
	if out, errOut, err := run("job", "list"); err != nil || !strings.Contains(out, id) {
		t.Errorf("job list from the context: %v %q %s", err, out, errOut)
	}
}
