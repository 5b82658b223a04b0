package federation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/paging"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"github.com/peloton-sched/peloton/sla"
)

// Federated services. A federated service is one SERVICE job spec run in
// several clusters: at create the federation splits its instances over
// the clusters its placement names (split.Service) and records the split
// with the service, in one write. From then on each cluster's worker keeps
// that cluster's part as desired state, as it keeps the cluster's pools:
// it makes the part's job there (under a request id, so a create whose
// answer was lost is not repeated), and on every pass repairs what it
// finds otherwise - a job deleted or ended there is made again, a count or
// spec changed there is set back. A delete cancels and deletes every part
// and forgets the service once all are gone.
//
// What a part's job is given: the service's job spec with the part's
// instance count, the service's budget of unavailable instances split in
// proportion (split.Budget), and the label LabelFederatedService naming the
// service, so that an operator of the cluster can tell whose it is.

const serviceRequestKind requestid.Kind = "federated-service"

// LabelFederatedService is the label the federation puts on the job it
// makes in a cluster for a federated service; its value is the service id.
const LabelFederatedService = sla.GroupLabel

func serviceKey(id string) string { return "services/" + id }

// fedService is a federated service: its record as in etcd (with what the
// last looks at its clusters saw, kept in memory) and its revision.
type fedService struct {
	rec *pelotonv1.FederatedService
	rev int64
}

