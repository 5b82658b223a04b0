package api_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// dryStack is a stack with its store at hand, to see that a dry run
// writes nothing.
type dryStack struct {
	st      store.Store
	jobs    pelotonv1.JobServiceClient
	updates pelotonv1.UpdateServiceClient
}

func startDryStack(t *testing.T) *dryStack {
	t.Helper()
	st := apitest.Start(t, apitest.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	conn, err := grpc.NewClient(st.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &dryStack{st: st.Store, jobs: pelotonv1.NewJobServiceClient(conn), updates: pelotonv1.NewUpdateServiceClient(conn)}
}

// keys are the store's job, update and request-id keys: what a create, an
// update or a scale would add.
func (d *dryStack) keys(t *testing.T) string {
	t.Helper()
	var ks []string
	for _, p := range []string{"jobs/", "updates/", "requests/", "index/"} {
		kvs, err := d.st.List(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			ks = append(ks, kv.Key)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n")
}

func dryServiceSpec() *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
}

// wantRefused fails t unless err is code with a message naming field.
func wantRefused(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), field) {
		t.Fatalf("got %v, want %s naming %s", err, code, field)
	}
}

func TestDryRunCreateJobStoresNothing(t *testing.T) {
	d := startDryStack(t)
	ctx := context.Background()
	before := d.keys(t)
	spec := dryServiceSpec()
	spec.Pool = "default" // resolved to /default, as a real create would
	r, err := d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec, DryRun: true, RequestId: "dry-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.DryRun || r.JobId != "" || r.Spec.GetPool() != "/default" || r.Spec.GetName() != "web" {
		t.Fatalf("dry run answered %v; want dryRun, no id, the spec with pool /default", r)
	}
	if after := d.keys(t); after != before {
		t.Fatalf("a dry run wrote to the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	l, err := d.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Jobs) != 0 {
		t.Fatalf("a dry run created jobs: %v", l.Jobs)
	}
	// The request id was not recorded: a real create with it creates.
	real, err := d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec, RequestId: "dry-1"})
	if err != nil || real.JobId == "" || real.DryRun {
		t.Fatalf("real create after a dry run: %v, %v", real, err)
	}

	bad := dryServiceSpec()
	bad.DefaultSpec.Resources.Cpu = 1000
	_, err = d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: bad, DryRun: true})
	wantRefused(t, err, codes.InvalidArgument, "spec.defaultSpec.resources.cpu")
	bad = dryServiceSpec()
	bad.Pool = "/nosuch"
	_, err = d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: bad, DryRun: true})
	wantRefused(t, err, codes.NotFound, "spec.pool")
	bad = dryServiceSpec()
	bad.Name = ""
	_, err = d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: bad, DryRun: true})
	wantRefused(t, err, codes.InvalidArgument, "spec.name")
}

func TestDryRunScaleAndUpdateChangeNothing(t *testing.T) {
	d := startDryStack(t)
	ctx := context.Background()
	c, err := d.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: dryServiceSpec()})
	if err != nil {
		t.Fatal(err)
	}
	id := c.JobId
	testutil.Eventually(t, 30*time.Second, "job "+id+" running", func() bool {
		g, err := d.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
		return err == nil && g.Job.Status.State == pelotonv1.JobState_JOB_RUNNING
	})
	before := d.keys(t)

	s, err := d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !s.DryRun || s.SpecVersion != 2 {
		t.Fatalf("dry-run scale answered %v; want dryRun and spec version 2", s)
	}
	_, err = d.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3, Version: 7, DryRun: true})
	wantRefused(t, err, codes.Aborted, "spec version 1, not 7")

	spec := dryServiceSpec()
	spec.DefaultSpec.Command = []string{"sleep", "7200"}
	u, err := d.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: spec, DryRun: true,
		UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !u.DryRun || u.Update.GetId() != "" || u.Update.GetStatus().GetInstancesTotal() != 2 || u.Update.GetToVersion() != 2 {
		t.Fatalf("dry-run update answered %v; want dryRun, no id, 2 instances to replace, version 2", u)
	}
	renamed := proto.Clone(spec).(*pelotonv1.JobSpec)
	renamed.Name = "other"
	_, err = d.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: renamed, DryRun: true})
	wantRefused(t, err, codes.InvalidArgument, "spec.name")
	_, err = d.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: spec, DryRun: true,
		UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: 5}})
	wantRefused(t, err, codes.InvalidArgument, "batchSize")

	if after := d.keys(t); after != before {
		t.Fatalf("dry runs wrote to the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	g, err := d.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if g.Job.Status.SpecVersion != 1 || g.Job.Spec.InstanceCount != 2 {
		t.Fatalf("after dry runs the job is at version %d with %d instances; want 1 and 2", g.Job.Status.SpecVersion, g.Job.Spec.InstanceCount)
	}
	us, err := d.updates.ListUpdates(ctx, &pelotonv1.ListUpdatesRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(us.Updates) != 0 {
		t.Fatalf("a dry run created updates: %v", us.Updates)
	}
}
