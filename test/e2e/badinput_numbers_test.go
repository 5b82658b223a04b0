package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestBadInputResourceNumbers: a negative, NaN, infinite or huge resource in
// a pool reservation or limit (create and update) or in a job's resources is
// InvalidArgument naming the field over REST, never 500, and stores nothing.
func TestBadInputResourceNumbers(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, hostCPU: 2, hostMem: 2048})
	if code, raw := s.rest("POST", "/v1/pools/ok", `{}`, nil); code != 200 {
		t.Fatalf("create /ok: %d %s", code, raw)
	}
	for _, v := range []string{`-1`, `"NaN"`, `"Infinity"`, `"-Infinity"`, `1e308`} {
		for _, tc := range []struct{ method, path, body, field string }{
			{"POST", "/v1/pools/x", `{"reservation":{"cpu":` + v + `}}`, "spec.reservation.cpu: must be a finite number >= 0"},
			{"POST", "/v1/pools/x", `{"limit":{"memoryMb":` + v + `}}`, "spec.limit.memoryMb: must be a finite number >= 0"},
			{"PUT", "/v1/pools/ok", `{"reservation":{"diskMb":` + v + `}}`, "spec.reservation.diskMb: must be a finite number >= 0"},
			{"PUT", "/v1/pools/ok", `{"share":{"cpu":` + v + `}}`, "spec.share.cpu: "},
			{"POST", "/v1/jobs", `{"name":"j","type":"BATCH","pool":"/default","instanceCount":1,"defaultSpec":{"command":["/bin/true"],"resources":{"cpu":` + v + `}}}`, "spec.defaultSpec.resources.cpu: must be a finite number >= 0"},
		} {
			code, raw := s.rest(tc.method, tc.path, tc.body, nil)
			if v == `1e308` && !strings.Contains(tc.field, "share") {
				tc.field = strings.SplitAfter(tc.field, ": ")[0] + "too large"
			}
			if code != 400 || !strings.Contains(raw, `"message":"`+tc.field) {
				t.Errorf("%s %s %s: got %d %s, want 400 with %q", tc.method, tc.path, tc.body, code, raw, tc.field)
			}
		}
	}
	if code, raw := s.rest("GET", "/v1/pools/x", nil, nil); code != 404 {
		t.Errorf("pool /x after refused creates: %d %s, want 404", code, raw)
	}
	// share 0 is refused: proto3 cannot tell it from unset, so we refuse an
	// explicit all-zero share instead of silently reading it as 1.
	if code, raw := s.rest("POST", "/v1/pools/z", `{"share":{"cpu":0}}`, nil); code != 400 || !strings.Contains(raw, `"message":"spec.share:`) {
		t.Errorf("share 0: got %d %s, want 400 naming spec.share", code, raw)
	}
}

// TestBadInputRESTProtocol: an oversized body is 413 and a known path with
// the wrong method is 405 with an Allow header.
func TestBadInputRESTProtocol(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, hostCPU: 2, hostMem: 2048})
	big := `{"name":"j","description":"` + strings.Repeat("x", 17<<20) + `"}`
	if code, raw := s.rest("POST", "/v1/jobs", big, nil); code != 413 {
		t.Errorf("oversized body: got %d %.200s, want 413", code, raw)
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/jobs", "GET, POST"},
		{"PATCH", "/v1/pools/a/b", "DELETE, GET, POST, PUT"},
		{"DELETE", "/v1/hosts", "GET"},
	} {
		code, hdr := s.restAllow(tc.method, tc.path)
		if code != 405 || hdr != tc.allow {
			t.Errorf("%s %s: got %d Allow %q, want 405 Allow %q", tc.method, tc.path, code, hdr, tc.allow)
		}
	}
}

// restAllow sends a bodiless request and returns the status and Allow header.
func (s *stack) restAllow(method, path string) (int, string) {
	req, err := http.NewRequest(method, "http://"+s.ready.HTTPAddr+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Allow")
}