func (sv *Services) loadServices(ctx context.Context) error {
	kvs, err := sv.f.st.List(ctx, "services/")
	if err != nil {
		return err
	}
	recs := make([]*fedService, 0, len(kvs))
	for _, kv := range kvs {
		rec := &pelotonv1.FederatedService{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			if err := sv.f.quarantine(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		recs = append(recs, &fedService{rec: rec, rev: kv.Revision})
	}
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	for _, s := range recs {
		sv.f.services[s.rec.Id] = s
	}
	return nil
}

// CreateService records a federated service and its split over clusters.
// It answers once the service is recorded; each cluster's worker makes the
// cluster's part right after.
func (sv *Services) CreateService(ctx context.Context, spec *pelotonv1.FederatedServiceSpec, rqID string) (*pelotonv1.FederatedService, error) {
	if spec.GetJob() != nil && spec.Job.Type == pelotonv1.JobType_JOB_TYPE_UNSPECIFIED {
		spec = proto.Clone(spec).(*pelotonv1.FederatedServiceSpec)
		spec.Job.Type = pelotonv1.JobType_SERVICE
	}
	if err := validateServiceSpec(spec); err != nil {
		return nil, err
	}
	rq, err := requestid.New(serviceRequestKind, rqID, &pelotonv1.CreateFederatedServiceRequest{Spec: spec})
	if err != nil {
		return nil, err
	}
	now := sv.f.opts.Now()
	o, err := requestid.Lookup(ctx, sv.f.st, rq, now)
	if err != nil {
		return nil, err
	}
	if o.Done {
		return sv.GetService(o.Object)
	}
	clusters := sv.registeredClusters()
	parts, budgets, err := servicePartsAt(spec, clusters)
	if err != nil {
		return nil, err
	}
	covered, err := split.Shares(spec.Placement, clusters)
	if err != nil {
		return nil, err
	}
	overrides, base, err := sv.overridesFor(spec.Placement, spec.Job, parts, "spec.placement", "spec.job")
	if err != nil {
		return nil, err
	}
	if err := sv.checkFits(spec.Job, base, "spec.job"); err != nil {
		return nil, err
	}
	if err := validateRolloutSteps(spec.Rollout, sortedKeys(parts), "spec.rollout"); err != nil {
		return nil, err
	}
	id := newJobID()
	rec := &pelotonv1.FederatedService{Id: id, Spec: spec, CreateTime: timestamppb.New(now), SpecVersion: 1,
		Versions: []*pelotonv1.ServiceVersion{{Version: 1, Job: spec.Job, CreateTime: timestamppb.New(now),
			Overrides: overrides, Placement: spec.Placement}}, PlacedOn: sortedKeys(covered)}
	for _, name := range sortedKeys(parts) {
		rec.Clusters = append(rec.Clusters, &pelotonv1.ServiceCluster{Cluster: name, Desired: parts[name],
			MaxUnavailable: budgets[name], Generation: 1, SpecVersion: 1, Message: "making its job there"})
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		return nil, err
	}
	ops := []store.Op{store.Put(serviceKey(id), b, store.MustNotExist)}
	if rq.ID != "" {
		ops = append(ops, o.Ops(rq, id, now)...) // the request record and the service commit together
	}
	rev, err := sv.f.st.Txn(ctx, ops...)
	if err != nil {
		if o2, rerr := requestid.Recheck(ctx, sv.f.st, rq, now, err); rerr == nil && o2.Done {
			return sv.GetService(o2.Object)
		}
		return nil, apierr.Unavailable("record federated service: %v", err)
	}
	sv.f.mu.Lock()
	sv.f.services[id] = &fedService{rec: rec, rev: rev}
	for name := range parts {
		if m := sv.f.clusters[name]; m != nil {
			m.nudge()
		}
	}
	sv.f.mu.Unlock()
	sv.f.log.Info("federated service created", "service", id, "name", spec.Job.Name, "split", parts)
	metrics.FederationServices.WithLabelValues("created").Inc()
	return sv.GetService(id)
}

func validateServiceSpec(spec *pelotonv1.FederatedServiceSpec) error {
	if err := validateServiceJob(spec.GetJob(), "spec.job"); err != nil {
		return err
	}
	if spec.Job.Type == pelotonv1.JobType_DAEMON {
		if err := validateDaemonPlacement(spec.Placement, "spec.placement"); err != nil {
			return err
		}
	}
	return validateOverrides(spec.Placement, spec.Job, "spec.placement")
}

// servicePartsAt splits a new service over clusters: its instances and
// its budget of unavailable instances. A DAEMON service gets a part (of
// no fixed count: one instance per matching host there) in every cluster
// its placement selects, each with the DAEMON's whole budget: a daemon's
// budget is per host set, and each cluster's hosts are their own.
func servicePartsAt(spec *pelotonv1.FederatedServiceSpec, clusters []split.ServiceCluster) (map[string]uint32, map[string]uint32, error) {
	budget := max(spec.Job.GetSla().GetMaximumUnavailableInstances(), 1)
	if spec.Job.Type == pelotonv1.JobType_DAEMON {
		by, err := split.Shares(spec.Placement, clusters)
		if err != nil {
			return nil, nil, err
		}
		if min := spec.Placement.GetMinClusters(); uint32(len(by)) < min {
			return nil, nil, apierr.Invalid("spec.placement.minClusters", "%d, but the placement selects %d cluster(s) (%s)", min, len(by), strings.Join(sortedKeys(by), ", "))
		}
		parts, budgets := map[string]uint32{}, map[string]uint32{}
		for name := range by {
			parts[name], budgets[name] = 0, budget
		}
		return parts, budgets, nil
	}
	parts, err := split.Service(spec.Job.InstanceCount, spec.Placement, clusters)
	if err != nil {
		return nil, nil, err
	}
	return parts, split.Budget(budget, parts), nil
}

// validateServiceJob checks the job spec of a federated service; field
// names start with at (spec.job in a create, job in an update).
func validateServiceJob(job *pelotonv1.JobSpec, at string) error {
	switch {
	case job == nil:
		return apierr.Invalid(at, "required: the service to run")
	case job.Type != pelotonv1.JobType_SERVICE && job.Type != pelotonv1.JobType_DAEMON:
		return apierr.Invalid(at+".type", "a federated service is a SERVICE or DAEMON job, not %s (BATCH jobs go through fed job create)", job.Type)
	case job.Name == "":
		return apierr.Invalid(at+".name", "required")
	case job.Type == pelotonv1.JobType_DAEMON && job.InstanceCount != 0:
		return apierr.Invalid(at+".instanceCount", "must be 0 or unset for a DAEMON: it runs one instance on every matching host of each cluster it is placed in, got %d", job.InstanceCount)
	case job.Type == pelotonv1.JobType_SERVICE && job.InstanceCount == 0:
		return apierr.Invalid(at+".instanceCount", "must be > 0")
	case len(job.InstanceSpecs) > 0:
		return apierr.Invalid(at+".instanceSpecs", "per-instance overrides cannot follow instances across clusters (each cluster numbers its part from 0); give every instance the default spec")
	case job.Foreign != nil:
		return apierr.Invalid(at+".foreign", "set by Peloton only")
	}
	if _, ok := job.Labels[LabelFederatedService]; ok {
		return apierr.Invalid(at+".labels", "%s is set by the federation", LabelFederatedService)
	}
	if _, err := resmgr.NormalizePath(job.Pool, at+".pool"); err != nil {
		return err
	}
	if _, err := jobRequest(job, at); err != nil {
		return err
	}
	return nil
}

// checkFits refuses a service a part of which could never run in its
// cluster (refuseUnfitService). at is the job's path in the request.
func (sv *Services) checkFits(job *pelotonv1.JobSpec, parts map[string]uint32, at string) error {
	pool, err := resmgr.NormalizePath(job.Pool, at+".pool")
	if err != nil {
		return err
	}
	var names []string
	for _, name := range sortedKeys(parts) {
		if parts[name] > 0 || job.Type == pelotonv1.JobType_DAEMON {
			names = append(names, name)
		}
	}
	sv.f.mu.Lock()
	views, global := sv.f.fitViewsLocked(names, pool), sv.f.isGlobalLeafLocked(pool)
	sv.f.mu.Unlock()
	return refuseUnfitService(largestTask(job, at), pool, global, views, at)
}

// GetService returns a federated service with what its clusters last
// showed.
func (sv *Services) GetService(id string) (*pelotonv1.FederatedService, error) {
	if id == "" {
		return nil, apierr.Invalid("serviceId", "required")
	}
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	s := sv.f.services[id]
	if s == nil {
		return nil, apierr.NotFound("federated service %s does not exist", id)
	}
	return sv.serviceViewLocked(s), nil
}

// serviceViewLocked is a service as the API shows it: the totals, and each
// part's message says so when its cluster cannot be reached or is gone.
// Caller holds mu.
func (sv *Services) serviceViewLocked(s *fedService) *pelotonv1.FederatedService {
	out := proto.Clone(s.rec).(*pelotonv1.FederatedService)
	out.Version = uint64(s.rev)
	out.Desired, out.Running, out.Healthy, out.Updated = 0, 0, 0, 0
	for _, p := range out.Clusters {
		switch m := sv.f.clusters[p.Cluster]; {
		case m == nil:
			p.Message = "cluster " + p.Cluster + " is not registered; its part does not run"
			p.Running, p.Healthy, p.Updated, p.State = 0, 0, 0, pelotonv1.JobState_JOB_STATE_UNSPECIFIED
		case m.rec.Health == pelotonv1.ClusterState_CLUSTER_UNREACHABLE:
			p.Message = "cluster " + p.Cluster + " is unreachable; as of the last look: " + p.Message
		}
		p.Override = versionOverride(out, partTarget(out, p), p.Cluster)
		p.Overridden = overriddenFields(p.Override)
		out.Desired += p.Desired
		out.Running += p.Running
		out.Healthy += p.Healthy
		if partTarget(out, p) == out.SpecVersion {
			out.Updated += p.Updated
		}
	}
	if out.Deleting {
		out.Message = "deleting: removing its jobs from their clusters"
	}
	return out
}

// ListServices returns federated services, newest first, a page at a time.
func (sv *Services) ListServices(cluster string, pageSize uint32, token string) ([]*pelotonv1.FederatedService, string, error) {
	n, err := paging.Size(pageSize, "pageSize")
	if err != nil {
		return nil, "", err
	}
	var past func(*fedService) bool
	if token != "" {
		mark, err := paging.DecodeMark(token, "pageToken", "fedservices")
		if err != nil {
			return nil, "", err
		}
		past = func(s *fedService) bool { return mark.Passed(s.rec.CreateTime.AsTime().UnixNano(), s.rec.Id) }
	}
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	all := make([]*fedService, 0, len(sv.f.services))
	for _, s := range sv.f.services {
		if cluster == "" || partOf(s.rec, cluster) != nil {
			all = append(all, s)
		}
	}
	sortNewestFirst(all, func(s *fedService) *pelotonv1.FederatedService { return s.rec })
	page, next := paging.Cut(all, n, past, func(last *fedService) string {
		return paging.EncodeMark("fedservices", paging.Mark{Nanos: last.rec.CreateTime.AsTime().UnixNano(), ID: last.rec.Id})
	}, func(s *fedService) int { return proto.Size(s.rec) })
	out := make([]*pelotonv1.FederatedService, 0, len(page))
	for _, s := range page {
		out = append(out, sv.serviceViewLocked(s))
	}
	return out, next, nil
}

// DeleteService removes a federated service: its jobs are cancelled and
// deleted in every cluster, and the service is forgotten once they all
// are. Parts in clusters no longer registered are dropped at once.
func (sv *Services) DeleteService(ctx context.Context, id string) error {
	if _, err := sv.GetService(id); err != nil {
		return err
	}
	err := sv.updateService(ctx, id, func(rec *pelotonv1.FederatedService) error {
		rec.Deleting = true
		if r := rec.Rollout; rolloutActive(r) {
			r.State, r.EndTime = pelotonv1.RolloutState_ROLLOUT_ABORTED, timestamppb.New(sv.f.opts.Now())
			r.Message = "aborted: the service is being deleted"
		}
		sv.f.mu.Lock()
		kept := rec.Clusters[:0]
		for _, p := range rec.Clusters {
			if sv.f.clusters[p.Cluster] != nil {
				kept = append(kept, p)
			}
		}
		sv.f.mu.Unlock()
		rec.Clusters = kept
		return nil
	})
	if err != nil {
		return err
	}
	sv.f.mu.Lock()
	if s := sv.f.services[id]; s != nil {
		for _, p := range s.rec.Clusters {
			if m := sv.f.clusters[p.Cluster]; m != nil {
				m.nudge()
			}
		}
	}
	sv.f.mu.Unlock()
	sv.f.log.Info("federated service deleting", "service", id)
	return sv.forgetIfGone(ctx, id)
}

// forgetIfGone deletes the record of a deleting service that has no part
// left.
func (sv *Services) forgetIfGone(ctx context.Context, id string) error {
	sv.f.mu.Lock()
	s := sv.f.services[id]
	if s == nil || !s.rec.Deleting || len(s.rec.Clusters) > 0 {
		sv.f.mu.Unlock()
		return nil
	}
	rev := s.rev
	final := proto.Clone(s.rec).(*pelotonv1.FederatedService)
	sv.f.mu.Unlock()
	// Archive before delete: a delete that follows a failed archive
	// would lose the service's history. The collector's next pass tries
	// again (archive.go).
	if err := sv.f.archiveService(ctx, final); err != nil {
		sv.f.log.Warn("cannot archive a deleted federated service; it stays in etcd until it can be", "service", id, "err", err)
		return nil
	}
	if _, err := sv.f.st.Txn(ctx, store.Delete(serviceKey(id), rev)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil // written meanwhile: the next pass looks again
		}
		return apierr.Unavailable("delete federated service %s: %v", id, err)
	}
	sv.f.mu.Lock()
	if s := sv.f.services[id]; s != nil && s.rev == rev {
		delete(sv.f.services, id)
	}
	sv.f.mu.Unlock()
	sv.f.log.Info("federated service deleted", "service", id)
	metrics.FederationServices.WithLabelValues("deleted").Inc()
	return nil
}

func partOf(rec *pelotonv1.FederatedService, cluster string) *pelotonv1.ServiceCluster {
	for _, p := range rec.Clusters {
		if p.Cluster == cluster {
			return p
		}
	}
	return nil
}

// updateService changes a service's record with compare-and-swap,
// retrying a few times on a conflict with another writer (another
// cluster's worker): change is applied to the latest record each time.
func (sv *Services) updateService(ctx context.Context, id string, change func(*pelotonv1.FederatedService) error) error {
	_, _, err := updateRecord(ctx, sv.f, casRecord[*pelotonv1.FederatedService]{
		key: serviceKey(id), what: "federated service " + id,
		read: func() (*pelotonv1.FederatedService, int64, bool) {
			sv.f.mu.Lock()
			defer sv.f.mu.Unlock()
			s := sv.f.services[id]
			if s == nil {
				return nil, 0, false
			}
			return proto.Clone(s.rec).(*pelotonv1.FederatedService), s.rev, true
		},
		keep: func(rec *pelotonv1.FederatedService, rev int64) {
			sv.f.mu.Lock()
			defer sv.f.mu.Unlock()
			if s := sv.f.services[id]; s != nil {
				s.rec, s.rev = rec, rev
			}
		},
		fresh: func() *pelotonv1.FederatedService { return &pelotonv1.FederatedService{} },
	}, change)
	return err
}

// observePart keeps what a look at a part's cluster saw, in memory only:
// it changes with every look, and a restart looks again.
func (sv *Services) observePart(id, cluster string, see func(p *pelotonv1.ServiceCluster)) {
	sv.f.mu.Lock()
	defer sv.f.mu.Unlock()
	if s := sv.f.services[id]; s != nil {
		if p := partOf(s.rec, cluster); p != nil {
			see(p)
		}
	}
}

// syncServices looks after the parts of federated services in cluster
// name, which just answered its check.
func (sv *Services) syncServices(ctx context.Context, name string, m *member) {
	sv.f.mu.Lock()
	var ids []string
	for id, s := range sv.f.services {
		if partOf(s.rec, name) != nil {
			ids = append(ids, id)
		}
	}
	cli := m.cli
	sv.f.mu.Unlock()
	sort.Strings(ids)
	sem := make(chan struct{}, jobSyncConcurrency)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := sv.syncPart(ctx, name, cli, id); err != nil && !errors.Is(err, errSkip) && ctx.Err() == nil {
				sv.f.log.Warn("federated service: call to a cluster failed; retried next pass", "service", id, "cluster", name, "err", err)
				sv.observePart(id, name, func(p *pelotonv1.ServiceCluster) { p.Message = "last call failed: " + err.Error() })
			}
		}()
	}
	wg.Wait()
}

