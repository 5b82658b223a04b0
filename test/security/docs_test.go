package security

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestSecurityDocOpenSSL runs docs/security.md's openssl commands as a
// user would paste them, serves a stack with the certificates they make
// and the doc's example policy, and calls it with them: the commands work
// and the policy means what the doc says.
func TestSecurityDocOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	script := block(t, string(doc), "<!-- tested: TestSecurityDocOpenSSL runs this block -->", "```sh")
	policy := block(t, string(doc), "## The policy", "```yaml")
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the doc's openssl commands: %v\n%s", err, out)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	policyFile := f("policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	e, _ := storetest.StartEtcd(t)
	s := startStack(t, "east", e.Endpoints(), serving.Security{
		TLS:  tlsfiles.Server{CertFile: f("cluster-east.pem"), KeyFile: f("cluster-east-key.pem"), ClientCAFile: f("ca.pem")},
		Auth: auth.Config{PolicyFile: policyFile},
	})
	as := func(who string) *pclient.Client {
		c, err := pclient.New(s.info.GRPCAddr, pclient.Options{Timeout: 20 * time.Second,
			TLS: &pclient.TLSFiles{CAFile: f("ca.pem"), CertFile: f(who + ".pem"), KeyFile: f(who + "-key.pem")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ops, alice, agent := as("ops-bot"), as("alice"), as("agent-host1")
	createPool(t, ops, "/team-a")
	createPool(t, ops, "/other")
	createJob(t, alice, batchSpec("mine", "/team-a"))
	if _, err := alice.Jobs.CreateJob(ctx(t), &pelotonv1.CreateJobRequest{Spec: batchSpec("theirs", "/other")}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice (team-a) creating a job in /other: %v, want PermissionDenied", err)
	}
	if _, err := alice.Pools.CreatePool(ctx(t), &pelotonv1.CreatePoolRequest{Path: "/team-a/sub", Spec: &pelotonv1.PoolSpec{}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice (a submitter) creating a pool: %v, want PermissionDenied", err)
	}
	if _, err := agent.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{Pool: "/team-a"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a host agent listing jobs: %v, want PermissionDenied", err)
	}
	if _, err := ops.Hosts.StartMaintenance(ctx(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"no-such-host"}}); status.Code(err) == codes.PermissionDenied {
		t.Errorf("ops-bot (group ops, operator) starting maintenance: %v", err)
	}
}

// block returns the body of the first fenced block opening with fence
// after the line after.
func block(t *testing.T, doc, after, fence string) string {
	t.Helper()
	i := strings.Index(doc, after)
	if i < 0 {
		t.Fatalf("docs/security.md has no %q", after)
	}
	rest := doc[i:]
	j := strings.Index(rest, fence+"\n")
	if j < 0 {
		t.Fatalf("no %s block after %q", fence, after)
	}
	body := rest[j+len(fence)+1:]
	k := strings.Index(body, "```")
	if k < 0 {
		t.Fatalf("the %s block after %q does not end", fence, after)
	}
	return body[:k]
}
