package api

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/sla"
)

// SetFederationCheck sets what decides whether a call that says it comes
// from the federation (metadata sla.FederationCallKey) is believed: with
// a policy on, only a caller holding admin cluster-wide, as the
// federation's principal must. Without it every such call is believed;
// the metadata is never sent by the CLI or the UI, and the REST gateway
// drops it, so no one sends it by accident.
func (s *Server) SetFederationCheck(f func(context.Context) bool) { s.fromFederation = f }

// federationCall says whether ctx's call is the federation keeping one
// of its services' jobs.
func (s *Server) federationCall(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(sla.FederationCallKey)) == 0 {
		return false
	}
	return s.fromFederation == nil || s.fromFederation(ctx)
}

// refuseFederated refuses a change (what: "scale", "update") of a job
// that a federated service owns, unless the federation itself makes it:
// the federation would set the job back to its service's spec at its next
// pass, so the change would be undone silently.
func (s *Server) refuseFederated(ctx context.Context, jobID, what string) error {
	if jobID == "" {
		return nil
	}
	j, err := s.jm.GetJob(jobID)
	if err != nil {
		return nil // the change itself says what is wrong with the id
	}
	svc := j.GetSpec().GetLabels()[sla.GroupLabel]
	if svc == "" || s.federationCall(ctx) {
		return nil
	}
	change, how := "an update", "update it"
	if what == "scale" {
		change, how = "a scale", "change its instanceCount"
	}
	return apierr.FailedPrecondition("job %s belongs to federated service %s (label %s), which would undo %s here; %s with peloton fed service update %s -f FILE",
		jobID, svc, sla.GroupLabel, change, how, svc)
}
