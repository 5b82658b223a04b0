package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/internal/testing/pgtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// archiveStack is a cluster stack in this process (embedded etcd, the sim
// backend, the real managers) whose API reads through an archive, served
// over gRPC on a loopback port.
type archiveStack struct {
	jm      *jobmgr.Manager
	srv     *api.Server
	jobs    pelotonv1.JobServiceClient
	tasks   pelotonv1.TaskServiceClient
	updates pelotonv1.UpdateServiceClient
}

const testCluster = "test-cluster"

// startArchiveStack starts the stack; h, if set, is its archive.
func startArchiveStack(t *testing.T, h history.Store) *archiveStack {
	t.Helper()
	level := slog.LevelError
	if os.Getenv("PELOTON_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	st := apitest.Start(t, apitest.Options{Logger: log, History: h, Cluster: testCluster})
	jm, srv := st.JM, st.Server
	conn, err := grpc.NewClient(st.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &archiveStack{jm: jm, srv: srv, jobs: pelotonv1.NewJobServiceClient(conn),
		tasks: pelotonv1.NewTaskServiceClient(conn), updates: pelotonv1.NewUpdateServiceClient(conn)}
}

func openBolt(t *testing.T) *history.Bolt {
	t.Helper()
	h, err := history.OpenBolt(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// batchSpec is a three-instance batch job whose instance 2 fails.
func batchSpec(name string, labels map[string]string) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 3, Labels: labels,
		DefaultSpec:   &pelotonv1.TaskSpec{Command: []string{"sleep", "0.05"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}},
		InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{2: {Command: []string{"exit", "3"}}},
	}
}

// finished creates a job and waits until it has finished.
func (s *archiveStack) finished(t *testing.T, spec *pelotonv1.JobSpec) string {
	t.Helper()
	ctx := context.Background()
	r, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "job "+r.JobId+" finished", func() error {
		g, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: r.JobId})
		if err != nil {
			t.Fatal(err)
		}
		switch g.Job.Status.State {
		case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
			return nil
		}
		return fmt.Errorf("%v", g.Job.Status)
	})
	return r.JobId
}

// liveView is what the API answers about a live job.
type liveView struct {
	job      *pelotonv1.Job
	tasks    []*pelotonv1.Task
	task     []*pelotonv1.Task // GetTask of each instance
	versions []*pelotonv1.JobVersion
	updates  []*pelotonv1.Update
}

func (s *archiveStack) view(t *testing.T, id string) liveView {
	t.Helper()
	ctx := context.Background()
	var v liveView
	g, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	v.job = g.Job
	lt, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	v.tasks = lt.Tasks
	for _, tk := range lt.Tasks {
		gt, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: id, InstanceId: tk.InstanceId})
		if err != nil {
			t.Fatal(err)
		}
		v.task = append(v.task, gt.Task)
	}
	vs, err := s.jobs.ListJobVersions(ctx, &pelotonv1.ListJobVersionsRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	v.versions = vs.Versions
	us, err := s.updates.ListUpdates(ctx, &pelotonv1.ListUpdatesRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	v.updates = us.Updates
	return v
}

// archive does what the collector does: archives the job as the API shows
// it, then removes it from the live store (through jobmgr: the API's
// DeleteJob would purge the archive too).
func (s *archiveStack) archive(t *testing.T, h history.Store, v liveView) {
	t.Helper()
	ctx := context.Background()
	j := &history.Job{Cluster: testCluster, ID: v.job.Id, Versions: v.versions, Status: v.job.Status, Updates: v.updates, ArchiveTime: time.Now()}
	for _, tk := range v.tasks {
		j.Tasks = append(j.Tasks, tk.Status)
	}
	if err := h.Put(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := s.jm.DeleteJob(ctx, v.job.Id); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, words ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
	for _, w := range words {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), w)
		}
	}
}

