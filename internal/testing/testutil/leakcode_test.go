package testutil

import "testing"

func TestRunsCodeOf(t *testing.T) {
	own := "goroutine 7 [select]:\ngithub.com/peloton-sched/peloton/hostmgr.(*Manager).loop(0xc0)\n\t/src/hostmgr/manager.go:490 +0x1\ncreated by github.com/peloton-sched/peloton/hostmgr.(*Manager).Start in goroutine 6\n\t/src/hostmgr/manager.go:36 +0x2"
	sub := "goroutine 8 [select]:\ngithub.com/peloton-sched/peloton/hostmgr/sim.(*Backend).run(0xc0)\n\t/src/hostmgr/sim/sim.go:10 +0x1\ncreated by github.com/peloton-sched/peloton/hostmgr.(*Manager).Start in goroutine 6\n\t/src/hostmgr/manager.go:36 +0x2"
	fake := "goroutine 9 [chan receive]:\ngithub.com/peloton-sched/peloton/hostmgr.(*fakeBackend).Launch(0xc0)\n\t/src/hostmgr/fake_test.go:40 +0x1\ngithub.com/peloton-sched/peloton/resmgr.(*Manager).run(0xc0)\n\t/src/resmgr/run.go:9 +0x1"
	createdOnly := "goroutine 10 [select]:\ngithub.com/peloton-sched/peloton/resmgr.(*Manager).run(0xc0)\n\t/src/resmgr/run.go:9 +0x1\ncreated by github.com/peloton-sched/peloton/hostmgr.(*Manager).Start in goroutine 6\n\t/src/hostmgr/manager.go:36 +0x2"
	leaked := RunsCodeOf("hostmgr")
	for _, tc := range []struct {
		name  string
		stack string
		want  bool
	}{
		{"hostmgr's own loop", own, true},
		{"a subpackage's loop", sub, false},
		{"a test's fake", fake, false},
		{"started by hostmgr, running another package", createdOnly, false},
	} {
		if got := leaked(tc.stack); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !RunsCodeOf("hostmgr/sim")(sub) {
		t.Error("hostmgr/sim's check misses its own loop")
	}
}
