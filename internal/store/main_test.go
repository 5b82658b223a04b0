package store

import (
	"os"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain lets the test binary serve as testutil's dial helper, run as
// another user.
func TestMain(m *testing.M) {
	testutil.DialHelperMain()
	os.Exit(m.Run())
}
