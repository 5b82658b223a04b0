package jobmgr

import (
	"fmt"
	"maps"
	"slices"

	"github.com/peloton-sched/peloton/internal/fsm"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The update planner: a pure function from a snapshot of an update's
// instances to what to do next. It has no clock, no lock and no I/O; the
// driver (update.go) builds the snapshot, asks the SLA evaluator for each
// instance the plan wants to start, and applies the rest.

type updateState = pelotonv1.UpdateState

const (
	updateRollingForward = pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD
	updatePaused         = pelotonv1.UpdateState_UPDATE_PAUSED
	updateSucceeded      = pelotonv1.UpdateState_UPDATE_SUCCEEDED
	updateRollingBack    = pelotonv1.UpdateState_UPDATE_ROLLING_BACK
	updateRolledBack     = pelotonv1.UpdateState_UPDATE_ROLLED_BACK
	updateFailed         = pelotonv1.UpdateState_UPDATE_FAILED
	updateAborted        = pelotonv1.UpdateState_UPDATE_ABORTED
)

// planInstance is one instance in an update's scope, as the driver sees it.
type planInstance struct {
	inst uint32
	// atTarget: the current run runs the target spec.
	atTarget bool
	// starting: a restart onto the target spec is under way (the old run is
	// being stopped).
	starting bool
	// ready: atTarget, and available for minReadySeconds.
	ready bool
	// failures since the update started this instance.
	failures uint32
	// stopped: the user stopped the instance; the update leaves it alone.
	stopped bool
	// down: the instance is not available now, so replacing it takes
	// nothing more down.
	down bool
}

// planInput is the snapshot the planner decides on.
type planInput struct {
	spec *pelotonv1.UpdateSpec
	// state is the update's state: rolling forward or back.
	state updateState
	// instances is the update's scope, in update order.
	instances []planInstance
	// failed are the instances already counted as failed.
	failed map[uint32]bool
	// done are the instances already counted as done.
	done map[uint32]bool
	// unavailable is how many of the job's instances are unavailable now,
	// for any reason, inside or outside the scope.
	unavailable int
}

// updatePlan is the planner's decision.
type updatePlan struct {
	// start are the instances to restart onto the target now, in order; the
	// driver stops at the first one the SLA evaluator refuses.
	start []uint32
	// newlyDone and newlyFailed are instances to add to the done and failed
	// sets. An instance counted done that fails again while the update runs
	// (with minReadySeconds 0 a run that crashes at once can look ready for
	// a moment) moves from done to failed.
	newlyDone, newlyFailed []uint32
	// current are the instances being replaced (started, not done nor failed).
	current []uint32
	// finished: every instance is done, failed or stopped.
	finished bool
	// failedOver: more instances failed than the update tolerates.
	failedOver bool
	// waiting explains why nothing starts although instances remain.
	waiting string
	// end is what the step makes of the update when it ends it or turns
	// it around: SUCCEEDED or ROLLED_BACK (finished), FAILED (failedOver,
	// while rolling back or without rollbackOnFailure), ROLLING_BACK
	// (failedOver with rollbackOnFailure: the driver starts the rollback).
	// 0 while it goes on.
	end updateState
	// endMessage is the update's message with end.
	endMessage string
}

// batchSize and maxUnavailable apply the UpdateSpec defaults.
func batchSize(s *pelotonv1.UpdateSpec) int {
	if s.GetBatchSize() > 0 {
		return int(s.GetBatchSize())
	}
	return 1
}

func maxUnavailable(s *pelotonv1.UpdateSpec) int {
	if s.GetMaxUnavailable() > 0 {
		return int(s.GetMaxUnavailable())
	}
	return batchSize(s)
}

// planUpdate decides one step of a rolling update (forward or back; the
// snapshot's target is whichever spec is being rolled out).
func planUpdate(in planInput) updatePlan {
	var p updatePlan
	failed := len(in.failed)
	retries := in.spec.GetMaxInstanceRetries()
	inflight := 0
	remaining := 0
	// Failed instances the update gave up on do not hold its allowance
	// (the SLA evaluator still counts them against the job's budget).
	givenUp := 0
	var candidates []planInstance
	for _, pi := range in.instances {
		switch {
		case in.failed[pi.inst]:
			if pi.down {
				givenUp++
			}
			continue
		case in.done[pi.inst] && !((pi.atTarget || pi.starting) && pi.failures > retries):
			continue
		case pi.stopped:
			continue
		case (pi.atTarget || pi.starting) && pi.failures > retries:
			p.newlyFailed = append(p.newlyFailed, pi.inst)
			failed++
			if pi.down {
				givenUp++
			}
		case pi.atTarget && pi.ready:
			p.newlyDone = append(p.newlyDone, pi.inst)
		case pi.atTarget || pi.starting:
			inflight++
			remaining++
			p.current = append(p.current, pi.inst)
		default:
			remaining++
			candidates = append(candidates, pi)
		}
	}
	if failed > int(in.spec.GetMaxTolerableFailures()) {
		p.failedOver = true
		p.end, p.endMessage = failedOver(in, p.newlyFailed)
		return p
	}
	if remaining == 0 {
		p.finished = true
		p.end = updateSucceeded
		if in.state == updateRollingBack {
			p.end = updateRolledBack
		}
		return p
	}
	// Instances being replaced are unavailable already, so they count in
	// both bounds. An instance that is down anyway costs no availability:
	// only the batch size bounds it.
	room := batchSize(in.spec) - inflight
	allowance := maxUnavailable(in.spec) - (in.unavailable - givenUp)
	for _, c := range candidates {
		if room <= 0 {
			break
		}
		if !c.down {
			if allowance <= 0 {
				continue
			}
			allowance--
		}
		p.start = append(p.start, c.inst)
		room--
	}
	if len(p.start) == 0 && len(candidates) > 0 && inflight == 0 {
		p.waiting = fmt.Sprintf("waiting: %d of the job's instances are unavailable, the update's maxUnavailable is %d", in.unavailable, maxUnavailable(in.spec))
	}
	return p
}

// failedOver is the end of an update in which more instances failed than
// it tolerates, and its message: a rollback fails; an update rolls back if
// its spec asks for that, else it fails.
func failedOver(in planInput, newlyFailed []uint32) (updateState, string) {
	all := slices.Sorted(maps.Keys(in.failed))
	for _, f := range newlyFailed {
		if !in.failed[f] {
			all = append(all, f)
		}
	}
	slices.Sort(all)
	msg := fmt.Sprintf("%d instances failed (%s), more than maxTolerableFailures %d", len(all), listU32(all, 5), in.spec.GetMaxTolerableFailures())
	switch {
	case in.state == updateRollingBack:
		return updateFailed, "rollback failed: " + msg
	case in.spec.GetRollbackOnFailure():
		return updateRollingBack, msg
	}
	return updateFailed, msg
}

// updateTransitions is the one table of legal update state changes.
var updateTransitions = fsm.New("update",
	fsm.From(updateRollingForward).To(updatePaused, updateSucceeded, updateRollingBack, updateFailed, updateAborted),
	fsm.From(updatePaused).To(updateRollingForward, updateRollingBack, updateAborted),
	fsm.From(updateRollingBack).To(updatePaused, updateRolledBack, updateFailed, updateAborted),
	fsm.From(updateSucceeded).To(updateRollingBack),
	fsm.From(updateFailed).To(updateRollingBack),
	fsm.From(updateAborted).To(updateRollingBack),
	fsm.From(updateRolledBack).To(),
)

func checkUpdateTransition(from, to updateState) error {
	if updateTransitions.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("update is %s; it cannot become %s", from, to)
}

// updateActive reports whether an update still owns its job's instances.
func updateActive(s updateState) bool {
	return s == updateRollingForward || s == updatePaused || s == updateRollingBack
}
