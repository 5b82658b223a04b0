package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScaleJob with removeInstances through the API: a dry run changes
// nothing, bad lists are refused naming removeInstances[i], and a real
// removal leaves the job with holes that ListTasks, GetTask and GetJob
// agree on; a scale back up adds IDs above the highest.
func TestScaleJobRemovesChosenInstances(t *testing.T) {
	st := apitest.Start(t, apitest.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	conn, err := grpc.NewClient(st.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	d := &dryStack{st: st.Store, jobs: pelotonv1.NewJobServiceClient(conn)}
	tasks := pelotonv1.NewTaskServiceClient(conn)
	ctx := context.Background()
	spec := dryServiceSpec()
	spec.InstanceCount = 5
	cr, err := d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetJobId()
	ids := func() ([]uint32, error) {
		r, err := tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
		var out []uint32
		for _, tk := range r.GetTasks() {
			out = append(out, tk.GetInstanceId())
		}
		return out, err
	}
	waitIDs := func(want []uint32) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, "instances", func() error {
			got, err := ids()
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("instances %v, want %v", got, want)
			}
			return nil
		})
	}
	waitIDs([]uint32{0, 1, 2, 3, 4})
	testutil.Eventually(t, 30*time.Second, "the job leaves INITIALIZED", func() error {
		j, err := d.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		if j.GetJob().GetStatus().GetState() == pelotonv1.JobState_JOB_INITIALIZED {
			return fmt.Errorf("still INITIALIZED")
		}
		return nil
	})

	before := d.keys(t)
	dry, err := d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{1, 3}, DryRun: true})
	if err != nil || !dry.GetDryRun() || dry.GetSpecVersion() != 2 {
		t.Fatalf("dry run: %v, %v", dry, err)
	}
	_, err = d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{1, 9}})
	wantRefused(t, err, codes.NotFound, "removeInstances[1]")
	_, err = d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{1, 1}})
	wantRefused(t, err, codes.InvalidArgument, "removeInstances[1]")
	if after := d.keys(t); after != before {
		t.Errorf("a dry run or a refused removal changed the store:\nbefore %s\nafter %s", before, after)
	}

	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	watch, err := tasks.WatchTasks(wctx, &pelotonv1.WatchTasksRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	for synced := false; !synced; {
		c, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		synced = c.GetSynced()
	}
	if _, err := d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{3, 1}}); err != nil {
		t.Fatal(err)
	}
	waitIDs([]uint32{0, 2, 4})

	_, err = tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: id, InstanceId: 1})
	wantRefused(t, err, codes.NotFound, "removed")
	j, err := d.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if s := j.GetJob().GetSpec(); s.GetInstanceCount() != 3 || !slices.Equal(s.GetRemovedInstances(), []uint32{1, 3}) {
		t.Errorf("spec after the removal: count %d, removed %v", s.GetInstanceCount(), s.GetRemovedInstances())
	}
	_, err = d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, RemoveInstances: []uint32{3}})
	wantRefused(t, err, codes.NotFound, "removeInstances[0]")
	if _, err := d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 4}); err != nil {
		t.Fatal(err)
	}
	waitIDs([]uint32{0, 2, 4, 5})
	// The watch said both were removed, nothing more of them after that,
	// and then the new instance 5.
	var removed []uint32
	for seen5 := false; !seen5; {
		c, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch: %v (removed so far %v)", err, removed)
		}
		inst := c.GetTask().GetInstanceId()
		switch {
		case c.GetRemoved():
			removed = append(removed, inst)
		case (inst == 1 || inst == 3) && len(removed) == 2:
			t.Errorf("watch sent instance %d after its removal: %v", inst, c.GetTask().GetStatus().GetState())
		case inst == 5:
			seen5 = true
		}
	}
	if !slices.Equal(removed, []uint32{1, 3}) {
		t.Errorf("watch removed %v, want [1 3]", removed)
	}
}

// An archived job with holes (its collector stored no task for a removed
// instance) answers as the live one did: ListTasks leaves the holes out,
// GetTask of one is NotFound saying it was removed.
func TestArchivedJobKeepsItsHoles(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx := context.Background()
	rec := archivedRecord("holed-job", "holed", time.Now().Add(-time.Hour), nil)
	spec := rec.Versions[0].Spec
	spec.InstanceCount, spec.RemovedInstances, spec.InstanceSpecs = 2, []uint32{1}, nil
	done := rec.Tasks[0]
	rec.Tasks = []*pelotonv1.TaskStatus{done, nil, done}
	rec.Status.TaskCounts = map[string]uint32{"SUCCEEDED": 2}
	if err := h.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	lt, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: "holed-job"})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, tk := range lt.GetTasks() {
		got = append(got, tk.GetInstanceId())
	}
	if !slices.Equal(got, []uint32{0, 2}) {
		t.Errorf("archived ListTasks: instances %v, want [0 2]", got)
	}
	_, err = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: "holed-job", InstanceId: 1})
	wantCode(t, "GetTask of an archived job's removed instance", err, codes.NotFound, "removed by a scale")
	if _, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: "holed-job", InstanceId: 2}); err != nil {
		t.Errorf("GetTask of instance 2: %v", err)
	}
}
