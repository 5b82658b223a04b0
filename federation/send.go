package federation

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The sender of a cluster sends the creates of the jobs dispatched to it,
// apart from the cluster's worker. The dispatcher wakes it right after it
// records a dispatch (so a create does not wait for the worker's next
// pass), and it sends every unsent create in a few CreateJobs calls, not
// one call each. The cluster stores each call's jobs in few transactions;
// the cluster job ids that come back are written through the federation's
// group commit. The worker still looks after everything else about those
// jobs (status, kills, moves) once they have their cluster job id.
//
// Crash safety is the dispatcher's: a job is sent only once its record
// says DISPATCHED to this cluster (written before the sender sees it), and
// every create carries the request id of its attempt, so a create whose
// answer was lost (a timeout, a federation restart) is answered again by
// the cluster, never carried out twice.

// sendBatch bounds the creates of one CreateJobs call. Each call's
// deadline grows with its size (sendTimeout).
const sendBatch = 250

// sendCallsInFlight bounds the CreateJobs calls one sender has on their
// way at once, and sendWrites the cluster job id writes.
const (
	sendCallsInFlight = 2
	sendWrites        = 256
)

// runSender sends a cluster's unsent creates when woken by the dispatcher,
// and every CheckEvery for those that failed before.
func (jb *Jobs) runSender(ctx context.Context, name string, m *member) {
	t := time.NewTicker(jb.f.opts.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.send:
		}
		jb.sendCreates(ctx, name, m)
	}
}

// sendTimeout is the deadline of a CreateJobs call of n creates: a
// CreateJob's (CallTimeout), and as much again per hundred creates.
func (jb *Jobs) sendTimeout(n int) time.Duration {
	return jb.f.opts.CallTimeout * time.Duration(1+n/100)
}

// sendCreates sends every create dispatched to cluster name and not sent
// yet, if its last check answered.
func (jb *Jobs) sendCreates(ctx context.Context, name string, m *member) {
	jobs, cli := jb.takeUnsent(name, m)
	if len(jobs) == 0 {
		return
	}
	defer jb.releaseUnsent(jobs)
	sem := make(chan struct{}, sendCallsInFlight)
	var wg sync.WaitGroup
	for off := 0; off < len(jobs); off += sendBatch {
		part := jobs[off:min(off+sendBatch, len(jobs))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			jb.sendPart(ctx, name, cli, part)
		})
	}
	wg.Wait()
}

// takeUnsent lists the jobs dispatched to name whose create is not sent
// (oldest first) and marks them the sender's; none while the cluster has
// not answered a check since start or is unreachable.
func (jb *Jobs) takeUnsent(name string, m *member) ([]*pelotonv1.FederatedJob, clusterClient) {
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	if jb.f.clusters[name] != m || !m.checked || m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
		return nil, nil
	}
	var jobs []*pelotonv1.FederatedJob
	for _, j := range jb.f.jobs {
		if senderOwns(j, name) && !j.sending {
			j.sending = true
			jobs = append(jobs, jobView(j))
		}
	}
	sort.Slice(jobs, func(a, b int) bool {
		ta, tb := jobs[a].CreateTime.AsTime(), jobs[b].CreateTime.AsTime()
		if !ta.Equal(tb) {
			return ta.Before(tb)
		}
		return jobs[a].Id < jobs[b].Id
	})
	return jobs, m.cli
}

// senderOwns says whether a job's next step is its create in cluster
// name: dispatched there, not sent, not killed. (A killed or moving job
// whose create may have been sent is the worker's: it sends the create
// again to learn its id, then cancels it.)
func senderOwns(j *fedJob, name string) bool {
	return j.rec.Cluster == name && j.rec.DispatchState == pelotonv1.DispatchState_DISPATCHED && j.rec.ClusterJobId == "" && !j.rec.Killed
}

func (jb *Jobs) releaseUnsent(jobs []*pelotonv1.FederatedJob) {
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	for _, v := range jobs {
		if j := jb.f.jobs[v.Id]; j != nil {
			j.sending = false
		}
	}
}

// sendPart sends one CreateJobs call and records each answer: the cluster
// job id, or the job's end when the cluster refused it for good. A create
// that failed otherwise is sent again at the sender's next turn.
func (jb *Jobs) sendPart(ctx context.Context, name string, cli clusterClient, jobs []*pelotonv1.FederatedJob) {
	req := &pelotonv1.CreateJobsRequest{Requests: make([]*pelotonv1.CreateJobRequest, len(jobs))}
	for i, j := range jobs {
		req.Requests[i] = &pelotonv1.CreateJobRequest{Spec: j.Spec.Job, RequestId: attemptRequestID(j)}
	}
	cctx, cancel := context.WithTimeout(ctx, jb.sendTimeout(len(jobs)))
	resp, err := cli.Jobs.CreateJobs(cctx, req)
	cancel()
	if status.Code(err) == codes.Unimplemented {
		// A cluster of a version before CreateJobs: one call per job.
		jb.sendEach(ctx, name, cli, jobs)
		return
	}
	if err == nil && len(resp.GetResults()) != len(jobs) {
		err = status.Errorf(codes.Internal, "CreateJobs answered %d results for %d requests", len(resp.GetResults()), len(jobs))
	}
	if err != nil {
		if ctx.Err() == nil {
			jb.f.log.Warn("federated jobs: creates in their cluster failed; sent again", "cluster", name, "jobs", len(jobs), "err", err)
		}
		return
	}
	sem := make(chan struct{}, sendWrites)
	var wg sync.WaitGroup
	for i, r := range resp.Results {
		id := jobs[i].Id
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			switch code := codes.Code(r.Code); {
			case code == codes.OK:
				err = jb.recordSent(ctx, id, name, r.JobId)
			case refusedCode(code):
				err = jb.recordRefused(ctx, id, name, itemWhy(r.Message))
			default:
				err = status.Error(code, r.Message)
			}
			if err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
				jb.f.log.Warn("federated job: its create in its cluster failed; sent again", "job", id, "cluster", name, "err", err)
			}
		})
	}
	wg.Wait()
}

// itemWhy is a CreateJobs item's refusal as CreateJob would have said it:
// "requests[3].spec.pool: ..." is "spec.pool: ..." for the job's record.
func itemWhy(msg string) string {
	rest, ok := strings.CutPrefix(msg, "requests[")
	if !ok {
		return msg
	}
	_, after, ok := strings.Cut(rest, "]")
	if !ok {
		return msg
	}
	if s, ok := strings.CutPrefix(after, "."); ok {
		return s
	}
	return strings.TrimPrefix(after, ": ")
}

// sendEach sends creates one CreateJob call each (syncJob), as many at
// once as a worker pass does.
func (jb *Jobs) sendEach(ctx context.Context, name string, cli clusterClient, jobs []*pelotonv1.FederatedJob) {
	sem := make(chan struct{}, jobSyncConcurrency)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := jb.syncJob(ctx, name, cli, j.Id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
				jb.f.log.Warn("federated job: call to its cluster failed; retried", "job", j.Id, "cluster", name, "err", err)
			}
		})
	}
	wg.Wait()
}