// TestArchivedJobReadThrough: once a finished job is archived and gone
// from the live store, the API answers about it from the archive as it
// answered about the live job (marked archived), pages its tasks with the
// same tokens, serves its output from the backend, refuses to change it,
// and DeleteJob purges it.
func TestArchivedJobReadThrough(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx := context.Background()
	id := s.finished(t, batchSpec("archived-one", map[string]string{"team": "a"}))
	live := s.view(t, id)
	if live.job.Status.State != pelotonv1.JobState_JOB_FAILED {
		t.Fatalf("job state %s, want JOB_FAILED (instance 2 exits 3)", live.job.Status.State)
	}
	// The first page of the live task list; its token is used on the
	// archived job.
	page1, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.archive(t, h, live)
	if _, err := s.jm.GetJob(id); status.Code(err) != codes.NotFound {
		t.Fatalf("jobmgr still knows the archived job: %v", err)
	}

	g, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("GetJob of the archived job: %v", err)
	}
	if !g.Job.Status.Archived {
		t.Error("GetJob: status.archived is not set")
	}
	want := proto.Clone(live.job).(*pelotonv1.Job)
	want.Status.Archived = true
	if !proto.Equal(g.Job, want) {
		t.Errorf("GetJob of the archived job:\n got %v\nwant %v", g.Job, want)
	}

	lt, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
	if err != nil {
		t.Fatalf("ListTasks: %v", err)
	}
	if len(lt.Tasks) != 3 {
		t.Fatalf("ListTasks: %d tasks, want 3", len(lt.Tasks))
	}
	for i, tk := range lt.Tasks {
		if !proto.Equal(tk, live.tasks[i]) {
			t.Errorf("ListTasks[%d] of the archived job:\n got %v\nwant %v", i, tk, live.tasks[i])
		}
		gt, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: id, InstanceId: uint32(i)})
		if err != nil {
			t.Fatalf("GetTask %d: %v", i, err)
		}
		if !proto.Equal(gt.Task, live.task[i]) {
			t.Errorf("GetTask %d of the archived job:\n got %v\nwant %v", i, gt.Task, live.task[i])
		}
	}
	if got := lt.Tasks[2].Status.State; got != pelotonv1.TaskState_FAILED {
		t.Errorf("instance 2 is %s, want FAILED", got)
	}
	if lt.Tasks[2].Spec != nil || live.task[2].Spec.GetCommand()[0] != "exit" {
		t.Errorf("a listed task has no spec, a got task its effective one: %v / %v", lt.Tasks[2].Spec, live.task[2].Spec)
	}

	// Paging and the state filter, with the live list's token.
	p2, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, PageSize: 1, PageToken: page1.NextPageToken})
	if err != nil {
		t.Fatalf("ListTasks with the live list's token: %v", err)
	}
	if len(p2.Tasks) != 1 || p2.Tasks[0].InstanceId != 1 || p2.NextPageToken == "" {
		t.Errorf("page 2: %v, next %q; want instance 1 and a next page", p2.Tasks, p2.NextPageToken)
	}
	p3, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, PageSize: 1, PageToken: p2.NextPageToken})
	if err != nil || len(p3.Tasks) != 1 || p3.Tasks[0].InstanceId != 2 || p3.NextPageToken != "" {
		t.Errorf("page 3: %v, next %q, %v; want instance 2 and no next page", p3.GetTasks(), p3.GetNextPageToken(), err)
	}
	failed, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, States: []pelotonv1.TaskState{pelotonv1.TaskState_FAILED}})
	if err != nil || len(failed.Tasks) != 1 || failed.Tasks[0].InstanceId != 2 {
		t.Errorf("failed tasks: %v, %v; want instance 2", failed.GetTasks(), err)
	}
	_, err = s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, PageToken: "nope"})
	wantCode(t, "ListTasks with a bad token", err, codes.InvalidArgument, "pageToken:")
	_, err = s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, PageSize: 99999})
	wantCode(t, "ListTasks with too big a page", err, codes.InvalidArgument, "pageSize:")
	_, err = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: id, InstanceId: 3})
	wantCode(t, "GetTask of an instance the job never had", err, codes.NotFound, "has no instance 3")

	vs, err := s.jobs.ListJobVersions(ctx, &pelotonv1.ListJobVersionsRequest{JobId: id})
	if err != nil || len(vs.Versions) != len(live.versions) || !proto.Equal(vs.Versions[0], live.versions[0]) {
		t.Errorf("ListJobVersions: %v, %v; want %v", vs.GetVersions(), err, live.versions)
	}
	if _, err := s.updates.ListUpdates(ctx, &pelotonv1.ListUpdatesRequest{JobId: id}); err != nil {
		t.Errorf("ListUpdates of the archived job: %v", err)
	}

	// Output: the last run of instance 0, from the backend.
	out := readLogs(t, s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: id, InstanceId: 0, Stream: pelotonv1.LogStream_STDOUT, Follow: true})
	if !strings.Contains(out, "sim: sleep 0.05 on ") || !strings.Contains(out, "succeeded (exit 0)") {
		t.Errorf("logs of instance 0: %q", out)
	}
	out = readLogs(t, s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: id, InstanceId: 2, RunId: 1, Stream: pelotonv1.LogStream_STDOUT})
	if !strings.Contains(out, "failed (exit 3)") {
		t.Errorf("logs of instance 2 run 1: %q", out)
	}
	_, err = readLogsErr(s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: id, InstanceId: 0, RunId: 9, Stream: pelotonv1.LogStream_STDOUT})
	wantCode(t, "logs of a run the instance never had", err, codes.NotFound, "has no run 9")

	// Changes are refused, naming the archive.
	for what, call := range map[string]func() error{
		"CancelJob":  func() error { _, err := s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: id}); return err },
		"RestartJob": func() error { _, err := s.jobs.RestartJob(ctx, &pelotonv1.RestartJobRequest{JobId: id}); return err },
		"ScaleJob": func() error {
			_, err := s.jobs.ScaleJob(ctx, &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 5})
			return err
		},
		"KillTask": func() error { _, err := s.tasks.KillTask(ctx, &pelotonv1.KillTaskRequest{JobId: id}); return err },
		"CreateUpdate": func() error {
			_, err := s.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: batchSpec("archived-one", nil)})
			return err
		},
	} {
		wantCode(t, what+" of an archived job", call(), codes.FailedPrecondition, "job "+id+" is archived")
	}

	// A job neither store has is NotFound, as before.
	_, err = s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "no-such-job"})
	wantCode(t, "GetJob of an unknown job", err, codes.NotFound, "no-such-job does not exist")
	_, err = s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: "no-such-job"})
	wantCode(t, "CancelJob of an unknown job", err, codes.NotFound, "no-such-job does not exist")

	// Delete purges the archived job.
	if _, err := s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: id}); err != nil {
		t.Fatalf("DeleteJob of the archived job: %v", err)
	}
	if _, err := h.Get(ctx, testCluster, id); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("the archive still has the deleted job: %v", err)
	}
	_, err = s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	wantCode(t, "GetJob of the purged job", err, codes.NotFound, "does not exist")
	_, err = s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: id})
	wantCode(t, "DeleteJob of the purged job", err, codes.NotFound, "does not exist")
}

