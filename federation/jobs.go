package federation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/paging"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

const jobRequestKind requestid.Kind = "federated-job"

func jobKey(id string) string { return "jobs/" + id }

// DispatchTable is the one list of legal dispatch state changes.
//
//	PENDING -> DISPATCHED     a cluster was chosen (the create is sent by its worker)
//	PENDING -> DONE           killed before it reached a cluster
//	DISPATCHED -> MOVING      its cluster went unreachable before any task started
//	DISPATCHED -> PENDING     its cluster was deregistered before any task started
//	DISPATCHED -> DONE        it ended in its cluster (or the cluster refused it)
//	MOVING -> PENDING         the copy in the old cluster is confirmed gone
//	MOVING -> DISPATCHED      the old cluster answered and tasks had started: it stays
//	MOVING -> DONE            killed while moving, and confirmed gone
var DispatchTable = fsm.New("dispatch",
	fsm.From(pelotonv1.DispatchState_DISPATCH_PENDING).To(pelotonv1.DispatchState_DISPATCHED, pelotonv1.DispatchState_DISPATCH_DONE),
	fsm.From(pelotonv1.DispatchState_DISPATCHED).To(pelotonv1.DispatchState_DISPATCH_MOVING, pelotonv1.DispatchState_DISPATCH_PENDING, pelotonv1.DispatchState_DISPATCH_DONE),
	fsm.From(pelotonv1.DispatchState_DISPATCH_MOVING).To(pelotonv1.DispatchState_DISPATCH_PENDING, pelotonv1.DispatchState_DISPATCHED, pelotonv1.DispatchState_DISPATCH_DONE),
	fsm.From(pelotonv1.DispatchState_DISPATCH_DONE).To(),
)