// partSpec is the job spec of a service's part in one cluster, as the part
// is now.
func partSpec(rec *pelotonv1.FederatedService, p *pelotonv1.ServiceCluster) *pelotonv1.JobSpec {
	return partSpecAt(rec, p.SpecVersion, p.Cluster, p.Desired, p.MaxUnavailable)
}

// partSpecAt is the job spec of a service's part in cluster at spec
// version v (with the cluster's override at v) with n instances and a
// budget of budget.
func partSpecAt(rec *pelotonv1.FederatedService, v uint64, cluster string, n, budget uint32) *pelotonv1.JobSpec {
	spec := proto.Clone(versionSpec(rec, v)).(*pelotonv1.JobSpec)
	applyOverride(spec, versionOverride(rec, v, cluster))
	spec.InstanceCount = n
	if spec.Sla == nil {
		spec.Sla = &pelotonv1.SlaSpec{}
	}
	spec.Sla.MaximumUnavailableInstances = budget
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelFederatedService] = rec.Id
	return spec
}

// versionSpec is the job spec of a service's version v (the current one
// if v is not kept).
func versionSpec(rec *pelotonv1.FederatedService, v uint64) *pelotonv1.JobSpec {
	for _, sv := range rec.Versions {
		if sv.Version == v {
			return sv.Job
		}
	}
	return rec.Spec.Job
}

