package auth_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/testing/authtest"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

const (
	vicToken  = "vic-token-0123456789"  // viewer of every pool (group readers)
	samToken  = "sam-token-0123456789"  // submitter on /a/**
	olgaToken = "olga-token-0123456789" // operator cluster-wide (group ops)

	tokensYAML = `
- {token: vic-token-0123456789, principal: vic, groups: [readers]}
- {token: sam-token-0123456789, principal: sam}
- {token: olga-token-0123456789, principal: olga, groups: [ops]}
`
	policyYAML = `
- {group: readers, role: viewer, pools: ["/**"]}
- {principal: sam, role: submitter, pools: ["/a/**"]}
- {group: ops, role: operator}
`
)

// The jobs every test serves: id -> pool.
var jobPools = map[string]string{"a1": "/a/x", "a2": "/a", "b1": "/b"}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is a guarded gRPC server of authtest's API on 127.0.0.1 and a
// plaintext connection to it (bearer tokens over loopback).
type fixture struct {
	jobs  *authtest.Jobs
	guard *auth.Guard
	conn  *grpc.ClientConn
	dir   string
	cfg   auth.Config
}

// start serves with the token file, the policy and an audit log in a
// fresh directory; change adjusts the configuration and the rules.
func start(t *testing.T, change func(*auth.Config, auth.Rules)) *fixture {
	t.Helper()
	f := &fixture{jobs: authtest.NewJobs(jobPools), dir: t.TempDir()}
	f.cfg = auth.Config{
		TokenFile:  authtest.WriteFile(t, f.dir, "tokens.yaml", tokensYAML),
		PolicyFile: authtest.WriteFile(t, f.dir, "policy.yaml", policyYAML),
		AuditFile:  filepath.Join(f.dir, "audit.log"),
		Log:        quiet,
	}
	rules := f.jobs.Rules()
	if change != nil {
		change(&f.cfg, rules)
	}
	g, err := auth.New(f.cfg, rules)
	if err != nil {
		t.Fatal(err)
	}
	f.guard = g
	t.Cleanup(func() { _ = g.Close() })
	srv := grpc.NewServer(g.ServerOptions()...)
	f.jobs.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	f.conn = dial(t, lis.Addr().String(), insecure.NewCredentials())
	return f
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

// as returns a context of a call with token (none if "") and the other
// metadata pairs kv.
func as(t *testing.T, token string, kv ...string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if token != "" {
		kv = append(kv, "authorization", "Bearer "+token)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func (f *fixture) jobsClient() pelotonv1.JobServiceClient {
	return pelotonv1.NewJobServiceClient(f.conn)
}

// wantCode checks err's code and that its message holds each of words.
func wantCode(t *testing.T, what string, err error, code codes.Code, words ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %s", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), w)
		}
	}
}

func TestUnauthenticated(t *testing.T) {
	f := start(t, nil)
	c := f.jobsClient()
	req := &pelotonv1.GetJobRequest{JobId: "a1"}
	_, err := c.GetJob(as(t, ""), req)
	wantCode(t, "no credentials", err, codes.Unauthenticated, "bearer token")
	_, err = c.GetJob(as(t, "not-a-token-0123456789"), req)
	wantCode(t, "a token not in the file", err, codes.Unauthenticated, "not valid")
	if err != nil && strings.Contains(err.Error(), "not-a-token") {
		t.Errorf("the error shows the token: %v", err)
	}
	_, err = c.GetJob(as(t, "", "authorization", "Basic dmljOnZpYw=="), req)
	wantCode(t, "not a bearer token", err, codes.Unauthenticated, "Bearer")
	_, err = c.GetJob(as(t, "", "authorization", "Bearer "+vicToken, "authorization", "Bearer "+samToken), req)
	wantCode(t, "two tokens", err, codes.Unauthenticated, "exactly one")
	_, err = c.GetJob(as(t, "", "authorization", "bearer  "+vicToken+" "), req)
	if err != nil {
		t.Errorf("a valid token with another case and blanks: %v", err)
	}
}

func TestRolesAndPools(t *testing.T) {
	f := start(t, nil)
	c := f.jobsClient()
	get := func(tok, job string) error {
		_, err := c.GetJob(as(t, tok), &pelotonv1.GetJobRequest{JobId: job})
		return err
	}
	cancel := func(tok, job string) error {
		_, err := c.CancelJob(as(t, tok), &pelotonv1.CancelJobRequest{JobId: job})
		return err
	}

	// A viewer reads, and may not change.
	for _, j := range []string{"a1", "a2", "b1"} {
		if err := get(vicToken, j); err != nil {
			t.Errorf("viewer GetJob %s: %v", j, err)
		}
	}
	wantCode(t, "viewer CancelJob", cancel(vicToken, "a1"), codes.PermissionDenied, "JobService.CancelJob", "submitter", "pool /a/x", "vic")

	// A grant on /a/** holds on /a and below, not on /b.
	for _, j := range []string{"a1", "a2"} {
		if err := cancel(samToken, j); err != nil {
			t.Errorf("submitter of /a/** CancelJob %s: %v", j, err)
		}
	}
	wantCode(t, "submitter of /a/** CancelJob on /b", cancel(samToken, "b1"), codes.PermissionDenied, "submitter", "pool /b", "sam")
	wantCode(t, "submitter of /a/** GetJob on /b", get(samToken, "b1"), codes.PermissionDenied, "viewer", "pool /b")
	if got := f.jobs.Cancelled(); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("handler cancelled %v, want [a1 a2]: a refused call must not reach it", got)
	}

	// A cluster-wide grant holds everywhere, cluster-wide calls included.
	if err := cancel(olgaToken, "b1"); err != nil {
		t.Errorf("operator CancelJob: %v", err)
	}
	_, err := c.ListJobVersions(as(t, olgaToken), &pelotonv1.ListJobVersionsRequest{JobId: "a1"})
	if err != nil {
		t.Errorf("operator, cluster-wide call: %v", err)
	}
	_, err = c.ListJobVersions(as(t, vicToken), &pelotonv1.ListJobVersionsRequest{JobId: "a1"})
	wantCode(t, "viewer of every pool, cluster-wide call", err, codes.PermissionDenied, "operator", "cluster-wide", "vic")

	// The rule's Pools error is the answer (before any right is looked at).
	wantCode(t, "unknown job", get(vicToken, "zz"), codes.NotFound, "zz")
}

