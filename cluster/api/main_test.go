package api_test

import (
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if a goroutine running this package's own code
// outlives the tests: whatever a test starts, it stops.
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, testutil.RunsCodeOf("cluster/api"))
}