// partRequestID names the create of generation gen of a service's job in a
// cluster.
func partRequestID(id, cluster string, gen uint32) string {
	return "fsvc-" + id + "-" + cluster + "-" + strconv.FormatUint(uint64(gen), 10)
}

// refused reports whether a cluster's answer is a refusal that a retry of
// the same call would get again.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists:
		return true
	}
	return false
}

// partSync is one pass over one service's part in one cluster: what
// syncPart read, and the calls its steps share.
type partSync struct {
	f    *Federation
	ctx  context.Context
	name string
	cli  clusterClient
	id   string
	rec  *pelotonv1.FederatedService
	p    *pelotonv1.ServiceCluster
}

// call bounds one call to the part's cluster.
func (ps *partSync) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(asFederation(ps.ctx, ps.id), ps.f.opts.CallTimeout)
}

// asFederation marks ctx's calls as the federation's keeping service id:
// a cluster refuses a scale or update of a service's job from anyone else
// (sla.FederationCallKey).
func asFederation(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, sla.FederationCallKey, id)
}

// setPart changes the stored part, unless it changed since it was read.
func (ps *partSync) setPart(change func(p *pelotonv1.ServiceCluster)) error {
	return ps.f.Services().updateService(ps.ctx, ps.id, func(cur *pelotonv1.FederatedService) error {
		q := partOf(cur, ps.name)
		if q == nil || q.Generation != ps.p.Generation || q.ClusterJobId != ps.p.ClusterJobId {
			return errSkip // changed since it was read; the next pass looks again
		}
		change(q)
		return nil
	})
}

