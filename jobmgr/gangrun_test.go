package jobmgr

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// gangBatch is a batch job of n instances in gangs of size.
func gangBatch(n, size, maxFailures uint32, policy pelotonv1.GangFailurePolicy) *pelotonv1.JobSpec {
	s := batchSpec(n, maxFailures)
	s.Gang = &pelotonv1.GangSpec{Size: size, OnMemberFailure: policy}
	return s
}

// queuedGang waits for the job's gang index to be queued to resmgr as one
// gang of the given runs of its members.
func (h *harness) queuedGang(jobID string, index int, runs map[uint32]uint32) {
	h.t.Helper()
	var ids []string
	for inst := range runs {
		ids = append(ids, resmgr.RunTaskID(jobID, inst, runs[inst]))
	}
	slices.Sort(ids)
	want := fmt.Sprintf("gang %s: %s", gangID(jobID, index), strings.Join(ids, " "))
	testutil.Eventually(h.t, 10*time.Second, "queued: "+want, func() error {
		got := h.res.called("gang " + gangID(jobID, index) + ":")
		if slices.Contains(got, want) {
			return nil
		}
		return fmt.Errorf("gangs queued: %q", got)
	})
}

// runGang places the given runs of the members on hosts h0, h1, ... and
// has them report RUNNING.
func (h *harness) runGang(jobID string, runs map[uint32]uint32) {
	h.t.Helper()
	for inst, run := range runs {
		id := h.placeRun(jobID, inst, run, fmt.Sprintf("h%d", inst))
		h.hosts.emit(id, taskRunning, 0, "")
	}
	for inst := range runs {
		h.waitTask(jobID, inst, taskRunning)
	}
}

// waitRun waits for the instance to be on run `run` in state st.
func (h *harness) waitRun(jobID string, inst, run uint32, st taskState) *pelotonv1.Task {
	h.t.Helper()
	var tk *pelotonv1.Task
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("%s/%d run %d %s", jobID, inst, run, st), func() error {
		var err error
		if tk, err = h.jm.GetTask(jobID, inst); err != nil {
			return err
		}
		if tk.Status.RunId != run || tk.Status.State != st {
			return fmt.Errorf("run %d %s (%s)", tk.Status.RunId, tk.Status.State, tk.Status.Message)
		}
		return nil
	})
	return tk
}

func runs(first, end, run uint32) map[uint32]uint32 {
	out := map[uint32]uint32{}
	for inst := first; inst < end; inst++ {
		out[inst] = run
	}
	return out
}

// Two gangs of three in one job are queued as two resmgr gangs and run on
// their own: one runs while the other still waits. A member of the running
// gang that exits 1 ends its peers' runs and the gang runs again as one,
// every member on a new run; the waiting gang is untouched. The failure is
// counted once, on the member that failed.
func TestHarnessGangFailureRestartsItsGangOnly(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(6, 3, 3, pelotonv1.GangFailurePolicy_GANG_FAILURE_POLICY_UNSPECIFIED))
	h.queuedGang(id, 0, runs(0, 3, 1))
	h.queuedGang(id, 1, runs(3, 6, 1))
	h.runGang(id, runs(0, 3, 1))
	h.hosts.emit(resmgr.RunTaskID(id, 1, 1), taskFailed, 1, "failed")
	// Its peers are stopped, not failed, and every member runs again.
	for _, inst := range []uint32{0, 2} {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the kill of instance %d's run", inst), func() bool {
			return len(h.hosts.called("kill "+resmgr.RunTaskID(id, inst, 1))) > 0
		})
	}
	h.queuedGang(id, 0, runs(0, 3, 2))
	for inst := range uint32(3) {
		tk := h.waitRun(id, inst, 2, taskPending)
		want := uint32(0)
		if inst == 1 {
			want = 1
		}
		if tk.Status.FailureCount != want {
			t.Errorf("instance %d: failureCount %d, want %d (%s)", inst, tk.Status.FailureCount, want, tk.Status.Message)
		}
	}
	for inst := uint32(3); inst < 6; inst++ {
		if q := h.res.queuedRun(id, inst); q != 1 {
			t.Errorf("instance %d of the other gang: run %d queued, want run 1 still", inst, q)
		}
		if n := len(h.res.called(fmt.Sprintf("enqueue %s", resmgr.RunTaskID(id, inst, 1)))); n != 1 {
			t.Errorf("instance %d of the other gang was queued %d times", inst, n)
		}
	}
	h.runGang(id, runs(3, 6, 1))
	h.runGang(id, runs(0, 3, 2))
	for inst := range uint32(6) {
		run := uint32(2)
		if inst >= 3 {
			run = 1
		}
		h.hosts.emit(resmgr.RunTaskID(id, inst, run), taskSucceeded, 0, "")
	}
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
}

