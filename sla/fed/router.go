// Package fed is the SLA evaluator of a cluster stack that belongs to a
// federation: the disruptions of a federated service's job (a job whose
// sla.JobSLA.Group is set) are asked of the federation's global evaluator,
// so that the service's budget holds across all its clusters; every other
// job is decided by the in-process evaluator, as in a stack on its own.
//
// Fail-safe: when the federation cannot be reached (or does not know the
// job yet), a federated job is decided locally, on its own budget there,
// which is its cluster's share of the service's budget (the federation
// splits it, rounded down, so the shares never add up to more than the
// budget). While that lasts the stack logs it once, sets
// peloton_sla_federation_fallback to 1 and says so in the job's status
// (sla.FallbackReporter), and only one call per ProbeEvery goes to the
// federation to find out whether it is back. Grants of the federation
// carry the prefix "fed:" so their release and renewal go back to it.
// The grants made here meanwhile are in every report to the federation
// while they last (ReportUnavailableRequest.held), the first one sent as
// soon as it answers again: from then on it counts them.
package fed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
)

const grantPrefix = "fed:"

// Router implements sla.Evaluator over a local evaluator and the
// federation's global one.
type Router struct {
	local   sla.Evaluator
	remote  pelotonv1.GlobalSlaServiceClient
	cluster string
	log     *slog.Logger

	// remoteTimeout bounds each call to the federation; probeEvery is how
	// often, while falling back, a call is let through to see whether it
	// answers again (see ask).
	remoteTimeout time.Duration
	probeEvery    time.Duration

	mu sync.Mutex
	// groups: the federated jobs, by job id, as SetJob told.
	groups map[string]string
	// fallback: the federation was unreachable at the last call.
	fallback bool
	// probed: when a call last went to the federation while falling back.
	probed time.Time
	// reports: each federated job's last report, sent again by Run.
	reports map[string][]uint32
	// localGrants: the grants this cluster made on its own share for
	// federated jobs, by grant id, until released or expired. Every
	// report carries the instances they hold, so that a federation that
	// comes back counts them from its first report on.
	localGrants map[string]localGrant
	// kick wakes Run to report at once (the federation answers again).
	kick chan struct{}
}

// localGrant is a grant of the local evaluator for a federated job.
type localGrant struct {
	job       string
	instances []uint32
	expires   time.Time
}

// New routes federated jobs of cluster to remote and the rest to local.
// remote may be nil until SetRemote: federated jobs are decided locally
// meanwhile.
func New(local sla.Evaluator, remote pelotonv1.GlobalSlaServiceClient, cluster string, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Router{local: local, remote: remote, cluster: cluster, log: log.With("component", "fedsla"),
		remoteTimeout: RemoteTimeout, probeEvery: ProbeEvery,
		groups: map[string]string{}, reports: map[string][]uint32{}, localGrants: map[string]localGrant{}, kick: make(chan struct{}, 1)}
}

const (
	// RemoteTimeout bounds one call to the federation's evaluator. Its
	// decisions take milliseconds (a grant's etcd write); one that takes
	// seconds is as good as gone, and the disruption waiting on it is
	// better decided on the cluster's share.
	RemoteTimeout = 2 * time.Second
	// ProbeEvery is how often, while the federation cannot be reached, a
	// decision or report is sent to it anyway to find out whether it is
	// back; the others are decided locally at once instead of each
	// waiting out RemoteTimeout against a federation that is gone.
	ProbeEvery = 5 * time.Second
)

// ask reports whether a call for a federated job goes to the federation:
// always while it answers; while falling back, once per probeEvery.
func (r *Router) ask() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fallback {
		return true
	}
	if now := time.Now(); now.Sub(r.probed) >= r.probeEvery {
		r.probed = now
		return true
	}
	return false
}

// SetRemote sets the federation's evaluator (once its address is known).
func (r *Router) SetRemote(remote pelotonv1.GlobalSlaServiceClient) {
	r.mu.Lock()
	r.remote = remote
	r.mu.Unlock()
}

// target is the federation's evaluator for a federated job, or nil (the
// job is not federated, or no federation is known yet).
func (r *Router) target(jobID string) pelotonv1.GlobalSlaServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups[jobID] == "" {
		return nil
	}
	return r.remote
}

func (r *Router) remoteClient() pelotonv1.GlobalSlaServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.remote
}

// reportEvery is how often the federated jobs' reports are sent again: the
// federation keeps them in memory, so one that restarted learns them
// within this.
const reportEvery = 10 * time.Second

