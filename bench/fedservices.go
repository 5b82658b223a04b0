package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The services phase of the federation scenario (--services N): one
// federated service of N instances over the scenario's clusters (equal
// parts), in a leaf global pool reserving half of every cluster.
//
//  1. Create: from the create call until the federation sees all N
//     instances RUNNING (serviceCreateToRunningSec).
//  2. Rollout: a new command rolled out cluster by cluster (the canary,
//     then one at a time), each cluster's update in batches of its part
//     of the budget with minReadySeconds 1, from the call until the
//     rollout SUCCEEDED (serviceRolloutSec). Meanwhile every cluster's
//     job is polled every 100 ms: a poll where the instances not RUNNING
//     over all clusters exceed the service's budget is a violation
//     (serviceBudgetViolations, which must be 0; serviceMaxUnavailable is
//     the most seen).
//  3. Global SLA: 5,000 disruption requests at 1,000/s to the federation's
//     global evaluator over loopback gRPC, each grant released at once:
//     the decision latency (slaDecisionP50Ms, slaDecisionP99Ms).
//  4. Failover: the last cluster's stack is stopped; once it is
//     unreachable past the toleration (--service-toleration; it cannot
//     fail over before the federation calls it UNREACHABLE, 5 s), its part
//     runs on the others. serviceFailoverSec is from the toleration's end
//     (the stop plus the toleration) until the other clusters' jobs run
//     all N instances.

const (
	fedServicePool = "/bench-svc"
	// The service's task: small, so that N instances and half again fit
	// the clusters.
	fedServiceCPU      = 0.005
	fedServiceMemoryMB = 2
	fedServicePoll     = 100 * time.Millisecond
	// fedServiceWait bounds each wait of the phase.
	fedServiceWait = 10 * time.Minute
)

