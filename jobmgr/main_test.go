package jobmgr

import (
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if a goroutine running jobmgr's own code outlives
// the tests: every Manager's engine stops with its context, and whatever
// else it starts belongs to it (Manager.Wait waits for all of it). A
// test's fake backend runs in hostmgr's goroutines, which hostmgr's own
// check covers.
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, testutil.RunsCodeOf("jobmgr"))
}
