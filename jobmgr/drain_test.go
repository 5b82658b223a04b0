package jobmgr

import (
	"fmt"
	"strings"
	"testing"
)

func TestPlanDrain(t *testing.T) {
	on := func(inst uint32, host string, st taskState) drainRun {
		return drainRun{inst: inst, run: 2, host: host, state: st}
	}
	for _, tc := range []struct {
		name string
		gang gangLayout
		runs []drainRun
		want string // victims as "inst:detail;"
	}{
		{"every running run on the host moves", gangLayout{},
			[]drainRun{on(0, "h", taskRunning), on(1, "h", taskLaunched), on(2, "other", taskRunning)},
			"0:host h is draining for maintenance;1:host h is draining for maintenance;"},
		{"runs being stopped or not launched stay as they are", gangLayout{},
			[]drainRun{on(0, "h", taskKilling), on(1, "h", taskPreempting), on(2, "", taskPending), on(3, "h", taskSucceeded)},
			""},
		{"a gang moves whole", gangLayout{size: 3, covered: 3},
			[]drainRun{on(0, "other", taskRunning), on(1, "h", taskRunning), on(2, "third", taskRunning), on(5, "other", taskRunning)},
			"1:host h is draining for maintenance;" +
				"0:its gang moves with instance 1, on host h, which is draining for maintenance;" +
				"2:its gang moves with instance 1, on host h, which is draining for maintenance;"},
		{"a gang member already being preempted on the host still takes the rest along", gangLayout{size: 2, covered: 2},
			[]drainRun{on(0, "h", taskPreempting), on(1, "other", taskRunning)},
			"1:its gang moves with instance 0, on host h, which is draining for maintenance;"},
		{"of many gangs, only the one with a member on the host moves", gangLayout{size: 2, covered: 6},
			[]drainRun{on(0, "other", taskRunning), on(1, "other", taskRunning), on(2, "other", taskRunning),
				on(3, "h", taskRunning), on(4, "third", taskRunning), on(5, "other", taskRunning)},
			"3:host h is draining for maintenance;" +
				"2:its gang moves with instance 3, on host h, which is draining for maintenance;"},
		{"a gang not on the host stays", gangLayout{size: 2, covered: 2},
			[]drainRun{on(0, "other", taskRunning), on(1, "other", taskRunning), on(4, "h", taskRunning)},
			"4:host h is draining for maintenance;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for _, v := range planDrain("h", tc.gang, tc.runs) {
				if v.run != 2 {
					t.Errorf("instance %d: run %d, want the current run 2", v.inst, v.run)
				}
				fmt.Fprintf(&b, "%d:%s;", v.inst, v.detail)
			}
			if b.String() != tc.want {
				t.Errorf("victims\n got %s\nwant %s", b.String(), tc.want)
			}
		})
	}
}
