package restgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadyz: /readyz answers 200 "ok" when ready, 503 with the reason when
// not, and 200 with "degraded", the reason and what it concerns when the
// daemon serves but a person must look (a load balancer keeps it in
// service); in text, or in JSON to a client that asks for it.
func TestReadyz(t *testing.T) {
	many := make([]string, maxReadyItems+5)
	for i := range many {
		many[i] = fmt.Sprintf("quarantine/tasks/j/%d@7", i)
	}
	for _, tc := range []struct {
		name   string
		ready  error
		code   int
		text   string
		status string
	}{
		{"ready", nil, 200, "ok\n", "ok"},
		{"not ready", errors.New("the store (etcd) does not answer"), 503, "not ready: the store (etcd) does not answer\n", "not ready"},
		{"degraded", fmt.Errorf("wrapped: %w", &Degraded{Reason: "2 records in quarantine", Items: []string{"quarantine/a@1", "quarantine/b@2"}}), 200,
			"ok (degraded: 2 records in quarantine)\nquarantine/a@1\nquarantine/b@2\n", "degraded"},
		{"degraded, many", &Degraded{Reason: "lots", Items: many}, 200, "", "degraded"},
	} {
		h := AdminHandler(func(context.Context) error { return tc.ready })
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != tc.code || tc.text != "" && rec.Body.String() != tc.text {
			t.Errorf("%s: %d %q, want %d %q", tc.name, rec.Code, rec.Body, tc.code, tc.text)
		}
		if tc.name == "degraded, many" {
			if lines := strings.Count(rec.Body.String(), "\n"); lines != maxReadyItems+2 || !strings.HasSuffix(rec.Body.String(), "(5 more)\n") {
				t.Errorf("%s: %d lines, ending %q", tc.name, lines, rec.Body.String()[max(0, rec.Body.Len()-20):])
			}
		}
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		req.Header.Set("Accept", "application/json")
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var got readyAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != tc.code || got.Status != tc.status ||
			rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s, JSON: %d %q (%v)", tc.name, rec.Code, rec.Body, err)
		}
		if tc.status == "degraded" && (got.Count == 0 || len(got.Items) == 0 || len(got.Items) > maxReadyItems) {
			t.Errorf("%s, JSON: %+v", tc.name, got)
		}
	}
}
