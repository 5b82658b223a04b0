package advisor

import (
	"context"
	"fmt"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Cluster is what the advisor needs of a cluster stack.
type Cluster interface {
	// Input reads the hosts, their runs and the latency-sensitive
	// services at now.
	Input(ctx context.Context, now time.Time) (Input, error)
	// MoveHost starts moving host to partition, saying why.
	MoveHost(ctx context.Context, host, partition, reason string) error
	// Publish hands the stack a round's advice.
	Publish(ctx context.Context, req *pelotonv1.PublishAdviceRequest) error
}

// APIClients are the clients of the stack's API the advisor uses.
type APIClients struct {
	Hosts      pelotonv1.HostServiceClient
	Jobs       pelotonv1.JobServiceClient
	Partitions pelotonv1.PartitionServiceClient
}

// APICluster is a Cluster over the stack's public gRPC API: the same
// whether the advisor runs in the stack's process or as its own daemon.
type APICluster struct {
	API APIClients
	// StaleAfter is the age past which a host's report is no reading.
	StaleAfter time.Duration
}

// jobInfo is what the advisor needs of a job.
type jobInfo struct {
	service bool    // long-running (service, stateful, daemon)
	gang    bool    // its instances form a gang
	slo     float64 // latency SLO in seconds, 0 if none
}

// Input implements Cluster: ListHosts with runs, and ListJobs for the
// jobs' types, gangs and SLOs.
func (c APICluster) Input(ctx context.Context, now time.Time) (Input, error) {
	hs, err := c.API.Hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{IncludeRuns: true})
	if err != nil {
		return Input{}, fmt.Errorf("advisor: list hosts: %w", err)
	}
	jobs, err := c.jobs(ctx)
	if err != nil {
		return Input{}, err
	}
	return BuildInput(now, hs.GetHosts(), jobs, c.StaleAfter), nil
}

func (c APICluster) jobs(ctx context.Context) (map[string]jobInfo, error) {
	jobs := map[string]jobInfo{}
	token := ""
	for range 1000 { // at most 5,000,000 jobs
		resp, err := c.API.Jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{PageSize: 5000, PageToken: token,
			States: []pelotonv1.JobState{pelotonv1.JobState_JOB_PENDING, pelotonv1.JobState_JOB_RUNNING, pelotonv1.JobState_JOB_INITIALIZED, pelotonv1.JobState_JOB_KILLING}})
		if err != nil {
			return nil, fmt.Errorf("advisor: list jobs: %w", err)
		}
		for _, j := range resp.GetJobs() {
			s := j.GetSpec()
			t := s.GetType()
			jobs[j.GetId()] = jobInfo{
				service: t == pelotonv1.JobType_SERVICE || t == pelotonv1.JobType_STATEFUL || t == pelotonv1.JobType_DAEMON,
				gang:    s.GetSla().GetMinimumRunningInstances() > 1,
				slo:     float64(s.GetSla().GetLatencySloMs()) / 1000,
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return jobs, nil
}

// MoveHost implements Cluster.
func (c APICluster) MoveHost(ctx context.Context, host, partition, reason string) error {
	_, err := c.API.Hosts.MoveHost(ctx, &pelotonv1.MoveHostRequest{Host: host, Partition: partition, Reason: reason})
	return err
}

// Publish implements Cluster.
func (c APICluster) Publish(ctx context.Context, req *pelotonv1.PublishAdviceRequest) error {
	_, err := c.API.Partitions.PublishAdvice(ctx, req)
	return err
}

// BuildInput turns the stack's hosts (with their runs) and the jobs into
// a round's input. A host's reading is fresh when its last report is at
// most staleAfter old; its latency is the worst P99/SLO of the runs of
// jobs with an SLO on it that have a reading. A service's P99 in a
// partition is the worst of its runs' there.
func BuildInput(now time.Time, hosts []*pelotonv1.Host, jobs map[string]jobInfo, staleAfter time.Duration) Input {
	in := Input{Now: now, Hosts: make([]Host, 0, len(hosts))}
	type svcKey struct{ job, partition string }
	svcs := map[svcKey]*Service{}
	var order []svcKey
	for _, h := range hosts {
		x := Host{Name: h.GetName(), Partition: h.GetPartition(), Target: h.GetTargetPartition(),
			InService: h.GetState() == pelotonv1.HostState_HOST_UP && h.GetPartitionState() == pelotonv1.PartitionMoveState_PARTITION_SETTLED &&
				h.GetMaintenanceMessage() == "",
			AllocatedCPU: h.GetAllocated().GetCpu()}
		if u := h.GetUsage(); u != nil && now.Sub(u.GetReceiveTime().AsTime()) <= staleAfter {
			x.Reading.Fresh = true
			if c := h.GetCapacity().GetCpu(); c > 0 {
				x.Reading.CPU = u.GetCpu() / c
			}
			if m := h.GetCapacity().GetMemoryMb(); m > 0 {
				x.Reading.Mem = float64(u.GetMemoryUsedMb()) / m
			}
		}
		revCPU := 0.0
		for _, r := range h.GetRuns() {
			j := jobs[r.GetJobId()]
			if r.GetRevocable() {
				revCPU += r.GetUsage().GetCpu()
			}
			if !r.GetRevocable() && !j.service && r.GetSince() != nil {
				x.WorkAtRisk += max(0, now.Sub(r.GetSince().AsTime()).Seconds()) * r.GetCpu()
			}
			if !r.GetRevocable() {
				x.Tasks++
				if j.gang {
					x.GangTasks++
				}
				if j.service {
					x.ServiceTasks++
				}
			}
			if j.slo <= 0 {
				continue
			}
			k := svcKey{r.GetJobId(), h.GetPartition()}
			s := svcs[k]
			if s == nil {
				s = &Service{Job: k.job, Partition: k.partition, SLO: j.slo}
				svcs[k] = s
				order = append(order, k)
			}
			if p := r.GetUsage().GetLatencyP99Seconds(); p > 0 && x.Reading.Fresh {
				s.P99 = max(s.P99, p)
				x.Reading.Latency = max(x.Reading.Latency, p/j.slo)
			}
		}
		if c := h.GetCapacity().GetCpu(); c > 0 && x.Reading.Fresh {
			x.Reading.OwnCPU = max(0, x.Reading.CPU-revCPU/c)
		}
		in.Hosts = append(in.Hosts, x)
	}
	for _, k := range order {
		in.Services = append(in.Services, *svcs[k])
	}
	return in
}
