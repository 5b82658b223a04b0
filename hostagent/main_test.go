package hostagent

import (
	"os"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "alloc" {
		allocHelper()
		return
	}
	// Every HTTP server, gRPC server and connection a test opens must be
	// closed by it, and every agent it runs stopped.
	testutil.LeakCheckMain(m, func(g string) bool {
		return strings.Contains(g, "net/http.") || strings.Contains(g, "net/http/httptest.") ||
			strings.Contains(g, "google.golang.org/grpc") || strings.Contains(g, "hostagent.(*Agent)")
	})
}
