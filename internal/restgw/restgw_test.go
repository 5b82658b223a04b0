package restgw

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
)

// TestNonUTF8PathOrQueryIs400: a path or query that is not UTF-8 once
// percent-decoded is the client's mistake, answered 400 with a JSON status
// before the gateway sees it. The gateway used to copy the bytes into a
// string field of the gRPC request, whose marshaling failed: a 500.
func TestNonUTF8PathOrQueryIs400(t *testing.T) {
	reg := func(ctx context.Context, mux *runtime.ServeMux, _ string, _ []grpc.DialOption) error {
		return mux.HandlePath(http.MethodGet, "/v1/things/{name}", func(w http.ResponseWriter, r *http.Request, p map[string]string) {
			_, _ = io.WriteString(w, p["name"])
		})
	}
	h, err := Handler(context.Background(), Options{GRPCAddr: "127.0.0.1:1", Register: []RegisterFunc{reg}, MaxRequestBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		code   int
	}{
		{"/v1/things/ok", http.StatusOK},
		{"/v1/things/%C3%A9t%C3%A9?q=%C3%A9", http.StatusOK},
		{"/v1/things/ok?a=1;b", http.StatusOK}, // malformed queries stay the gateway's business
		{"/v1/things/%94", http.StatusBadRequest},
		{"/v1/things/ok?name=%ff", http.StatusBadRequest},
		{"/v1/things/ok?%fe=1", http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
		if rec.Code != tc.code {
			t.Errorf("GET %s: %d %s, want %d", tc.target, rec.Code, rec.Body, tc.code)
			continue
		}
		if tc.code == http.StatusBadRequest {
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Code != 3 || st.Message == "" {
				t.Errorf("GET %s: %q is not an InvalidArgument JSON status", tc.target, rec.Body)
			}
		}
	}
}
