package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/peloton-sched/peloton/cluster/api"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func batchItem(name, requestID string) *pelotonv1.CreateJobRequest {
	return &pelotonv1.CreateJobRequest{RequestId: requestID, Spec: &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}}
}

// liveJobs counts the jobs the cluster lists.
func liveJobs(t *testing.T, d *dryStack) int {
	t.Helper()
	l, err := d.jobs.ListJobs(context.Background(), &pelotonv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Jobs)
}

// TestCreateJobsAnswersEachItem: every item of a batch create is answered
// on its own. Bad items are refused naming their index and field and leave
// nothing behind (no job, no request id); the good ones are created; a
// replay of the batch is answered with the same jobs and creates nothing.
func TestCreateJobsAnswersEachItem(t *testing.T) {
	d := startDryStack(t)
	ctx := context.Background()
	noInstances := batchItem("bad-count", "cj-bad-1")
	noInstances.Spec.InstanceCount = 0
	noPool := batchItem("bad-pool", "cj-bad-2")
	noPool.Spec.Pool = "/nosuch"
	dry := batchItem("dry", "cj-bad-3")
	dry.DryRun = true
	items := []*pelotonv1.CreateJobRequest{
		batchItem("a", "cj-a"), noInstances, batchItem("b", "cj-b"), noPool, batchItem("c", ""), dry,
		batchItem("a", "cj-a"), // the same request twice in one call: one job
	}
	resp, err := d.jobs.CreateJobs(ctx, &pelotonv1.CreateJobsRequest{Requests: items})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(items) {
		t.Fatalf("%d results for %d items", len(resp.Results), len(items))
	}
	for i, want := range []struct {
		code  codes.Code
		field string
	}{1: {codes.InvalidArgument, "requests[1].spec.instanceCount: "}, 3: {codes.NotFound, "requests[3].spec.pool: "}, 5: {codes.InvalidArgument, "requests[5].dryRun: "}} {
		if want.field == "" {
			continue
		}
		r := resp.Results[i]
		if codes.Code(r.Code) != want.code || !strings.HasPrefix(r.Message, want.field) || r.JobId != "" {
			t.Errorf("item %d: %v, want %s starting %q and no job id", i, r, want.code, want.field)
		}
	}
	ids := map[int]string{}
	for _, i := range []int{0, 2, 4, 6} {
		r := resp.Results[i]
		if r.Code != 0 || r.JobId == "" || r.Message != "" {
			t.Fatalf("item %d: %v, want a job id", i, r)
		}
		ids[i] = r.JobId
		g, err := d.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: r.JobId})
		if err != nil || g.Job.Spec.GetName() != items[i].Spec.Name {
			t.Fatalf("item %d's job %s: %v, %v", i, r.JobId, g, err)
		}
	}
	if ids[0] != ids[6] {
		t.Errorf("one request id twice in a call made jobs %s and %s, want one", ids[0], ids[6])
	}
	if n := liveJobs(t, d); n != 3 {
		t.Errorf("%d jobs after the batch, want 3 (a, b, c)", n)
	}
	keys := d.keys(t)
	for _, rq := range []string{"cj-bad-1", "cj-bad-2", "cj-bad-3"} {
		if strings.Contains(keys, rq) {
			t.Errorf("a refused item left its request id %s in the store:\n%s", rq, keys)
		}
	}

	// A replay (the answer was lost) is answered again, not repeated.
	again, err := d.jobs.CreateJobs(ctx, &pelotonv1.CreateJobsRequest{Requests: []*pelotonv1.CreateJobRequest{batchItem("b", "cj-b"), batchItem("a", "cj-a")}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Results[0].JobId != ids[2] || again.Results[1].JobId != ids[0] {
		t.Errorf("replay answered %v, want jobs %s and %s", again.Results, ids[2], ids[0])
	}
	if n := liveJobs(t, d); n != 3 {
		t.Errorf("%d jobs after the replay, want still 3", n)
	}
	// A request id reused for another job is refused, naming the item.
	reused, err := d.jobs.CreateJobs(ctx, &pelotonv1.CreateJobsRequest{Requests: []*pelotonv1.CreateJobRequest{batchItem("d", "cj-d"), batchItem("not-a", "cj-a")}})
	if err != nil {
		t.Fatal(err)
	}
	if r := reused.Results[1]; codes.Code(r.Code) != codes.AlreadyExists || !strings.HasPrefix(r.Message, "requests[1].requestId: ") {
		t.Errorf("reused request id: %v, want AlreadyExists naming requests[1].requestId", r)
	}
	if reused.Results[0].JobId == "" {
		t.Errorf("the good item beside a reused request id: %v, want created", reused.Results[0])
	}
}

// TestCreateJobsRefusesBadCalls: a call with no items or too many is
// refused whole, naming the field, and creates nothing.
func TestCreateJobsRefusesBadCalls(t *testing.T) {
	d := startDryStack(t)
	ctx := context.Background()
	_, err := d.jobs.CreateJobs(ctx, &pelotonv1.CreateJobsRequest{})
	wantRefused(t, err, codes.InvalidArgument, "requests: ")
	many := make([]*pelotonv1.CreateJobRequest, api.MaxCreateJobs+1)
	for i := range many {
		many[i] = batchItem(fmt.Sprintf("j%d", i), "")
	}
	_, err = d.jobs.CreateJobs(ctx, &pelotonv1.CreateJobsRequest{Requests: many})
	wantRefused(t, err, codes.InvalidArgument, "requests: ")
	if n := liveJobs(t, d); n != 0 {
		t.Errorf("%d jobs after refused calls, want 0", n)
	}
}
