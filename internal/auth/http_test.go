package auth

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
)

const httpTokens = `
- {token: vic-token-0123456789, principal: vic, groups: ["readers,admins", ops]}
- {token: olga-token-0123456789, principal: olga, groups: [ops]}
`

const httpPolicy = `
- {group: admins, role: admin}
- {group: ops, role: operator}
- {principal: vic, role: viewer, pools: ["/**"]}
`

func newHTTPGuard(t *testing.T) *Guard {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g, err := New(Config{TokenFile: write("tokens.yaml", httpTokens), PolicyFile: write("policy.yaml", httpPolicy),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// forwarded runs r through the guard's GatewayHandler and the gateway's
// metadata options, and returns what the in-memory listener's guard
// makes of the metadata the gateway would send (or the HTTP answer if
// the handler answered itself).
func forwarded(t *testing.T, g *Guard, r *http.Request) (Identity, *httptest.ResponseRecorder, error) {
	t.Helper()
	mux := runtime.NewServeMux(GatewayOptions()...)
	var md metadata.MD
	var seen http.Header
	rec := httptest.NewRecorder()
	g.GatewayHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, "/peloton.api.v1.JobService/GetJob")
		if err != nil {
			t.Fatal(err)
		}
		md, _ = metadata.FromOutgoingContext(ctx)
	})).ServeHTTP(rec, r)
	if md == nil {
		return Identity{}, rec, nil
	}
	for k := range seen {
		if strings.Contains(strings.ToLower(k), "x-peloton-") {
			t.Errorf("the gateway was handed header %s", k)
		}
	}
	id, err := g.Internal().forwardedIdentity(md)
	return id, nil, err
}

// A group with a comma in its name is one group on the REST path as on
// gRPC: the forwarded list used to be split on every comma, making group
// "readers,admins" two groups, one of them admins.
func TestGatewayForwardsTheIdentity(t *testing.T) {
	g := newHTTPGuard(t)
	r := httptest.NewRequest(http.MethodGet, "/v1/jobs/a1", nil)
	r.Header.Set("Authorization", "Bearer vic-token-0123456789")
	r.RemoteAddr = "192.0.2.7:5555"
	id, _, err := forwarded(t, g, r)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{Principal: "vic", Groups: []string{"readers,admins", "ops"}, Method: MethodToken, Peer: "192.0.2.7:5555"}
	if id.Principal != want.Principal || !slices.Equal(id.Groups, want.Groups) || id.Method != want.Method || id.Peer != want.Peer {
		t.Errorf("forwarded identity %+v, want %+v", id, want)
	}
	p := g.policy.Get()
	if p.Allows(id, Admin, "") {
		t.Error("vic, not in group admins, is admin over REST")
	}
}

// Headers that name a forwarded identity never get through: without a
// valid token the request is refused; with one, the token decides.
func TestForgedForwardedHeaders(t *testing.T) {
	g := newHTTPGuard(t)
	forge := func(r *http.Request) {
		r.Header.Set("X-Peloton-Principal", "olga")
		r.Header.Set("X-Peloton-Auth", MethodInProcess)
		r.Header.Set("Grpc-Metadata-X-Peloton-Principal", PrincipalAdvisor)
		r.Header.Set("Grpc-Metadata-X-Peloton-Groups", "admins")
		r.Header["grpc-metadata-x-peloton-auth"] = []string{MethodInProcess} // not canonical
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/jobs/a1", nil)
	forge(r)
	_, rec, _ := forwarded(t, g, r)
	if rec == nil || rec.Code != http.StatusUnauthorized {
		t.Fatalf("forged headers without a token: %v, want 401", rec)
	}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != 16 || body.Message == "" {
		t.Errorf("401 body %q, want {code: 16, message}", rec.Body)
	}
	if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without a WWW-Authenticate: Bearer header")
	}

	r = httptest.NewRequest(http.MethodGet, "/v1/jobs/a1", nil)
	forge(r)
	r.Header.Set("Authorization", "Bearer olga-token-0123456789")
	id, _, err := forwarded(t, g, r)
	if err != nil || id.Principal != "olga" || id.Method != MethodToken || !slices.Equal(id.Groups, []string{"ops"}) {
		t.Errorf("forged headers with olga's token: %+v, %v; want olga by token, group ops", id, err)
	}

	// The gateway's own header matcher drops them too, should a request
	// reach it some other way.
	mux := runtime.NewServeMux(GatewayOptions()...)
	r = httptest.NewRequest(http.MethodGet, "/v1/jobs/a1", nil)
	forge(r)
	r.Header.Set("Grpc-Metadata-Other", "kept")
	ctx, err := runtime.AnnotateContext(context.Background(), mux, r, "/peloton.api.v1.JobService/GetJob")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	for k := range md {
		if strings.HasPrefix(k, "x-peloton-") {
			t.Errorf("the gateway forwards %s: %v", k, md[k])
		}
	}
	if got := md.Get("other"); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("other Grpc-Metadata- headers: %v, want forwarded", got)
	}
}

func TestForwardedIdentityIsStrict(t *testing.T) {
	g := newHTTPGuard(t).Internal()
	full := func() metadata.MD {
		return metadata.Pairs(fwdMethod, MethodToken, fwdPrincipal, "vic", fwdGroups, "ops", fwdPeer, "p")
	}
	if id, err := g.forwardedIdentity(full()); err != nil || id.Principal != "vic" {
		t.Fatalf("a full forwarded identity: %+v, %v", id, err)
	}
	twice := full()
	twice.Append(fwdPrincipal, "olga")
	bad := full()
	bad.Set(fwdPrincipal, "%zz")
	none := full()
	none.Set(fwdMethod, MethodNone)
	for name, md := range map[string]metadata.MD{
		"a key twice":           twice,
		"a bad escape":          bad,
		"no identity":           {},
		"method none":           none,
		"method empty":          metadata.Pairs(fwdMethod, ""),
		"only the peer, no one": metadata.Pairs(fwdPeer, "p"),
	} {
		if id, err := g.forwardedIdentity(md); err == nil {
			t.Errorf("%s: %+v, want Unauthenticated from a guard that authenticates", name, id)
		}
	}
}

func TestRequireHTTP(t *testing.T) {
	g := newHTTPGuard(t)
	h := g.RequireHTTP(Viewer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "metrics") }))
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", http.StatusUnauthorized},
		{"wrong-token-0123456789", http.StatusUnauthorized},
		{"vic-token-0123456789", http.StatusOK}, // through its group ops
		{"olga-token-0123456789", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.code {
			t.Errorf("/metrics with %q: %d %s, want %d", tc.token, rec.Code, rec.Body, tc.code)
		}
	}
	pool := newGuardWith(t, "- {token: pat-token-0123456789, principal: pat}\n", "- {principal: pat, role: operator, pools: [/a/**]}\n")
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer pat-token-0123456789")
	pool.RequireHTTP(Viewer, http.NotFoundHandler()).ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "cluster-wide") {
		t.Errorf("/metrics by an operator of /a/**: %d %s, want 403 saying cluster-wide", rec.Code, rec.Body)
	}
	open, err := New(Config{}, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	open.RequireHTTP(Admin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("authentication off: %d, want 200", rec.Code)
	}
}

func newGuardWith(t *testing.T, tokens, policy string) *Guard {
	t.Helper()
	dir := t.TempDir()
	tp, pp := filepath.Join(dir, "t"), filepath.Join(dir, "p")
	if err := os.WriteFile(tp, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pp, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{TokenFile: tp, PolicyFile: pp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
