package federation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The global SLA evaluator. Cluster stacks started with --federation ask
// it (through sla/fed) for every voluntary disruption of an
// instance of a federated service's job: the service's budget
// (job.sla.maximumUnavailableInstances) then bounds the instances down
// over all its clusters, counted as the union of what each cluster
// reports down for involuntary reasons and what live grants hold.
//
// Grants are leases kept in etcd (slagrants/<id>), written before they are
// answered, so a restart or a new leader knows them; reports are kept in
// memory and sent again by the clusters (a cluster re-reports after any
// failed call). An instance is (cluster, instance id in its job there).

const slaGrantPrefix = "slagrants/"

type instKey struct {
	cluster string
	inst    uint32
}

// globalSLA is the evaluator's state. Guarded by Federation.mu.
type globalSLA struct {
	loaded bool
	grants map[string]*pelotonv1.SlaGrant
	// down is what each (cluster, job) reported down.
	down map[string]map[uint32]bool // key: cluster + "/" + job
	// held is what each (cluster, job) reported held by grants it made on
	// its own share while it could not reach the federation.
	held map[string]map[uint32]bool // key: cluster + "/" + job
}

func downKey(cluster, job string) string { return cluster + "/" + job }

func (sl *SLA) loadGrants(ctx context.Context) error {
	kvs, err := sl.f.st.List(ctx, slaGrantPrefix)
	if err != nil {
		return err
	}
	grants := map[string]*pelotonv1.SlaGrant{}
	for _, kv := range kvs {
		g := &pelotonv1.SlaGrant{}
		if err := proto.Unmarshal(kv.Value, g); err != nil {
			if err := sl.f.quarantine(ctx, kv, err); err != nil {
				return err
			}
			continue
		}
		grants[g.Id] = g
	}
	sl.f.mu.Lock()
	defer sl.f.mu.Unlock()
	sl.f.sla.grants = grants
	sl.f.sla.down = map[string]map[uint32]bool{}
	sl.f.sla.held = map[string]map[uint32]bool{}
	sl.f.sla.loaded = true
	return nil
}

// serviceOfJobLocked finds the federated service whose part in cluster is
// job. Caller holds mu.
func (sl *SLA) serviceOfJobLocked(cluster, job string) *fedService {
	for _, s := range sl.f.services {
		if p := partOf(s.rec, cluster); p != nil && p.ClusterJobId == job && !s.rec.Deleting {
			return s
		}
	}
	return nil
}

// expireGrantsLocked forgets grants past their expiry (their records are
// deleted in the background; a delete Close cuts short leaves a record
// that the next Start loads and expires again). Caller holds mu.
func (sl *SLA) expireGrantsLocked(now time.Time) {
	for id, g := range sl.f.sla.grants {
		if !now.Before(g.Expires.AsTime()) {
			delete(sl.f.sla.grants, id)
			sl.f.goLocked(func(ctx context.Context) {
				_, _ = sl.f.st.Txn(ctx, store.Delete(slaGrantPrefix+id, store.AnyRevision))
			})
		}
	}
}

// unavailableLocked is the set of a service's instances down or held, with
// who holds each held one. Caller holds mu.
func (sl *SLA) unavailableLocked(s *fedService) (map[instKey]string, map[string]int) {
	out := map[instKey]string{}
	perCluster := map[string]int{}
	daemon := s.rec.Spec.Job.GetType() == pelotonv1.JobType_DAEMON // no count: every slot is an instance
	for _, p := range s.rec.Clusters {
		key := downKey(p.Cluster, p.ClusterJobId)
		for i := range sl.f.sla.down[key] {
			if i < p.Desired || daemon {
				out[instKey{p.Cluster, i}] = ""
			}
		}
		for i := range sl.f.sla.held[key] {
			if _, ok := out[instKey{p.Cluster, i}]; !ok && (i < p.Desired || daemon) {
				out[instKey{p.Cluster, i}] = "cluster " + p.Cluster + " (granted on its own share while the federation was away)"
			}
		}
	}
	for _, g := range sl.f.sla.grants {
		if g.ServiceId != s.rec.Id {
			continue
		}
		for _, i := range g.Instances {
			k := instKey{g.Cluster, i}
			if h, ok := out[k]; !ok || h == "" {
				out[k] = g.Holder
			}
		}
	}
	for k := range out {
		perCluster[k.cluster]++
	}
	return out, perCluster
}