// fedJob is a federated job: its record as in etcd and its revision.
type fedJob struct {
	rec *pelotonv1.FederatedJob
	rev int64
	req resources.Resources
	// pool is the job's pool path, normalized: the global fair share
	// counts the job under it (fairshare.go).
	pool string
	// task is the most one of its tasks asks, per kind: what must fit
	// on one host of the cluster it goes to.
	task resources.Resources
	// busy: a worker or the dispatcher is writing it; others skip it.
	busy bool
	// sending: its cluster's sender has its create in hand (send.go).
	sending bool
}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (jb *Jobs) loadJobs(ctx context.Context) error {
	kvs, err := jb.f.st.List(ctx, "jobs/")
	if err != nil {
		return err
	}
	jobs := make([]*fedJob, 0, len(kvs))
	for _, kv := range kvs {
		rec := &pelotonv1.FederatedJob{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			if err := jb.f.quarantine(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		req, _ := jobRequest(rec.Spec.GetJob(), "spec.job")
		jobs = append(jobs, &fedJob{rec: rec, rev: kv.Revision, req: req, pool: jobPool(rec.Spec.GetJob()), task: largestTask(rec.Spec.GetJob(), "spec.job").res})
	}
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	for _, j := range jobs {
		jb.f.jobs[j.rec.Id] = j
	}
	return nil
}

// CreateJob accepts a BATCH job for dispatch. It answers once the job is
// recorded; the dispatcher sends it to a cluster right after.
func (jb *Jobs) CreateJob(ctx context.Context, spec *pelotonv1.FederatedJobSpec, rqID string) (string, error) {
	if err := validateJobSpec(spec); err != nil {
		return "", err
	}
	if err := jb.checkSelector(spec.GetPlacement().GetClusterSelector()); err != nil {
		return "", err
	}
	if err := jb.checkFits(spec); err != nil {
		return "", err
	}
	rq, err := requestid.New(jobRequestKind, rqID, &pelotonv1.CreateFederatedJobRequest{Spec: spec})
	if err != nil {
		return "", err
	}
	now := jb.f.opts.Now()
	if spec.Job.Type == pelotonv1.JobType_JOB_TYPE_UNSPECIFIED {
		// The federation dispatches batch jobs: a spec that names no type
		// is one.
		spec = proto.Clone(spec).(*pelotonv1.FederatedJobSpec)
		spec.Job.Type = pelotonv1.JobType_BATCH
	}
	id := newJobID()
	req, _ := jobRequest(spec.Job, "spec.job")
	rec := &pelotonv1.FederatedJob{Id: id, Spec: spec, DispatchState: pelotonv1.DispatchState_DISPATCH_PENDING,
		CreateTime: timestamppb.New(now), Message: "waiting for dispatch"}
	b, err := proto.Marshal(rec)
	if err != nil {
		return "", err
	}
	rev, done, err := jb.recordCreate(ctx, rq, id, b, now)
	if err != nil || done != "" {
		return done, err
	}
	jb.f.mu.Lock()
	jb.f.jobs[id] = &fedJob{rec: rec, rev: rev, req: req, pool: jobPool(spec.Job), task: largestTask(spec.Job, "spec.job").res}
	jb.f.mu.Unlock()
	metrics.FederationJobs.WithLabelValues("created").Inc()
	jb.f.kickDispatch()
	return id, nil
}

// recordCreate writes a new job's record b with request rq's record
// (requestid.WriteFirst): together or neither, group-committed with the
// other creates of the moment. done is the job a create carried out
// before under rq made.
func (jb *Jobs) recordCreate(ctx context.Context, rq requestid.Request, id string, b []byte, now time.Time) (rev int64, done string, err error) {
	put := store.Put(jobKey(id), b, store.MustNotExist)
	done, err = requestid.WriteFirst(ctx, jb.f.st, rq, now, func(o requestid.Outcome) error {
		var err error
		rev, err = jb.f.batch.WriteTxn(ctx, append([]store.Op{put}, o.Ops(rq, id, now)...)...)
		return err
	}, nil)
	switch {
	case apierr.Code(err) == codes.AlreadyExists:
		return 0, "", err
	case err != nil:
		return 0, "", apierr.Unavailable("record federated job: %v", err)
	}
	return rev, done, nil
}

// checkSelector refuses a cluster selector that no registered cluster
// matches: such a job could only wait for a cluster nobody announced, and
// is far more often a typo. A selector that matches clusters that are
// down or cordoned is fine: the job waits for them.
func (jb *Jobs) checkSelector(selector map[string]string) error {
	if len(selector) == 0 {
		return nil
	}
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	var known []string
	for _, name := range sortedKeys(jb.f.clusters) {
		labels := jb.f.clusters[name].rec.Labels
		if split.Matches(labels, selector) {
			return nil
		}
		known = append(known, name+" "+split.FormatLabels(labels))
	}
	if len(known) == 0 {
		return apierr.FailedPrecondition("spec.placement.clusterSelector: no cluster is registered")
	}
	return apierr.Invalid("spec.placement.clusterSelector", "%s matches no registered cluster (%s)", split.FormatLabels(selector), strings.Join(known, ", "))
}

// checkFits refuses a job no cluster its selector matches could ever run
// (refuseUnfitBatch), judged on what the clusters' last checks showed.
func (jb *Jobs) checkFits(spec *pelotonv1.FederatedJobSpec) error {
	pool, err := resmgr.NormalizePath(spec.Job.Pool, "spec.job.pool")
	if err != nil {
		return err
	}
	selector := spec.GetPlacement().GetClusterSelector()
	jb.f.mu.Lock()
	var names []string
	for _, name := range sortedKeys(jb.f.clusters) {
		if split.Matches(jb.f.clusters[name].rec.Labels, selector) {
			names = append(names, name)
		}
	}
	views, global := jb.f.fitViewsLocked(names, pool), jb.f.isGlobalLeafLocked(pool)
	req, _ := jobRequest(spec.Job, "spec.job")
	overLimit := jb.f.refuseOverGlobalLimitLocked(pool, req)
	jb.f.mu.Unlock()
	if overLimit != nil {
		return overLimit
	}
	return refuseUnfitBatch(largestTask(spec.Job, "spec.job"), pool, global, views, "spec.job")
}

func validateJobSpec(spec *pelotonv1.FederatedJobSpec) error {
	job := spec.GetJob()
	if job == nil {
		return apierr.Invalid("spec.job", "required: the job to dispatch")
	}
	switch job.Type {
	case pelotonv1.JobType_BATCH, pelotonv1.JobType_JOB_TYPE_UNSPECIFIED:
	case pelotonv1.JobType_SERVICE:
		return apierr.Invalid("spec.job.type", "the federation dispatches BATCH jobs; a SERVICE job runs across clusters as a federated service (peloton fed service create -f FILE, the spec under job:) or in one cluster (peloton --cluster NAME job create)")
	default:
		return apierr.Invalid("spec.job.type", "the federation dispatches BATCH jobs; a %s job runs in one cluster (peloton --cluster NAME job create)", job.Type)
	}
	if job.Name == "" {
		return apierr.Invalid("spec.job.name", "required")
	}
	if job.InstanceCount == 0 {
		return apierr.Invalid("spec.job.instanceCount", "must be > 0")
	}
	if _, err := resmgr.NormalizePath(job.Pool, "spec.job.pool"); err != nil {
		return err
	}
	if job.Foreign != nil {
		return apierr.Invalid("spec.job.foreign", "set by Peloton only")
	}
	if _, err := jobRequest(job, "spec.job"); err != nil {
		return err
	}
	return ValidateLabels(spec.GetPlacement().GetClusterSelector(), "spec.placement.clusterSelector")
}

// GetJob returns a federated job with its status as last observed.
func (jb *Jobs) GetJob(id string) (*pelotonv1.FederatedJob, error) {
	if id == "" {
		return nil, apierr.Invalid("jobId", "required")
	}
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	j := jb.f.jobs[id]
	if j == nil {
		return nil, apierr.NotFound("federated job %s does not exist", id)
	}
	return jobView(j), nil
}

func jobView(j *fedJob) *pelotonv1.FederatedJob {
	out := proto.Clone(j.rec).(*pelotonv1.FederatedJob)
	out.Version = uint64(j.rev)
	if m := out.GetStatus().GetMessage(); out.Message == "" && m != "" && out.DispatchState == pelotonv1.DispatchState_DISPATCHED {
		// Why the job is not running yet is the cluster's to say.
		out.Message = "in cluster " + out.Cluster + ": " + m
	}
	return out
}

// ListJobs returns federated jobs, newest first, a page at a time.
func (jb *Jobs) ListJobs(cluster string, pageSize uint32, token string) ([]*pelotonv1.FederatedJob, string, error) {
	n, err := paging.Size(pageSize, "pageSize")
	if err != nil {
		return nil, "", err
	}
	var past func(*fedJob) bool
	if token != "" {
		mark, err := paging.DecodeMark(token, "pageToken", "fedjobs")
		if err != nil {
			return nil, "", err
		}
		past = func(j *fedJob) bool { return mark.Passed(j.rec.CreateTime.AsTime().UnixNano(), j.rec.Id) }
	}
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	all := make([]*fedJob, 0, len(jb.f.jobs))
	for _, j := range jb.f.jobs {
		if cluster == "" || j.rec.Cluster == cluster {
			all = append(all, j)
		}
	}
	sortNewestFirst(all, func(j *fedJob) *pelotonv1.FederatedJob { return j.rec })
	page, next := paging.Cut(all, n, past, func(last *fedJob) string {
		return paging.EncodeMark("fedjobs", paging.Mark{Nanos: last.rec.CreateTime.AsTime().UnixNano(), ID: last.rec.Id})
	}, func(j *fedJob) int { return proto.Size(j.rec) })
	out := make([]*pelotonv1.FederatedJob, 0, len(page))
	for _, j := range page {
		v := jobView(j)
		// A summary, as ListJobs of a cluster answers.
		v.Spec = &pelotonv1.FederatedJobSpec{Placement: v.Spec.GetPlacement(), Job: &pelotonv1.JobSpec{
			Name: v.Spec.GetJob().GetName(), Type: v.Spec.GetJob().GetType(), Pool: v.Spec.GetJob().GetPool(),
			InstanceCount: v.Spec.GetJob().GetInstanceCount(), Sla: v.Spec.GetJob().GetSla(), Labels: v.Spec.GetJob().GetLabels()}}
		out = append(out, v)
	}
	return out, next, nil
}

// sortNewestFirst orders federated records as their lists show them:
// newest first, ties by id, the order paging.Mark reads.
func sortNewestFirst[T any, R interface {
	GetCreateTime() *timestamppb.Timestamp
	GetId() string
}](all []T, rec func(T) R) {
	sort.Slice(all, func(a, b int) bool {
		ra, rb := rec(all[a]), rec(all[b])
		ta, tb := ra.GetCreateTime().AsTime(), rb.GetCreateTime().AsTime()
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return ra.GetId() < rb.GetId()
	})
}

// KillJob kills a federated job wherever it is: before dispatch it is done
// at once; in a cluster, that cluster's worker cancels it there.
func (jb *Jobs) KillJob(ctx context.Context, id string) error {
	j, err := jb.GetJob(id)
	if err != nil {
		return err
	}
	if j.Killed || j.DispatchState == pelotonv1.DispatchState_DISPATCH_DONE {
		return nil
	}
	err = jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
		rec.Killed = true
		if rec.DispatchState == pelotonv1.DispatchState_DISPATCH_PENDING {
			rec.DispatchState = pelotonv1.DispatchState_DISPATCH_DONE
			rec.Message = "killed before dispatch"
		} else {
			rec.Message = "killing in cluster " + rec.Cluster
		}
		return nil
	})
	if err != nil {
		return err
	}
	jb.f.mu.Lock()
	if m := jb.f.clusters[j.Cluster]; m != nil {
		m.nudge()
	}
	jb.f.mu.Unlock()
	return nil
}

