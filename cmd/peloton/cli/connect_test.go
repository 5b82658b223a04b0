package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// secureJobs is a job service that records the authorization metadata of
// every call, and answers as a server with authentication would: with
// want set, a call without "Bearer <want>" is Unauthenticated; GetJob of
// "secret" is PermissionDenied.
type secureJobs struct {
	pelotonv1.UnimplementedJobServiceServer
	want string

	mu   sync.Mutex
	auth []string
}

func (s *secureJobs) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := ""
	if v := md.Get("authorization"); len(v) > 0 {
		got = v[0]
	}
	s.mu.Lock()
	s.auth = append(s.auth, got)
	s.mu.Unlock()
	if s.want != "" && got != "Bearer "+s.want {
		return status.Error(codes.Unauthenticated, "missing or unknown bearer token")
	}
	return nil
}

func (s *secureJobs) ListJobs(ctx context.Context, _ *pelotonv1.ListJobsRequest) (*pelotonv1.ListJobsResponse, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return &pelotonv1.ListJobsResponse{Jobs: []*pelotonv1.Job{makeJob("job-1").Name("hello").Obj()}}, nil
}

func (s *secureJobs) GetJob(ctx context.Context, req *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if req.GetJobId() == "secret" {
		return nil, status.Error(codes.PermissionDenied, `alice may not read jobs of pool /secret (role viewer of /team)`)
	}
	return &pelotonv1.GetJobResponse{Job: makeJob(req.GetJobId()).Obj()}, nil
}

// lastAuth is the authorization the last call carried.
func (s *secureJobs) lastAuth() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.auth) == 0 {
		return "(no call)"
	}
	return s.auth[len(s.auth)-1]
}

// pki is a CA, a server certificate for localhost and 127.0.0.1, a client
// certificate it signed, and one signed by a CA the server does not know.
type pki struct {
	dir                   string
	ca, other             *tlstest.CA
	serverCert, serverKey string
	clientCert, clientKey string
	strayCert, strayKey   string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca = tlstest.NewCA(t, p.dir, "ca")
	p.other = tlstest.NewCA(t, p.dir, "other")
	p.serverCert, p.serverKey = p.ca.Issue(t, "server", "peloton", tlstest.Opts{})
	p.clientCert, p.clientKey = p.ca.Issue(t, "alice", "alice", tlstest.Opts{})
	p.strayCert, p.strayKey = p.other.Issue(t, "mallory", "mallory", tlstest.Opts{})
	return p
}

// startSecure serves jobs on loopback over TLS with p's server
// certificate; with mutual, every client must present a certificate p's CA
// signed (tls.RequireAndVerifyClientCert). With p nil it serves plaintext.
func startSecure(t *testing.T, p *pki, mutual bool, jobs *secureJobs) string {
	t.Helper()
	var opts []grpc.ServerOption
	if p != nil {
		files := tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey}
		if mutual {
			files.ClientCAFile = p.ca.File
		}
		cfg, err := tlsfiles.ServerConfig(files, []string{"h2"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	pelotonv1.RegisterJobServiceServer(g, jobs)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// wantStderr checks a run's exit code and that its stderr holds every
// one of want.
func wantStderr(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d; stderr %q", r.code, code, r.stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q lacks %q", r.stderr, w)
		}
	}
}

