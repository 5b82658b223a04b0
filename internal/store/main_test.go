package store

import (
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain lets the test binary serve as testutil's dial helper, run as
// another user.
func TestMain(m *testing.M) {
	testutil.DialHelperMain()
	testutil.LeakCheckMain(m, testutil.RunsCodeOf("internal/store"))
}
