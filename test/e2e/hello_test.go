package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestHelloEndToEnd is the newcomer's path: the example job through gRPC and
// through REST, its logs, the per-instance override, then a restart of the
// whole stack on the same data dir that keeps everything.
func TestHelloEndToEnd(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{})
	spec := loadSpec(t, repoPath("examples/hello.yaml"))

	// gRPC
	resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	grpcJob := resp.JobId
	j := s.waitJob(grpcJob, pelotonv1.JobState_JOB_SUCCEEDED, 60*time.Second)
	if j.Status.TaskCounts["SUCCEEDED"] != 3 {
		t.Fatalf("task counts %v", j.Status.TaskCounts)
	}
	mustContain(t, s.logs(grpcJob, 0, 0, pelotonv1.LogStream_STDOUT), "hello from instance 0", "instance 0 stdout")
	mustContain(t, s.logs(grpcJob, 1, 0, pelotonv1.LogStream_STDOUT), "hello from instance 1", "instance 1 stdout")
	if got := s.logs(grpcJob, 2, 0, pelotonv1.LogStream_STDOUT); strings.TrimSpace(got) != "override" {
		t.Fatalf("instance 2 should run its override, printed %q", got)
	}
	task, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: grpcJob, InstanceId: 2})
	if err != nil {
		t.Fatal(err)
	}
	if task.Task.Spec.Env["GREETING"] != "hi" || task.Task.Spec.Command[2] != "echo override" {
		t.Fatalf("effective spec of instance 2: %v", task.Task.Spec)
	}
	if task.Task.Status.Host == "" || task.Task.Status.RunId != 1 || task.Task.Status.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("instance 2 status: %v", task.Task.Status)
	}

	// REST: the request body is the same document as the YAML file.
	body, _ := protojson.Marshal(spec)
	var created struct {
		JobID string `json:"jobId"`
	}
	if code, raw := s.rest("POST", "/v1/jobs", body, &created); code != 200 || created.JobID == "" {
		t.Fatalf("POST /v1/jobs: %d %s", code, raw)
	}
	testutil.Eventually(t, 60*time.Second, "the job succeeds, read over REST", func() error {
		var got struct {
			Job struct {
				Status struct{ State string } `json:"status"`
			} `json:"job"`
		}
		code, raw := s.rest("GET", "/v1/jobs/"+created.JobID, nil, &got)
		if code != 200 {
			t.Fatalf("GET job: %d %s", code, raw)
		}
		if got.Job.Status.State != "JOB_SUCCEEDED" {
			return fmt.Errorf("GET job: %s", raw)
		}
		return nil
	})
	var tl struct {
		Tasks []struct {
			InstanceID int    `json:"instanceId"`
			TaskID     string `json:"taskId"`
		} `json:"tasks"`
	}
	if code, raw := s.rest("GET", "/v1/jobs/"+created.JobID+"/tasks", nil, &tl); code != 200 || len(tl.Tasks) != 3 {
		t.Fatalf("GET tasks: %d %s", code, raw)
	}
	code, raw := s.rest("GET", "/v1/jobs/"+created.JobID+"/tasks/1/logs", nil, nil)
	if code != 200 {
		t.Fatalf("GET logs: %d %s", code, raw)
	}
	// A server stream over REST is newline-delimited {"result": LogChunk}; data is base64.
	var chunk struct {
		Result struct{ Data []byte } `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(raw, "\n", 2)[0]), &chunk); err != nil {
		t.Fatalf("decode log stream %q: %v", raw, err)
	}
	mustContain(t, string(chunk.Result.Data), "hello from instance 1", "REST logs")
	// since and timestamps are query parameters: each line comes with
	// the time the run's supervisor saw it written.
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	code, raw = s.rest("GET", "/v1/jobs/"+created.JobID+"/tasks/1/logs?since="+since+"&timestamps=true", nil, nil)
	if err := json.Unmarshal([]byte(strings.SplitN(raw, "\n", 2)[0]), &chunk); code != 200 || err != nil {
		t.Fatalf("GET logs since %s with timestamps: %d %s (%v)", since, code, raw, err)
	}
	ts, line, _ := strings.Cut(string(chunk.Result.Data), " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasPrefix(line, "hello from instance 1") {
		t.Errorf("REST logs with timestamps = %q; want an RFC 3339 time, a space and the line", chunk.Result.Data)
	}
	if code, raw := s.rest("GET", "/openapi.json", nil, nil); code != 200 || !strings.Contains(raw, "/v1/jobs") {
		t.Fatalf("openapi: %d", code)
	}
	if code, raw := s.rest("GET", "/metrics", nil, nil); code != 200 || !strings.Contains(raw, "peloton_api_request_seconds") {
		t.Fatalf("metrics: %d %.200s", code, raw)
	}
	if code, _ := s.rest("GET", "/healthz", nil, nil); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	if code, body := s.rest("GET", "/readyz", nil, nil); code != 200 || body != "ok\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}

	// Restart on the same data dir: jobs, tasks and logs are still there.
	before, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: grpcJob})
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	s2 := startStack(t, dir, stackOpts{})
	after, err := s2.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: grpcJob})
	if err != nil {
		t.Fatalf("job lost across restart: %v", err)
	}
	if !proto.Equal(before.Job.Spec, after.Job.Spec) || after.Job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Fatalf("job changed across restart:\nbefore %v\nafter  %v", before.Job, after.Job)
	}
	if n := s2.jobCount(); n != 2 {
		t.Fatalf("%d jobs after restart, want 2", n)
	}
	mustContain(t, s2.logs(grpcJob, 0, 0, pelotonv1.LogStream_STDOUT), "hello from instance 0", "logs after restart")
	if _, err := s2.pools.GetPool(ctxT(t), &pelotonv1.GetPoolRequest{Path: "/default"}); err != nil {
		t.Fatalf("default pool after restart: %v", err)
	}
	followSilentRun(t, s2, spec)
}

// TestRetriesAndFailure: a failing instance is retried restartPolicy.maxFailures
// times, then the job ends FAILED with the reason.
func TestRetriesAndFailure(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{})
	spec := &pelotonv1.JobSpec{Name: "fails", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"/bin/sh", "-c", "echo run $PELOTON_RUN_ID >&2; exit 3"},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}, RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 2}},
		InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{1: {Command: []string{"/bin/true"}}},
	}
	resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	j := s.waitJob(resp.JobId, pelotonv1.JobState_JOB_FAILED, 60*time.Second)
	mustContain(t, j.Status.Message, "instance 0", "job message")
	task, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 0})
	if err != nil {
		t.Fatal(err)
	}
	st := task.Task.Status
	if st.State != pelotonv1.TaskState_FAILED || st.FailureCount != 3 || st.RunId != 3 || st.ExitCode != 3 || st.Reason != "exit-nonzero" {
		t.Fatalf("instance 0: %v", st)
	}
	// Every run kept its own output.
	mustContain(t, s.logs(resp.JobId, 0, 1, pelotonv1.LogStream_STDERR), "run 1", "run 1 stderr")
	mustContain(t, s.logs(resp.JobId, 0, 3, pelotonv1.LogStream_STDERR), "run 3", "run 3 stderr")
	one, _ := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 1})
	if one.Task.Status.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("instance 1: %v", one.Task.Status)
	}

	// restart reruns what did not succeed, with a fresh failure budget.
	if _, err := s.jobs.RestartJob(ctxT(t), &pelotonv1.RestartJobRequest{JobId: resp.JobId}); err != nil {
		t.Fatal(err)
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_FAILED, 60*time.Second)
	task, _ = s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 0})
	if task.Task.Status.RunId != 6 {
		t.Fatalf("after restart instance 0 should have run 3 more times, is at run %d", task.Task.Status.RunId)
	}
	one, _ = s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 1})
	if one.Task.Status.RunId != 1 {
		t.Fatalf("a succeeded instance must not rerun on restart: %v", one.Task.Status)
	}
}

// TestCancelKillsProcesses: cancelling a running job kills its processes
// (and their children) and ends it KILLED; then it can be deleted.
func TestCancelKillsProcesses(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{})
	spec := &pelotonv1.JobSpec{Name: "sleepy", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 3,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"/bin/sh", "-c", "echo $$ > pid; sleep 300"},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}, KillGracePeriodSeconds: 1}}
	resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_RUNNING, 30*time.Second)
	if _, err := s.jobs.DeleteJob(ctxT(t), &pelotonv1.DeleteJobRequest{JobId: resp.JobId}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deleting a running job: %v, want FailedPrecondition", err)
	}
	// Wait until every instance is RUNNING, so each wrote its pid.
	testutil.Eventually(t, 30*time.Second, "every instance RUNNING", func() error {
		j, _ := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: resp.JobId})
		if n := j.GetJob().GetStatus().GetTaskCounts()["RUNNING"]; n != 3 {
			return fmt.Errorf("task counts %v", j.GetJob().GetStatus().GetTaskCounts())
		}
		return nil
	})
	var pids []int
	for inst := uint32(0); inst < 3; inst++ {
		tk, _ := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: inst})
		pidFile := s.dataDir + "/tasks/" + tk.Task.TaskId + "/pid"
		var pid int
		testutil.Eventually(t, 30*time.Second, "the pid file of "+tk.Task.TaskId, func() error {
			b, err := os.ReadFile(pidFile)
			if err == nil && len(b) <= 1 {
				err = fmt.Errorf("%s: %q", pidFile, b)
			}
			if err == nil {
				pid = atoi(strings.TrimSpace(string(b)))
			}
			return err
		})
		pids = append(pids, pid)
	}
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: resp.JobId}); err != nil {
		t.Fatal(err)
	}
	s.waitJob(resp.JobId, pelotonv1.JobState_JOB_KILLED, 30*time.Second)
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still alive after cancel", pid)
		}
	}
	if _, err := s.jobs.DeleteJob(ctxT(t), &pelotonv1.DeleteJobRequest{JobId: resp.JobId}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: resp.JobId}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleted job: %v, want NotFound", err)
	}
	// The pool is free again and can be deleted... after the job is gone.
	hs, _ := s.hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{})
	for _, h := range hs.Hosts {
		if h.TaskCount != 0 || h.Allocated.Cpu != 0 {
			t.Errorf("host %s still holds resources after cancel: %v", h.Name, h)
		}
	}
}

// TestCrashMidJobRecovers: the stack stops while instances run; after the
// restart their runs are reported lost and run again, and the job succeeds.
func TestCrashMidJobRecovers(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{})
	spec := &pelotonv1.JobSpec{Name: "long", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"/bin/sh", "-c", "if [ $PELOTON_RUN_ID = 1 ]; then sleep 300; fi; echo done"},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}, KillGracePeriodSeconds: 1}}
	resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "both instances RUNNING", func() error {
		j, _ := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: resp.JobId})
		if n := j.GetJob().GetStatus().GetTaskCounts()["RUNNING"]; n != 2 {
			return fmt.Errorf("job status %v", j.GetJob().GetStatus())
		}
		return nil
	})
	s.stop()
	s2 := startStack(t, dir, stackOpts{})
	s2.waitJob(resp.JobId, pelotonv1.JobState_JOB_SUCCEEDED, 60*time.Second)
	tk, _ := s2.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: 0})
	if tk.Task.Status.RunId != 2 || tk.Task.Status.FailureCount != 0 {
		t.Fatalf("a lost run should be rerun without counting as a failure: %v", tk.Task.Status)
	}
	mustContain(t, s2.logs(resp.JobId, 0, 0, pelotonv1.LogStream_STDOUT), "done", "rerun output")
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

var _ = context.Background
var _ = http.StatusOK

// followSilentRun follows, over REST, the logs of a run that has written
// nothing: the stream opens (its headers and an empty chunk come) while
// the run is still silent, which is what the web UI's task page waits for
// to stop saying "connecting…".
func followSilentRun(t *testing.T, s *stack, base *pelotonv1.JobSpec) {
	t.Helper()
	spec := proto.Clone(base).(*pelotonv1.JobSpec)
	spec.Name, spec.InstanceCount, spec.InstanceSpecs = "silent", 1, nil
	spec.DefaultSpec.Command = []string{"sleep", "60"}
	resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	defer func() { _, _ = s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: resp.JobId}) }()
	s.waitTasks(resp.JobId, "running", 30*time.Second, allRunning(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.ready.HTTPAddr+"/v1/jobs/"+resp.JobId+"/tasks/0/logs?follow=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("follow the logs of a silent run: no response (%v)", err)
	}
	defer r.Body.Close()
	line, err := bufio.NewReader(r.Body).ReadString('\n')
	var chunk struct {
		Result *struct{ Data []byte } `json:"result"`
	}
	if r.StatusCode != 200 || err != nil || json.Unmarshal([]byte(line), &chunk) != nil || chunk.Result == nil || len(chunk.Result.Data) != 0 {
		t.Fatalf("follow the logs of a silent run: %d, first line %q (%v); want 200 and an empty chunk", r.StatusCode, line, err)
	}
}