// servicesPhase runs the services phase (see above).
func (h *fedHarness) servicesPhase(ctx context.Context, r *Result) error {
	n, budget := h.cfg.Services, h.cfg.ServiceBudget
	if err := h.createHalfPool(ctx, fedServicePool); err != nil {
		return err
	}
	svcs := h.fc.Services
	spec := &pelotonv1.FederatedServiceSpec{
		Job: &pelotonv1.JobSpec{Name: "bench-svc", Type: pelotonv1.JobType_SERVICE, Pool: fedServicePool, InstanceCount: uint32(n),
			Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: uint32(budget)},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "86400"},
				Resources: &pelotonv1.Resources{Cpu: fedServiceCPU, MemoryMb: fedServiceMemoryMB}}},
		Placement: &pelotonv1.ServicePlacement{Failover: &pelotonv1.FailoverPolicy{
			TolerationSeconds: uint32(h.cfg.ServiceToleration / time.Second), MoveBack: false}},
	}
	h.env.progress("federation: a service of %d instances over %d clusters (budget %d)", n, len(h.registered), budget)
	start := time.Now()
	id, get, err := h.createService(ctx, spec)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, fedServiceWait)
	defer cancel()
	if err := waitServiceRunning(wctx, get, n); err != nil {
		return err
	}
	r.add("serviceCreateToRunningSec", time.Since(start).Seconds(), "s", fmt.Sprintf("create until all %d instances RUNNING, as the federation sees them (checks every %s)", n, h.cfg.CheckEvery))

	// The rollout, watched.
	cur, err := get(ctx)
	if err != nil {
		return err
	}
	batch := uint32(budget)
	for _, p := range cur.Clusters {
		batch = min(batch, p.MaxUnavailable)
	}
	watch := &unavailWatch{h: h, budget: uint32(budget)}
	wctxR, stopWatch := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { watch.run(wctxR, cur) })
	next := proto.Clone(spec.Job).(*pelotonv1.JobSpec)
	next.DefaultSpec.Command = []string{"sleep", "86401"}
	h.env.progress("federation: rolling a new spec out, cluster by cluster, batches of %d", batch)
	start = time.Now()
	_, err = svcs.UpdateFederatedService(ctx, &pelotonv1.UpdateFederatedServiceRequest{ServiceId: id, Job: next,
		Rollout: &pelotonv1.RolloutSpec{Update: &pelotonv1.UpdateSpec{BatchSize: batch, MinReadySeconds: 1}}})
	if err == nil {
		err = waitFor(wctx, fedServicePoll, "waiting for the rollout", func() (bool, string, error) {
			s, err := get(wctx)
			if err != nil {
				return false, "", err
			}
			r := s.Rollout
			if st := r.GetState(); st == pelotonv1.RolloutState_ROLLOUT_FAILED || st == pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK {
				return false, "", fmt.Errorf("bench: the rollout ended %s: %s", st, r.GetMessage())
			}
			return r.GetState() == pelotonv1.RolloutState_ROLLOUT_SUCCEEDED, r.GetState().String(), nil
		})
	}
	stopWatch()
	bg.Wait()
	if err != nil {
		return err
	}
	r.add("serviceRolloutSec", time.Since(start).Seconds(), "s", fmt.Sprintf("update until the rollout SUCCEEDED: each cluster in turn, batches of %d, minReadySeconds 1", batch))
	r.add("serviceBudgetViolations", float64(watch.violations), "", fmt.Sprintf("polls (every %s, %d in all) where more than the budget (%d) of instances were not RUNNING over all clusters", fedServicePoll, watch.polls, budget))
	r.add("serviceMaxUnavailable", float64(watch.most), "", "the most instances not RUNNING in one poll during the rollout")

	// The global SLA evaluator under load.
	if err := h.slaLoad(ctx, r, cur); err != nil {
		return err
	}

	// Failover: the last cluster stops.
	if len(h.members) < 2 {
		r.note("failover not measured: it needs two clusters")
		return nil
	}
	lost := h.members[len(h.members)-1].name
	h.env.progress("federation: stopping cluster %s; its part fails over after %s", lost, h.cfg.ServiceToleration)
	stopped := time.Now()
	h.stopStacks(len(h.members) - 1)
	err = waitFor(wctx, fedServicePoll, "waiting for the failover", func() (bool, string, error) {
		s, err := get(wctx)
		if err != nil {
			return false, "", err
		}
		running := uint32(0)
		for _, p := range s.Clusters {
			if p.Cluster == lost {
				continue
			}
			j, err := h.partJob(wctx, p)
			if err != nil {
				return false, "", err
			}
			running += j.GetStatus().GetTaskCounts()["RUNNING"]
		}
		return running >= uint32(n), fmt.Sprintf("%d of %d running without %s", running, n, lost), nil
	})
	if err != nil {
		return err
	}
	r.add("serviceFailoverSec", time.Since(stopped.Add(h.cfg.ServiceToleration)).Seconds(), "s",
		fmt.Sprintf("from the toleration's end (%s after the stop) until the other clusters run all %d instances", h.cfg.ServiceToleration, n))
	return nil
}

// createService creates a federated service of spec and returns its id
// and a reader of it.
func (h *fedHarness) createService(ctx context.Context, spec *pelotonv1.FederatedServiceSpec) (string, func(context.Context) (*pelotonv1.FederatedService, error), error) {
	svcs := h.fc.Services
	created, err := svcs.CreateFederatedService(ctx, &pelotonv1.CreateFederatedServiceRequest{Spec: spec})
	if err != nil {
		return "", nil, fmt.Errorf("bench: CreateFederatedService: %w", err)
	}
	id := created.ServiceId
	return id, func(ctx context.Context) (*pelotonv1.FederatedService, error) {
		resp, err := svcs.GetFederatedService(ctx, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
		if err != nil {
			return nil, fmt.Errorf("bench: GetFederatedService: %w", err)
		}
		return resp.Service, nil
	}, nil
}

// waitServiceRunning waits until the federation sees n instances of the
// service get reads RUNNING.
func waitServiceRunning(ctx context.Context, get func(context.Context) (*pelotonv1.FederatedService, error), n int) error {
	return waitFor(ctx, fedServicePoll, "waiting for every instance RUNNING", func() (bool, string, error) {
		s, err := get(ctx)
		if err != nil {
			return false, "", err
		}
		return s.Running == uint32(n), fmt.Sprintf("%d of %d running", s.Running, n), nil
	})
}

// partJob is a part's job as its cluster shows it (nil if it has none yet).
func (h *fedHarness) partJob(ctx context.Context, p *pelotonv1.ServiceCluster) (*pelotonv1.Job, error) {
	m := h.member(p.Cluster)
	if m == nil || p.ClusterJobId == "" {
		return nil, nil
	}
	resp, err := m.api.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: p.ClusterJobId})
	if err != nil {
		return nil, fmt.Errorf("bench: GetJob in %s: %w", p.Cluster, err)
	}
	return resp.Job, nil
}

