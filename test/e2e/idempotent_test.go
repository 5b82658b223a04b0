package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster/client"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// lossyClient is a client of s whose next call is answered by the server
// (its write committed) and then loses the answer: the server is stopped
// before the caller sees it, which gets Unavailable instead.
func lossyClient(t *testing.T, s *stack) *client.Client {
	t.Helper()
	var once sync.Once
	kill := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			t.Fatalf("%s before the crash: %v", method, err)
		}
		once.Do(s.stop)
		return status.Error(codes.Unavailable, "the server went away before it answered")
	}
	c, err := client.New(s.ready.GRPCAddr, client.Options{Timeout: 30 * time.Second, DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(kill)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCreateRetriedAfterTheServerDiedBeforeAnswering creates a pool, a job
// and an update each through a client whose answer is lost because the
// server stops right after committing, restarts the stack on the same etcd
// data, and retries with the same request id: the retry answers with what
// the first call created, and exactly one of each exists.
func TestCreateRetriedAfterTheServerDiedBeforeAnswering(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{})
	ctx := ctxT(t)
	svc, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: service("idem-svc", 2, 1, "sleep", "300")})
	if err != nil {
		t.Fatal(err)
	}

	// Pool.
	poolReq := &pelotonv1.CreatePoolRequest{Path: "/idem", Spec: &pelotonv1.PoolSpec{}, RequestId: "pool-r1"}
	if _, err := lossyClient(t, s).Pools.CreatePool(ctx, poolReq); status.Code(err) != codes.Unavailable {
		t.Fatalf("lossy CreatePool: %v", err)
	}
	s = startStack(t, dir, stackOpts{})
	p, err := s.pools.CreatePool(ctx, poolReq)
	if err != nil || p.Pool.GetPath() != "/idem" {
		t.Fatalf("retried CreatePool: %v, %v", p, err)
	}
	lp, err := s.pools.ListPools(ctx, &pelotonv1.ListPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pl := range lp.Pools {
		if pl.Path == "/idem" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d pools /idem, want 1", n)
	}

	// Job.
	jobReq := &pelotonv1.CreateJobRequest{Spec: batch("idem-job", 1, "true"), RequestId: "job-r1"}
	if _, err := lossyClient(t, s).Jobs.CreateJob(ctx, jobReq); status.Code(err) != codes.Unavailable {
		t.Fatalf("lossy CreateJob: %v", err)
	}
	s = startStack(t, dir, stackOpts{})
	j1, err := s.jobs.CreateJob(ctx, jobReq)
	if err != nil {
		t.Fatalf("retried CreateJob: %v", err)
	}
	j2, err := s.jobs.CreateJob(ctx, jobReq)
	if err != nil || j2.JobId != j1.JobId {
		t.Fatalf("second retry: %v, %v; want %s", j2, err, j1.JobId)
	}
	lj, err := s.jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{Name: "idem-job"})
	if err != nil || len(lj.Jobs) != 1 || lj.Jobs[0].Id != j1.JobId {
		t.Fatalf("jobs named idem-job: %v, %v; want exactly %s", lj, err, j1.JobId)
	}
	// The same id with another spec is refused, naming the field.
	other := &pelotonv1.CreateJobRequest{Spec: batch("idem-other", 1, "true"), RequestId: "job-r1"}
	if _, err := s.jobs.CreateJob(ctx, other); status.Code(err) != codes.AlreadyExists || !strings.HasPrefix(status.Convert(err).Message(), "requestId: ") {
		t.Fatalf("request id reused for another job: %v", err)
	}

	// Update.
	s.waitTasks(svc.JobId, "the service running", 60*time.Second, allRunning(2))
	upd := service("idem-svc", 2, 1, "sleep", "301")
	updReq := &pelotonv1.CreateUpdateRequest{JobId: svc.JobId, Spec: upd, RequestId: "upd-r1"}
	if _, err := lossyClient(t, s).Updates.CreateUpdate(ctx, updReq); status.Code(err) != codes.Unavailable {
		t.Fatalf("lossy CreateUpdate: %v", err)
	}
	s = startStack(t, dir, stackOpts{})
	u, err := s.updates.CreateUpdate(ctx, updReq)
	if err != nil {
		t.Fatalf("retried CreateUpdate: %v", err)
	}
	lu, err := s.updates.ListUpdates(ctx, &pelotonv1.ListUpdatesRequest{JobId: svc.JobId})
	if err != nil || len(lu.Updates) != 1 || lu.Updates[0].Id != u.Update.GetId() {
		t.Fatalf("updates of the service: %v, %v; want exactly %s", lu, err, u.Update.GetId())
	}
}

// TestRESTRequestIDAndZeroValues: over REST the request id is a query
// parameter of the create, and answers carry zero values (instance 0 has
// its instanceId).
func TestRESTRequestIDAndZeroValues(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{})
	body := `{"name":"rest-idem","type":"BATCH","pool":"/default","instanceCount":2,"sla":{"preemptible":true},` +
		`"defaultSpec":{"command":["true"],"resources":{"cpu":0.1,"memoryMb":16}}}`
	var a, b struct {
		JobID string `json:"jobId"`
	}
	if code, raw := s.rest("POST", "/v1/jobs?requestId=rest-1", body, &a); code != 200 || a.JobID == "" {
		t.Fatalf("POST /v1/jobs: %d %s", code, raw)
	}
	if code, raw := s.rest("POST", "/v1/jobs?requestId=rest-1", body, &b); code != 200 || b.JobID != a.JobID {
		t.Fatalf("POST /v1/jobs again: %d %s; want job %s", code, raw, a.JobID)
	}
	if n := s.jobCount(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if code, raw := s.rest("POST", "/v1/jobs?requestId=bad/id", body, nil); code != 400 || !strings.Contains(raw, "requestId: ") {
		t.Fatalf("bad request id: %d %s", code, raw)
	}
	s.waitJob(a.JobID, pelotonv1.JobState_JOB_SUCCEEDED, 60*time.Second)
	code, raw := s.rest("GET", "/v1/jobs/"+a.JobID+"/tasks", nil, nil)
	if code != 200 {
		t.Fatalf("GET tasks: %d %s", code, raw)
	}
	var tl struct {
		Tasks []map[string]json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(raw), &tl); err != nil || len(tl.Tasks) != 2 {
		t.Fatalf("GET tasks: %v %s", err, raw)
	}
	found := false
	for _, tk := range tl.Tasks {
		id, ok := tk["instanceId"]
		if !ok {
			t.Fatalf("a task without instanceId: %s", raw)
		}
		if string(id) == "0" {
			found = true
			var st map[string]json.RawMessage
			_ = json.Unmarshal(tk["status"], &st)
			if string(st["exitCode"]) != "0" {
				t.Errorf("instance 0 status has no exitCode 0: %s", tk["status"])
			}
		}
	}
	if !found {
		t.Fatalf("no task with instanceId 0: %s", raw)
	}
}

// batch is a preemptible BATCH job of n instances running command.
func batch(name string, n uint32, command ...string) *pelotonv1.JobSpec {
	preemptible := true
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
		Sla:         &pelotonv1.SlaSpec{Preemptible: &preemptible},
		DefaultSpec: &pelotonv1.TaskSpec{Command: command, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}
}
