package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandler checks what the server answers for the UI's paths: the root
// redirects, every /ui/ path is the app's shell (so deep links work), the
// assets carry their content types, and anything else is not the UI's.
func TestHandler(t *testing.T) {
	for _, kind := range []Kind{Cluster, Federation} {
		srv := httptest.NewServer(Handler(kind))
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(path string) (*http.Response, string) {
			t.Helper()
			resp, err := noFollow.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		for _, p := range []string{"/", "/ui"} {
			resp, _ := get(p)
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
				t.Errorf("%s %s: %d to %q, want 302 to /ui/", kind, p, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
		for _, p := range []string{"/ui/", "/ui/jobs", "/ui/jobs/0d6e2b7c-1f3a-4c59-9a3e-2a1f0e5b7c11", "/ui/jobs/x/tasks/3",
			"/ui/pools", "/ui/pools/org/team", "/ui/hosts", "/ui/hosts/local-0", "/ui/partitions", "/ui/partitions?host=local-0", "/ui/updates", "/ui/updates/u1", "/ui/clusters", "/ui/services/s", "/ui/no/such/page"} {
			resp, body := get(p)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
				t.Errorf("%s %s: %d %q, want 200 text/html", kind, p, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if !strings.Contains(body, `<meta name="peloton-api" content="`+string(kind)+`">`) || !strings.Contains(body, `src="/ui/assets/app.js"`) {
				t.Errorf("%s %s: the shell does not name its API kind and app:\n%s", kind, p, body)
			}
			if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: missing security headers: %v", kind, p, resp.Header)
			}
		}
		assets := map[string]string{
			"app.js": "text/javascript; charset=utf-8", "api.js": "text/javascript; charset=utf-8",
			"dom.js": "text/javascript; charset=utf-8", "grid.js": "text/javascript; charset=utf-8",
			"diff.js": "text/javascript; charset=utf-8", "cluster.js": "text/javascript; charset=utf-8",
			"federation.js": "text/javascript; charset=utf-8", "partitions.js": "text/javascript; charset=utf-8",
			"style.css": "text/css; charset=utf-8",
			"icon.svg":  "image/svg+xml",
		}
		for name, ct := range assets {
			resp, body := get("/ui/assets/" + name)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ct || body == "" {
				t.Errorf("%s asset %s: %d %q (%d bytes), want 200 %q", kind, name, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), ct)
			}
		}
		for _, p := range []string{"/ui/assets/nope.js", "/ui/assets/index.html", "/ui/assets/../ui.go", "/ui/assets/", "/v2/other", "/favicon.ico"} {
			if resp, _ := get(p); resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s: %d, want 404", kind, p, resp.StatusCode)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/jobs", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s POST /ui/jobs: %d, want 405", kind, resp.StatusCode)
		}
		srv.Close()
	}
}

// TestShellNamesTheFederationUI: a cluster's shell carries its federation's
// UI address (escaped) when it knows it, and nothing when it does not.
func TestShellNamesTheFederationUI(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:5292/", `<meta name="peloton-federation-ui" content="http://127.0.0.1:5292/">`},
		{`http://x/"><script>`, `<meta name="peloton-federation-ui" content="http://x/&#34;&gt;&lt;script&gt;">`},
		{"", `<meta name="peloton-federation-ui" content="">`},
	} {
		srv := httptest.NewServer(HandlerWith(Cluster, tc.url))
		resp, err := http.Get(srv.URL + "/ui/clusters")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("federation UI %q: the shell lacks %s", tc.url, tc.want)
		}
	}
}