// Members that fail together are one failure of their gang; once the
// gang's failures pass restartPolicy.maxFailures the member fails, its
// peers are killed, and the job fails naming the gang and the member.
func TestHarnessGangFailuresAreCountedOncePerRestart(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(3, 3, 1, pelotonv1.GangFailurePolicy_RESTART_GANG))
	h.runGang(id, runs(0, 3, 1))
	h.hosts.emit(resmgr.RunTaskID(id, 0, 1), taskFailed, 1, "failed")
	h.hosts.emit(resmgr.RunTaskID(id, 2, 1), taskFailed, 1, "failed")
	h.queuedGang(id, 0, runs(0, 3, 2))
	h.runGang(id, runs(0, 3, 2))
	h.hosts.emit(resmgr.RunTaskID(id, 2, 2), taskFailed, 1, "failed")
	h.waitJob(id, pelotonv1.JobState_JOB_FAILED)
	tk := h.waitTask(id, 2, taskFailed)
	if !strings.Contains(tk.Status.Message, "gang 0 (instances 0-2) failed: run 2 of instance 2 failed") ||
		!strings.Contains(tk.Status.Message, "2 failures of the gang, restartPolicy.maxFailures is 1") {
		t.Errorf("the failed member says %q", tk.Status.Message)
	}
	for _, inst := range []uint32{0, 1} {
		if tk := h.waitTask(id, inst, taskKilled); tk.Status.RunId != 2 {
			t.Errorf("instance %d killed on run %d", inst, tk.Status.RunId)
		}
	}
	j, err := h.jm.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.Status.Message, "instance 2 (gang 0 (instances 0-2) failed") {
		t.Errorf("job message %q does not name the gang and the member", j.Status.Message)
	}
	if q := h.res.queuedRun(id, 2); q != 0 {
		t.Errorf("run %d queued after the gang's failures were spent", q)
	}
}

// RESTART_MEMBER: the member that fails runs again alone, queued alone; its
// peers keep their runs.
func TestHarnessGangRestartMemberRestartsOnlyTheMember(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(3, 3, 2, pelotonv1.GangFailurePolicy_RESTART_MEMBER))
	h.queuedGang(id, 0, runs(0, 3, 1))
	h.runGang(id, runs(0, 3, 1))
	h.hosts.emit(resmgr.RunTaskID(id, 1, 1), taskFailed, 1, "failed")
	testutil.Eventually(t, 10*time.Second, "run 2 of the member queued", func() bool { return h.res.queuedRun(id, 1) == 2 })
	if g := h.res.called("gang " + gangID(id, 0) + ": " + resmgr.RunTaskID(id, 0, 2)); len(g) > 0 {
		t.Errorf("the gang was queued again: %v", g)
	}
	for _, inst := range []uint32{0, 2} {
		if tk := h.waitTask(id, inst, taskRunning); tk.Status.RunId != 1 {
			t.Errorf("peer %d is on run %d", inst, tk.Status.RunId)
		}
		if k := h.hosts.called("kill " + resmgr.RunTaskID(id, inst, 1)); len(k) > 0 {
			t.Errorf("peer %d was killed", inst)
		}
	}
}

