package serving_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/restgw"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/testing/authtest"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

const (
	vicToken  = "vic-token-0123456789"  // viewer of every pool, not cluster-wide
	samToken  = "sam-token-0123456789"  // submitter on /a/**
	olgaToken = "olga-token-0123456789" // operator cluster-wide

	tokensYAML = `
- {token: vic-token-0123456789, principal: vic, groups: [readers]}
- {token: sam-token-0123456789, principal: sam}
- {token: olga-token-0123456789, principal: olga, groups: [ops]}
`
	policyYAML = `
- {group: readers, role: viewer, pools: ["/**"]}
- {principal: sam, role: submitter, pools: ["/a/**"]}
- {group: ops, role: operator}
- {group: admins, role: admin}
`
	maxRequest = 64 << 10
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// api serves authtest's jobs the way a daemon serves its own: a gRPC
// server with the options Start gives, REST through restgw.
func api(jobs *authtest.Jobs) serving.API {
	return serving.API{
		GRPCServer: func(opts ...grpc.ServerOption) *grpc.Server {
			s := grpc.NewServer(opts...)
			jobs.Register(s)
			return s
		},
		HTTPHandler: func(ctx context.Context, grpcAddr string, extra http.Handler, opts ...restgw.Option) (http.Handler, error) {
			o := restgw.Options{
				GRPCAddr: grpcAddr,
				Register: []restgw.RegisterFunc{
					pelotonv1.RegisterJobServiceHandlerFromEndpoint,
					pelotonv1.RegisterTaskServiceHandlerFromEndpoint,
				},
				MaxRequestBytes: 1 << 20, // the daemon's default, which Start's limit replaces
				Extra:           extra,
			}
			for _, opt := range opts {
				opt(&o)
			}
			return restgw.Handler(ctx, o)
		},
		Rules: jobs.Rules(),
		Ready: func(context.Context) error { return nil },
	}
}

// daemon is a running serving.Server with TLS on 127.0.0.1.
type daemon struct {
	srv   *serving.Server
	jobs  *authtest.Jobs
	ca    *tlstest.CA
	dir   string
	grpc  string
	https string
	audit string
}

// startDaemon starts the listeners with TLS, the token file, the policy,
// an audit log and an admin listener; change adjusts the security.
func startDaemon(t *testing.T, change func(*serving.Security, *daemon)) *daemon {
	t.Helper()
	d := &daemon{jobs: authtest.NewJobs(map[string]string{"a1": "/a/x", "a2": "/a", "b1": "/b"}), dir: t.TempDir()}
	d.ca = tlstest.NewCA(t, d.dir, "ca")
	cert, key := d.ca.Issue(t, "server", "server", tlstest.Opts{})
	d.audit = filepath.Join(d.dir, "audit.log")
	sec := serving.Security{
		TLS: tlsfiles.Server{CertFile: cert, KeyFile: key},
		Auth: auth.Config{
			TokenFile:  authtest.WriteFile(t, d.dir, "tokens.yaml", tokensYAML),
			PolicyFile: authtest.WriteFile(t, d.dir, "policy.yaml", policyYAML),
			AuditFile:  d.audit,
		},
		MaxRequestBytes: maxRequest,
		AdminListen:     "127.0.0.1:0",
	}
	if change != nil {
		change(&sec, d)
	}
	gl, hl := listen(t), listen(t)
	d.grpc, d.https = gl.Addr().String(), hl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := serving.Start(ctx, api(d.jobs), sec, gl, hl, quiet)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d.srv = srv
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
		cancel()
	})
	return d
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// clientTLS verifies the daemon against its CA and presents the client
// certificate of cn (in groups), if cn is not "".
func (d *daemon) clientTLS(t *testing.T, cn string, groups ...string) *tls.Config {
	t.Helper()
	files := tlsfiles.Client{CAFile: d.ca.File, ServerName: "127.0.0.1"}
	if cn != "" {
		files.CertFile, files.KeyFile = d.ca.Issue(t, "client-"+cn, cn, tlstest.Opts{Groups: groups})
	}
	cfg, err := tlsfiles.ClientConfig(files, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (d *daemon) httpClient(t *testing.T, cfg *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

type answer struct {
	code   int
	header http.Header
	body   string
}

// do sends one request with token ("" for none) and the headers kv.
func do(t *testing.T, c *http.Client, method, url, token, body string, kv ...string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// grpcCode reads the "code" of a JSON error body.
func grpcCode(t *testing.T, a answer) int {
	t.Helper()
	var st struct {
		Code int `json:"code"`
	}
	if err := json.Unmarshal([]byte(a.body), &st); err != nil {
		t.Errorf("body %q is not a JSON status: %v", a.body, err)
		return -1
	}
	return st.Code
}

func TestREST(t *testing.T) {
	d := startDaemon(t, nil)
	c := d.httpClient(t, d.clientTLS(t, ""))
	base := "https://" + d.https

	a := do(t, c, http.MethodGet, base+"/v1/jobs/a1", vicToken, "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `"id":"a1"`) {
		t.Errorf("GET a job with a viewer's token: %d %s", a.code, a.body)
	}
	if id := d.jobs.LastGet().Identity; id.Principal != "vic" || id.Method != auth.MethodToken || !strings.HasPrefix(id.Peer, "127.0.0.1:") {
		t.Errorf("the handler saw %+v, want vic by token from 127.0.0.1 (the HTTP client)", id)
	}

	a = do(t, c, http.MethodGet, base+"/v1/jobs/a1", "", "", "X-Request-Id", "rest-anon")
	if a.code != http.StatusUnauthorized || grpcCode(t, a) != 16 {
		t.Errorf("GET without a token: %d %s, want 401 {code: 16}", a.code, a.body)
	}
	if got := a.header.Get("X-Request-Id"); got != "rest-anon" {
		t.Errorf("401's X-Request-Id %q, want the caller's", got)
	}
	a = do(t, c, http.MethodGet, base+"/v1/jobs/a1", "wrong-token-0123456789", "")
	if a.code != http.StatusUnauthorized || grpcCode(t, a) != 16 {
		t.Errorf("GET with a wrong token: %d %s, want 401 {code: 16}", a.code, a.body)
	}

	// Refusals keep their codes over REST.
	a = do(t, c, http.MethodPost, base+"/v1/jobs/b1:cancel", vicToken, "")
	if a.code != http.StatusForbidden || grpcCode(t, a) != int(codes.PermissionDenied) || !strings.Contains(a.body, "pool /b") {
		t.Errorf("viewer cancelling: %d %s, want 403 naming the pool", a.code, a.body)
	}
	a = do(t, c, http.MethodPost, base+"/v1/jobs/a1:cancel", samToken, "", "X-Request-Id", "rest-req-1")
	if a.code != http.StatusOK {
		t.Errorf("submitter cancelling on its pool: %d %s", a.code, a.body)
	}
	if got := a.header.Get("X-Request-Id"); got != "rest-req-1" {
		t.Errorf("answer's X-Request-Id %q, want the caller's", got)
	}
	if !slices.Equal(d.jobs.Cancelled(), []string{"a1"}) {
		t.Errorf("cancelled %v, want [a1]", d.jobs.Cancelled())
	}
	// Audited: allowed changes, and refusals, those refused before the
	// gateway (401) too.
	cancelled, anon := false, false
	for _, e := range readAudit(t, d.audit) {
		switch e.RequestID {
		case "rest-req-1":
			cancelled = e.Principal == "sam" && e.Method == authtest.CancelJob && e.Outcome == "OK" && e.Object == "job a1"
		case "rest-anon":
			anon = e.Principal == "" && e.Method == "GET /v1/jobs/a1" && e.Outcome == "Unauthenticated" && strings.HasPrefix(e.Peer, "127.0.0.1:")
		}
	}
	if !cancelled || !anon {
		t.Errorf("want audit entries of sam's REST cancel (rest-req-1) and of the request without a token (rest-anon) in %+v", readAudit(t, d.audit))
	}

	// Lists are filtered over REST too.
	a = do(t, c, http.MethodGet, base+"/v1/jobs", samToken, "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `"a1"`) || strings.Contains(a.body, `"b1"`) {
		t.Errorf("sam's list: %d %s, want a1 and a2 only", a.code, a.body)
	}

	// A stream authorized on its request.
	a = do(t, c, http.MethodGet, base+"/v1/jobs/a1/tasks/0/logs", vicToken, "")
	if a.code != http.StatusOK || !strings.Contains(a.body, "YTE=") { // "a1", base64
		t.Errorf("logs over REST: %d %s", a.code, a.body)
	}
	a = do(t, c, http.MethodGet, base+"/v1/jobs/b1/tasks/0/logs", samToken, "")
	if a.code != http.StatusForbidden || !strings.Contains(a.body, `"code":7`) || strings.Contains(a.body, "bG9nIG9m") { // "log of"
		t.Errorf("sam's logs of b1 over REST: %d %s, want 403 and no log", a.code, a.body)
	}

	a = do(t, c, http.MethodGet, base+"/healthz", "", "")
	if a.code != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200", a.code)
	}
}

// Headers that would forge the identity the gateway forwards never get
// through: without a token they do not authenticate, with one they do
// not change who the caller is.
func TestForgedIdentityHeaders(t *testing.T) {
	d := startDaemon(t, nil)
	c := d.httpClient(t, d.clientTLS(t, ""))
	base := "https://" + d.https
	forged := []string{
		"Grpc-Metadata-X-Peloton-Principal", "olga",
		"Grpc-Metadata-X-Peloton-Groups", "ops,admins",
		"Grpc-Metadata-X-Peloton-Auth", auth.MethodInProcess,
		"Grpc-Metadata-X-Peloton-Peer", "in-process",
		"X-Peloton-Principal", "admin",
		"X-Peloton-Auth", auth.MethodToken,
		"X-Peloton-Groups", "admins",
	}
	a := do(t, c, http.MethodGet, base+"/v1/jobs/a1", "", "", forged...)
	if a.code != http.StatusUnauthorized || grpcCode(t, a) != 16 {
		t.Errorf("forged identity without a token: %d %s, want 401", a.code, a.body)
	}
	a = do(t, c, http.MethodPost, base+"/v1/jobs/b1:cancel", vicToken, "", forged...)
	if a.code != http.StatusForbidden || !strings.Contains(a.body, "vic") {
		t.Errorf("forged identity with a viewer's token: %d %s, want 403 to vic", a.code, a.body)
	}
	if got := d.jobs.Cancelled(); len(got) != 0 {
		t.Errorf("cancelled %v with a forged identity", got)
	}
	a = do(t, c, http.MethodGet, base+"/metrics", "", "", forged...)
	if a.code != http.StatusUnauthorized {
		t.Errorf("/metrics with a forged identity: %d, want 401", a.code)
	}
}

func TestMetricsNeedAClusterViewer(t *testing.T) {
	d := startDaemon(t, nil)
	c := d.httpClient(t, d.clientTLS(t, ""))
	url := "https://" + d.https + "/metrics"
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", http.StatusUnauthorized},
		{vicToken, http.StatusForbidden}, // a viewer of every pool, not of the cluster
		{olgaToken, http.StatusOK},
	} {
		if a := do(t, c, http.MethodGet, url, tc.token, ""); a.code != tc.code {
			t.Errorf("/metrics with %q: %d %s, want %d", tc.token, a.code, a.body, tc.code)
		}
	}
	refused := 0
	for _, e := range readAudit(t, d.audit) {
		if e.Method == "GET /metrics" && (e.Outcome == "Unauthenticated" || e.Outcome == "PermissionDenied" && e.Principal == "vic") {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d audit entries of refused /metrics requests, want 2: %+v", refused, readAudit(t, d.audit))
	}
	// The admin listener serves them plainly, for scrapers on a network
	// kept apart.
	if d.srv.AdminAddr == "" {
		t.Fatal("no admin listener")
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if a := do(t, http.DefaultClient, http.MethodGet, "http://"+d.srv.AdminAddr+path, "", ""); a.code != http.StatusOK {
			t.Errorf("admin listener %s: %d %s", path, a.code, a.body)
		}
	}
	if a := do(t, http.DefaultClient, http.MethodGet, "http://"+d.srv.AdminAddr+"/v1/jobs/a1", "", ""); a.code != http.StatusNotFound {
		t.Errorf("admin listener serves the API: %d", a.code)
	}
}

func TestGRPCOverTLS(t *testing.T) {
	d := startDaemon(t, nil)
	conn := dial(t, d.grpc, credentials.NewTLS(d.clientTLS(t, "")))
	jobs := pelotonv1.NewJobServiceClient(conn)
	if _, err := jobs.GetJob(withToken(t, vicToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Errorf("GetJob over TLS with a token: %v", err)
	}
	_, err := jobs.GetJob(withToken(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetJob over TLS without a token: %v, want Unauthenticated", err)
	}
	plain := pelotonv1.NewJobServiceClient(dial(t, d.grpc, insecure.NewCredentials()))
	if _, err := plain.GetJob(withToken(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to the TLS listener: %v, want Unavailable", err)
	}
	if !d.srv.TLS() {
		t.Error("Server.TLS() is false")
	}
}

// With a client CA, the client's certificate identifies the caller on
// both listeners; a group name with a comma stays one group over REST.
func TestMutualTLSIdentifiesTheCaller(t *testing.T) {
	d := startDaemon(t, func(s *serving.Security, d *daemon) { s.TLS.ClientCAFile = d.ca.File })
	base := "https://" + d.https

	cora := d.httpClient(t, d.clientTLS(t, "cora", "ops"))
	if a := do(t, cora, http.MethodPost, base+"/v1/jobs/b1:cancel", "", ""); a.code != http.StatusOK {
		t.Errorf("cora of ops by certificate over HTTPS: %d %s", a.code, a.body)
	}
	if a := do(t, cora, http.MethodGet, base+"/v1/jobs/a1", "", ""); a.code != http.StatusOK {
		t.Errorf("cora of ops by certificate over HTTPS: %d %s", a.code, a.body)
	}
	if id := d.jobs.LastGet().Identity; id.Principal != "cora" || id.Method != auth.MethodCertificate || !slices.Equal(id.Groups, []string{"ops"}) {
		t.Errorf("over HTTPS the handler saw %+v, want cora by certificate in ops", id)
	}
	if a := do(t, cora, http.MethodGet, base+"/metrics", "", ""); a.code != http.StatusOK {
		t.Errorf("/metrics to an operator by certificate: %d", a.code)
	}

	eve := d.httpClient(t, d.clientTLS(t, "eve", "readers,admins"))
	if a := do(t, eve, http.MethodPost, base+"/v1/jobs/b1:cancel", "", ""); a.code != http.StatusForbidden {
		t.Errorf("eve of group \"readers,admins\" over HTTPS: %d %s, want 403: she is not in admins", a.code, a.body)
	}

	// No certificate: the listener refuses the connection.
	noCert := d.httpClient(t, d.clientTLS(t, ""))
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	if resp, err := noCert.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("HTTPS without a client certificate: %d, want the connection refused", resp.StatusCode)
	}

	conn := dial(t, d.grpc, credentials.NewTLS(d.clientTLS(t, "cora", "ops")))
	if _, err := pelotonv1.NewJobServiceClient(conn).GetJob(withToken(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Errorf("cora by certificate over gRPC: %v", err)
	}
	if id := d.jobs.LastGet().Identity; id.Principal != "cora" || id.Method != auth.MethodCertificate {
		t.Errorf("over gRPC the handler saw %+v, want cora by certificate", id)
	}
}

// The daemon's own components call through the in-memory listener with
// their fixed roles: the advisor is an operator, a host agent only
// reports.
func TestInProcess(t *testing.T) {
	d := startDaemon(t, nil)
	conn, err := d.srv.InProcess(auth.PrincipalAdvisor)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := pelotonv1.NewJobServiceClient(conn)
	ctx := withToken(t, "")
	if _, err := jobs.ListJobVersions(ctx, &pelotonv1.ListJobVersionsRequest{JobId: "a1"}); err != nil {
		t.Errorf("advisor, cluster-wide operator call: %v", err)
	}
	if _, err := jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: "b1"}); err != nil {
		t.Errorf("advisor cancelling: %v", err)
	}
	resp, err := jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{})
	if err != nil || len(resp.GetJobs()) != 3 {
		t.Errorf("advisor's list: %v, %v; want every job", resp, err)
	}
	if _, err := jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Fatal(err)
	}
	if id := d.jobs.LastGet().Identity; id.Principal != auth.PrincipalAdvisor || id.Method != auth.MethodInProcess {
		t.Errorf("the handler saw %+v, want the advisor in-process", id)
	}

	agent, err := d.srv.InProcess(auth.PrincipalHostAgent)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	_, err = pelotonv1.NewJobServiceClient(agent).GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "a1"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("host agent reading a job: %v, want PermissionDenied", err)
	}
}

// Limits apply to what a request is, not what it looks like on the wire:
// a gzip-compressed gRPC request over the limit once decompressed, and a
// REST body over it.
func TestRequestSizeLimits(t *testing.T) {
	d := startDaemon(t, nil)
	conn := dial(t, d.grpc, credentials.NewTLS(d.clientTLS(t, "")))
	jobs := pelotonv1.NewJobServiceClient(conn)
	create := func(name string) error {
		_, err := jobs.CreateJob(withToken(t, samToken), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: name, Pool: "/a/x"}},
			grpc.UseCompressor(gzip.Name))
		return err
	}
	if err := create("small"); err != nil {
		t.Fatalf("a small gzip request: %v", err)
	}
	err := create(strings.Repeat("a", 4*maxRequest)) // a few hundred bytes compressed
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gzip request of %d bytes decompressed: %v, want ResourceExhausted", 4*maxRequest, err)
	}

	c := d.httpClient(t, d.clientTLS(t, ""))
	body := fmt.Sprintf(`{"name": %q, "pool": "/a/x"}`, strings.Repeat("a", maxRequest))
	a := do(t, c, http.MethodPost, "https://"+d.https+"/v1/jobs", samToken, body, "Content-Type", "application/json")
	if a.code != http.StatusRequestEntityTooLarge || grpcCode(t, a) != int(codes.ResourceExhausted) {
		t.Errorf("REST body over the limit: %d %s, want 413", a.code, a.body)
	}
	a = do(t, c, http.MethodPost, "https://"+d.https+"/v1/jobs", samToken, `{"name": "small", "pool": "/a/x"}`, "Content-Type", "application/json")
	if a.code != http.StatusOK {
		t.Errorf("REST body under the limit: %d %s", a.code, a.body)
	}
}

