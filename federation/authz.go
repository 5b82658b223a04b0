package federation

import (
	"context"
	"fmt"

	"github.com/peloton-sched/peloton/internal/auth"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Who may call what on the federation. Global pools, federated jobs and
// federated services are reached through their pool (a job's or service's
// spec.job.pool); the registry of clusters and the global SLA evaluator
// are cluster-wide. A cluster stack registers itself and asks the global
// SLA evaluator as its own principal (its client certificate's), which
// needs the operator role on the federation; removing a cluster needs
// admin.

type (
	hasJobID     interface{ GetJobId() string }
	hasServiceID interface{ GetServiceId() string }
	hasPath      interface{ GetPath() string }
	hasName      interface{ GetName() string }
)

// Rules are the federation API's authorization rules; every method it
// serves has one (internal/serving refuses to start otherwise).
func (s *Server) Rules() auth.Rules {
	const (
		cl   = "/peloton.api.v1.ClusterService/"
		pool = "/peloton.api.v1.FederatedPoolService/"
		job  = "/peloton.api.v1.FederatedJobService/"
		svc  = "/peloton.api.v1.FederatedServiceService/"
		sla  = "/peloton.api.v1.GlobalSlaService/"
	)
	clusterObj := func(req any) string { return "cluster " + req.(hasName).GetName() }
	onCluster := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Mutating: mutating, Object: clusterObj}
	}
	onPool := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Mutating: mutating, Pools: func(_ context.Context, req any) ([]string, error) {
			return auth.Paths(req.(hasPath).GetPath()), nil
		}, Object: func(req any) string { return "global pool " + req.(hasPath).GetPath() }}
	}
	onJob := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Mutating: mutating, Pools: s.jobPools,
			Object: func(req any) string { return "federated job " + req.(hasJobID).GetJobId() }}
	}
	onService := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Mutating: mutating, Pools: s.servicePools,
			Object: func(req any) string { return "federated service " + req.(hasServiceID).GetServiceId() }}
	}
	slaRule := auth.Rule{Role: auth.Operator, Object: func(req any) string {
		r, ok := req.(interface {
			GetCluster() string
			GetJobId() string
		})
		if !ok {
			return ""
		}
		return fmt.Sprintf("job %s of cluster %s", r.GetJobId(), r.GetCluster())
	}}
	update := onService(auth.Submitter, true)
	update.Pools = func(ctx context.Context, req any) ([]string, error) {
		pools, err := s.servicePools(ctx, req)
		if err != nil {
			return nil, err
		}
		return append(pools, auth.Paths(req.(*pelotonv1.UpdateFederatedServiceRequest).GetJob().GetPool())...), nil
	}
	rules := auth.Rules{
		cl + "RegisterCluster":   onCluster(auth.Operator, true),
		cl + "DeregisterCluster": onCluster(auth.Admin, true),
		cl + "GetCluster":        onCluster(auth.Viewer, false),
		cl + "ListClusters":      {Role: auth.Viewer},
		cl + "CordonCluster":     onCluster(auth.Operator, true),
		cl + "UncordonCluster":   onCluster(auth.Operator, true),

		pool + "CreateFederatedPool": onPool(auth.Operator, true),
		pool + "GetFederatedPool":    onPool(auth.Viewer, false),
		pool + "UpdateFederatedPool": onPool(auth.Operator, true),
		pool + "DeleteFederatedPool": onPool(auth.Operator, true),
		pool + "ListFederatedPools": {Role: auth.Viewer, Filter: func(resp any, canView func(string) bool) {
			r := resp.(*pelotonv1.ListFederatedPoolsResponse)
			kept := r.Pools[:0]
			for _, p := range r.Pools {
				if canView(p.GetPath()) {
					kept = append(kept, p)
				}
			}
			r.Pools = kept
		}},

		job + "CreateFederatedJob": {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				return auth.Paths(req.(*pelotonv1.CreateFederatedJobRequest).GetSpec().GetJob().GetPool()), nil
			},
			Object: func(req any) string {
				j := req.(*pelotonv1.CreateFederatedJobRequest).GetSpec().GetJob()
				return fmt.Sprintf("federated job %q in %s", j.GetName(), j.GetPool())
			}},
		job + "GetFederatedJob": onJob(auth.Viewer, false),
		job + "ListFederatedJobs": {Role: auth.Viewer, Filter: func(resp any, canView func(string) bool) {
			r := resp.(*pelotonv1.ListFederatedJobsResponse)
			kept := r.Jobs[:0]
			for _, j := range r.Jobs {
				if canView(j.GetSpec().GetJob().GetPool()) {
					kept = append(kept, j)
				}
			}
			r.Jobs = kept
		}},
		job + "KillFederatedJob": onJob(auth.Submitter, true),

		svc + "CreateFederatedService": {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				return auth.Paths(req.(*pelotonv1.CreateFederatedServiceRequest).GetSpec().GetJob().GetPool()), nil
			},
			Object: func(req any) string {
				j := req.(*pelotonv1.CreateFederatedServiceRequest).GetSpec().GetJob()
				return fmt.Sprintf("federated service %q in %s", j.GetName(), j.GetPool())
			}},
		svc + "GetFederatedService": onService(auth.Viewer, false),
		svc + "ListFederatedServices": {Role: auth.Viewer, Filter: func(resp any, canView func(string) bool) {
			r := resp.(*pelotonv1.ListFederatedServicesResponse)
			kept := r.Services[:0]
			for _, v := range r.Services {
				if canView(v.GetSpec().GetJob().GetPool()) {
					kept = append(kept, v)
				}
			}
			r.Services = kept
		}},
		svc + "DeleteFederatedService": onService(auth.Submitter, true),
		svc + "UpdateFederatedService": update,

		sla + "RequestDisruption": slaRule,
		sla + "ReleaseDisruption": slaRule,
		sla + "RenewDisruption":   slaRule,
		sla + "ReportUnavailable": slaRule,
	}
	// The rollout controls and the rebalance act on one service each.
	for _, verb := range []string{"Pause", "Resume", "Abort", "Rollback", "Approve", "Rebalance"} {
		rules[svc+verb+"FederatedService"] = onService(auth.Submitter, true)
	}
	return rules
}

func (s *Server) jobPools(_ context.Context, req any) ([]string, error) {
	j, err := s.f.Jobs().GetJob(req.(hasJobID).GetJobId())
	if err != nil {
		return nil, err
	}
	return auth.Paths(j.GetSpec().GetJob().GetPool()), nil
}

func (s *Server) servicePools(_ context.Context, req any) ([]string, error) {
	v, err := s.f.Services().GetService(req.(hasServiceID).GetServiceId())
	if err != nil {
		return nil, err
	}
	return auth.Paths(v.GetSpec().GetJob().GetPool()), nil
}