// A request naming no pool is held to a cluster-wide grant: a grant on
// some pools does not cover it (it used to be allowed to anyone).
func TestRequestNamingNoPoolNeedsAClusterWideGrant(t *testing.T) {
	f := start(t, nil)
	c := f.jobsClient()
	create := func(tok, pool string) error {
		_, err := c.CreateJob(as(t, tok), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "j", Pool: pool}})
		return err
	}
	if err := create(samToken, "/a/new"); err != nil {
		t.Errorf("submitter of /a/** creating in /a/new: %v", err)
	}
	wantCode(t, "submitter of /a/**, no pool", create(samToken, ""), codes.PermissionDenied, "names no pool", "cluster-wide")
	wantCode(t, "viewer, no pool", create(vicToken, ""), codes.PermissionDenied, "names no pool")
	if err := create(olgaToken, ""); err != nil {
		t.Errorf("operator cluster-wide, no pool: %v", err)
	}
	// A list naming no pool is filtered instead.
	if _, err := c.ListJobs(as(t, samToken), &pelotonv1.ListJobsRequest{}); err != nil {
		t.Errorf("ListJobs naming no pool: %v", err)
	}
}

func TestListsAreFiltered(t *testing.T) {
	f := start(t, nil)
	c := f.jobsClient()
	ids := func(tok string, pool string) ([]string, error) {
		resp, err := c.ListJobs(as(t, tok), &pelotonv1.ListJobsRequest{Pool: pool})
		var out []string
		for _, j := range resp.GetJobs() {
			out = append(out, j.GetId())
		}
		return out, err
	}
	for _, tc := range []struct {
		tok, pool string
		want      []string
	}{
		{samToken, "", []string{"a1", "a2"}},
		{vicToken, "", []string{"a1", "a2", "b1"}},
		{olgaToken, "", []string{"a1", "a2", "b1"}},
		{samToken, "/a/x", []string{"a1"}},
	} {
		got, err := ids(tc.tok, tc.pool)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ListJobs(pool %q) with %s: %v, %v; want %v", tc.pool, tc.tok, got, err, tc.want)
		}
	}
	_, err := ids(samToken, "/b")
	wantCode(t, "a list narrowed to a pool the caller may not view", err, codes.PermissionDenied, "pool /b")
}

