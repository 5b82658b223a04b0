package sim

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if any goroutine of a sim Backend outlives the
// tests: every Backend is closed by its test, so none may remain.
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(g string) bool { return strings.Contains(g, "hostmgr/sim.(*Backend)") })
}
