package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeServer answers the API from canned values and records what it was
// asked, so the commands can be tested without a cluster.
type fakeServer struct {
	pelotonv1.UnimplementedJobServiceServer
	pelotonv1.UnimplementedTaskServiceServer
	pelotonv1.UnimplementedPoolServiceServer
	pelotonv1.UnimplementedHostServiceServer

	mu        sync.Mutex
	createErr error
	created   *pelotonv1.JobSpec
	listReq   *pelotonv1.ListJobsRequest
	restart   *pelotonv1.RestartJobRequest
	logsReq   *pelotonv1.GetTaskLogsRequest
	updateReq *pelotonv1.UpdatePoolRequest
	// states are the job states GetJob returns, one per call; the last repeats.
	states []pelotonv1.JobState
	polls  int
	// cancels and kills count CancelJob and KillTask calls.
	cancels, kills int
}

func (f *fakeServer) CancelJob(context.Context, *pelotonv1.CancelJobRequest) (*pelotonv1.CancelJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels++
	return &pelotonv1.CancelJobResponse{}, nil
}

func (f *fakeServer) DeleteJob(context.Context, *pelotonv1.DeleteJobRequest) (*pelotonv1.DeleteJobResponse, error) {
	return &pelotonv1.DeleteJobResponse{}, nil
}

func (f *fakeServer) DeletePool(context.Context, *pelotonv1.DeletePoolRequest) (*pelotonv1.DeletePoolResponse, error) {
	return &pelotonv1.DeletePoolResponse{}, nil
}

func (f *fakeServer) KillTask(context.Context, *pelotonv1.KillTaskRequest) (*pelotonv1.KillTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills++
	return &pelotonv1.KillTaskResponse{}, nil
}

func (f *fakeServer) GetTask(_ context.Context, req *pelotonv1.GetTaskRequest) (*pelotonv1.GetTaskResponse, error) {
	return &pelotonv1.GetTaskResponse{Task: makeTask(req.GetJobId(), req.GetInstanceId(), pelotonv1.TaskState_KILLING)}, nil
}

func (f *fakeServer) CreateJob(_ context.Context, req *pelotonv1.CreateJobRequest) (*pelotonv1.CreateJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return nil, f.createErr
	}
	f.created = req.GetSpec()
	return &pelotonv1.CreateJobResponse{JobId: "job-1"}, nil
}

func (f *fakeServer) GetJob(_ context.Context, req *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetJobId() != "job-1" {
		return nil, status.Errorf(codes.NotFound, "job %q not found", req.GetJobId())
	}
	st := pelotonv1.JobState_JOB_PENDING
	if len(f.states) > 0 {
		st = f.states[min(f.polls, len(f.states)-1)]
	}
	f.polls++
	job := makeJob("job-1").Name("hello").Instances(3).State(st).Obj()
	if st == pelotonv1.JobState_JOB_FAILED {
		job.Status.Message = "instance 2 failed"
	}
	return &pelotonv1.GetJobResponse{Job: job}, nil
}

func (f *fakeServer) ListJobs(_ context.Context, req *pelotonv1.ListJobsRequest) (*pelotonv1.ListJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listReq = req
	return &pelotonv1.ListJobsResponse{}, nil
}

func (f *fakeServer) RestartJob(_ context.Context, req *pelotonv1.RestartJobRequest) (*pelotonv1.RestartJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restart = req
	return &pelotonv1.RestartJobResponse{}, nil
}

func (f *fakeServer) ListTasks(_ context.Context, req *pelotonv1.ListTasksRequest) (*pelotonv1.ListTasksResponse, error) {
	return taskList(), nil
}