// updateJob changes a job's record with compare-and-swap, retrying a few
// times on a conflict with another writer (change is applied to the
// latest record each time). The dispatch state change, if any, must be in
// DispatchTable.
func (jb *Jobs) updateJob(ctx context.Context, id string, change func(*pelotonv1.FederatedJob) error) error {
	before, rec, err := updateRecord(ctx, jb.f, jb.jobRecord(id), func(rec *pelotonv1.FederatedJob) error {
		from := rec.DispatchState
		if err := change(rec); err != nil {
			return err
		}
		if err := DispatchTable.Check(from, rec.DispatchState); err != nil {
			return fmt.Errorf("federated job %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if before.DispatchState != rec.DispatchState {
		jb.f.log.Info("federated job", "job", id, "from", before.DispatchState, "to", rec.DispatchState, "cluster", rec.Cluster, "why", rec.Message)
	}
	return nil
}

// jobRecord is how updateRecord reaches federated job id.
func (jb *Jobs) jobRecord(id string) casRecord[*pelotonv1.FederatedJob] {
	return casRecord[*pelotonv1.FederatedJob]{
		key: jobKey(id), what: "federated job " + id,
		read: func() (*pelotonv1.FederatedJob, int64, bool) {
			jb.f.mu.Lock()
			defer jb.f.mu.Unlock()
			j := jb.f.jobs[id]
			if j == nil {
				return nil, 0, false
			}
			return proto.Clone(j.rec).(*pelotonv1.FederatedJob), j.rev, true
		},
		keep: func(rec *pelotonv1.FederatedJob, rev int64) {
			jb.f.mu.Lock()
			defer jb.f.mu.Unlock()
			if j := jb.f.jobs[id]; j != nil {
				j.rec, j.rev = rec, rev
			}
		},
		fresh: func() *pelotonv1.FederatedJob { return &pelotonv1.FederatedJob{} },
	}
}

// dispatchLoop sends pending jobs to clusters, when kicked and every
// CheckEvery (a pending job waits for a cluster to have room or return).
func (jb *Jobs) dispatchLoop(ctx context.Context) {
	t := time.NewTicker(jb.f.opts.CheckEvery)
	defer t.Stop()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		jb.dispatchPending(ctx)
		jb.f.passes.dispatch.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-jb.f.kick:
		case <-sweep.C:
			if jb.f.opts.History != nil {
				continue // the collector archives done jobs (archive.go)
			}
			if n, err := jb.sweepDone(ctx, sweepLimit); err != nil {
				jb.f.log.Warn("sweep of done federated jobs", "deleted", n, "err", err)
			}
		}
	}
}

// sweepEvery and sweepLimit pace the deletion of done jobs past
// JobRetention: a bounded pass an hour, so a backlog is worked off over
// several passes instead of in one burst of writes.
const (
	sweepEvery = time.Hour
	sweepLimit = 10000
)

// sweepDone deletes up to limit federated jobs done for longer than
// JobRetention (by the end their cluster reported, or their creation when
// none is known), oldest first, and returns how many it deleted.
func (jb *Jobs) sweepDone(ctx context.Context, limit int) (int, error) {
	cutoff := jb.f.opts.Now().Add(-jb.f.opts.JobRetention)
	type victim struct {
		id  string
		rev int64
		at  time.Time
	}
	var victims []victim
	jb.f.mu.Lock()
	for id, j := range jb.f.jobs {
		if j.rec.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE || j.busy {
			continue
		}
		at := j.rec.CreateTime.AsTime()
		if ct := j.rec.Status.GetCompletionTime(); ct != nil {
			at = ct.AsTime()
		}
		if at.Before(cutoff) {
			victims = append(victims, victim{id, j.rev, at})
		}
	}
	jb.f.mu.Unlock()
	sort.Slice(victims, func(a, b int) bool { return victims[a].at.Before(victims[b].at) })
	if len(victims) > limit {
		victims = victims[:limit]
	}
	deleted := 0
	for _, v := range victims {
		if _, err := jb.f.batch.Write(ctx, store.Delete(jobKey(v.id), v.rev)); err != nil {
			if errors.Is(err, store.ErrConflict) {
				continue // written meanwhile: the next sweep looks again
			}
			return deleted, err
		}
		jb.f.mu.Lock()
		if j := jb.f.jobs[v.id]; j != nil && j.rev == v.rev {
			delete(jb.f.jobs, v.id)
		}
		jb.f.mu.Unlock()
		deleted++
	}
	return deleted, nil
}

// dispatchConcurrency bounds the dispatcher's record writes in flight. The
// writes are group-committed (store.Batcher), so as many as fill its
// pipeline of transactions cost a few etcd round trips, not one each.
const dispatchConcurrency = 256

func (jb *Jobs) dispatchPending(ctx context.Context) {
	type choice struct{ id, cluster, why string }
	jb.f.mu.Lock()
	var pending []*fedJob
	for _, j := range jb.f.jobs {
		if j.rec.DispatchState == pelotonv1.DispatchState_DISPATCH_PENDING && !j.rec.Killed && !j.busy {
			pending = append(pending, j)
		}
	}
	sort.Slice(pending, func(a, b int) bool {
		return pending[a].rec.CreateTime.AsTime().Before(pending[b].rec.CreateTime.AsTime())
	})
	var choices []choice
	// The global fair share gates the jobs of global leaf pools; a job
	// let through is counted at once, so the next one sees it.
	share := jb.f.fairShareLocked()
	for _, j := range pending {
		cands := jb.candidatesLocked(j.rec.Spec.GetJob().GetPool())
		name, why := chooseCluster(j.req, j.task, j.rec.Spec.GetPlacement().GetClusterSelector(), cands)
		if name != "" {
			if wait := share.admit(j.pool, j.req); wait != "" {
				name, why = "", wait
			}
		}
		if name != "" {
			// Assume the job is there until the next check shows it.
			m := jb.f.clusters[name]
			if m.assumed == nil {
				m.assumed = map[string]resources.Resources{}
			}
			pool := j.rec.Spec.GetJob().GetPool()
			m.assumed[pool] = m.assumed[pool].Add(j.req)
			j.busy = true
		}
		choices = append(choices, choice{j.rec.Id, name, why})
	}
	jb.f.mu.Unlock()

	sem := make(chan struct{}, dispatchConcurrency)
	var wg sync.WaitGroup
	for _, c := range choices {
		if c.cluster == "" {
			jb.f.mu.Lock()
			if j := jb.f.jobs[c.id]; j != nil && j.rec.Message != c.why {
				j.rec.Message = c.why // said in memory only: it changes as clusters do
			}
			jb.f.mu.Unlock()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := jb.updateJob(ctx, c.id, func(rec *pelotonv1.FederatedJob) error {
				if rec.DispatchState != pelotonv1.DispatchState_DISPATCH_PENDING || rec.Killed {
					return errSkip
				}
				rec.DispatchState = pelotonv1.DispatchState_DISPATCHED
				rec.Cluster, rec.ClusterJobId = c.cluster, ""
				rec.Message = "sending to cluster " + c.cluster
				rec.Attempts = append(rec.Attempts, &pelotonv1.FederatedJobAttempt{Cluster: c.cluster, DispatchTime: timestamppb.New(jb.f.opts.Now())})
				return nil
			})
			jb.f.mu.Lock()
			if j := jb.f.jobs[c.id]; j != nil {
				j.busy = false
			}
			if m := jb.f.clusters[c.cluster]; m != nil && err == nil {
				m.nudgeSend()
			}
			jb.f.mu.Unlock()
			if err == nil {
				metrics.FederationJobs.WithLabelValues("dispatched").Inc()
			} else if !errors.Is(err, errSkip) {
				jb.f.log.Warn("cannot record a dispatch; retried", "job", c.id, "err", err)
			}
		}()
	}
	wg.Wait()
}

var errSkip = errors.New("skip")

// candidatesLocked is every cluster as the dispatcher sees it for a job
// of pool. Caller holds mu.
func (jb *Jobs) candidatesLocked(pool string) []candidate {
	out := make([]candidate, 0, len(jb.f.clusters))
	for _, name := range sortedKeys(jb.f.clusters) {
		m := jb.f.clusters[name]
		c := candidate{name: name, labels: m.rec.Labels, state: effectiveState(m.rec.Health, m.cordoned()),
			largest: m.largest, knowsLargest: m.knowsLargest}
		if !m.checked {
			c.state = pelotonv1.ClusterState_CLUSTER_DEGRADED // not looked at yet since start
		}
		if p := m.pools[pool]; p != nil && len(p.Children) == 0 && pool != "/" {
			c.hasPool = true
			ent, _ := resources.FromProto(p.GetStatus().GetEntitlement(), "")
			alloc, _ := resources.FromProto(p.GetStatus().GetAllocation(), "")
			c.headroom = ent.Sub(alloc).Sub(m.assumed[pool])
		}
		if m.capacity.MilliCPU > 0 {
			c.used = float64(m.alloc.MilliCPU) / float64(m.capacity.MilliCPU)
		}
		out = append(out, c)
	}
	return out
}

// started reports whether a job's status shows any task that got as far
// as a host: such a job is never dispatched again.
func started(st *pelotonv1.JobStatus) bool {
	if st == nil {
		return false
	}
	switch st.State {
	case pelotonv1.JobState_JOB_RUNNING, pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED:
		return true
	}
	for state, n := range st.TaskCounts {
		if n == 0 {
			continue
		}
		switch state {
		case "INITIALIZED", "PENDING", "READY", "PLACING", "PLACED":
		default:
			return true
		}
	}
	return false
}

func terminal(s pelotonv1.JobState) bool {
	return s == pelotonv1.JobState_JOB_SUCCEEDED || s == pelotonv1.JobState_JOB_FAILED || s == pelotonv1.JobState_JOB_KILLED
}

// clusterUnreachable marks the jobs in a cluster that went unreachable
// and had not started as moving: they are dispatched again once their
// copy there is confirmed gone.
func (jb *Jobs) clusterUnreachable(ctx context.Context, name string) {
	for _, id := range jb.jobsIn(name, pelotonv1.DispatchState_DISPATCHED) {
		err := jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
			if rec.Cluster != name || rec.DispatchState != pelotonv1.DispatchState_DISPATCHED || started(rec.Status) || rec.Killed {
				return errSkip
			}
			rec.DispatchState = pelotonv1.DispatchState_DISPATCH_MOVING
			rec.Message = "cluster " + name + " is unreachable and no task had started: to be dispatched elsewhere once its copy there is confirmed gone"
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) {
			jb.f.log.Warn("cannot mark a job moving", "job", id, "err", err)
		}
	}
}

