package advisor

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Cluster is what the advisor needs of a cluster stack.
type Cluster interface {
	// Input reads the hosts, their runs and the latency-sensitive
	// services at now.
	Input(ctx context.Context, now time.Time) (Input, error)
	// MoveHost starts the move mv (its host to mv.To, saying why, with its
	// drain window).
	MoveHost(ctx context.Context, mv Move) error
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
// Use a pointer: it caches what it learnt of jobs between rounds.
type APICluster struct {
	API APIClients
	// StaleAfter is the age past which a host's report is no reading.
	StaleAfter time.Duration

	// jobs caches the jobs runs belong to; fetched is when each was read.
	jobs    map[string]jobInfo
	fetched map[string]time.Time
}

// jobInfo is what the advisor needs of a job.
type jobInfo struct {
	service bool    // long-running (service, stateful, daemon)
	gang    bool    // its instances form a gang
	slo     float64 // latency SLO in seconds, 0 if none
}

// jobTTL is how long what the advisor read of a job holds: a job's type
// and gang never change, its SLO may with an update.
const jobTTL = 5 * time.Minute

// listJobsAbove is how many jobs to read in a round past which one
// ListJobs of every live job is cheaper than a GetJob each.
const listJobsAbove = 100

// Input implements Cluster: ListHosts with runs, and the jobs of those
// runs (their types, gangs and SLOs) from a cache, reading those it lacks
// or read more than jobTTL ago.
func (c *APICluster) Input(ctx context.Context, now time.Time) (Input, error) {
	hs, err := c.API.Hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{IncludeRuns: true})
	if err != nil {
		return Input{}, fmt.Errorf("advisor: list hosts: %w", err)
	}
	if err := c.refreshJobs(ctx, hs.GetHosts(), now); err != nil {
		return Input{}, err
	}
	in := BuildInput(now, hs.GetHosts(), c.jobs, c.StaleAfter)
	moves, err := c.API.Partitions.ListPartitionMoves(ctx, &pelotonv1.ListPartitionMovesRequest{Limit: cancelledLookBack})
	if err != nil {
		return Input{}, fmt.Errorf("advisor: list partition moves: %w", err)
	}
	in.Cancelled = Cancelled(moves.GetMoves())
	return in, nil
}

// cancelledLookBack is how many of the newest moves the advisor reads for
// cancels each round.
const cancelledLookBack = 200

// Cancelled is when each host's move was last cancelled, from the move
// history (state CANCELLED).
func Cancelled(moves []*pelotonv1.PartitionMove) map[string]time.Time {
	out := map[string]time.Time{}
	for _, mv := range moves {
		if t := mv.GetTime().AsTime(); mv.GetState() == "CANCELLED" && t.After(out[mv.GetHost()]) {
			out[mv.GetHost()] = t
		}
	}
	return out
}

// refreshJobs makes the cache hold every job with a run on hosts, fresh,
// and nothing else.
func (c *APICluster) refreshJobs(ctx context.Context, hosts []*pelotonv1.Host, now time.Time) error {
	if c.jobs == nil {
		c.jobs, c.fetched = map[string]jobInfo{}, map[string]time.Time{}
	}
	wanted := map[string]bool{}
	var missing []string
	for _, h := range hosts {
		for _, r := range h.GetRuns() {
			id := r.GetJobId()
			if id == "" || wanted[id] {
				continue
			}
			wanted[id] = true
			if t, ok := c.fetched[id]; !ok || now.Sub(t) > jobTTL {
				missing = append(missing, id)
			}
		}
	}
	for id := range c.jobs {
		if !wanted[id] {
			delete(c.jobs, id)
			delete(c.fetched, id)
		}
	}
	if len(missing) > listJobsAbove {
		return c.listJobs(ctx, wanted, now)
	}
	for _, id := range missing {
		resp, err := c.API.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
		if status.Code(err) == codes.NotFound {
			delete(c.jobs, id) // gone: its runs are ending
			continue
		}
		if err != nil {
			return fmt.Errorf("advisor: get job %s: %w", id, err)
		}
		c.keep(resp.GetJob(), now)
	}
	return nil
}

// listJobs reads every live job, keeping those wanted.
func (c *APICluster) listJobs(ctx context.Context, wanted map[string]bool, now time.Time) error {
	token := ""
	for range 1000 { // at most 5,000,000 jobs
		resp, err := c.API.Jobs.ListJobs(ctx, &pelotonv1.ListJobsRequest{PageSize: 5000, PageToken: token,
			States: []pelotonv1.JobState{pelotonv1.JobState_JOB_PENDING, pelotonv1.JobState_JOB_RUNNING, pelotonv1.JobState_JOB_INITIALIZED, pelotonv1.JobState_JOB_KILLING}})
		if err != nil {
			return fmt.Errorf("advisor: list jobs: %w", err)
		}
		for _, j := range resp.GetJobs() {
			if wanted[j.GetId()] {
				c.keep(j, now)
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return nil
}

func (c *APICluster) keep(j *pelotonv1.Job, now time.Time) {
	s := j.GetSpec()
	t := s.GetType()
	c.jobs[j.GetId()] = jobInfo{
		service: t == pelotonv1.JobType_SERVICE || t == pelotonv1.JobType_STATEFUL || t == pelotonv1.JobType_DAEMON,
		gang:    s.GetSla().GetMinimumRunningInstances() > 1,
		slo:     float64(s.GetSla().GetLatencySloMs()) / 1000,
	}
	c.fetched[j.GetId()] = now
}

// MoveHost implements Cluster.
func (c *APICluster) MoveHost(ctx context.Context, mv Move) error {
	_, err := c.API.Hosts.MoveHost(ctx, &pelotonv1.MoveHostRequest{Host: mv.Host, Partition: mv.To, Reason: mv.Reason,
		DrainSeconds: uint32(mv.Drain / time.Second), FinishTaskIds: mv.Finish})
	return err
}

// Publish implements Cluster.
func (c *APICluster) Publish(ctx context.Context, req *pelotonv1.PublishAdviceRequest) error {
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
				el := max(0, now.Sub(r.GetSince().AsTime()))
				x.WorkAtRisk += el.Seconds() * r.GetCpu()
				x.Runs = append(x.Runs, Run{ID: r.GetTaskId(), Job: r.GetJobId(), Elapsed: el, CPU: r.GetCpu()})
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
