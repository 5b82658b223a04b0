package advisor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeHosts answers ListHosts with hosts.
type fakeHosts struct {
	pelotonv1.HostServiceClient
	hosts []*pelotonv1.Host
}

func (f *fakeHosts) ListHosts(context.Context, *pelotonv1.ListHostsRequest, ...grpc.CallOption) (*pelotonv1.ListHostsResponse, error) {
	return &pelotonv1.ListHostsResponse{Hosts: f.hosts}, nil
}

// fakeJobs has jobs and counts the calls made of it.
type fakeJobs struct {
	pelotonv1.JobServiceClient
	jobs       map[string]*pelotonv1.Job
	gets, list int
}

func (f *fakeJobs) GetJob(_ context.Context, r *pelotonv1.GetJobRequest, _ ...grpc.CallOption) (*pelotonv1.GetJobResponse, error) {
	f.gets++
	j, ok := f.jobs[r.GetJobId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "job: no such job")
	}
	return &pelotonv1.GetJobResponse{Job: j}, nil
}

func (f *fakeJobs) ListJobs(context.Context, *pelotonv1.ListJobsRequest, ...grpc.CallOption) (*pelotonv1.ListJobsResponse, error) {
	f.list++
	out := &pelotonv1.ListJobsResponse{}
	for _, j := range f.jobs {
		out.Jobs = append(out.Jobs, j)
	}
	return out, nil
}

// fakeParts answers ListPartitionMoves with moves.
type fakeParts struct {
	pelotonv1.PartitionServiceClient
	moves []*pelotonv1.PartitionMove
}

func (f *fakeParts) ListPartitionMoves(context.Context, *pelotonv1.ListPartitionMovesRequest, ...grpc.CallOption) (*pelotonv1.ListPartitionMovesResponse, error) {
	return &pelotonv1.ListPartitionMovesResponse{Moves: f.moves}, nil
}

func job(id string, typ pelotonv1.JobType, sloMs, gang uint32) *pelotonv1.Job {
	return &pelotonv1.Job{Id: id, Spec: &pelotonv1.JobSpec{Type: typ, Sla: &pelotonv1.SlaSpec{LatencySloMs: sloMs, MinimumRunningInstances: gang}}}
}

