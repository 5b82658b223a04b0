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
)

func TestExtentOf(t *testing.T) {
	for _, c := range []struct {
		count uint32
		holes []uint32
		want  uint32
	}{
		{10, nil, 10},
		{8, []uint32{3, 7}, 10},
		{6, []uint32{3, 7}, 7},
		{2, []uint32{3, 7}, 2},
		{3, []uint32{0, 1, 2}, 6},
		{10, []uint32{3, 7}, 12},
	} {
		if got := extentOf(c.count, c.holes); got != c.want {
			t.Errorf("extentOf(%d, %v) = %d, want %d", c.count, c.holes, got, c.want)
		}
	}
}

// runAll places and starts run 1 of instances 0..n-1 of a job.
func (h *harness) runAll(jobID string, n uint32) {
	h.t.Helper()
	for inst := range n {
		h.hosts.emit(h.placeRun(jobID, inst, 1, fmt.Sprintf("h%d", inst)), taskRunning, 0, "")
	}
	for inst := range n {
		h.waitTask(jobID, inst, taskRunning)
	}
}

// listed is the instance IDs ListTasks returns.
func (h *harness) listed(jobID string) []uint32 {
	h.t.Helper()
	ts, err := h.jm.ListTasks(jobID, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []uint32
	for _, tk := range ts {
		out = append(out, tk.InstanceId)
	}
	return out
}

// waitListed waits for ListTasks to return exactly want.
func (h *harness) waitListed(jobID string, want []uint32) {
	h.t.Helper()
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("instances %v", want), func() error {
		if got := h.listed(jobID); !slices.Equal(got, want) {
			return fmt.Errorf("instances %v", got)
		}
		return nil
	})
}

// A scale that removes instances 3 and 7 of 10 stops just those two and
// deletes their records; the job has 8 instances with a hole at each, in
// its spec, in its list and to GetTask. A control plane that crashes and
// comes back has the same 8. A scale back up to 10 adds instances 10 and
// 11 (above the highest), never 3 or 7 again, and the job succeeds once
// its 10 instances do.
func TestHarnessScaleRemovesChosenInstances(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(10, 0))
	h.runAll(id, 10)
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 0, []uint32{7, 3}, 0); err != nil {
		t.Fatal(err)
	}
	holes := []uint32{0, 1, 2, 4, 5, 6, 8, 9}
	h.waitListed(id, holes)
	for _, inst := range []uint32{3, 7} {
		if k := h.hosts.called("kill " + resmgr.RunTaskID(id, inst, 1)); len(k) != 1 {
			t.Errorf("instance %d: kills %v", inst, k)
		}
		if _, err := h.st.Get(context.Background(), taskKey(id, inst)); err == nil {
			t.Errorf("instance %d still has a record", inst)
		}
		if _, err := h.jm.GetTask(id, inst); apierr.Code(err) != codes.NotFound {
			t.Errorf("GetTask of removed instance %d: %v, want NotFound", inst, err)
		}
	}
	if k := h.hosts.called("kill "); len(k) != 2 {
		t.Errorf("kills %v, want only the two removed", k)
	}
	j, err := h.jm.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.InstanceCount != 8 || !slices.Equal(j.Spec.RemovedInstances, []uint32{3, 7}) || j.Status.State != pelotonv1.JobState_JOB_RUNNING {
		t.Errorf("job after the removal: count %d, removed %v, %s", j.Spec.InstanceCount, j.Spec.RemovedInstances, j.Status.State)
	}

	h.crash()
	h.waitListed(id, holes)
	for _, inst := range holes {
		if tk := h.waitTask(id, inst, taskRunning); tk.Status.RunId != 1 {
			t.Errorf("instance %d on run %d after the restart", inst, tk.Status.RunId)
		}
	}

	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 10, nil, 0); err != nil {
		t.Fatal(err)
	}
	grown := append(slices.Clone(holes), 10, 11)
	h.waitListed(id, grown)
	for _, inst := range []uint32{10, 11} {
		h.hosts.emit(h.placeRun(id, inst, h.waitFirstRun(id, inst), fmt.Sprintf("h%d", inst)), taskRunning, 0, "")
	}
	h.hosts.mu.Lock()
	var runIDs []string
	for r := range h.hosts.runs {
		runIDs = append(runIDs, r)
	}
	h.hosts.mu.Unlock()
	for _, r := range runIDs {
		if _, inst, _, _ := parseTaskID(r); inst != 3 && inst != 7 {
			h.hosts.emit(r, taskSucceeded, 0, "")
		}
	}
	h.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED)
	if _, err := h.jm.GetTask(id, 3); apierr.Code(err) != codes.NotFound {
		t.Errorf("instance 3 came back: %v", err)
	}
}

