package restgw

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// A number in a REST path or query that does not parse is refused naming
// the parameter and what it takes, in the API's words: no strconv text.
// The gateway refuses it before any gRPC call, so no server is needed.
func TestBadNumberParametersNameTheField(t *testing.T) {
	h, err := Handler(context.Background(), Options{GRPCAddr: "127.0.0.1:1", MaxRequestBytes: 1 << 10,
		Register: []RegisterFunc{pelotonv1.RegisterTaskServiceHandlerFromEndpoint, pelotonv1.RegisterJobServiceHandlerFromEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ target, want string }{
		{"/v1/jobs/j/tasks/-1", `instance_id: "-1" is not a whole number from 0 up`},
		{"/v1/jobs/j/tasks/abc", `instance_id: "abc" is not a whole number from 0 up`},
		{"/v1/jobs/j/tasks/99999999999", `instance_id: "99999999999" is out of range`},
		{"/v1/jobs?page_size=-5", `page_size: "-5" is not a whole number from 0 up`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %d %s: %v", tc.target, rec.Code, rec.Body, err)
		}
		if rec.Code != http.StatusBadRequest || body.Message != tc.want || strings.Contains(body.Message, "strconv") {
			t.Errorf("%s: %d %q, want 400 %q", tc.target, rec.Code, body.Message, tc.want)
		}
	}
}