// clusterGone handles the jobs of a deregistered cluster: the operator
// says it is gone, so a job that had not started is dispatched again, and
// one that had is given up with a message.
func (jb *Jobs) clusterGone(ctx context.Context, name string) {
	ids := append(jb.jobsIn(name, pelotonv1.DispatchState_DISPATCHED), jb.jobsIn(name, pelotonv1.DispatchState_DISPATCH_MOVING)...)
	for _, id := range ids {
		err := jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
			if rec.Cluster != name || rec.DispatchState == pelotonv1.DispatchState_DISPATCH_DONE || rec.DispatchState == pelotonv1.DispatchState_DISPATCH_PENDING {
				return errSkip
			}
			endAttempt(rec, "cluster "+name+" was deregistered")
			if started(rec.Status) || rec.Killed {
				rec.DispatchState = pelotonv1.DispatchState_DISPATCH_DONE
				rec.Message = "cluster " + name + " was deregistered while the job was in it; its end there is unknown"
				return nil
			}
			rec.DispatchState = pelotonv1.DispatchState_DISPATCH_PENDING
			rec.Cluster, rec.ClusterJobId, rec.Status = "", "", nil
			rec.Message = "cluster " + name + " was deregistered before any task started: waiting for dispatch"
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) {
			jb.f.log.Warn("cannot move a job off a deregistered cluster", "job", id, "err", err)
		}
	}
	jb.f.kickDispatch()
}

