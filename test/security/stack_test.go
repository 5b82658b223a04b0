// Package security runs whole cluster stacks and a federation with TLS,
// mutual TLS, tokens and a policy, and checks from the outside what each
// caller may do.
package security

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The principals of the tests and their tokens. Each token client also
// presents the "cli" certificate, which the listener requires and the
// policy grants nothing: the token decides who calls.
var tokens = map[string]string{
	"bob":     "bob-token-0123456789abcdef",     // viewer of /a/**
	"alice":   "alice-token-0123456789abcdef",   // submitter of /a/**
	"carol":   "carol-token-0123456789abcdef",   // operator, cluster-wide
	"root":    "root-token-0123456789abcdef",    // admin
	"agent-1": "agent-1-token-0123456789abcdef", // agent
	"dave":    "dave-token-0123456789abcdef",    // nothing granted
}

const policy = `
- {principal: bob, role: viewer, pools: ["/a/**"]}
- {principal: alice, role: submitter, pools: ["/a/**"]}
- {principal: carol, role: operator}
- {principal: root, role: admin}
- {principal: agent-1, role: agent}
- {group: ops, role: operator}
- {principal: peloton-federation, role: admin}
`

// pki is the test's CA and the certificates it signed.
type pki struct {
	dir                string
	ca                 *tlstest.CA
	serverCert, server string // cert and key of the listeners
	cliCert, cliKey    string
	opsCert, opsKey    string // CN ops-bot, O ops
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir, ca: tlstest.NewCA(t, dir, "peloton-test")}
	p.serverCert, p.server = p.ca.Issue(t, "server", "peloton-server", tlstest.Opts{})
	p.cliCert, p.cliKey = p.ca.Issue(t, "cli", "cli", tlstest.Opts{})
	p.opsCert, p.opsKey = p.ca.Issue(t, "ops", "ops-bot", tlstest.Opts{Groups: []string{"ops"}})
	return p
}

func (p *pki) write(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *pki) tokenFile(t *testing.T) string {
	var b strings.Builder
	for who, tok := range tokens {
		fmt.Fprintf(&b, "- {token: %q, principal: %s}\n", tok, who)
	}
	return p.write(t, "tokens.yaml", b.String())
}

// security is the listeners' configuration of the tests' stacks.
func (p *pki) security(t *testing.T, audit string) serving.Security {
	return serving.Security{
		TLS: tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.server, ClientCAFile: p.ca.File},
		Auth: auth.Config{TokenFile: p.tokenFile(t), PolicyFile: p.write(t, "policy.yaml", policy), AuditFile: audit,
			HandlerTimeout: time.Minute},
	}
}

// stack is a running cluster stack.
type stack struct {
	info cluster.ReadyInfo
	done chan error
	stop context.CancelFunc
}

func startStack(t *testing.T, name string, endpoints []string, sec serving.Security, opts ...func(*cluster.Config)) *stack {
	t.Helper()
	s := &stack{done: make(chan error, 1)}
	ready := make(chan cluster.ReadyInfo, 1)
	cfg := cluster.Config{
		ClusterName: name, DataDir: t.TempDir(), Listen: testutil.FreeAddr(t), HTTPListen: testutil.FreeAddr(t),
		EtcdEndpoints: endpoints, Backend: "sim", Hosts: 2, ShutdownGrace: 2 * time.Second, Security: sec,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("cluster", name),
		OnReady: func(info cluster.ReadyInfo) { ready <- info },
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- cluster.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("cluster %s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("cluster %s did not stop within 30s", name)
		}
	})
	select {
	case s.info = <-ready:
	case err := <-s.done:
		t.Fatalf("cluster %s: %v", name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("cluster %s not ready within 60s", name)
	}
	return s
}

// as is a client of addr for one principal (by token), over mutual TLS
// with the cli certificate.
func (p *pki) as(t *testing.T, addr, who string) *pclient.Client {
	t.Helper()
	o := pclient.Options{Timeout: 20 * time.Second, TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: p.cliCert, KeyFile: p.cliKey}}
	if who != "" {
		o.Token = tokens[who]
	}
	c, err := pclient.New(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func batchSpec(name, pool string) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: pool, InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}
}

func serviceSpec(name, pool string) *pelotonv1.JobSpec {
	s := batchSpec(name, pool)
	s.Type = pelotonv1.JobType_SERVICE
	s.InstanceCount = 2
	return s
}

func createJob(t *testing.T, c *pclient.Client, spec *pelotonv1.JobSpec) string {
	t.Helper()
	r, err := c.Jobs.CreateJob(ctx(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateJob %s in %s: %v", spec.GetName(), spec.GetPool(), err)
	}
	// Until its tasks exist, calls on the job's tasks and updates are
	// refused with "retry in a moment": the tests act on it at once.
	id := r.GetJobId()
	testutil.Eventually(t, 30*time.Second, "job "+id+" has its tasks", func() error {
		j, err := c.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		if st := j.GetJob().GetStatus().GetState(); st == pelotonv1.JobState_JOB_INITIALIZED {
			return fmt.Errorf("it is %s", st)
		}
		return nil
	})
	return id
}

func createPool(t *testing.T, c *pclient.Client, path string) {
	t.Helper()
	if _, err := c.Pools.CreatePool(ctx(t), &pelotonv1.CreatePoolRequest{Path: path, Spec: &pelotonv1.PoolSpec{}}); err != nil {
		t.Fatalf("CreatePool %s: %v", path, err)
	}
}

func listJobs(t *testing.T, c *pclient.Client) []*pelotonv1.Job {
	t.Helper()
	r, err := c.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetJobs()
}

// denied says whether err is a refusal by the guard.
func denied(err error) bool {
	c := status.Code(err)
	return c == codes.PermissionDenied || c == codes.Unauthenticated
}