func TestStartFails(t *testing.T) {
	jobs := authtest.NewJobs(nil)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, _ := ca.Issue(t, "server", "server", tlstest.Opts{})
	_, otherKey := ca.Issue(t, "other", "other", tlstest.Opts{})
	missingRule := api(jobs)
	missingRule.Rules = jobs.Rules()
	delete(missingRule.Rules, authtest.DeleteJob)
	for _, tc := range []struct {
		name string
		api  serving.API
		sec  serving.Security
		want string
	}{
		{"token file missing", api(jobs), serving.Security{Auth: auth.Config{TokenFile: filepath.Join(dir, "missing")}}, "--auth-token-file"},
		{"key does not match", api(jobs), serving.Security{TLS: tlsfiles.Server{CertFile: cert, KeyFile: otherKey}}, "TLS"},
		{"a method without a rule", missingRule, serving.Security{}, authtest.DeleteJob},
		{"admin address taken", api(jobs), serving.Security{AdminListen: "256.0.0.1:1"}, "--admin-listen"},
	} {
		_, err := serving.Start(context.Background(), tc.api, tc.sec, listen(t), listen(t), quiet)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Start = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckExposure(t *testing.T) {
	tlsOn := tlsfiles.Server{CertFile: "c.pem", KeyFile: "k.pem"}
	for _, tc := range []struct {
		name  string
		sec   serving.Security
		addrs map[string]string
		want  []string // in the error; none: allowed
	}{
		{"loopback, nothing", serving.Security{}, map[string]string{"--listen": "127.0.0.1:5391", "--http-listen": "localhost:5392", "--x": "[::1]:1"}, nil},
		{"everywhere, nothing", serving.Security{}, map[string]string{"--listen": "0.0.0.0:5391"},
			[]string{"--listen 0.0.0.0:5391", "TLS (--tls-cert-file, --tls-key-file) and no authentication", "--insecure"}},
		{"all interfaces, empty host", serving.Security{}, map[string]string{"--http-listen": ":5392"}, []string{"--http-listen :5392", "--insecure"}},
		{"a LAN address, TLS only", serving.Security{TLS: tlsOn}, map[string]string{"--listen": "192.0.2.1:5391"},
			[]string{"--listen", "has no authentication (--auth-token-file or --client-ca-file)", "--insecure"}},
		{"tokens without TLS", serving.Security{Auth: auth.Config{TokenFile: "t"}}, map[string]string{"--listen": "0.0.0.0:5391"},
			[]string{"has no TLS (--tls-cert-file, --tls-key-file):"}},
		{"the first listener at fault, by flag", serving.Security{}, map[string]string{"--listen": "127.0.0.1:1", "--b": "0.0.0.0:1", "--a": "0.0.0.0:2"}, []string{"--a 0.0.0.0:2"}},
		{"TLS and tokens", serving.Security{TLS: tlsOn, Auth: auth.Config{TokenFile: "t"}}, map[string]string{"--listen": "0.0.0.0:5391"}, nil},
		{"TLS and client certificates", serving.Security{TLS: tlsfiles.Server{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}, map[string]string{"--listen": "0.0.0.0:5391"}, nil},
		{"insecure", serving.Security{Insecure: true}, map[string]string{"--listen": "0.0.0.0:5391"}, nil},
	} {
		err := serving.CheckExposure(tc.sec, tc.addrs)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want allowed", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: allowed, want refused", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func withToken(t *testing.T, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func readAudit(t *testing.T, path string) []auth.AuditEntry {
	t.Helper()
	var out []auth.AuditEntry
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e auth.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}