// unavailWatch counts the polls in which more instances of a service than
// its budget were not RUNNING over all its clusters.
type unavailWatch struct {
	h                       *fedHarness
	budget                  uint32
	polls, violations, most uint32
}

func (w *unavailWatch) run(ctx context.Context, svc *pelotonv1.FederatedService) {
	t := time.NewTicker(fedServicePoll)
	defer t.Stop()
	for {
		var down uint32
		ok := true
		for _, p := range svc.Clusters {
			j, err := w.h.partJob(ctx, p)
			if err != nil || j == nil {
				ok = false
				break
			}
			// Instances of the job's count not RUNNING.
			if run := j.GetStatus().GetTaskCounts()["RUNNING"]; run < j.GetSpec().GetInstanceCount() {
				down += j.GetSpec().GetInstanceCount() - run
			}
		}
		if ok {
			w.polls++
			w.most = max(w.most, down)
			if down > w.budget {
				w.violations++
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// slaLoadRate and slaLoadFor size the SLA load step: disruption requests
// (each released at once) at this rate for this long, at most
// slaLoadInFlight at a time.
const (
	slaLoadRate     = 1000
	slaLoadFor      = 5 * time.Second
	slaLoadInFlight = 64
)

// slaLoad sends RequestDisruption for one instance of the service's first
// part at slaLoadRate, releasing each grant at once, and reports the
// decision latency (request to answer, granted or refused) over loopback
// gRPC.
func (h *fedHarness) slaLoad(ctx context.Context, r *Result, svc *pelotonv1.FederatedService) error {
	p := svc.Clusters[0]
	n := int(slaLoadRate * slaLoadFor / time.Second)
	h.env.progress("federation: %d disruption requests to the global SLA evaluator at %d/s", n, slaLoadRate)
	lat := make([]float64, n)
	var refused, failed atomic.Int64
	sem := make(chan struct{}, slaLoadInFlight)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / slaLoadRate)
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		<-tick.C
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			resp, err := h.fc.SLA.RequestDisruption(ctx, &pelotonv1.RequestDisruptionRequest{Cluster: p.Cluster, JobId: p.ClusterJobId,
				Instances: []uint32{uint32(i) % p.Desired}, Holder: "bench", TtlSeconds: 60})
			lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			switch {
			case status.Code(err) == codes.FailedPrecondition:
				refused.Add(1)
			case err != nil:
				failed.Add(1)
			default:
				_, _ = h.fc.SLA.ReleaseDisruption(ctx, &pelotonv1.ReleaseDisruptionRequest{GrantId: resp.GrantId})
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("bench: %d of %d disruption requests failed", f, n)
	}
	r.add("slaDecisionP50Ms", percentile(lat, 50), "ms", fmt.Sprintf("RequestDisruption over loopback gRPC, %d requests offered at %d/s, each grant released at once (a grant is recorded in etcd before the answer)", n, slaLoadRate))
	r.add("slaDecisionP99Ms", percentile(lat, 99), "ms", "")
	r.add("slaRequestsPerSec", float64(n)/elapsed.Seconds(), "/s", fmt.Sprintf("achieved; %d refused over the budget", refused.Load()))
	return nil
}