// waitFirstRun is the run id instance inst's first run was given: above
// every run of a removed instance (status.removedRunId).
func (h *harness) waitFirstRun(jobID string, inst uint32) uint32 {
	h.t.Helper()
	var run uint32
	testutil.Eventually(h.t, 10*time.Second, fmt.Sprintf("%s/%d created", jobID, inst), func() error {
		tk, err := h.jm.GetTask(jobID, inst)
		if err != nil {
			return err
		}
		run = tk.Status.RunId
		return nil
	})
	return run
}

// A removal with a count: the listed instances go, and the count is the
// new total, so new instances are added above the highest.
func TestHarnessScaleRemovesAndGrows(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(4, 0))
	h.runAll(id, 4)
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 5, []uint32{1}, 0); err != nil {
		t.Fatal(err)
	}
	h.waitListed(id, []uint32{0, 2, 3, 4, 5})
	// Shrinking with a count below the rest takes the highest others too.
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 2, []uint32{2}, 0); err != nil {
		t.Fatal(err)
	}
	h.waitListed(id, []uint32{0, 3})
	j, err := h.jm.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.InstanceCount != 2 || !slices.Equal(j.Spec.RemovedInstances, []uint32{1, 2}) {
		t.Errorf("spec: count %d, removed %v", j.Spec.InstanceCount, j.Spec.RemovedInstances)
	}
}

// Bad removals are refused with the field and the reason, and change
// nothing: an instance the job does not have (NotFound), one listed twice
// (InvalidArgument), part of a gang or a count below selfScale.min
// (FailedPrecondition). A whole gang may go.
func TestHarnessScaleRemovalRefusals(t *testing.T) {
	h := newHarness(t)
	spec := gangBatch(6, 3, 0, pelotonv1.GangFailurePolicy_RESTART_GANG)
	spec.SelfScale = &pelotonv1.SelfScaleSpec{Min: 3, Max: 9}
	id := h.create(spec)
	h.queuedGang(id, 0, runs(0, 3, 1))
	for _, c := range []struct {
		name   string
		count  uint32
		remove []uint32
		code   codes.Code
		words  []string
	}{
		{"missing", 0, []uint32{0, 1, 2, 6}, codes.NotFound, []string{"removeInstances[3]", "no instance 6"}},
		{"twice", 0, []uint32{3, 4, 3, 5}, codes.InvalidArgument, []string{"removeInstances[2]", "twice"}},
		{"part of a gang", 0, []uint32{3, 4}, codes.FailedPrecondition, []string{"removeInstances[0]", "gang 1", "instance 5 is not listed"}},
		{"below selfScale.min", 0, []uint32{0, 1, 2, 3, 4, 5}, codes.FailedPrecondition, []string{"removeInstances"}},
		{"count below selfScale.min", 2, []uint32{3, 4, 5}, codes.FailedPrecondition, []string{"selfScale.min"}},
	} {
		_, err := h.jm.Updates().ScaleJob(context.Background(), id, c.count, c.remove, 0)
		if apierr.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	bad := batchSpec(3, 0)
	bad.RemovedInstances = []uint32{1}
	if _, err := h.jm.CreateJob(context.Background(), bad); apierr.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.removedInstances") {
		t.Errorf("a create with spec.removedInstances: %v, want InvalidArgument naming it", err)
	}
	vs, err := h.jm.Updates().ListJobVersions(id)
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions after refused scales: %d, %v", len(vs), err)
	}
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 0, []uint32{5, 3, 4}, 0); err != nil {
		t.Fatalf("removing gang 1 whole: %v", err)
	}
	h.waitListed(id, []uint32{0, 1, 2})
	// Growing again adds a whole gang above the highest: gang 2.
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 6, nil, 0); err != nil {
		t.Fatal(err)
	}
	h.waitListed(id, []uint32{0, 1, 2, 6, 7, 8})
	h.queuedGang(id, 2, map[uint32]uint32{6: h.waitFirstRun(id, 6), 7: h.waitFirstRun(id, 7), 8: h.waitFirstRun(id, 8)})
	if _, err := h.jm.GetGang(id, 1); apierr.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "removed") {
		t.Errorf("GetGang of the removed gang: %v, want NotFound", err)
	}
	g, err := h.jm.GetGang(id, 2)
	if err != nil {
		t.Fatal(err)
	}
	var members []uint32
	for _, mb := range g.Members {
		members = append(members, mb.Instance)
	}
	if !slices.Equal(members, []uint32{6, 7, 8}) || g.Size != 3 {
		t.Errorf("gang 2: size %d, members %v", g.Size, members)
	}
}