// TestTLSServer: --ca-file reaches a TLS server; every other way of
// getting TLS wrong fails with a message that names the flag to fix.
func TestTLSServer(t *testing.T) {
	p := newPKI(t)
	addr := startSecure(t, p, false, &secureJobs{})
	plain := startSecure(t, nil, false, &secureJobs{})

	r := runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "job", "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "job-1") {
		t.Fatalf("job list with --ca-file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"plaintext to a TLS server", []string{"--server", addr}, exitError,
			[]string{"the peloton server at " + addr + " closed the connection before speaking plaintext gRPC", "if it serves TLS", "--ca-file"}},
		{"the system's roots", []string{"--server", addr, "--tls-server-name", "localhost"}, exitError,
			[]string{"presented a certificate this machine does not trust (x509: certificate signed by unknown authority)", "--ca-file"}},
		{"another CA", []string{"--server", addr, "--ca-file", p.other.File}, exitError,
			[]string{"that the CA in " + p.other.File + " (--ca-file) did not sign", "give the CA that signed it with --ca-file"}},
		{"a name the certificate lacks", []string{"--server", addr, "--ca-file", p.ca.File, "--tls-server-name", "peloton.example"}, exitError,
			[]string{"presented a certificate for another name (x509: certificate is valid for localhost, not peloton.example)", "--tls-server-name"}},
		{"TLS to a plaintext server", []string{"--server", plain, "--ca-file", p.ca.File}, exitError,
			[]string{"the peloton server at " + plain + " does not serve TLS", "leave out --ca-file"}},
		{"a CA file that is not one", []string{"--server", addr, "--ca-file", p.serverKey}, exitUsage,
			[]string{"Error: --ca-file: " + p.serverKey + " holds no PEM certificate"}},
		{"a CA file that is not there", []string{"--server", addr, "--ca-file", filepath.Join(p.dir, "nope.pem")}, exitUsage,
			[]string{"Error: --ca-file: open " + filepath.Join(p.dir, "nope.pem")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStderr(t, runCLI(t, "", append(tc.args, "job", "list")...), tc.code, tc.want...)
		})
	}
}

// TestMutualTLS: a server that requires client certificates lets in the
// one its CA signed (--cert-file, --key-file) and no other.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	addr := startSecure(t, p, true, &secureJobs{})
	r := runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "--cert-file", p.clientCert, "--key-file", p.clientKey, "job", "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "job-1") {
		t.Fatalf("job list with a client certificate: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Over TLS 1.3 the refusal comes after the client's handshake: the
	// client reads the server's alert or only a closed connection.
	r = runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "job", "list")
	wantStderr(t, r, exitError, "the peloton server at "+addr, "give --cert-file and --key-file")
	if !strings.Contains(r.stderr, "requires a client certificate") && !strings.Contains(r.stderr, "if it requires a client certificate") {
		t.Errorf("without a client certificate: stderr %q does not say one may be needed", r.stderr)
	}
	r = runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "--cert-file", p.strayCert, "--key-file", p.strayKey, "job", "list")
	wantStderr(t, r, exitError, "this client's certificate "+p.strayCert+" (from --cert-file)", "it must be signed by a CA the server trusts for clients")

	r = runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "--cert-file", p.clientCert, "job", "list")
	wantStderr(t, r, exitUsage, "Error: --cert-file is set but --key-file is not: a client certificate needs both")
	r = runCLI(t, "", "--server", addr, "--ca-file", p.ca.File, "--cert-file", p.clientCert, "--key-file", p.strayKey, "job", "list")
	wantStderr(t, r, exitUsage, "Error: --cert-file / --key-file: tls: private key does not match public key")
}

// writeConfig writes a config file in a fresh directory and returns its
// path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenSources: the token is sent from --token, $PELOTON_TOKEN or the
// context's token or tokenFile, in that order of precedence, and never in
// plaintext to a host that is not this one.
func TestTokenSources(t *testing.T) {
	p := newPKI(t)
	jobs := &secureJobs{}
	addr := startSecure(t, p, false, jobs)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := writeConfig(t, `currentContext: inline
contexts:
  - name: inline
    server: `+addr+`
    caFile: `+p.ca.File+`
    token: from-context
  - name: file
    server: `+addr+`
    caFile: `+p.ca.File+`
    tokenFile: `+tokenFile+`
  - name: none
    server: `+addr+`
    caFile: `+p.ca.File+`
`)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"the current context's token", nil, nil, "Bearer from-context"},
		{"a context's tokenFile, newline trimmed", nil, []string{"--context", "file"}, "Bearer from-file"},
		{"a context without a token", nil, []string{"--context", "none"}, ""},
		{"$PELOTON_TOKEN over the context", map[string]string{tokenEnv: "from-env"}, nil, "Bearer from-env"},
		{"--token over $PELOTON_TOKEN and the context", map[string]string{tokenEnv: "from-env"}, []string{"--token", "from-flag"}, "Bearer from-flag"},
		{"--token over a context's tokenFile", nil, []string{"--context", "file", "--token", "from-flag"}, "Bearer from-flag"},
		{`--token "" sends none`, map[string]string{tokenEnv: "from-env"}, []string{"--token", ""}, ""},
		{"$PELOTON_CONFIG finds the file", map[string]string{configEnv: config}, []string{"--context", "file"}, "Bearer from-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{configEnv: config}
			for k, v := range tc.env {
				env[k] = v
			}
			args := tc.args
			if _, ok := tc.env[configEnv]; !ok {
				args = append([]string{"--config", config}, args...)
				delete(env, configEnv)
			}
			r := runEnv(t, env, append(args, "job", "list")...)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if got := jobs.lastAuth(); got != tc.want {
				t.Errorf("the server got authorization %q, want %q", got, tc.want)
			}
		})
	}

	// Never in plaintext to another host: refused before anything is sent.
	r := runEnv(t, map[string]string{tokenEnv: "from-env"}, "--server", "10.0.0.1:5391", "job", "list")
	wantStderr(t, r, exitUsage, "the token (from $PELOTON_TOKEN) is sent only over TLS or to a loopback address, and --server 10.0.0.1:5391 is neither", "--ca-file")
	// To this host it may go in plaintext (peloton up serves plaintext on
	// loopback).
	local := &secureJobs{}
	plain := startSecure(t, nil, false, local)
	if r := runCLI(t, "", "--server", plain, "--token", "t", "job", "list"); r.code != exitOK || local.lastAuth() != "Bearer t" {
		t.Errorf("token over loopback plaintext: exit %d, stderr %q, server got %q", r.code, r.stderr, local.lastAuth())
	}
}