func (f *fakeServer) GetTaskLogs(req *pelotonv1.GetTaskLogsRequest, stream grpc.ServerStreamingServer[pelotonv1.LogChunk]) error {
	f.mu.Lock()
	f.logsReq = req
	f.mu.Unlock()
	for _, s := range []string{"hello ", "from ", "instance 0\n", "\x00raw"} {
		if err := stream.Send(&pelotonv1.LogChunk{Data: []byte(s)}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeServer) UpdatePool(_ context.Context, req *pelotonv1.UpdatePoolRequest) (*pelotonv1.UpdatePoolResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updateReq = req
	return &pelotonv1.UpdatePoolResponse{Pool: &pelotonv1.Pool{Path: req.GetPath(), Spec: req.GetSpec(), Version: req.GetVersion() + 1}}, nil
}

func (f *fakeServer) ListHosts(context.Context, *pelotonv1.ListHostsRequest) (*pelotonv1.ListHostsResponse, error) {
	return &pelotonv1.ListHostsResponse{Hosts: []*pelotonv1.Host{{Name: "host-0", State: pelotonv1.HostState_HOST_UP}}}, nil
}

// startFake serves f on a loopback port and returns its address.
func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pelotonv1.RegisterJobServiceServer(s, f)
	pelotonv1.RegisterTaskServiceServer(s, f)
	pelotonv1.RegisterPoolServiceServer(s, f)
	pelotonv1.RegisterHostServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestJobCreatePrintsOnlyTheID(t *testing.T) {
	f := &fakeServer{}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "job", "create", "-f", "../../../examples/hello.yaml")
	if r.code != exitOK || r.stdout != "job-1\n" || r.stderr != "" {
		t.Fatalf("job create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want, _ := loadJobSpec("../../../examples/hello.yaml", nil)
	if !proto.Equal(f.created, want) {
		t.Errorf("server got %v, want %v", f.created, want)
	}

	r = runCLI(t, "name: piped\ninstanceCount: 1\n", "--server", addr, "job", "create", "-f", "-")
	if r.code != exitOK || r.stdout != "job-1\n" || f.created.GetName() != "piped" {
		t.Errorf("job create -f -: exit %d, stdout %q, stderr %q, spec %v", r.code, r.stdout, r.stderr, f.created)
	}

	// A bad spec fails before any call.
	f.created = nil
	r = runCLI(t, "instancecount: 1\n", "--server", addr, "job", "create", "-f", "-")
	if r.code != exitError || r.stderr != "Error: stdin: unknown field \"instancecount\" (did you mean \"instanceCount\"?)\n" || f.created != nil {
		t.Errorf("bad spec: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestGRPCErrorIsPrintedWithItsCode(t *testing.T) {
	f := &fakeServer{createErr: status.Error(codes.InvalidArgument, "spec.instanceCount: must be > 0")}
	addr := startFake(t, f)
	r := runCLI(t, "name: x\n", "--server", addr, "job", "create", "-f", "-")
	if r.code != exitError || r.stdout != "" || r.stderr != "Error: InvalidArgument: spec.instanceCount: must be > 0\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "--server", addr, "job", "get", "nope")
	if r.code != exitError || r.stderr != "Error: NotFound: job \"nope\" not found\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestJobGetAndList(t *testing.T) {
	f := &fakeServer{states: []pelotonv1.JobState{pelotonv1.JobState_JOB_RUNNING}}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "job", "get", "job-1", "-o", "json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"state": "JOB_RUNNING"`) || !strings.HasPrefix(r.stdout, "{\n  \"id\": \"job-1\"") {
		t.Errorf("job get -o json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "--server", addr, "job", "list", "--pool", "/p", "--state", "running,JOB_FAILED", "--state", "succeeded", "--name", "he", "-o", "yaml")
	if r.code != exitOK || r.stdout != "jobs: []\n" {
		t.Errorf("job list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := &pelotonv1.ListJobsRequest{Pool: "/p", Name: "he", PageSize: listPageSize, States: []pelotonv1.JobState{
		pelotonv1.JobState_JOB_RUNNING, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_SUCCEEDED}}
	if !proto.Equal(f.listReq, want) {
		t.Errorf("ListJobs request = %v, want %v", f.listReq, want)
	}
}

func TestJobWait(t *testing.T) {
	pending, running := pelotonv1.JobState_JOB_PENDING, pelotonv1.JobState_JOB_RUNNING
	for _, tc := range []struct {
		name   string
		states []pelotonv1.JobState
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"reaches it", []pelotonv1.JobState{pending, running, pelotonv1.JobState_JOB_SUCCEEDED},
			[]string{"--for", "SUCCEEDED"}, exitOK, "job job-1 is JOB_SUCCEEDED\n", ""},
		{"non-terminal target", []pelotonv1.JobState{pending, running},
			[]string{"--for", "job_running"}, exitOK, "job job-1 is JOB_RUNNING\n", ""},
		{"ends otherwise", []pelotonv1.JobState{pending, pelotonv1.JobState_JOB_FAILED},
			[]string{"--for", "succeeded"}, exitUnreachable, "",
			"Error: job job-1 is JOB_FAILED, not JOB_SUCCEEDED: instance 2 failed\n"},
		{"times out", []pelotonv1.JobState{running},
			[]string{"--for", "JOB_SUCCEEDED", "--timeout", "100ms"}, exitTimeout, "",
			"Error: job job-1 is JOB_RUNNING, not JOB_SUCCEEDED (timed out after 100ms)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startFake(t, &fakeServer{states: tc.states})
			r := runCLI(t, "", append([]string{"--server", addr, "job", "wait", "job-1"}, tc.args...)...)
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	addr := startFake(t, &fakeServer{})
	r := runCLI(t, "", "--server", addr, "job", "wait", "gone", "--for", "SUCCEEDED")
	if r.code != exitError || r.stderr != "Error: NotFound: job \"gone\" not found\n" {
		t.Errorf("wait for missing job: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestJobRestartInstances(t *testing.T) {
	f := &fakeServer{}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "job", "restart", "job-1", "--instances", "0,3")
	if r.code != exitOK || f.restart == nil || len(f.restart.Instances) != 2 || f.restart.Instances[1] != 3 {
		t.Errorf("exit %d, stderr %q, request %v", r.code, r.stderr, f.restart)
	}
}

func TestTaskListAndLogs(t *testing.T) {
	f := &fakeServer{}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "task", "list", "job-1", "-o", "wide")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "INSTANCE") || !strings.Contains(r.stdout, "FAILURES") {
		t.Errorf("task list -o wide: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "", "--server", addr, "task", "logs", "job-1", "0", "--run", "2", "--stderr", "-f")
	if r.code != exitOK || r.stdout != "hello from instance 0\n\x00raw" {
		t.Errorf("task logs: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := &pelotonv1.GetTaskLogsRequest{JobId: "job-1", RunId: 2, Stream: pelotonv1.LogStream_STDERR, Follow: true}
	if !proto.Equal(f.logsReq, want) {
		t.Errorf("GetTaskLogs request = %v, want %v", f.logsReq, want)
	}
}

func TestPoolUpdate(t *testing.T) {
	f := &fakeServer{}
	addr := startFake(t, f)
	r := runCLI(t, "", "--server", addr, "pool", "update", "/org/team", "-f", "../../../examples/pool.yaml", "--version", "4", "-o", "json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"version": 5`) {
		t.Errorf("pool update: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if f.updateReq.GetVersion() != 4 || f.updateReq.GetSpec().GetLimit() == nil {
		t.Errorf("UpdatePool request = %v", f.updateReq)
	}
}

func TestServerFromEnvironment(t *testing.T) {
	addr := startFake(t, &fakeServer{})
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.getenv = func(k string) string {
		if k == serverEnv {
			return addr
		}
		return ""
	}
	if code := execute(a, []string{"host", "list"}, nil); code != exitOK || !strings.Contains(out.String(), "host-0") {
		t.Errorf("host list via $%s: exit %d, stdout %q, stderr %q", serverEnv, code, out.String(), errb.String())
	}
}

func TestUnreachableServer(t *testing.T) {
	// A port nothing listens on: take one and close it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	start := time.Now()
	r := runCLI(t, "", "--server", addr, "job", "list")
	if r.code != exitError {
		t.Errorf("exit %d, want %d", r.code, exitError)
	}
	for _, want := range []string{"Error: cannot reach the peloton server at " + addr, "peloton up"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	// Not a timing claim: only that a refused connection does not wait out
	// the 30s per-call timeout.
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s", d)
	}
}