func readLogsErr(c pelotonv1.TaskServiceClient, req *pelotonv1.GetTaskLogsRequest) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.GetTaskLogs(ctx, req)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		b.Write(m.Data)
	}
}

func readLogs(t *testing.T, c pelotonv1.TaskServiceClient, req *pelotonv1.GetTaskLogsRequest) string {
	t.Helper()
	out, err := readLogsErr(c, req)
	if err != nil {
		t.Fatalf("logs %v: %v", req, err)
	}
	return out
}

// archivedRecord is a job that finished long ago, put straight into the
// archive: the backend has never heard of its runs.
func archivedRecord(id, name string, created time.Time, labels map[string]string) *history.Job {
	spec := batchSpec(name, labels)
	spec.InstanceCount = 1
	end := timestamppb.New(created.Add(time.Minute))
	return &history.Job{Cluster: testCluster, ID: id, ArchiveTime: created.Add(time.Hour),
		Versions: []*pelotonv1.JobVersion{{Version: 1, Spec: spec, CreateTime: timestamppb.New(created)}},
		Status: &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_SUCCEEDED, SpecVersion: 1, CreateTime: timestamppb.New(created),
			CompletionTime: end, TaskCounts: map[string]uint32{"SUCCEEDED": 1}},
		Tasks: []*pelotonv1.TaskStatus{{State: pelotonv1.TaskState_SUCCEEDED, RunId: 1, SpecVersion: 1, Host: "sim-00000", CompletionTime: end}},
	}
}

// TestArchivedLogsNoLongerKept: the output of an archived run the backend
// no longer keeps is NotFound, saying so.
func TestArchivedLogsNoLongerKept(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx := context.Background()
	if err := h.Put(ctx, archivedRecord("old-job", "old", time.Now().Add(-48*time.Hour), nil)); err != nil {
		t.Fatal(err)
	}
	_, err := readLogsErr(s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: "old-job", Stream: pelotonv1.LogStream_STDOUT})
	wantCode(t, "logs of an archived run the backend forgot", err, codes.NotFound, "run 1 of instance 0 of archived job old-job is no longer kept", "--log-retention")
	_, err = readLogsErr(s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: "old-job", InstanceId: 1, Stream: pelotonv1.LogStream_STDOUT})
	wantCode(t, "logs of an instance the job never had", err, codes.NotFound, "has no instance 1")
	_, err = readLogsErr(s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: "old-job", Stream: pelotonv1.LogStream(7)})
	wantCode(t, "logs of no stream", err, codes.InvalidArgument, "stream:")
}

