// Package authtest serves a small job API - Peloton's JobService and
// TaskService over a fixed set of jobs, each in a pool - with the rules
// that guard it, for tests of internal/auth's guard and of the listeners
// that run it (internal/serving). It is not the cluster's API: only what
// a guard looks at is real (pools, lists, streams, deadlines).
package authtest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/auth"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Jobs is the API: job id -> pool.
type Jobs struct {
	pelotonv1.UnimplementedJobServiceServer
	pelotonv1.UnimplementedTaskServiceServer

	pools map[string]string

	mu        sync.Mutex
	cancelled []string
	last      Seen
}

var (
	_ pelotonv1.JobServiceServer  = (*Jobs)(nil)
	_ pelotonv1.TaskServiceServer = (*Jobs)(nil)
)

// Seen is what the last GetJob handler saw of its call.
type Seen struct {
	// Deadline is the call's deadline, zero if it had none.
	Deadline time.Time
	Identity auth.Identity
}

// NewJobs serves the jobs of pools (job id -> pool path).
func NewJobs(pools map[string]string) *Jobs { return &Jobs{pools: pools} }

// Register adds both services to s.
func (j *Jobs) Register(s grpc.ServiceRegistrar) {
	pelotonv1.RegisterJobServiceServer(s, j)
	pelotonv1.RegisterTaskServiceServer(s, j)
}

// Cancelled lists the jobs CancelJob was called on, in order.
func (j *Jobs) Cancelled() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.cancelled)
}