// A rolling update of a service with holes replaces the instances it has,
// batch by batch, and leaves the holes alone: no record is made for a
// removed instance, and the update's spec keeps the job's holes.
func TestHarnessUpdateAcrossHoles(t *testing.T) {
	h := newHarness(t)
	spec := serviceSpec(6, "img:1")
	spec.Sla = &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3}
	id := h.create(spec)
	h.runAll(id, 6)
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 0, []uint32{1, 4}, 0); err != nil {
		t.Fatal(err)
	}
	live := []uint32{0, 2, 3, 5}
	h.waitListed(id, live)
	h.advance(time.Minute)
	next := serviceSpec(4, "img:2")
	next.Sla = spec.Sla
	up, err := h.jm.Updates().CreateUpdate(context.Background(), id, next, &pelotonv1.UpdateSpec{BatchSize: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(up.Instances, live) {
		t.Errorf("update scope %v, want %v", up.Instances, live)
	}
	testutil.Eventually(t, 20*time.Second, "the update succeeds", func() error {
		for _, k := range h.hosts.called("kill ") {
			_, inst, run, _ := parseTaskID(k[len("kill "):])
			if inst == 1 || inst == 4 || run != 1 {
				continue
			}
			r := resmgr.RunTaskID(id, inst, run+1)
			if h.res.queuedRun(id, inst) == run+1 {
				h.res.place(id, inst, fmt.Sprintf("h%d", inst))
			}
			h.hosts.mu.Lock()
			_, launched := h.hosts.runs[r]
			h.hosts.mu.Unlock()
			if launched {
				h.hosts.emit(r, taskRunning, 0, "")
			}
		}
		h.advance(time.Minute)
		got, err := h.jm.Updates().GetUpdate(up.Id)
		if err != nil {
			return err
		}
		if got.Status.State != updateSucceeded {
			return fmt.Errorf("it is %s (%s)", got.Status.State, got.Status.Message)
		}
		return nil
	})
	h.waitListed(id, live)
	j, err := h.jm.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.InstanceCount != 4 || !slices.Equal(j.Spec.RemovedInstances, []uint32{1, 4}) || j.Spec.DefaultSpec.Image != "img:2" {
		t.Errorf("spec after the update: count %d, removed %v, image %s", j.Spec.InstanceCount, j.Spec.RemovedInstances, j.Spec.DefaultSpec.Image)
	}
	for _, inst := range []uint32{1, 4} {
		if _, err := h.st.Get(context.Background(), taskKey(id, inst)); err == nil {
			t.Errorf("removed instance %d has a record again", inst)
		}
	}
}

// A control plane that dies just after it stored the removal, before it
// stopped anything, finishes the removal when it comes back: the spec
// version alone says which instances go.
func TestHarnessRemovalFinishesAfterACrash(t *testing.T) {
	h := newHarness(t)
	id := h.create(batchSpec(3, 0))
	h.runAll(id, 3)
	dead := h.dead
	crashAt := func() {
		if _, err := h.st.Get(context.Background(), jobSpecKey(id, 2)); err == nil {
			dead.Store(true)
		}
	}
	h.afterTxn.Store(&crashAt)
	if _, err := h.jm.Updates().ScaleJob(context.Background(), id, 0, []uint32{1}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the removal's write", dead.Load)
	h.afterTxn.Store(nil)
	if k := h.hosts.called("kill "); len(k) > 0 {
		t.Fatalf("kills sent before the crash: %v", k)
	}
	h.crash()
	h.waitListed(id, []uint32{0, 2})
	if k := h.hosts.called("kill " + resmgr.RunTaskID(id, 1, 1)); len(k) != 1 {
		t.Errorf("kills of instance 1 after the restart: %v", k)
	}
	testutil.Eventually(t, 10*time.Second, "instance 1's record deleted", func() error {
		if _, err := h.st.Get(context.Background(), taskKey(id, 1)); err == nil {
			return fmt.Errorf("it is still stored")
		}
		return nil
	})
}