func endAttempt(rec *pelotonv1.FederatedJob, why string) {
	if n := len(rec.Attempts); n > 0 && rec.Attempts[n-1].EndReason == "" {
		rec.Attempts[n-1].EndReason = why
	}
}

// jobsIn lists the jobs in a cluster in a dispatch state.
func (jb *Jobs) jobsIn(cluster string, st pelotonv1.DispatchState) []string {
	jb.f.mu.Lock()
	defer jb.f.mu.Unlock()
	var ids []string
	for id, j := range jb.f.jobs {
		if j.rec.Cluster == cluster && j.rec.DispatchState == st {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// jobSyncBatch bounds how many jobs one worker pass looks at, and
// jobSyncConcurrency how many calls to the cluster it has in flight.
const (
	jobSyncBatch       = 1024
	jobSyncConcurrency = 32
)

// syncJobs does the federated jobs' business with one cluster that just
// answered its check: send the creates of jobs dispatched to it, cancel
// the killed and the moving ones, and refresh the status of the others.
func (jb *Jobs) syncJobs(ctx context.Context, name string, m *member) {
	jb.f.mu.Lock()
	var ids []string
	for id, j := range jb.f.jobs {
		st := j.rec.DispatchState
		// An unsent create is the sender's (send.go).
		if j.rec.Cluster == name && (st == pelotonv1.DispatchState_DISPATCHED || st == pelotonv1.DispatchState_DISPATCH_MOVING) && !senderOwns(j, name) {
			ids = append(ids, id)
		}
	}
	cli := m.cli
	jb.f.mu.Unlock()
	// Unsent creates first, then the rest, oldest job ids first; a pass
	// takes a bounded batch and the next pass the next.
	sort.Strings(ids)
	if len(ids) > jobSyncBatch {
		off := int(m.jobCursor.Add(jobSyncBatch)) % len(ids)
		ids = append(ids[off:], ids[:off]...)[:jobSyncBatch]
	}
	sem := make(chan struct{}, jobSyncConcurrency)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := jb.syncJob(ctx, name, cli, id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
				jb.f.log.Warn("federated job: call to its cluster failed; retried next pass", "job", id, "cluster", name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// syncJob moves one job along with its cluster.
func (jb *Jobs) syncJob(ctx context.Context, name string, cli clusterClient, id string) error {
	j, err := jb.GetJob(id)
	if err != nil || j.Cluster != name {
		return errSkip
	}
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, jb.f.opts.CallTimeout) }
	clusterID := j.ClusterJobId
	if clusterID == "" {
		// Send the create, under a request id of this attempt: a create
		// whose answer was lost is answered again, not repeated.
		cctx, cancel := call()
		resp, err := cli.Jobs.CreateJob(cctx, &pelotonv1.CreateJobRequest{Spec: j.Spec.Job, RequestId: attemptRequestID(j)})
		cancel()
		if err != nil {
			if refusedCode(status.Code(err)) {
				return jb.recordRefused(ctx, id, name, status.Convert(err).Message())
			}
			return err
		}
		clusterID = resp.JobId
		if err := jb.recordSent(ctx, id, name, clusterID); err != nil {
			return err
		}
		if !j.Killed && j.DispatchState == pelotonv1.DispatchState_DISPATCHED {
			return nil // just created: its state is read at the next pass
		}
	}
	cctx, cancel := call()
	resp, err := cli.Jobs.GetJob(cctx, &pelotonv1.GetJobRequest{JobId: clusterID})
	cancel()
	if status.Code(err) == codes.NotFound {
		return jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
			if rec.Cluster != name || rec.ClusterJobId != clusterID {
				return errSkip
			}
			return jb.confirmGone(rec, rec.Status, name, "deleted from cluster "+name)
		})
	}
	if err != nil {
		return err
	}
	st := resp.Job.Status
	moving := j.DispatchState == pelotonv1.DispatchState_DISPATCH_MOVING
	if (j.Killed || (moving && !started(st))) && !terminal(st.State) && st.State != pelotonv1.JobState_JOB_KILLING {
		cctx, cancel := call()
		_, err := cli.Jobs.CancelJob(cctx, &pelotonv1.CancelJobRequest{JobId: clusterID})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			return err
		}
	}
	if !terminal(st.State) && !(moving && started(st)) {
		// Only the status moved on: kept in memory (the API shows it, and
		// it is written with the record's next change). Writing every
		// task count change of every job would cost the store a write per
		// job per check; a restart reads it again from the cluster.
		jb.f.mu.Lock()
		if j := jb.f.jobs[id]; j != nil && j.rec.Cluster == name && j.rec.ClusterJobId == clusterID {
			j.rec.Status = st
		}
		jb.f.mu.Unlock()
		return nil
	}
	return jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
		if rec.Cluster != name || rec.ClusterJobId != clusterID {
			return errSkip
		}
		// Whether tasks had started is judged on what was seen before the
		// cancel: the cancel itself ends never-started tasks KILLED.
		before := rec.Status
		rec.Status = st
		switch {
		case terminal(st.State):
			return jb.confirmGone(rec, before, name, "ended "+st.State.String()+" in cluster "+name)
		case rec.DispatchState == pelotonv1.DispatchState_DISPATCH_MOVING && started(st):
			rec.DispatchState = pelotonv1.DispatchState_DISPATCHED
			rec.Message = "cluster " + name + " answered again and tasks had started there: the job stays"
		}
		return nil
	})
}

