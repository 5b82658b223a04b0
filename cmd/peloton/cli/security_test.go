package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
)

// TestUnsecuredListenerBeyondLoopbackRefused: a daemon whose listener
// other machines can reach refuses to start without TLS and
// authentication, and says which flag and why, unless --insecure; secured,
// it starts.
func TestUnsecuredListenerBeyondLoopbackRefused(t *testing.T) {
	var got cluster.Config
	run := func(ctx context.Context, cfg cluster.Config) error {
		got = cfg
		return nil
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("- {token: \"0123456789abcdef0123\", principal: alice}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("- {principal: alice, role: admin}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := []string{"serve", "cluster", "--etcd-endpoints", "http://e:2379"}
	for _, c := range []struct {
		args []string
		want []string // in stderr; none: it starts
	}{
		{[]string{"--listen", "0.0.0.0:5391"}, []string{"--listen 0.0.0.0:5391", "no TLS", "authentication", "--insecure"}},
		{[]string{"--http-listen", "10.0.0.1:5291"}, []string{"--http-listen 10.0.0.1:5291", "--insecure"}},
		{[]string{"--listen", "0.0.0.0:5391", "--tls-cert-file", cert, "--tls-key-file", key}, []string{"--listen", "authentication (--auth-token-file or --client-ca-file)"}},
		{[]string{"--listen", "0.0.0.0:5391", "--auth-token-file", tokens}, []string{"no TLS (--tls-cert-file"}},
		{[]string{"--listen", "0.0.0.0:5391", "--insecure"}, nil},
		{[]string{"--listen", "0.0.0.0:5391", "--http-listen", "0.0.0.0:5291", "--tls-cert-file", cert, "--tls-key-file", key, "--auth-token-file", tokens, "--authz-policy-file", policy}, nil},
		{[]string{"--listen", "0.0.0.0:5391", "--http-listen", "0.0.0.0:5291", "--tls-cert-file", cert, "--tls-key-file", key, "--client-ca-file", ca.File}, nil},
		{[]string{"--tls-cert-file", cert}, []string{"--tls-cert-file is set but --tls-key-file is not"}},
		{[]string{"--client-ca-file", ca.File}, []string{"--client-ca-file needs --tls-cert-file"}},
		{[]string{"--tls-cert-file", key, "--tls-key-file", key}, []string{"--tls-cert-file / --tls-key-file"}},
		{[]string{"--authz-policy-file", policy}, []string{"--authz-policy-file", "needs callers to authenticate"}},
		{[]string{"--auth-token-file", filepath.Join(dir, "missing.yaml")}, []string{"--auth-token-file", "no such file"}},
		{[]string{"--rate-limit", "-1"}, []string{"--rate-limit"}},
		{[]string{"--max-request-bytes", "10"}, []string{"--max-request-bytes"}},
		{[]string{"--admin-listen", "nope"}, []string{"--admin-listen"}},
	} {
		got = cluster.Config{}
		r := runWith(t, run, "", append(append([]string(nil), serve...), c.args...)...)
		if c.want == nil {
			if r.code != exitOK {
				t.Errorf("%v: exit %d, stderr %q; want it to start", c.args, r.code, r.stderr)
			}
			continue
		}
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage)", c.args, r.code, exitUsage)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr %q does not say %q", c.args, r.stderr, w)
			}
		}
	}
	// The flags reach the stack's configuration.
	r := runWith(t, run, "", append(append([]string(nil), serve...), "--tls-cert-file", cert, "--tls-key-file", key,
		"--client-ca-file", ca.File, "--auth-token-file", tokens, "--authz-policy-file", policy, "--audit-log", "-",
		"--rate-limit", "50", "--max-request-bytes", "1048576", "--admin-listen", "127.0.0.1:0")...)
	if r.code != exitOK {
		t.Fatalf("secured serve cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	sec := got.Security
	if sec.TLS.CertFile != cert || sec.TLS.ClientCAFile != ca.File || sec.Auth.TokenFile != tokens || sec.Auth.PolicyFile != policy ||
		sec.Auth.AuditFile != "-" || sec.Auth.RatePerSecond != 50 || sec.MaxRequestBytes != 1<<20 || sec.AdminListen != "127.0.0.1:0" {
		t.Errorf("security config = %+v", sec)
	}
	// `peloton up` runs a federation that calls its clusters: it must be
	// able to verify them and be someone to them.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", cert, "--tls-key-file", key, "--auth-token-file", tokens}, "--peer-ca-file"},
		{[]string{"--tls-cert-file", cert, "--tls-key-file", key, "--auth-token-file", tokens, "--peer-ca-file", ca.File}, "--peer-token-file"},
	} {
		r := runCLI(t, "", append([]string{"up"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("up %v: exit %d, stderr %q; want a usage error naming %s", c.args, r.code, r.stderr, c.want)
		}
	}
	// `peloton up` checks its federation's listeners too.
	r = runCLI(t, "", "up", "--federation-listen", "0.0.0.0:5392")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--federation-listen 0.0.0.0:5392") {
		t.Errorf("up --federation-listen 0.0.0.0: exit %d, stderr %q", r.code, r.stderr)
	}
}