// TestListJobsArchived: ListJobs with archived lists the archive, with
// every filter; without it, the live jobs, with the same filters.
func TestListJobsArchived(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx := context.Background()
	now := time.Now()
	for _, j := range []*history.Job{
		archivedRecord("a-old", "nightly-etl", now.Add(-72*time.Hour), map[string]string{"team": "data"}),
		archivedRecord("b-mid", "nightly-report", now.Add(-30*time.Hour), map[string]string{"team": "data", "tier": "2"}),
		archivedRecord("c-new", "adhoc", now.Add(-2*time.Hour), map[string]string{"team": "web"}),
	} {
		if err := h.Put(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	liveID := s.finished(t, batchSpec("nightly-live", map[string]string{"team": "data"}))

	ids := func(r *pelotonv1.ListJobsResponse) string {
		var out []string
		for _, j := range r.GetJobs() {
			if !j.Status.GetArchived() && j.Id != liveID {
				t.Errorf("archived job %s listed without status.archived", j.Id)
			}
			out = append(out, j.Id)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name string
		req  *pelotonv1.ListJobsRequest
		want string
	}{
		{"all", &pelotonv1.ListJobsRequest{Archived: true}, "c-new,b-mid,a-old"},
		{"label", &pelotonv1.ListJobsRequest{Archived: true, Labels: map[string]string{"team": "data"}}, "b-mid,a-old"},
		{"two labels", &pelotonv1.ListJobsRequest{Archived: true, Labels: map[string]string{"team": "data", "tier": "2"}}, "b-mid"},
		{"name", &pelotonv1.ListJobsRequest{Archived: true, Name: "nightly"}, "b-mid,a-old"},
		{"since", &pelotonv1.ListJobsRequest{Archived: true, CreatedSince: timestamppb.New(now.Add(-48 * time.Hour))}, "c-new,b-mid"},
		{"until", &pelotonv1.ListJobsRequest{Archived: true, CreatedUntil: timestamppb.New(now.Add(-24 * time.Hour))}, "b-mid,a-old"},
		{"between", &pelotonv1.ListJobsRequest{Archived: true, CreatedSince: timestamppb.New(now.Add(-48 * time.Hour)),
			CreatedUntil: timestamppb.New(now.Add(-24 * time.Hour))}, "b-mid"},
		{"pool", &pelotonv1.ListJobsRequest{Archived: true, Pool: "default"}, "c-new,b-mid,a-old"},
		{"other pool", &pelotonv1.ListJobsRequest{Archived: true, Pool: "/other"}, ""},
		{"state", &pelotonv1.ListJobsRequest{Archived: true, States: []pelotonv1.JobState{pelotonv1.JobState_JOB_FAILED}}, ""},
		{"live", &pelotonv1.ListJobsRequest{}, liveID},
		{"live label", &pelotonv1.ListJobsRequest{Labels: map[string]string{"team": "data"}}, liveID},
		{"live other label", &pelotonv1.ListJobsRequest{Labels: map[string]string{"team": "web"}}, ""},
		{"live since", &pelotonv1.ListJobsRequest{CreatedSince: timestamppb.New(now.Add(-time.Hour))}, liveID},
		{"live until", &pelotonv1.ListJobsRequest{CreatedUntil: timestamppb.New(now.Add(-time.Hour))}, ""},
	} {
		r, err := s.jobs.ListJobs(ctx, c.req)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := ids(r); got != c.want {
			t.Errorf("%s: listed %q, want %q", c.name, got, c.want)
		}
	}

	// Pages of the archive.
	p1, err := s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true, PageSize: 2})
	if err != nil || ids(p1) != "c-new,b-mid" || p1.NextPageToken == "" {
		t.Fatalf("page 1: %v, %v", p1, err)
	}
	p2, err := s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true, PageSize: 2, PageToken: p1.NextPageToken})
	if err != nil || ids(p2) != "a-old" || p2.NextPageToken != "" {
		t.Fatalf("page 2: %v, %v", p2, err)
	}

	// Bad filters, named.
	for _, archived := range []bool{false, true} {
		_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: archived, CreatedSince: timestamppb.New(now), CreatedUntil: timestamppb.New(now)})
		wantCode(t, "createdUntil not after createdSince", err, codes.InvalidArgument, "createdUntil: ", "is not after createdSince")
		_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: archived, Labels: map[string]string{"": "x"}})
		wantCode(t, "an empty label key", err, codes.InvalidArgument, "labels: ")
		_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: archived, CreatedSince: &timestamppb.Timestamp{Nanos: -1}})
		wantCode(t, "an invalid time", err, codes.InvalidArgument, "createdSince: ")
	}
	_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true, PageToken: "nope"})
	wantCode(t, "a bad archive token", err, codes.InvalidArgument, "pageToken: ")
	_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true, PageSize: 99999})
	wantCode(t, "too big an archive page", err, codes.InvalidArgument, "pageSize: ")
}