// refusedCode says whether a cluster's answer to a create refuses the job
// for good: sending the same spec again would be refused the same way.
func refusedCode(code codes.Code) bool {
	return code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition || code == codes.AlreadyExists
}

// recordRefused ends job id, which cluster name refused (why): dispatch
// it elsewhere? The same spec would be refused for the same reason; say so.
func (jb *Jobs) recordRefused(ctx context.Context, id, name, why string) error {
	return jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
		if rec.ClusterJobId != "" || rec.Cluster != name {
			return errSkip
		}
		endAttempt(rec, "refused: "+why)
		rec.DispatchState = pelotonv1.DispatchState_DISPATCH_DONE
		rec.Message = fmt.Sprintf("cluster %s refused the job: %s", name, why)
		return nil
	})
}

// recordSent writes the id cluster name gave job id's create.
func (jb *Jobs) recordSent(ctx context.Context, id, name, clusterID string) error {
	err := jb.updateJob(ctx, id, func(rec *pelotonv1.FederatedJob) error {
		if rec.Cluster != name {
			return errSkip
		}
		rec.ClusterJobId = clusterID
		if n := len(rec.Attempts); n > 0 {
			rec.Attempts[n-1].ClusterJobId = clusterID
		}
		if rec.DispatchState == pelotonv1.DispatchState_DISPATCHED && !rec.Killed {
			rec.Message = ""
		}
		return nil
	})
	if err == nil {
		metrics.FederationJobs.WithLabelValues("sent").Inc()
	}
	return err
}