// Run sends the federated jobs' last reports again every reportEvery
// until ctx ends.
func (r *Router) Run(ctx context.Context) {
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
		r.mu.Lock()
		remote := r.remote
		again := make(map[string][]uint32, len(r.reports))
		for id, down := range r.reports {
			again[id] = down
		}
		for _, g := range r.localGrants {
			if _, ok := again[g.job]; !ok && r.groups[g.job] != "" {
				again[g.job] = nil
			}
		}
		r.mu.Unlock()
		if remote == nil {
			continue
		}
		for id, down := range again {
			cctx, cancel := context.WithTimeout(ctx, r.remoteTimeout)
			_, err := remote.ReportUnavailable(cctx, &pelotonv1.ReportUnavailableRequest{Cluster: r.cluster, JobId: id, Instances: down, Held: r.held(id)})
			cancel()
			// A report is also the probe that ends (or starts) a
			// fallback while no disruption is asked for, so that the
			// jobs' status says the truth within reportEvery.
			r.observe(err)
			if err != nil {
				break // the next round tries again
			}
		}
	}
}

// observe records what a call to the federation said of its reachability:
// answered (any answer), or unreachable. Other failures say nothing.
func (r *Router) observe(err error) {
	switch {
	case err == nil:
		r.setFallback(false, nil)
	case unreachable(err):
		r.setFallback(true, err)
	}
}

// InFallback implements sla.FallbackReporter: a federated job is decided
// on its cluster's share while the federation's evaluator is unreachable.
func (r *Router) InFallback(jobID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fallback && r.groups[jobID] != ""
}