// The jobs of the hosts' runs are read once and kept until they age, a job
// no run belongs to any more is forgotten, and many new jobs at once are
// read with one ListJobs.
func TestAPIClusterCachesJobs(t *testing.T) {
	hosts := &fakeHosts{}
	jobs := &fakeJobs{jobs: map[string]*pelotonv1.Job{
		"web":   job("web", pelotonv1.JobType_SERVICE, 200, 0),
		"train": job("train", pelotonv1.JobType_BATCH, 0, 4),
	}}
	run := func(id, jobID string) *pelotonv1.HostRun { return &pelotonv1.HostRun{TaskId: id, JobId: jobID} }
	hosts.hosts = []*pelotonv1.Host{{Name: "h1", Runs: []*pelotonv1.HostRun{run("web-0-1", "web"), run("web-1-1", "web"), run("train-0-1", "train"), run("gone-0-1", "gone")}}}
	parts := &fakeParts{moves: []*pelotonv1.PartitionMove{
		{Host: "h1", State: "CANCELLED", Time: timestamppb.New(at(-5))},
		{Host: "h1", State: "CANCELLED", Time: timestamppb.New(at(-60))},
		{Host: "h2", State: "DONE", Time: timestamppb.New(at(-5))},
	}}
	c := &APICluster{API: APIClients{Hosts: hosts, Jobs: jobs, Partitions: parts}, StaleAfter: time.Minute}
	in, err := c.Input(context.Background(), at(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Cancelled) != 1 || !in.Cancelled["h1"].Equal(at(-5)) {
		t.Fatalf("cancelled %v; want h1 at its latest cancel", in.Cancelled)
	}
	if jobs.gets != 3 || jobs.list != 0 {
		t.Fatalf("first round: %d GetJob, %d ListJobs; want 3 and 0", jobs.gets, jobs.list)
	}
	if h := in.Hosts[0]; h.ServiceTasks != 2 || h.GangTasks != 1 || h.Tasks != 4 || len(in.Services) != 1 || in.Services[0].SLO != 0.2 {
		t.Fatalf("input %+v", in)
	}
	if _, err := c.Input(context.Background(), at(60)); err != nil || jobs.gets != 4 {
		t.Fatalf("second round: %v, %d GetJob; want only the job not found read again (4)", err, jobs.gets)
	}
	if _, err := c.Input(context.Background(), at(400)); err != nil || jobs.gets != 7 {
		t.Fatalf("after the TTL: %v, %d GetJob; want all three read again (7)", err, jobs.gets)
	}
	hosts.hosts[0].Runs = hosts.hosts[0].Runs[:2]
	if _, err := c.Input(context.Background(), at(410)); err != nil || len(c.jobs) != 1 {
		t.Fatalf("runs of one job left: %v, cache %v", err, c.jobs)
	}
	var many []*pelotonv1.HostRun
	for i := range listJobsAbove + 1 {
		id := fmt.Sprintf("batch-%d", i)
		jobs.jobs[id] = job(id, pelotonv1.JobType_BATCH, 0, 0)
		many = append(many, run(id+"-0-1", id))
	}
	hosts.hosts[0].Runs = many
	gets := jobs.gets
	if _, err := c.Input(context.Background(), at(420)); err != nil || jobs.list != 1 || jobs.gets != gets || len(c.jobs) != listJobsAbove+1 {
		t.Fatalf("%d new jobs: %v, %d ListJobs, %d more GetJob, cache %d; want one ListJobs", listJobsAbove+1, err, jobs.list, jobs.gets-gets, len(c.jobs))
	}
}

// BuildInput: readings from fresh reports only, own CPU without the
// revocable runs', a host's latency as its worst P99/SLO, services per
// partition, and the batch work a drain would throw away.
func TestBuildInput(t *testing.T) {
	now := at(100)
	jobs := map[string]jobInfo{"web": {service: true, slo: 0.1}, "b": {}}
	hosts := []*pelotonv1.Host{{
		Name: "h1", Partition: "stateless", State: pelotonv1.HostState_HOST_UP, PartitionState: pelotonv1.PartitionMoveState_PARTITION_SETTLED,
		Capacity: &pelotonv1.Resources{Cpu: 10, MemoryMb: 1000},
		Usage:    &pelotonv1.HostUsage{Cpu: 6, MemoryUsedMb: 500, ReceiveTime: timestamppb.New(now.Add(-time.Second))},
		Runs: []*pelotonv1.HostRun{
			{TaskId: "web-0-1", JobId: "web", Usage: &pelotonv1.TaskUsage{Cpu: 3, LatencyP99Seconds: 0.15}},
			{TaskId: "b-0-1", JobId: "b", Cpu: 2, Since: timestamppb.New(now.Add(-time.Hour))},
			{TaskId: "r-0-1", JobId: "b", Revocable: true, Cpu: 1, Since: timestamppb.New(now.Add(-time.Hour)), Usage: &pelotonv1.TaskUsage{Cpu: 2}},
		},
	}, {
		Name: "h2", Partition: "batch", Usage: &pelotonv1.HostUsage{Cpu: 1, ReceiveTime: timestamppb.New(now.Add(-time.Hour))},
		Capacity: &pelotonv1.Resources{Cpu: 10},
	}}
	in := BuildInput(now, hosts, jobs, time.Minute)
	h1, h2 := in.Hosts[0], in.Hosts[1]
	near := func(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }
	if !h1.InService || !h1.Reading.Fresh || !near(h1.Reading.CPU, 0.6) || !near(h1.Reading.OwnCPU, 0.4) || !near(h1.Reading.Mem, 0.5) {
		t.Errorf("h1 reading %+v (in service %v)", h1.Reading, h1.InService)
	}
	if h1.Reading.Latency < 1.49 || h1.Reading.Latency > 1.51 || h1.WorkAtRisk != 2*3600 || h1.Tasks != 2 || h1.ServiceTasks != 1 {
		t.Errorf("h1 %+v; want latency 1.5, 2 core-hours at risk, 2 runs, 1 service instance", h1)
	}
	if h2.Reading.Fresh || h2.InService {
		t.Errorf("h2 %+v: a stale report is no reading, and a host not settled is not in service", h2)
	}
	if len(in.Services) != 1 || in.Services[0].P99 != 0.15 || in.Services[0].Partition != "stateless" || !in.Services[0].Over() {
		t.Errorf("services %+v", in.Services)
	}
}