// TestAuthErrors: Unauthenticated says whether a token was sent and where
// it came from; PermissionDenied is the server's message as it is.
func TestAuthErrors(t *testing.T) {
	p := newPKI(t)
	addr := startSecure(t, p, false, &secureJobs{want: "good"})
	base := []string{"--server", addr, "--ca-file", p.ca.File}
	r := runCLI(t, "", append(base, "job", "list")...)
	wantStderr(t, r, exitError, "Error: Unauthenticated: missing or unknown bearer token; no token and no client certificate were sent: "+
		"give a token with --token or $PELOTON_TOKEN, or a client certificate with --cert-file and --key-file, or use a context that has them")
	r = runCLI(t, "", append(base, "--token", "bad", "job", "list")...)
	wantStderr(t, r, exitError, "Error: Unauthenticated: missing or unknown bearer token; the peloton server at "+addr+" refused the token from --token")
	config := writeConfig(t, "currentContext: c\ncontexts:\n  - name: c\n    token: stale\n")
	r = runCLI(t, "", append(base, "--config", config, "job", "list")...)
	wantStderr(t, r, exitError, "refused the token from token of context c", "fix the context's token or tokenFile")
	r = runCLI(t, "", append(base, "--token", "good", "job", "get", "secret")...)
	if r.code != exitError || r.stderr != "Error: PermissionDenied: alice may not read jobs of pool /secret (role viewer of /team)\n" {
		t.Errorf("PermissionDenied: exit %d, stderr %q; want the server's message as it is", r.code, r.stderr)
	}
	if r := runCLI(t, "", append(base, "--token", "good", "job", "get", "j")...); r.code != exitOK {
		t.Errorf("with the right token: exit %d, stderr %q", r.code, r.stderr)
	}
	// A certificate the server does not take for a principal, and no token.
	mutual := startSecure(t, p, true, &secureJobs{want: "good"})
	r = runCLI(t, "", "--server", mutual, "--ca-file", p.ca.File, "--cert-file", p.clientCert, "--key-file", p.clientKey, "job", "list")
	wantStderr(t, r, exitError, "Error: Unauthenticated: missing or unknown bearer token; the peloton server at "+mutual+
		" did not accept the client certificate "+p.clientCert+" (from --cert-file) and no token was sent")
}

