// Package fedsla is the SLA evaluator of a cluster stack that belongs to a
// federation: the disruptions of a federated service's job (a job whose
// sla.JobSLA.Group is set) are asked of the federation's global evaluator,
// so that the service's budget holds across all its clusters; every other
// job is decided by the in-process evaluator, as in a stack on its own.
//
// Fail-safe: when the federation cannot be reached (or does not know the
// job yet), a federated job is decided locally, on its own budget there,
// which is its cluster's share of the service's budget (the federation
// splits it so). While that lasts the stack logs it once and sets
// peloton_sla_federation_fallback to 1. Grants of the federation carry the
// prefix "fed:" so their release and renewal go back to it.
package fedsla

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/sla"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

const grantPrefix = "fed:"

// Router implements sla.Evaluator over a local evaluator and the
// federation's global one.
type Router struct {
	local   sla.Evaluator
	remote  pelotonv1.GlobalSlaServiceClient
	cluster string
	log     *slog.Logger

	mu sync.Mutex
	// groups: the federated jobs, by job id, as SetJob told.
	groups map[string]string
	// fallback: the federation was unreachable at the last call.
	fallback bool
	// reports: each federated job's last report, sent again by Run.
	reports map[string][]uint32
}

// New routes federated jobs of cluster to remote and the rest to local.
// remote may be nil until SetRemote: federated jobs are decided locally
// meanwhile.
func New(local sla.Evaluator, remote pelotonv1.GlobalSlaServiceClient, cluster string, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Router{local: local, remote: remote, cluster: cluster, log: log.With("component", "fedsla"),
		groups: map[string]string{}, reports: map[string][]uint32{}}
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
		}
		r.mu.Lock()
		remote := r.remote
		again := make(map[string][]uint32, len(r.reports))
		for id, down := range r.reports {
			again[id] = down
		}
		r.mu.Unlock()
		if remote == nil {
			continue
		}
		for id, down := range again {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := remote.ReportUnavailable(cctx, &pelotonv1.ReportUnavailableRequest{Cluster: r.cluster, JobId: id, Instances: down})
			cancel()
			if err != nil {
				break // the next round tries again
			}
		}
	}
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
	}
}

// Request implements sla.Evaluator.
func (r *Router) Request(ctx context.Context, req sla.Request) (sla.Grant, error) {
	remote := r.target(req.JobID)
	if remote == nil {
		return r.local.Request(ctx, req)
	}
	ttl := uint32(max(1, (req.TTL+time.Second-1)/time.Second))
	resp, err := remote.RequestDisruption(ctx, &pelotonv1.RequestDisruptionRequest{Cluster: r.cluster, JobId: req.JobID,
		Instances: req.Instances, Holder: req.Holder, Reason: req.Reason, TtlSeconds: ttl, Partial: req.Partial})
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
		return r.local.Request(ctx, req)
	case unreachable(err):
		r.setFallback(true, err)
		return r.local.Request(ctx, req)
	}
	return sla.Grant{}, fmt.Errorf("federation SLA evaluator: %w", err)
}

// Release implements sla.Evaluator.
func (r *Router) Release(ctx context.Context, grantID string) error {
	id, ok := strings.CutPrefix(grantID, grantPrefix)
	if !ok {
		return r.local.Release(ctx, grantID)
	}
	remote := r.remoteClient()
	if remote == nil {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	}
	_, err := remote.ReleaseDisruption(ctx, &pelotonv1.ReleaseDisruptionRequest{GrantId: id})
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	}
	return err
}

// Renew implements sla.Evaluator.
func (r *Router) Renew(ctx context.Context, grantID string, ttl time.Duration) error {
	id, ok := strings.CutPrefix(grantID, grantPrefix)
	if !ok {
		return r.local.Renew(ctx, grantID, ttl)
	}
	remote := r.remoteClient()
	if remote == nil {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
	}
	_, err := remote.RenewDisruption(ctx, &pelotonv1.RenewDisruptionRequest{GrantId: id, TtlSeconds: uint32(max(1, (ttl+time.Second-1)/time.Second))})
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("grant %s: %w", grantID, sla.ErrUnknownGrant)
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
	_, err := remote.ReportUnavailable(ctx, &pelotonv1.ReportUnavailableRequest{Cluster: r.cluster, JobId: jobID, Instances: unavailable})
	if err != nil {
		return fmt.Errorf("report to the federation's SLA evaluator: %w", err)
	}
	return nil
}

// Status implements sla.Evaluator: the local view.
func (r *Router) Status(ctx context.Context, jobID string) (sla.JobStatus, error) {
	return r.local.Status(ctx, jobID)
}

var _ sla.Evaluator = (*Router)(nil)