// say sets the part's message.
func (ps *partSync) say(msg string) {
	ps.f.Services().observePart(ps.id, ps.name, func(q *pelotonv1.ServiceCluster) { q.Message = msg })
}

// leaving reports whether the part is to be removed: its service is
// deleted or it retires.
func (ps *partSync) leaving() bool { return ps.rec.Deleting || ps.p.Retiring }

// deleteJob deletes the part's job there; one already gone is no error.
func (ps *partSync) deleteJob(jobID string) error {
	cctx, cancel := ps.call()
	_, err := ps.cli.Jobs.DeleteJob(cctx, &pelotonv1.DeleteJobRequest{JobId: jobID})
	cancel()
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	return nil
}

// syncPart brings one service's part in cluster name to its desired state.
func (sv *Services) syncPart(ctx context.Context, name string, cli clusterClient, id string) error {
	sv.f.mu.Lock()
	s := sv.f.services[id]
	if s == nil || partOf(s.rec, name) == nil {
		sv.f.mu.Unlock()
		return errSkip
	}
	rec := proto.Clone(s.rec).(*pelotonv1.FederatedService)
	sv.f.mu.Unlock()
	ps := &partSync{f: sv.f, ctx: ctx, name: name, cli: cli, id: id, rec: rec, p: partOf(rec, name)}

	jobID := ps.p.ClusterJobId
	if jobID == "" {
		var done bool
		var err error
		if jobID, done, err = ps.create(); done || err != nil {
			return err
		}
	}

	cctx, cancel := ps.call()
	resp, err := cli.Jobs.GetJob(cctx, &pelotonv1.GetJobRequest{JobId: jobID})
	cancel()
	gone := status.Code(err) == codes.NotFound
	if err != nil && !gone {
		return err
	}
	if ps.leaving() {
		return ps.remove(jobID, resp, gone)
	}
	if gone || terminal(resp.Job.Status.State) {
		return ps.remake(jobID, resp, gone)
	}

	job := resp.Job
	st := job.Status
	sv.observePart(id, name, func(q *pelotonv1.ServiceCluster) {
		q.Running, q.State = st.TaskCounts["RUNNING"], st.State
		q.Healthy, q.Updated, q.SlaFallback = st.Healthy, st.Updated, st.SlaFallback
		q.Message = ""
	})
	if busy, err := sv.syncStep(ctx, name, cli, rec, ps.p, jobID, st); busy || err != nil {
		return err // a rollout's step changes the job: no drift to look for
	}
	if st.SpecVersion <= ps.p.ClusterSpecVersion {
		return ps.rescale(jobID, job)
	}
	return ps.setBack(jobID, st)
}

