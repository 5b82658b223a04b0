package local

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testutil"
)

// httpHelperEnv, set to "1" in a task's env, turns the test binary into the
// tiny HTTP server that the HTTP health-check tests launch as a task: it is
// on every machine that can run these tests, unlike python3 or busybox.
const httpHelperEnv = "PELOTON_LOCAL_TEST_HTTP_SERVER"

// TestMain fails the run if any goroutine of this package outlives the
// tests: every Backend is closed by its test, so none may remain.
func TestMain(m *testing.M) {
	if os.Getenv(httpHelperEnv) == "1" {
		os.Exit(serveHTTPHelper())
	}
	testutil.LeakCheckMain(m, func(g string) bool {
		return strings.Contains(g, "hostmgr/local.") && !strings.Contains(g, "hostmgr/local.TestMain")
	})
}

// serveHTTPHelper listens on 127.0.0.1:$PELOTON_PORT_HTTP and answers
// "/" with 200, "/moved" with a 302 to "/broken", and "/broken" with 500.
// It runs until it is killed.
func serveHTTPHelper() int {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/broken", http.StatusFound)
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	err := http.ListenAndServe("127.0.0.1:"+os.Getenv("PELOTON_PORT_HTTP"), mux)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "http helper:", err)
	}
	return 1
}