// A member preempted alone (resmgr takes whole gangs, but a drain or a
// restart of resmgr may not) takes its RESTART_GANG gang with it: the
// peers are stopped and the gang queues again whole, with no failure
// counted.
func TestHarnessPreemptedMemberTakesItsGang(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(4, 2, 0, pelotonv1.GangFailurePolicy_RESTART_GANG))
	h.runGang(id, runs(0, 4, 1))
	h.res.victims <- []resmgr.Victim{{Task: &resmgr.Task{JobID: id, Instance: 3, RunID: 1}, Reason: "preempted", Detail: "test"}}
	h.queuedGang(id, 1, runs(2, 4, 2))
	for inst := uint32(2); inst < 4; inst++ {
		if tk := h.waitRun(id, inst, 2, taskPending); tk.Status.FailureCount != 0 {
			t.Errorf("instance %d: failureCount %d after a preemption", inst, tk.Status.FailureCount)
		}
	}
	for inst := range uint32(2) {
		if tk := h.waitTask(id, inst, taskRunning); tk.Status.RunId != 1 {
			t.Errorf("instance %d of the other gang is on run %d", inst, tk.Status.RunId)
		}
	}
}

// A control plane that dies just after it wrote a member's failure, before
// any peer was told, finishes the gang's restart when it comes back: the
// peers' runs, still going on the backend, are stopped, and the gang runs
// again as one, the failure counted once.
func TestHarnessGangRestartFinishesAfterACrash(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(3, 3, 2, pelotonv1.GangFailurePolicy_RESTART_GANG))
	h.runGang(id, runs(0, 3, 1))
	dead := h.dead
	crashAt := func() {
		kv, err := h.st.Get(context.Background(), taskKey(id, 1))
		if err != nil {
			return
		}
		rt := &pelotonv1.TaskStatus{}
		if proto.Unmarshal(kv.Value, rt) == nil && rt.RunId == 2 {
			dead.Store(true)
		}
	}
	h.afterTxn.Store(&crashAt)
	h.hosts.emit(resmgr.RunTaskID(id, 1, 1), taskFailed, 1, "failed")
	testutil.Eventually(t, 10*time.Second, "the failed member's write", dead.Load)
	h.afterTxn.Store(nil)
	for _, inst := range []uint32{0, 2} {
		if rt := h.storedTask(id, inst); rt.State != taskRunning || rt.RunId != 1 {
			t.Fatalf("instance %d was stored as run %d %s before the crash", inst, rt.RunId, rt.State)
		}
	}
	if k := h.hosts.called("kill "); len(k) > 0 {
		t.Fatalf("kills sent before the crash: %v", k)
	}
	h.crash()
	h.queuedGang(id, 0, runs(0, 3, 2))
	for inst := range uint32(3) {
		want := uint32(0)
		if inst == 1 {
			want = 1
		}
		if tk := h.waitRun(id, inst, 2, taskPending); tk.Status.FailureCount != want {
			t.Errorf("instance %d: failureCount %d, want %d", inst, tk.Status.FailureCount, want)
		}
	}
}

// A scale of a gang job keeps whole gangs; an update of it is refused (it
// is a batch job, which updates do not roll).
func TestHarnessGangScaleKeepsWholeGangs(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(6, 3, 0, pelotonv1.GangFailurePolicy_RESTART_GANG))
	h.queuedGang(id, 0, runs(0, 3, 1))
	for _, bad := range []uint32{2, 5, 7} {
		_, err := h.jm.Updates().ScaleJob(context.Background(), id, bad, nil, 0)
		if apierr.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "instanceCount") || !strings.Contains(err.Error(), "spec.gang.size") {
			t.Errorf("scale to %d: %v", bad, err)
		}
	}
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 9, nil, 0); err != nil {
		t.Fatalf("scale to 9: %v", err)
	}
	h.queuedGang(id, 2, runs(6, 9, 1))
	next := gangBatch(6, 2, 0, pelotonv1.GangFailurePolicy_RESTART_GANG)
	if _, err := h.jm.Updates().CreateUpdate(context.Background(), id, next, &pelotonv1.UpdateSpec{}, 0); apierr.Code(err) != codes.FailedPrecondition {
		t.Errorf("an update changing spec.gang.size: %v", err)
	}
}