// LastGet is what the last GetJob saw.
func (j *Jobs) LastGet() Seen {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

func (j *Jobs) job(id string) (*pelotonv1.Job, error) {
	p, ok := j.pools[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s not found", id)
	}
	return &pelotonv1.Job{Id: id, Spec: &pelotonv1.JobSpec{Name: id, Pool: p}}, nil
}

func (j *Jobs) GetJob(ctx context.Context, r *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	var seen Seen
	seen.Deadline, _ = ctx.Deadline()
	seen.Identity, _ = auth.FromContext(ctx)
	j.mu.Lock()
	j.last = seen
	j.mu.Unlock()
	job, err := j.job(r.GetJobId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetJobResponse{Job: job}, nil
}

// ListJobs answers every job (of r's pool, if it names one), in id order.
func (j *Jobs) ListJobs(_ context.Context, r *pelotonv1.ListJobsRequest) (*pelotonv1.ListJobsResponse, error) {
	resp := &pelotonv1.ListJobsResponse{}
	for _, id := range slices.Sorted(maps.Keys(j.pools)) {
		if r.GetPool() == "" || j.pools[id] == r.GetPool() {
			job, _ := j.job(id)
			resp.Jobs = append(resp.Jobs, job)
		}
	}
	return resp, nil
}

func (j *Jobs) CreateJob(_ context.Context, r *pelotonv1.CreateJobRequest) (*pelotonv1.CreateJobResponse, error) {
	return &pelotonv1.CreateJobResponse{JobId: "new-" + r.GetSpec().GetName()}, nil
}

func (j *Jobs) CancelJob(_ context.Context, r *pelotonv1.CancelJobRequest) (*pelotonv1.CancelJobResponse, error) {
	if _, err := j.job(r.GetJobId()); err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.cancelled = append(j.cancelled, r.GetJobId())
	j.mu.Unlock()
	return &pelotonv1.CancelJobResponse{}, nil
}

// ListJobVersions stands for a cluster-wide call (see Rules).
func (j *Jobs) ListJobVersions(context.Context, *pelotonv1.ListJobVersionsRequest) (*pelotonv1.ListJobVersionsResponse, error) {
	return &pelotonv1.ListJobVersionsResponse{}, nil
}

// GetTaskLogs streams "log of <job>" in two chunks.
func (j *Jobs) GetTaskLogs(r *pelotonv1.GetTaskLogsRequest, s grpc.ServerStreamingServer[pelotonv1.LogChunk]) error {
	if _, err := j.job(r.GetJobId()); err != nil {
		return err
	}
	for _, part := range []string{"log of ", r.GetJobId()} {
		if err := s.Send(&pelotonv1.LogChunk{Data: []byte(part)}); err != nil {
			return err
		}
	}
	return nil
}

// Method names, for tests.
const (
	GetJob          = "/peloton.api.v1.JobService/GetJob"
	ListJobs        = "/peloton.api.v1.JobService/ListJobs"
	CreateJob       = "/peloton.api.v1.JobService/CreateJob"
	CancelJob       = "/peloton.api.v1.JobService/CancelJob"
	DeleteJob       = "/peloton.api.v1.JobService/DeleteJob"
	ListJobVersions = "/peloton.api.v1.JobService/ListJobVersions"
	GetTaskLogs     = "/peloton.api.v1.TaskService/GetTaskLogs"
)

type hasJobID interface{ GetJobId() string }

// Rules guard every method of both services the way the cluster API's
// do: a job's calls on its pool (viewer to read, submitter to change),
// ListJobs filtered, CreateJob on its spec's pool, and - standing for the
// cluster-wide calls - ListJobVersions for operators cluster-wide.
func (j *Jobs) Rules() auth.Rules {
	jobPool := func(_ context.Context, req any) ([]string, error) {
		job, err := j.job(req.(hasJobID).GetJobId())
		if err != nil {
			return nil, err
		}
		return []string{job.GetSpec().GetPool()}, nil
	}
	object := func(req any) string { return "job " + req.(hasJobID).GetJobId() }
	onJob := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Pools: jobPool, Mutating: mutating, Object: object}
	}
	return auth.Rules{
		GetJob: onJob(auth.Viewer, false),
		ListJobs: {Role: auth.Viewer,
			Pools: func(_ context.Context, req any) ([]string, error) {
				return nonEmpty(req.(*pelotonv1.ListJobsRequest).GetPool()), nil
			},
			Filter: func(resp any, canView func(string) bool) {
				r := resp.(*pelotonv1.ListJobsResponse)
				r.Jobs = slices.DeleteFunc(r.Jobs, func(j *pelotonv1.Job) bool { return !canView(j.GetSpec().GetPool()) })
			}},
		CreateJob: {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				return nonEmpty(req.(*pelotonv1.CreateJobRequest).GetSpec().GetPool()), nil
			},
			Object: func(req any) string { return "job " + req.(*pelotonv1.CreateJobRequest).GetSpec().GetName() }},
		"/peloton.api.v1.JobService/CreateJobs": {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				var pools []string
				for _, r := range req.(*pelotonv1.CreateJobsRequest).GetRequests() {
					pools = append(pools, r.GetSpec().GetPool())
				}
				return auth.Paths(pools...), nil
			}},
		CancelJob:                               onJob(auth.Submitter, true),
		DeleteJob:                               onJob(auth.Submitter, true),
		"/peloton.api.v1.JobService/RestartJob": onJob(auth.Submitter, true),
		"/peloton.api.v1.JobService/ScaleJob":   onJob(auth.Submitter, true),
		"/peloton.api.v1.JobService/GetGang":    onJob(auth.Viewer, false),
		ListJobVersions:                         {Role: auth.Operator},
		"/peloton.api.v1.TaskService/ListTasks": onJob(auth.Viewer, false),
		"/peloton.api.v1.TaskService/GetTask":   onJob(auth.Viewer, false),
		"/peloton.api.v1.TaskService/KillTask":  onJob(auth.Submitter, true),
		GetTaskLogs:                             onJob(auth.Viewer, false),
		// The watch streams (the fake serves none): every job's changes for
		// viewers cluster-wide, a job's tasks on its pool.
		"/peloton.api.v1.JobService/WatchJobs":   {Role: auth.Viewer},
		"/peloton.api.v1.TaskService/WatchTasks": onJob(auth.Viewer, false),
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// WriteFile replaces dir/name with content the way an operator's
// rotation does (written aside, renamed into place) and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}