// TestContextSettings: a context gives the defaults of --server and the
// TLS flags; a flag or $PELOTON_SERVER wins over it; relative paths in the
// file are relative to the file, ~/ to the home directory.
func TestContextSettings(t *testing.T) {
	p := newPKI(t)
	jobs := &secureJobs{}
	addr := startSecure(t, p, true, jobs)
	gone := closedAddr(t)
	home := t.TempDir()
	if err := os.Rename(p.clientKey, filepath.Join(home, "alice-key.pem")); err != nil {
		t.Fatal(err)
	}
	// The CA and the certificate sit beside the config file (p.dir).
	config := filepath.Join(p.dir, "config.yaml")
	if err := os.WriteFile(config, []byte(`currentContext: prod
contexts:
  - name: prod
    server: `+addr+`
    caFile: ca-ca.pem
    certFile: ./alice.pem
    keyFile: ~/alice-key.pem
  - name: gone
    server: `+gone+`
    caFile: ca-ca.pem
    certFile: alice.pem
    keyFile: ~/alice-key.pem
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": home, configEnv: config}
	if r := runEnv(t, env, "job", "list"); r.code != exitOK || !strings.Contains(r.stdout, "job-1") {
		t.Fatalf("job list in context prod: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// --server and $PELOTON_SERVER win over the context's server; the
	// context's TLS files still apply.
	if r := runEnv(t, env, "--context", "gone", "--server", addr, "job", "list"); r.code != exitOK {
		t.Errorf("--server over the context's: exit %d, stderr %q", r.code, r.stderr)
	}
	env2 := map[string]string{"HOME": home, configEnv: config, serverEnv: addr}
	if r := runEnv(t, env2, "--context", "gone", "job", "list"); r.code != exitOK {
		t.Errorf("$%s over the context's server: exit %d, stderr %q", serverEnv, r.code, r.stderr)
	}
	// --server over $PELOTON_SERVER.
	r := runEnv(t, env2, "--server", gone, "job", "list")
	wantStderr(t, r, exitError, "cannot reach the peloton server at "+gone)
	// A context's server that does not answer is named as the context's.
	r = runEnv(t, env, "--context", "gone", "job", "list")
	wantStderr(t, r, exitError, "cannot reach the peloton server at "+gone+" (server of context gone)")
	// A flag wins over the context's file: this CA did not sign the server.
	r = runEnv(t, env, "--ca-file", p.other.File, "job", "list")
	wantStderr(t, r, exitError, "the CA in "+p.other.File+" (--ca-file) did not sign")
	// --context "" uses no context: plaintext to the default server.
	r = runEnv(t, env, "--context", "", "--server", addr, "job", "list")
	wantStderr(t, r, exitError, "closed the connection before speaking plaintext gRPC")
	// No home: ~/ cannot be resolved, and the error names the field.
	r = runEnv(t, map[string]string{configEnv: config}, "job", "list")
	wantStderr(t, r, exitError, "config file "+config+": keyFile of context prod: ~/alice-key.pem starts with ~ but there is no home directory")
	// ... unless a flag replaces that field.
	if r := runEnv(t, map[string]string{configEnv: config}, "--key-file", filepath.Join(home, "alice-key.pem"), "job", "list"); r.code != exitOK {
		t.Errorf("--key-file over a context's ~/ path with no home: exit %d, stderr %q", r.code, r.stderr)
	}
	// A file of the context that does not load names the field.
	if err := os.Remove(filepath.Join(p.dir, "alice.pem")); err != nil {
		t.Fatal(err)
	}
	r = runEnv(t, env, "job", "list")
	wantStderr(t, r, exitError, "Error: certFile of context prod / keyFile of context prod: open "+filepath.Join(p.dir, "alice.pem"))
}

// TestContextCluster: a context's federation and cluster route cluster
// commands as --federation and --cluster do; --server drops the context's
// cluster; the cluster and fed commands are not refused for it.
func TestContextCluster(t *testing.T) {
	clusterAddr := startFake(t, &fakeServer{})
	ff := &fakeFederation{clusters: map[string]*pelotonv1.Cluster{
		"a": {Name: "a", Endpoint: clusterAddr, State: pelotonv1.ClusterState_CLUSTER_READY},
	}}
	fed := startFakeFederation(t, ff)
	other := &secureJobs{}
	otherAddr := startSecure(t, nil, false, other)
	config := writeConfig(t, "currentContext: east\ncontexts:\n  - name: east\n    federation: "+fed+"\n    cluster: a\n")
	r := runCLI(t, "", "--config", config, "host", "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "host-0") || ff.lookups != 1 {
		t.Fatalf("host list in context east: exit %d, stdout %q, stderr %q, lookups %d", r.code, r.stdout, r.stderr, ff.lookups)
	}
	if r := runCLI(t, "", "--config", config, "cluster", "list"); r.code != exitOK {
		t.Errorf("cluster list in a context with a cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "--config", config, "--server", otherAddr, "job", "list"); r.code != exitOK || other.lastAuth() != "" || ff.lookups != 1 {
		t.Errorf("--server in a context with a cluster: exit %d, stderr %q, lookups %d; want the server, not the cluster",
			r.code, r.stderr, ff.lookups)
	}
	bad := writeConfig(t, "currentContext: b\ncontexts:\n  - name: b\n    federation: "+fed+"\n    cluster: Bad_Name\n")
	r = runCLI(t, "", "--config", bad, "job", "list")
	wantStderr(t, r, exitUsage, `Error: invalid cluster of context b "Bad_Name"`)
}

// TestServerCommandsRefuseClientAuthFlags: the daemons take none of the
// CLI's connection flags; a token given to them would otherwise be dropped
// without a word.
func TestServerCommandsRefuseClientAuthFlags(t *testing.T) {
	for _, args := range [][]string{
		{"up", "--token", "t"},
		{"up", "--ca-file", "ca.pem"},
		{"up", "--context", "prod"},
		{"serve", "cluster", "--etcd-endpoints", "http://a:2379", "--config", "c.yaml"},
		{"serve", "advisor", "--server", "127.0.0.1:1", "--token", "t"},
		{"serve", "hostagent", "--server", "127.0.0.1:1", "--token", "t"},
	} {
		r := runCLI(t, "", args...)
		wantStderr(t, r, exitUsage, "is a flag of the client commands")
	}
}

// advisedHosts is the host service `serve advisor` reads, recording the
// token and client certificate of each call.
type advisedHosts struct {
	pelotonv1.UnimplementedHostServiceServer
	calls chan string
}

func (h *advisedHosts) ListHosts(ctx context.Context, _ *pelotonv1.ListHostsRequest) (*pelotonv1.ListHostsResponse, error) {
	got := "token " + strings.Join(metadata.ValueFromIncomingContext(ctx, "authorization"), ",")
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			got += ", client " + ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	select {
	case h.calls <- got:
	default:
	}
	return &pelotonv1.ListHostsResponse{}, nil
}

// TestAdvisorConnectsWithTLSAndToken: `serve advisor` reaches a stack that
// requires client certificates with --ca-file, --cert-file and --key-file,
// and sends the token of --token-file.
func TestAdvisorConnectsWithTLSAndToken(t *testing.T) {
	p := newPKI(t)
	files := tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.ca.File}
	cfg, err := tlsfiles.ServerConfig(files, []string{"h2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hosts := &advisedHosts{calls: make(chan string, 1)}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	pelotonv1.RegisterHostServiceServer(g, hosts)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	tokenFile := filepath.Join(p.dir, "advisor-token")
	if err := os.WriteFile(tokenFile, []byte("adv-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var out, errb syncBuffer
	a := newApp(&out, &errb)
	a.getenv = func(string) string { return "" }
	root := a.rootCommand()
	root.SetArgs([]string{"serve", "advisor", "--server", lis.Addr().String(), "--mode", "observe", "--advisor-interval", "100ms",
		"--ca-file", p.ca.File, "--cert-file", p.clientCert, "--key-file", p.clientKey, "--token-file", tokenFile, "--log-level", "error"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case got := <-hosts.calls:
		if got != "token Bearer adv-token, client alice" {
			t.Errorf("the stack saw %q; want the token of --token-file and the certificate of --cert-file", got)
		}
	case err := <-done:
		t.Fatalf("serve advisor ended: %v\n%s", err, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve advisor made no call within 30s\n%s", errb.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve advisor: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "peloton advisor is advising: "+lis.Addr().String()) {
		t.Errorf("stdout %q", out.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca-file", p.ca.File, "--cert-file", p.clientCert}, "Error: --cert-file is set but --key-file is not: a client certificate needs both"},
		{[]string{"--token-file", filepath.Join(p.dir, "nope")}, "Error: invalid --token-file: open " + filepath.Join(p.dir, "nope")},
	} {
		r := runCLI(t, "", append([]string{"serve", "advisor", "--server", lis.Addr().String()}, tc.args...)...)
		wantStderr(t, r, exitUsage, tc.want)
	}
	r := runCLI(t, "", "serve", "advisor", "--server", "10.0.0.1:5391", "--token-file", tokenFile)
	wantStderr(t, r, exitUsage, "Error: --token-file: the token is sent only over TLS or to a loopback address, and --server 10.0.0.1:5391 is neither: give --ca-file")
}

// syncBuffer is a bytes.Buffer that a running command may write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