func TestMethodWithoutARuleIsRefused(t *testing.T) {
	f := start(t, func(_ *auth.Config, r auth.Rules) { delete(r, authtest.DeleteJob) })
	_, err := f.jobsClient().DeleteJob(as(t, olgaToken), &pelotonv1.DeleteJobRequest{JobId: "a1"})
	wantCode(t, "DeleteJob without a rule", err, codes.PermissionDenied, "JobService.DeleteJob", "no authorization rule")

	// With authentication off too.
	open := start(t, func(c *auth.Config, r auth.Rules) { *c = auth.Config{Log: quiet}; delete(r, authtest.DeleteJob) })
	_, err = open.jobsClient().DeleteJob(as(t, ""), &pelotonv1.DeleteJobRequest{JobId: "a1"})
	wantCode(t, "DeleteJob without a rule, authentication off", err, codes.PermissionDenied, "no authorization rule")
	if err := (auth.Rules{authtest.GetJob: {}}).Check([]string{authtest.GetJob, authtest.DeleteJob, authtest.CancelJob}); err == nil ||
		!strings.Contains(err.Error(), authtest.CancelJob+", "+authtest.DeleteJob) {
		t.Errorf("Rules.Check = %v, want both methods without a rule named", err)
	}
}

// Without a policy every authenticated caller may call what has a rule;
// without authentication everyone is anonymous, lists unfiltered.
func TestWithoutPolicyOrAuthentication(t *testing.T) {
	f := start(t, func(c *auth.Config, _ auth.Rules) { c.PolicyFile = "" })
	c := f.jobsClient()
	if _, err := c.CancelJob(as(t, vicToken), &pelotonv1.CancelJobRequest{JobId: "b1"}); err != nil {
		t.Errorf("no policy, authenticated: %v", err)
	}
	_, err := c.GetJob(as(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"})
	wantCode(t, "no policy, no credentials", err, codes.Unauthenticated)

	open := start(t, func(c *auth.Config, _ auth.Rules) { *c = auth.Config{Log: quiet} })
	if open.guard.Authenticating() || open.guard.Authorizing() {
		t.Error("the zero Config authenticates or authorizes")
	}
	if _, err := open.jobsClient().CancelJob(as(t, ""), &pelotonv1.CancelJobRequest{JobId: "b1"}); err != nil {
		t.Errorf("authentication off: %v", err)
	}
	if _, err := open.jobsClient().GetJob(as(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Errorf("authentication off: %v", err)
	}
	if id := open.jobs.LastGet().Identity; id.Principal != auth.Anonymous || id.Method != auth.MethodNone {
		t.Errorf("authentication off: the handler saw %+v, want anonymous", id)
	}
}

func TestRateLimit(t *testing.T) {
	// So slow a bucket never refills during the test: no timing involved.
	f := start(t, func(c *auth.Config, _ auth.Rules) { c.RatePerSecond, c.RateBurst = 0.001, 3 })
	c := f.jobsClient()
	for i := range 3 {
		if _, err := c.GetJob(as(t, vicToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
			t.Fatalf("call %d of the burst: %v", i+1, err)
		}
	}
	_, err := c.GetJob(as(t, vicToken), &pelotonv1.GetJobRequest{JobId: "a1"})
	wantCode(t, "over the burst", err, codes.ResourceExhausted, "rate limit", "vic")
	var retry *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 {
		t.Errorf("over the burst: details %v, want a RetryInfo with a delay", status.Convert(err).Details())
	}
	// Each principal has its own bucket.
	if _, err := c.GetJob(as(t, samToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Errorf("another principal: %v", err)
	}
	// Streams count too.
	logs, err := pelotonv1.NewTaskServiceClient(f.conn).GetTaskLogs(as(t, vicToken), &pelotonv1.GetTaskLogsRequest{JobId: "a1"})
	if err == nil {
		_, err = logs.Recv()
	}
	wantCode(t, "a stream over the burst", err, codes.ResourceExhausted)
}

func TestHandlerTimeout(t *testing.T) {
	f := start(t, func(c *auth.Config, _ auth.Rules) { c.HandlerTimeout = time.Minute })
	c := f.jobsClient()
	before := time.Now()
	if _, err := c.GetJob(as(t, vicToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Fatal(err)
	}
	// The client set a deadline of 10s (as): the earlier one stands.
	if dl := f.jobs.LastGet().Deadline; dl.IsZero() || dl.After(before.Add(11*time.Second)) {
		t.Errorf("handler deadline %v, want the caller's, about 10s from %v", dl, before)
	}
	before = time.Now()
	if _, err := c.GetJob(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+vicToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Fatal(err)
	}
	dl := f.jobs.LastGet().Deadline
	if dl.IsZero() || dl.Before(before.Add(time.Minute)) || dl.After(time.Now().Add(time.Minute)) {
		t.Errorf("no deadline from the caller: the handler's is %v, want a minute from %v", dl, before)
	}

	// Without HandlerTimeout, a call without a deadline has none.
	f2 := start(t, nil)
	if _, err := f2.jobsClient().GetJob(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+vicToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Fatal(err)
	}
	if dl := f2.jobs.LastGet().Deadline; !dl.IsZero() {
		t.Errorf("without HandlerTimeout the handler's deadline is %v, want none", dl)
	}
	if id := f2.jobs.LastGet().Identity; id.Principal != "vic" || id.Method != auth.MethodToken || !slices.Equal(id.Groups, []string{"readers"}) || id.Peer == "" {
		t.Errorf("the handler saw %+v, want vic by token with group readers and a peer", id)
	}
}

// readAudit returns the audit log's entries.
func readAudit(t *testing.T, path string) []auth.AuditEntry {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []auth.AuditEntry
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var e auth.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func TestAuditAndRequestIDs(t *testing.T) {
	f := start(t, nil)
	c := f.jobsClient()
	var hdr metadata.MD
	// An allowed mutating call, with the caller's request id.
	if _, err := c.CancelJob(as(t, samToken, "x-request-id", "req-cancel-1"), &pelotonv1.CancelJobRequest{JobId: "a1"}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get("x-request-id"); !slices.Equal(got, []string{"req-cancel-1"}) {
		t.Errorf("answer's x-request-id %v, want the caller's", got)
	}
	// An allowed read: not written.
	if _, err := c.GetJob(as(t, vicToken, "x-request-id", "req-read"), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Fatal(err)
	}
	// Refused: a mutating call, a read, a caller without credentials.
	_, err := c.CancelJob(as(t, vicToken, "x-request-id", "req-denied"), &pelotonv1.CancelJobRequest{JobId: "b1"})
	wantCode(t, "viewer cancelling", err, codes.PermissionDenied)
	_, err = c.GetJob(as(t, samToken), &pelotonv1.GetJobRequest{JobId: "b1"}, grpc.Header(&hdr))
	wantCode(t, "sam reading /b", err, codes.PermissionDenied)
	made := hdr.Get("x-request-id")
	if len(made) != 1 || made[0] == "" {
		t.Errorf("a call without a request id got x-request-id %v, want one made up", made)
	}
	_, err = c.CancelJob(as(t, "", "x-request-id", "req-anon"), &pelotonv1.CancelJobRequest{JobId: "a1"})
	wantCode(t, "no credentials", err, codes.Unauthenticated)

	entries := readAudit(t, f.cfg.AuditFile)
	type line struct{ id, principal, method, object, outcome string }
	var got []line
	for _, e := range entries {
		got = append(got, line{e.RequestID, e.Principal, e.Method, e.Object, e.Outcome})
		if e.Time.IsZero() || e.DurationMs < 0 {
			t.Errorf("entry %+v: no time or a negative duration", e)
		}
	}
	want := []line{
		{"req-cancel-1", "sam", authtest.CancelJob, "job a1", "OK"},
		{"req-denied", "vic", authtest.CancelJob, "job b1", "PermissionDenied"},
		{made[0], "sam", authtest.GetJob, "job b1", "PermissionDenied"},
		{"req-anon", "", authtest.CancelJob, "job a1", "Unauthenticated"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit log:\n%v\nwant\n%v", got, want)
	}
	if len(entries) == len(want) {
		if e := entries[1]; e.AuthBy != auth.MethodToken || !slices.Equal(e.Groups, []string{"readers"}) || e.Peer == "" || !strings.Contains(e.Message, "submitter") {
			t.Errorf("denied entry %+v: want auth method, groups, peer and the refusal's message", e)
		}
		if entries[0].Message != "" {
			t.Errorf("allowed entry has message %q", entries[0].Message)
		}
	}
	for _, e := range entries {
		if b, _ := json.Marshal(e); strings.Contains(string(b), "token-0123456789") {
			t.Errorf("an audit entry shows a token: %s", b)
		}
	}
}

func TestStreamAuthorizedOnItsFirstMessage(t *testing.T) {
	f := start(t, nil)
	tasks := pelotonv1.NewTaskServiceClient(f.conn)
	read := func(tok, job string) (string, error) {
		s, err := tasks.GetTaskLogs(as(t, tok), &pelotonv1.GetTaskLogsRequest{JobId: job})
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			if err != nil {
				return b.String(), err
			}
			b.Write(m.GetData())
		}
	}
	if got, err := read(samToken, "a1"); err != nil || got != "log of a1" {
		t.Errorf("sam's logs of a1: %q, %v", got, err)
	}
	got, err := read(samToken, "b1")
	wantCode(t, "sam's logs of b1", err, codes.PermissionDenied, "TaskService.GetTaskLogs", "viewer", "pool /b")
	if got != "" {
		t.Errorf("a refused stream sent %q", got)
	}
	_, err = read("", "a1")
	wantCode(t, "a stream without credentials", err, codes.Unauthenticated)
	_, err = read(vicToken, "zz")
	wantCode(t, "logs of an unknown job", err, codes.NotFound)

	n := 0
	for _, e := range readAudit(t, f.cfg.AuditFile) {
		if e.Method == authtest.GetTaskLogs && e.Outcome == "PermissionDenied" && e.Object == "job b1" && e.Principal == "sam" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d audit entries of sam's refused stream, want 1", n)
	}
}

// A stream handler that sends before it receives, or carries on after
// its request was refused, still sends nothing to a caller that may not
// see it, and the call ends with the refusal. (The guard used to let a
// send through before the first message and every message after a
// refused one, and to audit a refused mutating stream twice.)
func TestCarelessStreamHandlerLeaksNothing(t *testing.T) {
	const method = "/peloton.test.Careless/Logs"
	desc := grpc.ServiceDesc{
		ServiceName: "peloton.test.Careless",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Logs", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				_ = ss.SendMsg(&pelotonv1.LogChunk{Data: []byte("early ")})
				var req pelotonv1.GetTaskLogsRequest
				_ = ss.RecvMsg(&req) // the error ignored
				_ = ss.RecvMsg(&req)
				_ = ss.SendMsg(&pelotonv1.LogChunk{Data: []byte("late")})
				return nil
			},
		}},
	}
	jobs := authtest.NewJobs(jobPools)
	rules := jobs.Rules()
	rules[method] = auth.Rule{Role: auth.Viewer, Pools: rules[authtest.GetTaskLogs].Pools, Mutating: true, Object: rules[authtest.GetTaskLogs].Object}
	dir := t.TempDir()
	cfg := auth.Config{
		TokenFile:  authtest.WriteFile(t, dir, "tokens.yaml", tokensYAML),
		PolicyFile: authtest.WriteFile(t, dir, "policy.yaml", policyYAML),
		AuditFile:  filepath.Join(dir, "audit.log"),
		Log:        quiet,
	}
	g, err := auth.New(cfg, rules)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := grpc.NewServer(g.ServerOptions()...)
	srv.RegisterService(&desc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn := dial(t, lis.Addr().String(), insecure.NewCredentials())

	run := func(tok, job string) (string, error) {
		s, err := conn.NewStream(as(t, tok), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
		if err != nil {
			return "", err
		}
		// A send after the server ended the stream is io.EOF; the
		// stream's status comes from receiving.
		for range 2 {
			if err := s.SendMsg(&pelotonv1.GetTaskLogsRequest{JobId: job}); err != nil && !errors.Is(err, io.EOF) {
				return "", err
			}
		}
		_ = s.CloseSend()
		var b strings.Builder
		for {
			var m pelotonv1.LogChunk
			err := s.RecvMsg(&m)
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			if err != nil {
				return b.String(), err
			}
			b.Write(m.GetData())
		}
	}
	got, err := run(samToken, "b1")
	wantCode(t, "refused caller", err, codes.PermissionDenied, "pool /b")
	if got != "" {
		t.Errorf("a refused caller received %q", got)
	}
	got, err = run(samToken, "a1")
	if err != nil || got != "late" {
		t.Errorf("allowed caller: %q, %v; want only what was sent after the request was authorized", got, err)
	}
	n := 0
	for _, e := range readAudit(t, cfg.AuditFile) {
		if e.Outcome == "PermissionDenied" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d audit entries of the refused mutating stream, want 1", n)
	}
}

// The token file and the policy are read again when they change: the
// next call follows them; a policy that does not load leaves the last
// good one in force.
func TestFilesAreReloaded(t *testing.T) {
	old := reload.Interval
	reload.Interval = 0
	t.Cleanup(func() { reload.Interval = old })
	f := start(t, nil)
	c := f.jobsClient()
	cancel := func(tok, job string) error {
		_, err := c.CancelJob(as(t, tok), &pelotonv1.CancelJobRequest{JobId: job})
		return err
	}
	wantCode(t, "before the change", cancel(samToken, "b1"), codes.PermissionDenied)

	authtest.WriteFile(t, f.dir, "policy.yaml", policyYAML+"- {principal: sam, role: submitter, pools: [/b]}\n")
	if err := cancel(samToken, "b1"); err != nil {
		t.Errorf("after sam was granted /b: %v", err)
	}
	authtest.WriteFile(t, f.dir, "policy.yaml", "- {principal: sam, role: boss}\n")
	if err := cancel(samToken, "b1"); err != nil {
		t.Errorf("after a broken policy replaced the good one: %v, want the last good policy kept", err)
	}
	authtest.WriteFile(t, f.dir, "policy.yaml", policyYAML)
	wantCode(t, "after the grant was taken back", cancel(samToken, "b1"), codes.PermissionDenied)

	const newToken = "new-token-0123456789"
	_, err := c.GetJob(as(t, newToken), &pelotonv1.GetJobRequest{JobId: "a1"})
	wantCode(t, "a token not yet in the file", err, codes.Unauthenticated)
	authtest.WriteFile(t, f.dir, "tokens.yaml", "- {token: "+newToken+", principal: nina, groups: [readers]}\n")
	if _, err := c.GetJob(as(t, newToken), &pelotonv1.GetJobRequest{JobId: "a1"}); err != nil {
		t.Errorf("a token added to the file: %v", err)
	}
	_, err = c.GetJob(as(t, vicToken), &pelotonv1.GetJobRequest{JobId: "a1"})
	wantCode(t, "a token removed from the file", err, codes.Unauthenticated)
}

func TestNewFailsOnBadFiles(t *testing.T) {
	dir := t.TempDir()
	rules := authtest.NewJobs(jobPools).Rules()
	for _, tc := range []struct {
		cfg  auth.Config
		want string
	}{
		{auth.Config{TokenFile: filepath.Join(dir, "missing")}, "--auth-token-file"},
		{auth.Config{TokenFile: authtest.WriteFile(t, dir, "t.yaml", "- {token: short, principal: a}")}, "--auth-token-file"},
		{auth.Config{PolicyFile: authtest.WriteFile(t, dir, "p.yaml", "- {principal: a, role: boss}")}, "--authz-policy-file"},
		{auth.Config{AuditFile: filepath.Join(dir, "no", "such", "dir", "audit.log")}, "--audit-log"},
		// A policy nobody is held to (all callers anonymous) would allow
		// everything.
		{auth.Config{PolicyFile: authtest.WriteFile(t, dir, "good.yaml", policyYAML)}, "needs callers to authenticate"},
	} {
		tc.cfg.Log = quiet
		if _, err := auth.New(tc.cfg, rules); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// A client certificate the listener verified identifies its holder: the
// common name is the principal, the organizations its groups. A bearer
// token, if sent, is who the caller is.
func TestClientCertificateIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	jobs := authtest.NewJobs(jobPools)
	g, err := auth.New(auth.Config{
		TokenFile:   authtest.WriteFile(t, dir, "tokens.yaml", tokensYAML),
		PolicyFile:  authtest.WriteFile(t, dir, "policy.yaml", policyYAML),
		ClientCerts: true, Log: quiet,
	}, jobs.Rules())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	stc, err := tlsfiles.ServerConfig(tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.File}, []string{"h2"}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(g.ServerOptions(), grpc.Creds(credentials.NewTLS(stc)))...)
	jobs.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	client := func(cn string, groups ...string) pelotonv1.JobServiceClient {
		c, k := ca.Issue(t, cn, cn, tlstest.Opts{Groups: groups})
		cfg, err := tlsfiles.ClientConfig(tlsfiles.Client{CAFile: ca.File, CertFile: c, KeyFile: k, ServerName: "127.0.0.1"}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return pelotonv1.NewJobServiceClient(dial(t, lis.Addr().String(), credentials.NewTLS(cfg)))
	}
	cora := client("cora", "ops")
	if _, err := cora.CancelJob(as(t, ""), &pelotonv1.CancelJobRequest{JobId: "b1"}); err != nil {
		t.Errorf("cora of group ops, by certificate: %v", err)
	}
	if id := func() auth.Identity {
		_, _ = cora.GetJob(as(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"})
		return jobs.LastGet().Identity
	}(); id.Principal != "cora" || id.Method != auth.MethodCertificate || !slices.Equal(id.Groups, []string{"ops"}) {
		t.Errorf("the handler saw %+v, want cora by certificate in group ops", id)
	}
	_, err = cora.CancelJob(as(t, vicToken), &pelotonv1.CancelJobRequest{JobId: "b1"})
	wantCode(t, "cora's certificate with vic's token", err, codes.PermissionDenied, "vic")

	dan := client("dan")
	_, err = dan.GetJob(as(t, ""), &pelotonv1.GetJobRequest{JobId: "a1"})
	wantCode(t, "a certificate whose holder has no grant", err, codes.PermissionDenied, "dan")
	// A certificate cannot claim a system principal's in-process rights.
	adv := client(auth.PrincipalAdvisor)
	_, err = adv.ListJobVersions(as(t, ""), &pelotonv1.ListJobVersionsRequest{})
	wantCode(t, "a certificate named "+auth.PrincipalAdvisor, err, codes.PermissionDenied)
}
