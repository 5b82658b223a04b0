package local

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// httpHelperEnv, set to "1" in a task's env, turns the test binary into the
// tiny HTTP server that the HTTP health-check tests launch as a task: it is
// on every machine that can run these tests, unlike python3 or busybox.
const httpHelperEnv = "PELOTON_LOCAL_TEST_HTTP_SERVER"

// allocHelperEnv, set to a number of MiB in a task's env, turns the test
// binary into a task that allocates that much memory, touching every page,
// then exits 0: the OOM tests' run that exceeds its memory limit.
const allocHelperEnv = "PELOTON_LOCAL_TEST_ALLOC_MB"

// TestMain fails the run if any goroutine of this package outlives the
// tests: every Backend is closed by its test, so none may remain.
func TestMain(m *testing.M) {
	if os.Getenv(httpHelperEnv) == "1" {
		os.Exit(serveHTTPHelper())
	}
	if mb := os.Getenv(allocHelperEnv); mb != "" {
		os.Exit(allocHelper(mb))
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

// allocHelper allocates mb MiB in 1 MiB blocks and writes to every page of
// each, so the memory is really used, not only reserved.
func allocHelper(mb string) int {
	n, err := strconv.Atoi(mb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "alloc helper:", err)
		return 2
	}
	blocks := make([][]byte, 0, n)
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		blocks = append(blocks, b)
	}
	fmt.Println("allocated", len(blocks), "MiB")
	return 0
}
