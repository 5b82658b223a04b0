package history

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if a test leaves a store's goroutines behind (a
// PostgreSQL pool not closed, a pgtest server not stopped).
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, func(stack string) bool {
		return strings.Contains(stack, "pgxpool.") || strings.Contains(stack, "pgtest.(*Server)") ||
			strings.Contains(stack, "peloton/history.") && !strings.Contains(stack, "history.TestMain")
	})
}
