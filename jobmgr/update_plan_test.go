package jobmgr

import (
	"fmt"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// pi builds planner instances: pi(3, "old") etc.
func pi(inst uint32, kind string) planInstance {
	p := planInstance{inst: inst}
	switch kind {
	case "old": // runs the old spec, available
	case "old-down":
		p.down = true
	case "starting":
		p.starting, p.down = true, true
	case "new": // on the target, not ready yet
		p.atTarget, p.down = true, true
	case "ready":
		p.atTarget, p.ready = true, true
	case "failing":
		p.atTarget, p.down, p.failures = true, true, 1
	case "stopped":
		p.stopped, p.down = true, true
	default:
		panic(kind)
	}
	return p
}

func TestPlanUpdate(t *testing.T) {
	spec := func(batch, maxUnav, retries, tolerate uint32) *pelotonv1.UpdateSpec {
		return &pelotonv1.UpdateSpec{BatchSize: batch, MaxUnavailable: maxUnav, MaxInstanceRetries: retries, MaxTolerableFailures: tolerate}
	}
	for _, tc := range []struct {
		name        string
		in          planInput
		start, done string
		failed      string
		finished    bool
		failedOver  bool
		waiting     bool
	}{
		{name: "first batch", in: planInput{spec: spec(2, 0, 0, 0), instances: []planInstance{pi(0, "old"), pi(1, "old"), pi(2, "old")}},
			start: "[0 1]"},
		{name: "defaults: one at a time", in: planInput{spec: &pelotonv1.UpdateSpec{}, instances: []planInstance{pi(0, "old"), pi(1, "old")}},
			start: "[0]"},
		{name: "window full", in: planInput{spec: spec(2, 0, 0, 0), unavailable: 2, instances: []planInstance{pi(0, "starting"), pi(1, "new"), pi(2, "old")}},
			start: "[]"},
		{name: "slot frees as one is ready", in: planInput{spec: spec(2, 0, 0, 0), unavailable: 1, instances: []planInstance{pi(0, "ready"), pi(1, "new"), pi(2, "old"), pi(3, "old")}},
			start: "[2]", done: "[0]"},
		{name: "others down eat maxUnavailable", in: planInput{spec: spec(3, 2, 0, 0), unavailable: 2, instances: []planInstance{pi(0, "old"), pi(1, "old")}},
			start: "[]", waiting: true},
		{name: "a down instance costs no availability", in: planInput{spec: spec(2, 1, 0, 0), unavailable: 1, instances: []planInstance{pi(0, "old"), pi(1, "old-down")}},
			start: "[1]"},
		{name: "failure within retries keeps trying", in: planInput{spec: spec(1, 0, 1, 0), unavailable: 1, instances: []planInstance{pi(0, "failing"), pi(1, "old")}},
			start: "[]"},
		{name: "failure beyond retries fails the update", in: planInput{spec: spec(1, 0, 0, 0), unavailable: 1, instances: []planInstance{pi(0, "failing"), pi(1, "old")}},
			failed: "[0]", failedOver: true},
		{name: "tolerated failure moves on", in: planInput{spec: spec(1, 0, 0, 1), unavailable: 1, instances: []planInstance{pi(0, "failing"), pi(1, "old")}},
			failed: "[0]", start: "[1]"},
		{name: "stopped instances are skipped", in: planInput{spec: spec(2, 0, 0, 0), unavailable: 1, instances: []planInstance{pi(0, "stopped"), pi(1, "old")}},
			start: "[1]"},
		{name: "all done", in: planInput{spec: spec(2, 0, 0, 0), instances: []planInstance{pi(0, "ready"), pi(1, "ready")}},
			done: "[0 1]", finished: true},
		{name: "done, then failing: failed after all", in: planInput{spec: spec(1, 0, 0, 0), done: map[uint32]bool{0: true},
			instances: []planInstance{pi(0, "failing"), pi(1, "old")}}, failed: "[0]", failedOver: true},
		{name: "already counted", in: planInput{spec: spec(1, 0, 0, 0), done: map[uint32]bool{0: true}, failed: map[uint32]bool{1: true},
			instances: []planInstance{pi(0, "ready"), pi(1, "failing")}}, failedOver: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.failed == nil {
				tc.in.failed = map[uint32]bool{}
			}
			if tc.in.done == nil {
				tc.in.done = map[uint32]bool{}
			}
			p := planUpdate(tc.in)
			show := func(xs []uint32) string {
				if xs == nil {
					xs = []uint32{}
				}
				return fmt.Sprint(xs)
			}
			if tc.start == "" {
				tc.start = "[]"
			}
			if tc.done == "" {
				tc.done = "[]"
			}
			if tc.failed == "" {
				tc.failed = "[]"
			}
			if show(p.start) != tc.start || show(p.newlyDone) != tc.done || show(p.newlyFailed) != tc.failed ||
				p.finished != tc.finished || p.failedOver != tc.failedOver || (p.waiting != "") != tc.waiting {
				t.Errorf("plan = start %v done %v failed %v finished %v failedOver %v waiting %q", show(p.start), show(p.newlyDone), show(p.newlyFailed), p.finished, p.failedOver, p.waiting)
			}
		})
	}
}

