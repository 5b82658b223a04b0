package federation

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if a goroutine the Federation started outlives
// the tests: every one belongs to the Federation's group, which Close
// cancels and waits for.
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(g string) bool {
		return strings.Contains(g, "peloton/federation.(*Federation)")
	})
}
