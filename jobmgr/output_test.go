package jobmgr

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

var _ hostmgr.OutputPruner = (*sandboxView)(nil)

func (v *sandboxView) RemoveJobOutput(_ context.Context, jobID string) error {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.s.outputRemoved = append(v.s.outputRemoved, jobID)
	return nil
}

// TestDeleteJobRemovesItsOutput: deleting a finished job tells the backend
// that its runs' output may go; a delete refused tells it nothing.
func TestDeleteJobRemovesItsOutput(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(1)
	p := startProcess(t, e, s)
	spec := &pelotonv1.JobSpec{Name: "out", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
	ctx := context.Background()
	id, err := p.jm.CreateJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	run := resmgr.RunTaskID(id, 0, 1)
	waitFor(t, "the run launched", 20*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.runs[run] != nil, fmt.Sprintf("%d runs", len(s.runs))
	})
	if err := p.jm.DeleteJob(ctx, id); err == nil {
		t.Fatal("DeleteJob of a running job succeeded")
	}
	s.finish(run, pelotonv1.TaskState_SUCCEEDED, false)
	waitFor(t, "the job succeeded", 20*time.Second, func() (bool, string) {
		j, err := p.jm.GetJob(id)
		if err != nil {
			return false, err.Error()
		}
		return j.Status.State == pelotonv1.JobState_JOB_SUCCEEDED, j.Status.State.String()
	})
	s.mu.Lock()
	before := slices.Clone(s.outputRemoved)
	s.mu.Unlock()
	if len(before) != 0 {
		t.Fatalf("output of %v removed before any delete", before)
	}
	if err := p.jm.DeleteJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(s.outputRemoved, []string{id}) {
		t.Errorf("the backend was told to remove the output of %v, want [%s]", s.outputRemoved, id)
	}
}