// TestNoArchive: a stack without an archive answers as before, and a list
// of the archive says how to get one.
func TestNoArchive(t *testing.T) {
	s := startArchiveStack(t, nil)
	ctx := context.Background()
	_, err := s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true})
	wantCode(t, "ListJobs archived without an archive", err, codes.FailedPrecondition, "archived: ", "--archive")
	_, err = s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "gone"})
	wantCode(t, "GetJob of an unknown job", err, codes.NotFound, "job gone does not exist")
	_, err = s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: "gone"})
	wantCode(t, "DeleteJob of an unknown job", err, codes.NotFound, "job gone does not exist")
}

// TestArchiveUnavailable: with the archive's PostgreSQL server down, a job
// the live store does not have is Unavailable, naming the archive; the
// live jobs are served as ever.
func TestArchiveUnavailable(t *testing.T) {
	pg := pgtest.New(t)
	ctx := context.Background()
	h, err := history.OpenPostgres(ctx, pg.URL(pg.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	s := startArchiveStack(t, h)
	if err := h.Put(ctx, archivedRecord("pg-job", "pg", time.Now().Add(-time.Hour), nil)); err != nil {
		t.Fatal(err)
	}
	g, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "pg-job"})
	if err != nil || !g.Job.Status.Archived {
		t.Fatalf("GetJob from PostgreSQL: %v, %v", g, err)
	}
	liveID := s.finished(t, batchSpec("live", nil))
	pg.Stop(t)
	_, err = s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "pg-job"})
	wantCode(t, "GetJob with the archive down", err, codes.Unavailable, "archive of finished jobs cannot be reached")
	_, err = s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: "pg-job"})
	wantCode(t, "CancelJob with the archive down", err, codes.Unavailable, "archive of finished jobs cannot be reached")
	_, err = s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Archived: true})
	wantCode(t, "ListJobs archived with the archive down", err, codes.Unavailable, "archive of finished jobs cannot be reached")
	if _, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: liveID}); err != nil {
		t.Errorf("GetJob of a live job with the archive down: %v", err)
	}
	if r, err := s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{}); err != nil || len(r.Jobs) != 1 {
		t.Errorf("ListJobs of the live jobs with the archive down: %v, %v", r, err)
	}
}

// TestArchivedJobRules: authorization finds an archived job's pool in the
// archive, for the calls about the job and for its updates in a list.
func TestArchivedJobRules(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	ctx := context.Background()
	rec := archivedRecord("ruled", "ruled", time.Now().Add(-time.Hour), nil)
	rec.Versions[0].Spec.Pool = "/org/team"
	rec.Updates = []*pelotonv1.Update{{Id: "u-1", JobId: "ruled", Status: &pelotonv1.UpdateStatus{CreateTime: timestamppb.New(time.Now().Add(-time.Hour))}}}
	if err := h.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rules := s.srv.Rules()
	for _, m := range []string{"/peloton.api.v1.JobService/GetJob", "/peloton.api.v1.JobService/DeleteJob", "/peloton.api.v1.TaskService/GetTaskLogs"} {
		pools, err := rules[m].Pools(ctx, &pelotonv1.GetJobRequest{JobId: "ruled"})
		if err != nil || len(pools) != 1 || pools[0] != "/org/team" {
			t.Errorf("%s of the archived job needs the role on %v (%v), want [/org/team]", m, pools, err)
		}
		_, err = rules[m].Pools(ctx, &pelotonv1.GetJobRequest{JobId: "nowhere"})
		wantCode(t, m+" of an unknown job", err, codes.NotFound, "nowhere does not exist")
	}
	resp, err := s.updates.ListUpdates(ctx, &pelotonv1.ListUpdatesRequest{JobId: "ruled"})
	if err != nil || len(resp.Updates) != 1 || resp.Updates[0].Id != "u-1" {
		t.Fatalf("ListUpdates of the archived job: %v, %v", resp, err)
	}
	var asked []string
	rules["/peloton.api.v1.UpdateService/ListUpdates"].Filter(resp, func(p string) bool { asked = append(asked, p); return p == "/org/team" })
	if len(resp.Updates) != 1 || len(asked) != 1 || asked[0] != "/org/team" {
		t.Errorf("the list filter kept %v, asking for %v; want the update kept, by /org/team", resp.Updates, asked)
	}
}