// TestPlanNeverExceedsBatch drives the planner through a whole simulated
// update and checks that no step ever has more than batchSize instances in
// flight or takes more available instances down than maxUnavailable allows.
func TestPlanNeverExceedsBatch(t *testing.T) {
	for _, batch := range []uint32{1, 2, 3, 7} {
		for _, maxUnav := range []uint32{0, 1, 2, 5} {
			spec := &pelotonv1.UpdateSpec{BatchSize: batch, MaxUnavailable: maxUnav}
			const n = 20
			kind := make([]string, n)
			for i := range kind {
				kind[i] = "old"
			}
			done := map[uint32]bool{}
			for step := 0; step < 10*n; step++ {
				var ins []planInstance
				unavailable := 0
				for i, k := range kind {
					ins = append(ins, pi(uint32(i), k))
					if k != "old" && k != "ready" {
						unavailable++
					}
				}
				p := planUpdate(planInput{spec: spec, instances: ins, failed: map[uint32]bool{}, done: done, unavailable: unavailable})
				for _, d := range p.newlyDone {
					done[d] = true
				}
				if p.finished {
					break
				}
				inflight := len(p.current) + len(p.start)
				if inflight > batchSize(spec) {
					t.Fatalf("batch %d: %d in flight", batch, inflight)
				}
				if unavailable+len(p.start) > max(maxUnavailable(spec), unavailable) {
					t.Fatalf("batch %d maxUnavailable %d: %d down + %d started", batch, maxUnav, unavailable, len(p.start))
				}
				// Advance the world: started become new, new become ready.
				for i, k := range kind {
					switch k {
					case "new":
						kind[i] = "ready"
					case "starting":
						kind[i] = "new"
					}
				}
				for _, s := range p.start {
					kind[s] = "starting"
				}
			}
			if len(done) != n {
				t.Errorf("batch %d maxUnavailable %d: %d of %d done", batch, maxUnav, len(done), n)
			}
		}
	}
}

// TestPlanUpdateEnd: the state a step leaves an update in when it ends it
// or turns it around, and the update's message then.
func TestPlanUpdateEnd(t *testing.T) {
	spec := func(tolerate uint32, rollback bool) *pelotonv1.UpdateSpec {
		return &pelotonv1.UpdateSpec{BatchSize: 2, MaxTolerableFailures: tolerate, RollbackOnFailure: rollback}
	}
	for _, tc := range []struct {
		name string
		in   planInput
		end  updateState
		msg  string
	}{
		{name: "going on", in: planInput{spec: spec(0, false), state: updateRollingForward, instances: []planInstance{pi(0, "ready"), pi(1, "old")}}},
		{name: "every instance done: succeeded", in: planInput{spec: spec(0, false), state: updateRollingForward, instances: []planInstance{pi(0, "ready"), pi(1, "stopped")}},
			end: updateSucceeded},
		{name: "a rollback with every instance done: rolled back", in: planInput{spec: spec(0, true), state: updateRollingBack, instances: []planInstance{pi(0, "ready"), pi(1, "ready")}},
			end: updateRolledBack},
		{name: "done with tolerated failures: succeeded", in: planInput{spec: spec(1, false), state: updateRollingForward, failed: map[uint32]bool{1: true}, instances: []planInstance{pi(0, "ready"), pi(1, "failing")}},
			end: updateSucceeded},
		{name: "too many failures: failed", in: planInput{spec: spec(0, false), state: updateRollingForward, instances: []planInstance{pi(0, "failing"), pi(1, "old")}},
			end: updateFailed, msg: "1 instances failed (0), more than maxTolerableFailures 0"},
		{name: "too many failures with rollbackOnFailure: rolling back", in: planInput{spec: spec(1, true), state: updateRollingForward, failed: map[uint32]bool{3: true}, instances: []planInstance{pi(0, "failing"), pi(1, "old"), pi(3, "failing")}},
			end: updateRollingBack, msg: "2 instances failed (0, 3), more than maxTolerableFailures 1"},
		{name: "a rollback with too many failures: failed", in: planInput{spec: spec(0, true), state: updateRollingBack, instances: []planInstance{pi(0, "old"), pi(1, "failing")}},
			end: updateFailed, msg: "rollback failed: 1 instances failed (1), more than maxTolerableFailures 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.failed == nil {
				tc.in.failed = map[uint32]bool{}
			}
			tc.in.done = map[uint32]bool{}
			p := planUpdate(tc.in)
			if p.end != tc.end || p.endMessage != tc.msg {
				t.Errorf("end %v %q; want %v %q", p.end, p.endMessage, tc.end, tc.msg)
			}
		})
	}
}
