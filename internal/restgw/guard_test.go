package restgw

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/peloton-sched/peloton/internal/auth"
)

// With a Guard, the event stream and /metrics are for viewers of the
// cluster; the probes, the OpenAPI document and Extra (the UI, which
// calls the API with the user's token) stay open.
func TestGuardedPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g, err := auth.New(auth.Config{
		TokenFile:  write("tokens.yaml", "- {token: vic-token-0123456789, principal: vic}\n- {token: olga-token-0123456789, principal: olga}\n"),
		PolicyFile: write("policy.yaml", "- {principal: vic, role: viewer, pools: [/**]}\n- {principal: olga, role: viewer}\n"),
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, auth.Rules{})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	h, err := Handler(context.Background(), Options{GRPCAddr: "127.0.0.1:1", Guard: g, MaxRequestBytes: 1 << 10,
		Events: ok, Extra: ok, OpenAPI: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, token string
		code        int
	}{
		{"/v1/events", "", http.StatusUnauthorized},
		{"/v1/events", "vic-token-0123456789", http.StatusForbidden},
		{"/v1/events", "olga-token-0123456789", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "vic-token-0123456789", http.StatusForbidden},
		{"/metrics", "olga-token-0123456789", http.StatusOK},
		{"/v1/jobs", "", http.StatusUnauthorized},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/openapi.json", "", http.StatusOK},
		{"/ui/index.html", "", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.code {
			t.Errorf("GET %s with %q: %d %s, want %d", tc.path, tc.token, rec.Code, rec.Body, tc.code)
		}
	}
}
