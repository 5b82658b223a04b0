package jobmgr

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestMain fails the run if a goroutine running jobmgr's own code outlives
// the tests: every Manager's engine stops with its context, and whatever
// else it starts belongs to it (Manager.Wait waits for all of it).
func TestMain(m *testing.M) {
	testutil.LeakCheckMain(m, runsJobmgrCode)
}

// runsJobmgrCode reports whether a goroutine's stack has a frame of
// jobmgr's code (not of its tests: a test's fake backend runs in hostmgr's
// goroutines, which hostmgr's own check covers). The line a goroutine was
// created from does not count: a test starts other packages' loops.
func runsJobmgrCode(stack string) bool {
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "created by ") {
			break
		}
		if i+1 < len(lines) && strings.Contains(l, "peloton/jobmgr.") {
			file := lines[i+1]
			if strings.Contains(file, "/jobmgr/") && !strings.Contains(file, "_test.go:") {
				return true
			}
		}
	}
	return false
}

func TestRunsJobmgrCode(t *testing.T) {
	own := "goroutine 7 [select]:\ngithub.com/peloton-sched/peloton/jobmgr.(*Manager).worker(0xc0)\n\t/src/jobmgr/engine.go:490 +0x1\ncreated by github.com/peloton-sched/peloton/jobmgr.(*Manager).Start in goroutine 6\n\t/src/jobmgr/engine.go:36 +0x2"
	started := "goroutine 8 [select]:\ngithub.com/peloton-sched/peloton/resmgr.(*Manager).Run(0xc0)\n\t/src/resmgr/run.go:10 +0x1\ncreated by github.com/peloton-sched/peloton/jobmgr.startProcessOn in goroutine 6\n\t/src/jobmgr/patch_test.go:343 +0x2"
	fake := "goroutine 9 [chan receive]:\ngithub.com/peloton-sched/peloton/jobmgr.(*sandboxView).Launch(0xc0)\n\t/src/jobmgr/substrate_test.go:40 +0x1\ngithub.com/peloton-sched/peloton/hostmgr.(*Manager).launch(0xc0)\n\t/src/hostmgr/launch.go:9 +0x1"
	if !runsJobmgrCode(own) || runsJobmgrCode(started) || runsJobmgrCode(fake) {
		t.Errorf("own %v, started by a test %v, a test's fake %v; want true, false, false", runsJobmgrCode(own), runsJobmgrCode(started), runsJobmgrCode(fake))
	}
}