func breakdown(perCluster map[string]int) string {
	var parts []string
	for _, c := range sortedKeys(perCluster) {
		parts = append(parts, fmt.Sprintf("%s: %d", c, perCluster[c]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// RequestDisruption grants req's instances if the service's budget allows
// over all its clusters (see above).
func (sl *SLA) RequestDisruption(ctx context.Context, req *pelotonv1.RequestDisruptionRequest) (*pelotonv1.RequestDisruptionResponse, error) {
	switch {
	case req.Cluster == "":
		return nil, apierr.Invalid("cluster", "required")
	case req.JobId == "":
		return nil, apierr.Invalid("jobId", "required")
	case len(req.Instances) == 0:
		return nil, apierr.Invalid("instances", "at least one")
	case req.Holder == "":
		return nil, apierr.Invalid("holder", "required")
	case req.TtlSeconds == 0:
		return nil, apierr.Invalid("ttlSeconds", "must be > 0")
	}
	start := time.Now()
	now := sl.f.opts.Now()
	sl.f.mu.Lock()
	if !sl.f.sla.loaded {
		sl.f.mu.Unlock()
		return nil, apierr.Unavailable("the global SLA evaluator is starting")
	}
	sl.expireGrantsLocked(now)
	s := sl.serviceOfJobLocked(req.Cluster, req.JobId)
	if s == nil {
		sl.f.mu.Unlock()
		return nil, apierr.NotFound("job %s of cluster %s is no part of a federated service", req.JobId, req.Cluster)
	}
	budget := int(max(s.rec.Spec.Job.GetSla().GetMaximumUnavailableInstances(), 1))
	unavail, perCluster := sl.unavailableLocked(s)
	// A DAEMON's budget is its own in each cluster (each runs on its own
	// hosts); a SERVICE's is one over all its clusters.
	daemon := s.rec.Spec.Job.GetType() == pelotonv1.JobType_DAEMON
	used := func() int {
		if daemon {
			return perCluster[req.Cluster]
		}
		return len(unavail)
	}
	var granted []uint32
	var refusal string
	seen := map[uint32]bool{}
	for _, i := range req.Instances {
		if seen[i] {
			continue
		}
		k := instKey{req.Cluster, i}
		h, down := unavail[k]
		switch {
		case down && h != "" && h != req.Holder:
			refusal = fmt.Sprintf("instance %d in cluster %s is held by %s", i, req.Cluster, h)
		case !down && daemon && used()+1 > budget:
			refusal = fmt.Sprintf("%d of its budget of %d instances are unavailable in cluster %s (a DAEMON's budget is per cluster)", used(), budget, req.Cluster)
		case !down && used()+1 > budget:
			refusal = fmt.Sprintf("%d of its budget of %d instances are unavailable across its clusters (%s)", len(unavail), budget, breakdown(perCluster))
		}
		if refusal != "" {
			break
		}
		seen[i] = true
		granted = append(granted, i)
		if !down {
			unavail[k] = req.Holder
			perCluster[req.Cluster]++
		}
	}
	if refusal != "" && (!req.Partial || len(granted) == 0) {
		sl.f.mu.Unlock()
		metrics.FederationSLA.WithLabelValues("refused").Inc()
		return nil, apierr.FailedPrecondition("SLA: federated service %s: %s", s.rec.Id, refusal)
	}
	g := &pelotonv1.SlaGrant{Id: grantID(), ServiceId: s.rec.Id, Cluster: req.Cluster, JobId: req.JobId, Instances: granted,
		Holder: req.Holder, Expires: timestamppb.New(now.Add(time.Duration(req.TtlSeconds) * time.Second))}
	// Held in memory at once, so a concurrent request counts it; written
	// before it is answered, so a restart knows it.
	sl.f.sla.grants[g.Id] = g
	sl.f.mu.Unlock()
	forget := func() {
		sl.f.mu.Lock()
		delete(sl.f.sla.grants, g.Id)
		sl.f.mu.Unlock()
	}
	b, err := proto.Marshal(g)
	if err != nil {
		// The request's own text cannot be recorded (not UTF-8; the
		// cluster and job were found, so it is the holder): nothing was
		// written, and asking again fails the same way.
		forget()
		return nil, apierr.Invalid("holder", "the grant cannot be recorded: %v", err)
	}
	if _, err := sl.f.st.Txn(ctx, store.Put(slaGrantPrefix+g.Id, b, store.MustNotExist)); err != nil {
		forget()
		return nil, apierr.Unavailable("record the grant: %v", err)
	}
	metrics.FederationSLA.WithLabelValues("granted").Inc()
	metrics.FederationSLALatency.Observe(time.Since(start).Seconds())
	return &pelotonv1.RequestDisruptionResponse{GrantId: g.Id, Instances: granted, Expires: g.Expires}, nil
}

func grantID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ReleaseDisruption ends a grant.
func (sl *SLA) ReleaseDisruption(ctx context.Context, id string) error {
	sl.f.mu.Lock()
	sl.expireGrantsLocked(sl.f.opts.Now())
	_, ok := sl.f.sla.grants[id]
	delete(sl.f.sla.grants, id)
	sl.f.mu.Unlock()
	if !ok {
		return apierr.NotFound("grant %s is unknown or expired", id)
	}
	if _, err := sl.f.st.Txn(ctx, store.Delete(slaGrantPrefix+id, store.AnyRevision)); err != nil {
		return apierr.Unavailable("delete the grant: %v", err)
	}
	return nil
}

// RenewDisruption extends a live grant.
func (sl *SLA) RenewDisruption(ctx context.Context, id string, ttl time.Duration) error {
	if ttl <= 0 {
		return apierr.Invalid("ttlSeconds", "must be > 0")
	}
	sl.f.mu.Lock()
	sl.expireGrantsLocked(sl.f.opts.Now())
	g := sl.f.sla.grants[id]
	if g == nil {
		sl.f.mu.Unlock()
		return apierr.NotFound("grant %s is unknown or expired", id)
	}
	g = proto.Clone(g).(*pelotonv1.SlaGrant)
	g.Expires = timestamppb.New(sl.f.opts.Now().Add(ttl))
	sl.f.sla.grants[id] = g
	sl.f.mu.Unlock()
	b, err := proto.Marshal(g)
	if err != nil {
		return fmt.Errorf("federation: encode grant %s: %w", id, err)
	}
	if _, err := sl.f.st.Txn(ctx, store.Put(slaGrantPrefix+id, b, store.AnyRevision)); err != nil {
		return apierr.Unavailable("renew the grant: %v", err)
	}
	return nil
}

// ReportUnavailable replaces what a cluster's job has down, and what
// grants the cluster made on its own share hold.
func (sl *SLA) ReportUnavailable(cluster, job string, instances, held []uint32) {
	sl.f.mu.Lock()
	defer sl.f.mu.Unlock()
	replaceSet(sl.f.sla.down, downKey(cluster, job), instances)
	replaceSet(sl.f.sla.held, downKey(cluster, job), held)
}

// replaceSet sets m[key] to the set of instances, or deletes it for none.
func replaceSet(m map[string]map[uint32]bool, key string, instances []uint32) {
	if len(instances) == 0 {
		delete(m, key)
		return
	}
	set := make(map[uint32]bool, len(instances))
	for _, i := range instances {
		set[i] = true
	}
	m[key] = set
}

// SLAView is a federated service's budget use across its clusters now.
func (sl *SLA) SLAView(id string) (unavailable int, perCluster map[string]int, err error) {
	sl.f.mu.Lock()
	defer sl.f.mu.Unlock()
	s := sl.f.services[id]
	if s == nil {
		return 0, nil, apierr.NotFound("federated service %s does not exist", id)
	}
	sl.expireGrantsLocked(sl.f.opts.Now())
	u, per := sl.unavailableLocked(s)
	return len(u), per, nil
}
