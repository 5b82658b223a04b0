package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestSimBatchJob runs the whole stack on the sim backend - the same jobmgr,
// resmgr, placement and hostmgr code as on real hosts - with a batch job
// larger than the cluster fits at once: 1000 one-CPU tasks on 100 simulated
// hosts of 4 CPUs, so placement goes through at least three waves.
func TestSimBatchJob(t *testing.T) {
	const hosts, instances = 100, 1000
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: hosts})
	ctx := ctxT(t)

	hl, err := s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	if err != nil {
		t.Fatalf("ListHosts: %v", err)
	}
	if len(hl.Hosts) != hosts || hl.Hosts[0].Name != "sim-00000" || hl.Hosts[0].Labels["peloton.io/backend"] != "sim" {
		t.Fatalf("hosts: %d, first %v", len(hl.Hosts), hl.Hosts[0])
	}

	spec := &pelotonv1.JobSpec{
		Name: "sim-batch", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: instances,
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:   []string{"sleep", "0.1"},
			Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 128},
		},
	}
	start := time.Now()
	resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	j := s.waitJob(resp.JobId, pelotonv1.JobState_JOB_SUCCEEDED, 120*time.Second)
	t.Logf("%d tasks of sleep 0.1 on %d simulated hosts: JOB_SUCCEEDED after %s", instances, hosts, time.Since(start))
	if got := j.Status.TaskCounts["SUCCEEDED"]; got != instances {
		t.Fatalf("task counts %v, want %d SUCCEEDED", j.Status.TaskCounts, instances)
	}

	// Every resource was given back.
	hl, err = s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	if err != nil {
		t.Fatalf("ListHosts: %v", err)
	}
	for _, h := range hl.Hosts {
		if h.TaskCount != 0 || h.Allocated.GetCpu() != 0 {
			t.Errorf("host %s after the job: %d tasks, %v allocated", h.Name, h.TaskCount, h.Allocated)
		}
	}
	task, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: resp.JobId, InstanceId: instances - 1})
	if err != nil {
		t.Fatal(err)
	}
	if st := task.Task.Status; st.State != pelotonv1.TaskState_SUCCEEDED || !strings.HasPrefix(st.Host, "sim-") {
		t.Fatalf("last instance: %v", st)
	}
	out := s.logs(resp.JobId, instances-1, task.Task.Status.RunId, pelotonv1.LogStream_STDOUT)
	mustContain(t, out, "sim: sleep 0.1 on "+task.Task.Status.Host, "simulated stdout")
	mustContain(t, out, "sim: succeeded (exit 0)", "simulated stdout")
}

// TestTwoEnginesNeverDoubleBook runs two placement engines at once on a
// cluster smaller than the work, and samples every host while they race:
// no host may ever hold more than its capacity, and every task must finish.
func TestTwoEnginesNeverDoubleBook(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 40, hostCPU: 4, hostMem: 4096, engines: 2})
	ctx := ctxT(t)
	var ids []string
	for i := 0; i < 3; i++ {
		resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
			Name: "race", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 300,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0.2"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 256}}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.JobId)
	}
	done := func() bool {
		for _, id := range ids {
			j, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
			if err != nil {
				t.Fatal(err)
			}
			if j.Job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
				return false
			}
		}
		return true
	}
	// Every poll of the wait for the jobs to finish samples the hosts.
	samples := 0
	testutil.Eventually(t, 60*time.Second, "the jobs finished", func() bool {
		if done() {
			return true
		}
		hl, err := s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hl.Hosts {
			if h.Allocated.Cpu > h.Capacity.Cpu || h.Allocated.MemoryMb > h.Capacity.MemoryMb {
				t.Fatalf("host %s double-booked: %v of %v", h.Name, h.Allocated, h.Capacity)
			}
		}
		samples++
		return false
	})
	if samples < 5 {
		t.Logf("only %d samples taken while the engines raced", samples)
	}
}