// unreachable reports whether err says the federation could not answer
// (rather than answered no).
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// setFallback records whether decisions fall back to the local share.
func (r *Router) setFallback(on bool, why error) {
	r.mu.Lock()
	was := r.fallback
	r.fallback = on
	r.mu.Unlock()
	switch {
	case on && !was:
		r.log.Warn("the federation's SLA evaluator cannot be reached: federated services' disruptions are decided on this cluster's share of their budgets", "err", why)
		metrics.SLAFallback.Set(1)
	case !on && was:
		r.log.Info("the federation's SLA evaluator answers again: federated services' disruptions ask it")
		metrics.SLAFallback.Set(0)
		// What was granted here meanwhile is reported now, not at the
		// next round.
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// held is the instances of job under local grants that still last,
// sorted.
func (r *Router) held(job string) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	set := map[uint32]bool{}
	for id, g := range r.localGrants {
		switch {
		case !now.Before(g.expires):
			delete(r.localGrants, id)
		case g.job == job:
			for _, i := range g.instances {
				set[i] = true
			}
		}
	}
	out := make([]uint32, 0, len(set))
	for i := range set {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// requestLocal asks the local evaluator, and remembers a grant it makes
// for a federated job (see localGrants).
func (r *Router) requestLocal(ctx context.Context, req sla.Request) (sla.Grant, error) {
	g, err := r.local.Request(ctx, req)
	if err != nil || len(g.Instances) == 0 {
		return g, err
	}
	r.mu.Lock()
	if r.groups[req.JobID] != "" {
		r.localGrants[g.ID] = localGrant{job: req.JobID, instances: append([]uint32(nil), g.Instances...), expires: g.Expires}
	}
	r.mu.Unlock()
	return g, nil
}

// Request implements sla.Evaluator.
func (r *Router) Request(ctx context.Context, req sla.Request) (sla.Grant, error) {
	remote := r.target(req.JobID)
	if remote == nil || !r.ask() {
		return r.requestLocal(ctx, req)
	}
	ttl := uint32(max(1, (req.TTL+time.Second-1)/time.Second))
	cctx, cancel := context.WithTimeout(ctx, r.remoteTimeout)
	resp, err := remote.RequestDisruption(cctx, &pelotonv1.RequestDisruptionRequest{Cluster: r.cluster, JobId: req.JobID,
		Instances: req.Instances, Holder: req.Holder, Reason: req.Reason, TtlSeconds: ttl, Partial: req.Partial})
	cancel()
	switch {
	case err == nil:
		r.setFallback(false, nil)
		return sla.Grant{ID: grantPrefix + resp.GrantId, JobID: req.JobID, Instances: resp.Instances, Holder: req.Holder,
			Reason: req.Reason, Expires: resp.Expires.AsTime()}, nil
	case status.Code(err) == codes.FailedPrecondition:
		r.setFallback(false, nil)
		msg := status.Convert(err).Message()
		return sla.Grant{}, &sla.RefusedError{JobID: req.JobID, Requested: len(req.Instances), Reason: strings.TrimPrefix(msg, "SLA: ")}
	case status.Code(err) == codes.NotFound:
		// Not a part the federation knows (yet): this cluster decides.
		return r.requestLocal(ctx, req)
	case unreachable(err) && ctx.Err() == nil:
		r.setFallback(true, err)
		return r.requestLocal(ctx, req)
	}
	return sla.Grant{}, fmt.Errorf("federation SLA evaluator: %w", err)
}

// Release implements sla.Evaluator.
func (r *Router) Release(ctx context.Context, grantID string) error {
	id, ok := strings.CutPrefix(grantID, grantPrefix)
	if !ok {
		r.mu.Lock()
		delete(r.localGrants, grantID)
		r.mu.Unlock()
		return r.local.Release(ctx, grantID)
	}
	remote := r.remoteClient()
	if remote == nil {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	}
	// With the federation away, its grant is over as far as this cluster
	// is concerned: the federation lets the lease run out by itself, and
	// counts the instance down until then (the safe side). A holder that
	// waited for the release instead would hold up its update or drain
	// for as long as the federation is away.
	if !r.ask() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.remoteTimeout)
	defer cancel()
	_, err := remote.ReleaseDisruption(cctx, &pelotonv1.ReleaseDisruptionRequest{GrantId: id})
	r.observe(err)
	switch {
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	case err != nil && unreachable(err) && ctx.Err() == nil:
		return nil
	}
	return err
}

// Renew implements sla.Evaluator.
func (r *Router) Renew(ctx context.Context, grantID string, ttl time.Duration) error {
	id, ok := strings.CutPrefix(grantID, grantPrefix)
	if !ok {
		if err := r.local.Renew(ctx, grantID, ttl); err != nil {
			return err
		}
		r.mu.Lock()
		if g, ok := r.localGrants[grantID]; ok {
			g.expires = time.Now().Add(ttl)
			r.localGrants[grantID] = g
		}
		r.mu.Unlock()
		return nil
	}
	remote := r.remoteClient()
	if remote == nil {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	}
	// With the federation away its lease cannot be extended: the holder
	// is told it lost it, and asks again, which this cluster then decides
	// on its share.
	if !r.ask() {
		return fmt.Errorf("grant %s: the federation cannot be reached: %w", grantID, sla.ErrUnknownGrant)
	}
	cctx, cancel := context.WithTimeout(ctx, r.remoteTimeout)
	defer cancel()
	_, err := remote.RenewDisruption(cctx, &pelotonv1.RenewDisruptionRequest{GrantId: id, TtlSeconds: uint32(max(1, (ttl+time.Second-1)/time.Second))})
	r.observe(err)
	switch {
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	case err != nil && unreachable(err) && ctx.Err() == nil:
		return fmt.Errorf("grant %s: the federation cannot be reached: %w", grantID, sla.ErrUnknownGrant)
	}
	return err
}

// SetJob implements sla.Evaluator: the local evaluator always knows the
// job (it decides when the federation cannot).
func (r *Router) SetJob(ctx context.Context, job sla.JobSLA) error {
	r.mu.Lock()
	if job.Group != "" {
		r.groups[job.JobID] = job.Group
	} else {
		delete(r.groups, job.JobID)
	}
	r.mu.Unlock()
	return r.local.SetJob(ctx, job)
}

// RemoveJob implements sla.Evaluator.
func (r *Router) RemoveJob(ctx context.Context, jobID string) error {
	r.mu.Lock()
	delete(r.groups, jobID)
	delete(r.reports, jobID)
	for id, g := range r.localGrants {
		if g.job == jobID {
			delete(r.localGrants, id)
		}
	}
	r.mu.Unlock()
	return r.local.RemoveJob(ctx, jobID)
}

// ReportAvailability implements sla.Evaluator: both evaluators hear it. A
// report the federation did not get is an error, so that jobmgr sends it
// again later.
func (r *Router) ReportAvailability(ctx context.Context, jobID string, unavailable []uint32) error {
	if err := r.local.ReportAvailability(ctx, jobID, unavailable); err != nil {
		return err
	}
	r.mu.Lock()
	if r.groups[jobID] != "" {
		r.reports[jobID] = append([]uint32(nil), unavailable...)
	}
	r.mu.Unlock()
	remote := r.target(jobID)
	if remote == nil {
		return nil
	}
	if !r.ask() {
		// Kept in reports: Run sends it once the federation answers.
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.remoteTimeout)
	_, err := remote.ReportUnavailable(cctx, &pelotonv1.ReportUnavailableRequest{Cluster: r.cluster, JobId: jobID, Instances: unavailable, Held: r.held(jobID)})
	cancel()
	r.observe(err)
	if err != nil {
		return fmt.Errorf("report to the federation's SLA evaluator: %w", err)
	}
	return nil
}

// Status implements sla.Evaluator: the local view.
func (r *Router) Status(ctx context.Context, jobID string) (sla.JobStatus, error) {
	return r.local.Status(ctx, jobID)
}

var (
	_ sla.Evaluator        = (*Router)(nil)
	_ sla.FallbackReporter = (*Router)(nil)
)