// confirmGone is what a job becomes once its copy in cluster name has
// ended: done, or (moving, and no task had started as of before, the last
// status seen before the copy ended) pending for another dispatch.
func (jb *Jobs) confirmGone(rec *pelotonv1.FederatedJob, before *pelotonv1.JobStatus, name, why string) error {
	if rec.DispatchState == pelotonv1.DispatchState_DISPATCH_MOVING && !rec.Killed && !started(before) {
		endAttempt(rec, "moved: cluster "+name+" was unreachable; its copy is confirmed gone ("+why+")")
		rec.DispatchState = pelotonv1.DispatchState_DISPATCH_PENDING
		rec.Cluster, rec.ClusterJobId, rec.Status = "", "", nil
		rec.Message = "waiting for dispatch after leaving cluster " + name
		defer jb.f.kickDispatch()
		return nil
	}
	endAttempt(rec, why)
	rec.DispatchState = pelotonv1.DispatchState_DISPATCH_DONE
	rec.Message = why
	metrics.FederationJobs.WithLabelValues("done").Inc()
	// What it held is free: a job waiting for its fair share may go now
	// rather than at the dispatcher's next tick.
	defer jb.f.kickDispatch()
	return nil
}

// attemptRequestID names the create of one dispatch attempt in its cluster.
func attemptRequestID(j *pelotonv1.FederatedJob) string {
	return "fed-" + j.Id + "-" + strconv.Itoa(len(j.Attempts))
}