// create makes the part's job, which it has not got yet; during a delete
// too, since a create whose answer was lost may have made it (the request
// id answers with it then, and it is removed after). It returns the job's
// id, and whether this pass is done.
func (ps *partSync) create() (string, bool, error) {
	cctx, cancel := ps.call()
	resp, err := ps.cli.Jobs.CreateJob(cctx, &pelotonv1.CreateJobRequest{Spec: partSpec(ps.rec, ps.p), RequestId: partRequestID(ps.id, ps.name, ps.p.Generation)})
	cancel()
	if err != nil {
		if refused(err) {
			if ps.leaving() {
				return "", true, ps.f.Services().dropPart(ps.ctx, ps.id, ps.name, ps.p) // nothing there to remove
			}
			ps.say(fmt.Sprintf("cluster %s refuses the job: %s; tried again every check", ps.name, status.Convert(err).Message()))
			return "", true, nil
		}
		return "", true, err
	}
	jobID := resp.JobId
	if err := ps.setPart(func(q *pelotonv1.ServiceCluster) {
		q.ClusterJobId, q.ClusterSpecVersion, q.Message = jobID, 1, ""
	}); err != nil {
		return "", true, err
	}
	ps.p.ClusterJobId, ps.p.ClusterSpecVersion = jobID, 1
	metrics.FederationServices.WithLabelValues("part-created").Inc()
	// Its state is read at the next pass, unless it is to go at once.
	return jobID, !ps.leaving(), nil
}