// sla.maximumRunningInstances starts whole gangs only: with room for three
// of gangs of two, one gang starts and the next waits whole, never one of
// its members alone.
func TestHarnessGangsStartWholeWithinMaximumRunning(t *testing.T) {
	h := newHarness(t)
	spec := gangBatch(6, 2, 0, pelotonv1.GangFailurePolicy_RESTART_GANG)
	spec.Sla = &pelotonv1.SlaSpec{MaximumRunningInstances: 3}
	id := h.create(spec)
	h.queuedGang(id, 0, runs(0, 2, 1))
	// The evaluation that queued gang 0 is the one that left gang 1 out;
	// one more (the clock moved) must not queue part of it either.
	h.advance(time.Second)
	h.runGang(id, runs(0, 2, 1))
	for inst := uint32(2); inst < 6; inst++ {
		if q := h.res.queuedRun(id, inst); q != 0 {
			t.Errorf("instance %d queued (run %d) with room for one more instance, not a gang", inst, q)
		}
	}
	h.hosts.emit(resmgr.RunTaskID(id, 0, 1), taskSucceeded, 0, "")
	h.hosts.emit(resmgr.RunTaskID(id, 1, 1), taskSucceeded, 0, "")
	h.queuedGang(id, 1, runs(2, 4, 1))
}

// A lost member restarts its gang too, counting no failure; the gang waits
// whole for the lost member's backoff.
func TestHarnessLostMemberRestartsItsGang(t *testing.T) {
	h := newHarness(t)
	id := h.create(gangBatch(3, 3, 0, pelotonv1.GangFailurePolicy_RESTART_GANG))
	h.runGang(id, runs(0, 3, 1))
	h.hosts.emit(resmgr.RunTaskID(id, 2, 1), taskLost, 0, "host-lost")
	for _, inst := range []uint32{0, 1} {
		h.waitRun(id, inst, 2, taskInitialized)
	}
	if q := h.res.queuedRun(id, 0); q != 0 {
		t.Errorf("run %d of instance 0 queued while the lost member waits out its backoff", q)
	}
	h.advance(time.Minute)
	h.queuedGang(id, 0, runs(0, 3, 2))
	for inst := range uint32(3) {
		if tk := h.waitRun(id, inst, 2, taskPending); tk.Status.FailureCount != 0 {
			t.Errorf("instance %d: failureCount %d after a loss", inst, tk.Status.FailureCount)
		}
	}
}

// A scale that grows a smaller last gang (allowPartialLast) restarts it
// with its new member, so that it runs whole; the full gang before it is
// untouched.
func TestHarnessScaleGrowingThePartialGangRestartsIt(t *testing.T) {
	h := newHarness(t)
	spec := gangBatch(5, 3, 0, pelotonv1.GangFailurePolicy_RESTART_GANG)
	spec.Gang.AllowPartialLast = true
	id := h.create(spec)
	h.queuedGang(id, 1, runs(3, 5, 1))
	h.runGang(id, runs(0, 5, 1))
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 6, nil, 0); err != nil {
		t.Fatal(err)
	}
	h.queuedGang(id, 1, map[uint32]uint32{3: 2, 4: 2, 5: 1})
	for inst := range uint32(3) {
		if tk := h.waitTask(id, inst, taskRunning); tk.Status.RunId != 1 {
			t.Errorf("instance %d of the full gang is on run %d", inst, tk.Status.RunId)
		}
	}
}