// remove stops and deletes the part's job, whose GetJob answered resp (or
// NotFound: gone), and drops the part once the job is gone.
func (ps *partSync) remove(jobID string, resp *pelotonv1.GetJobResponse, gone bool) error {
	if gone {
		return ps.f.Services().dropPart(ps.ctx, ps.id, ps.name, ps.p)
	}
	st := resp.Job.Status
	if !terminal(st.State) {
		if st.State != pelotonv1.JobState_JOB_KILLING {
			cctx, cancel := ps.call()
			_, err := ps.cli.Jobs.CancelJob(cctx, &pelotonv1.CancelJobRequest{JobId: jobID})
			cancel()
			if err != nil && status.Code(err) != codes.NotFound {
				return err
			}
		}
		ps.say("stopping its job there")
		return nil
	}
	if err := ps.deleteJob(jobID); err != nil {
		return err
	}
	return ps.f.Services().dropPart(ps.ctx, ps.id, ps.name, ps.p)
}

// remake handles a part's job removed or stopped behind the federation's
// back: a stopped job is deleted, and either way the part is made again,
// under the next generation's request id.
func (ps *partSync) remake(jobID string, resp *pelotonv1.GetJobResponse, gone bool) error {
	why := "its job " + jobID + " was deleted there"
	if !gone {
		why = "its job " + jobID + " ended " + resp.Job.Status.State.String() + " there"
		if err := ps.deleteJob(jobID); err != nil {
			return err
		}
	}
	ps.f.log.Warn("federated service: part gone from its cluster; making it again", "service", ps.id, "cluster", ps.name, "why", why)
	metrics.FederationServices.WithLabelValues("part-repaired").Inc()
	return ps.setPart(func(q *pelotonv1.ServiceCluster) {
		q.ClusterJobId, q.ClusterSpecVersion = "", 0
		q.Generation++
		q.Message = why + "; making it again"
	})
}

// rescale handles a part's job as the federation left it (or a change of
// its own not yet seen): its count follows the part's, which failover
// changes. A DAEMON part has no count of its own.
func (ps *partSync) rescale(jobID string, job *pelotonv1.Job) error {
	st := job.Status
	if ps.rec.Spec.Job.Type == pelotonv1.JobType_DAEMON {
		return nil // its count there follows the cluster's hosts
	}
	if st.SpecVersion < ps.p.ClusterSpecVersion {
		return nil
	}
	if job.Spec.GetInstanceCount() == ps.p.Desired {
		if job.Spec.GetSla().GetMaximumUnavailableInstances() != ps.p.MaxUnavailable {
			return ps.rebudget(jobID, st)
		}
		return nil
	}
	cctx, cancel := ps.call()
	sc, err := ps.cli.Jobs.ScaleJob(cctx, &pelotonv1.ScaleJobRequest{JobId: jobID, InstanceCount: ps.p.Desired, Version: st.SpecVersion})
	cancel()
	if err != nil {
		if refused(err) {
			ps.say(fmt.Sprintf("scaling its job there to %d waits: %s", ps.p.Desired, status.Convert(err).Message()))
			return nil
		}
		return err
	}
	return ps.setPart(func(q *pelotonv1.ServiceCluster) { q.ClusterSpecVersion = sc.SpecVersion })
}

// rebudget gives the part's job the part's budget, which failover changed
// (rebudget in failover.go), with an update of the job's SLA alone: its
// instances run on untouched.
func (ps *partSync) rebudget(jobID string, st *pelotonv1.JobStatus) error {
	up, err := ps.updateToPart(jobID, st, fmt.Sprintf("giving its job there a budget of %d waits", ps.p.MaxUnavailable))
	if up == nil || err != nil {
		return err
	}
	return ps.setPart(func(q *pelotonv1.ServiceCluster) { q.ClusterSpecVersion = up.GetToVersion() })
}

// updateToPart updates the part's job there to the part's spec, from the
// job's version st.SpecVersion. A refusal is said on the part as waits
// plus why, and returns no update and no error: the next pass tries again.
func (ps *partSync) updateToPart(jobID string, st *pelotonv1.JobStatus, waits string) (*pelotonv1.Update, error) {
	cctx, cancel := ps.call()
	up, err := ps.cli.Updates.CreateUpdate(cctx, &pelotonv1.CreateUpdateRequest{JobId: jobID, Spec: partSpec(ps.rec, ps.p), JobVersion: st.SpecVersion})
	cancel()
	if err != nil {
		if refused(err) {
			ps.say(waits + ": " + status.Convert(err).Message())
			return nil, nil
		}
		return nil, err
	}
	return up.GetUpdate(), nil
}

// setBack handles a part's job someone changed there: it is set back to
// the part's spec with an update of its own, which the cluster rolls out
// under the part's budget.
func (ps *partSync) setBack(jobID string, st *pelotonv1.JobStatus) error {
	up, err := ps.updateToPart(jobID, st, fmt.Sprintf("its job there was changed (spec version %d); setting it back waits", st.SpecVersion))
	if up == nil || err != nil {
		return err
	}
	ps.f.log.Warn("federated service: part changed in its cluster; set back", "service", ps.id, "cluster", ps.name,
		"found", st.SpecVersion, "update", up.GetId())
	metrics.FederationServices.WithLabelValues("part-repaired").Inc()
	return ps.setPart(func(q *pelotonv1.ServiceCluster) {
		q.ClusterSpecVersion = up.GetToVersion()
		q.Message = fmt.Sprintf("its job there was changed (spec version %d); set back by update %s", st.SpecVersion, up.GetId())
	})
}

// partTarget is the service spec version part p's job is driven to: the
// rollout's while its step there goes forward or back, else the part's.
func partTarget(rec *pelotonv1.FederatedService, p *pelotonv1.ServiceCluster) uint64 {
	switch s := stepFor(rec, p.Cluster); s.GetState() {
	case pelotonv1.RolloutStepState_STEP_UPDATING:
		return rec.Rollout.ToVersion
	case pelotonv1.RolloutStepState_STEP_ROLLING_BACK:
		return rec.Rollout.FromVersion
	}
	return p.SpecVersion
}

// dropPart removes a deleting service's part whose job is gone, and the
// service once no part is left.
func (sv *Services) dropPart(ctx context.Context, id, name string, p *pelotonv1.ServiceCluster) error {
	err := sv.updateService(ctx, id, func(cur *pelotonv1.FederatedService) error {
		kept := cur.Clusters[:0]
		for _, q := range cur.Clusters {
			if q.Cluster != name || q.Generation != p.Generation {
				kept = append(kept, q)
			}
		}
		cur.Clusters = kept
		return nil
	})
	if err != nil {
		return err
	}
	return sv.forgetIfGone(ctx, id)
}
