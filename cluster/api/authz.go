package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/peloton-sched/peloton/internal/auth"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Who may call what: the role each method of the cluster API needs, and on
// which pools. Jobs, tasks and updates are reached through the job's pool
// (its current version's); a spec that moves a job to another pool needs
// the role on both. Hosts, partitions and the host agents' reports are
// cluster-wide. Lists of many pools answer with what the caller may view.

type (
	hasJobID    interface{ GetJobId() string }
	hasUpdateID interface{ GetUpdateId() string }
	hasPath     interface{ GetPath() string }
)

// Rules are the cluster API's authorization rules; TestEveryMethodHasARule
// checks that every method the server registers has one.
func (s *Server) Rules() auth.Rules {
	const (
		job    = "/peloton.api.v1.JobService/"
		task   = "/peloton.api.v1.TaskService/"
		pool   = "/peloton.api.v1.PoolService/"
		host   = "/peloton.api.v1.HostService/"
		part   = "/peloton.api.v1.PartitionService/"
		update = "/peloton.api.v1.UpdateService/"
		agent  = "/peloton.api.v1.HostAgentService/"
	)
	onJob := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Pools: s.jobPools, Mutating: mutating, Object: jobObject}
	}
	// A self-scaling job's own token (auth.MethodJobToken) may read,
	// scale (within spec.selfScale, see ScaleJob) and cancel its job.
	ownJob := func(r auth.Rule) auth.Rule {
		r.JobToken = true
		return r
	}
	onUpdate := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Pools: s.updatePools, Mutating: mutating, Object: func(req any) string {
			return "update " + req.(hasUpdateID).GetUpdateId()
		}}
	}
	onPool := func(role auth.Role, mutating bool) auth.Rule {
		return auth.Rule{Role: role, Pools: pathPools, Mutating: mutating, Object: func(req any) string {
			return "pool " + req.(hasPath).GetPath()
		}}
	}
	clusterWide := func(role auth.Role, mutating bool, object func(any) string) auth.Rule {
		return auth.Rule{Role: role, Mutating: mutating, Object: object}
	}
	hosts := func(req any) string {
		switch r := req.(type) {
		case *pelotonv1.StartMaintenanceRequest:
			return "hosts " + strings.Join(r.GetHosts(), ",")
		case *pelotonv1.CompleteMaintenanceRequest:
			return "hosts " + strings.Join(r.GetHosts(), ",")
		case *pelotonv1.MoveHostRequest:
			return "host " + r.GetHost() + " to " + r.GetPartition()
		}
		return ""
	}
	return auth.Rules{
		job + "CreateJob": {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				return auth.Paths(req.(*pelotonv1.CreateJobRequest).GetSpec().GetPool()), nil
			},
			Object: func(req any) string {
				r := req.(*pelotonv1.CreateJobRequest)
				return fmt.Sprintf("job %q in %s", r.GetSpec().GetName(), r.GetSpec().GetPool())
			}},
		// Every item's pool: the caller submits in each.
		job + "CreateJobs": {Role: auth.Submitter, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				var pools []string
				for _, r := range req.(*pelotonv1.CreateJobsRequest).GetRequests() {
					pools = append(pools, r.GetSpec().GetPool())
				}
				return auth.Paths(pools...), nil
			},
			Object: func(req any) string {
				return fmt.Sprintf("%d jobs", len(req.(*pelotonv1.CreateJobsRequest).GetRequests()))
			}},
		job + "GetJob":          ownJob(onJob(auth.Viewer, false)),
		job + "ListJobs":        {Role: auth.Viewer, Pools: listJobsPools, Filter: filterJobs},
		job + "CancelJob":       ownJob(onJob(auth.Submitter, true)),
		job + "DeleteJob":       onJob(auth.Submitter, true),
		job + "RestartJob":      onJob(auth.Submitter, true),
		job + "ScaleJob":        ownJob(onJob(auth.Submitter, true)),
		job + "ListJobVersions": onJob(auth.Viewer, false),
		job + "GetGang":         onJob(auth.Viewer, false),
		// Watching named jobs needs the viewer role on each one's pool;
		// watching every job (none named) needs it cluster-wide.
		job + "WatchJobs": {Role: auth.Viewer, Pools: s.watchJobsPools, Object: func(req any) string {
			return "jobs " + strings.Join(req.(*pelotonv1.WatchJobsRequest).GetJobIds(), ",")
		}},

		task + "ListTasks":   onJob(auth.Viewer, false),
		task + "GetTask":     onJob(auth.Viewer, false),
		task + "KillTask":    onJob(auth.Submitter, true),
		task + "GetTaskLogs": onJob(auth.Viewer, false),
		task + "WatchTasks":  onJob(auth.Viewer, false),

		pool + "CreatePool": onPool(auth.Operator, true),
		pool + "GetPool":    onPool(auth.Viewer, false),
		pool + "UpdatePool": onPool(auth.Operator, true),
		pool + "DeletePool": onPool(auth.Operator, true),
		pool + "ListPools":  {Role: auth.Viewer, Filter: filterPools},
		pool + "MovePool": {Role: auth.Operator, Mutating: true,
			Pools: func(_ context.Context, req any) ([]string, error) {
				r := req.(*pelotonv1.MovePoolRequest)
				return auth.Paths(r.GetPath(), r.GetNewParent()), nil
			},
			Object: func(req any) string {
				r := req.(*pelotonv1.MovePoolRequest)
				return "pool " + r.GetPath() + " to " + r.GetNewParent()
			}},

		host + "ListHosts":           clusterWide(auth.Viewer, false, nil),
		host + "StartMaintenance":    clusterWide(auth.Operator, true, hosts),
		host + "CompleteMaintenance": clusterWide(auth.Operator, true, hosts),
		host + "MoveHost":            clusterWide(auth.Operator, true, hosts),

		part + "ListPartitions":     clusterWide(auth.Viewer, false, nil),
		part + "ListPartitionMoves": clusterWide(auth.Viewer, false, nil),
		part + "PublishAdvice":      clusterWide(auth.Operator, false, nil),

		agent + "ReportUsage": clusterWide(auth.Agent, false, nil),

		update + "CreateUpdate": {Role: auth.Submitter, Mutating: true, Object: jobObject,
			Pools: func(ctx context.Context, req any) ([]string, error) {
				pools, err := s.jobPools(ctx, req)
				if err != nil {
					return nil, err
				}
				return append(pools, auth.Paths(req.(*pelotonv1.CreateUpdateRequest).GetSpec().GetPool())...), nil
			}},
		update + "GetUpdate":      onUpdate(auth.Viewer, false),
		update + "ListUpdates":    {Role: auth.Viewer, Pools: s.listUpdatesPools, Filter: s.filterUpdates},
		update + "PauseUpdate":    onUpdate(auth.Submitter, true),
		update + "ResumeUpdate":   onUpdate(auth.Submitter, true),
		update + "AbortUpdate":    onUpdate(auth.Submitter, true),
		update + "RollbackUpdate": onUpdate(auth.Submitter, true),
	}
}

// watchJobsPools are the pools of the jobs a WatchJobs names.
func (s *Server) watchJobsPools(ctx context.Context, req any) ([]string, error) {
	var pools []string
	for _, id := range req.(*pelotonv1.WatchJobsRequest).GetJobIds() {
		p, err := s.jobPools(ctx, &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return nil, err
		}
		pools = append(pools, p...)
	}
	return pools, nil
}

func jobObject(req any) string { return "job " + req.(hasJobID).GetJobId() }

// jobPools is the pool of the request's job. A job that does not exist is
// NotFound, as the call itself would answer.
// An archived job's pool is the one it had when it finished.
func (s *Server) jobPools(ctx context.Context, req any) ([]string, error) {
	id := req.(hasJobID).GetJobId()
	p, err := s.jm.JobPool(id)
	if err != nil {
		if p, err = s.archivedPool(ctx, id, err); err != nil {
			return nil, err
		}
	}
	return []string{p}, nil
}

func (s *Server) updatePools(ctx context.Context, req any) ([]string, error) {
	j, err := s.jm.Updates().UpdateJob(req.(hasUpdateID).GetUpdateId())
	if err != nil {
		return nil, err
	}
	return s.jobPools(ctx, &pelotonv1.GetJobRequest{JobId: j})
}

func pathPools(_ context.Context, req any) ([]string, error) {
	return auth.Paths(req.(hasPath).GetPath()), nil
}

// listJobsPools: a list narrowed to one pool needs the role there; the
// others are filtered.
func listJobsPools(_ context.Context, req any) ([]string, error) {
	return auth.Paths(req.(*pelotonv1.ListJobsRequest).GetPool()), nil
}

func filterJobs(resp any, canView func(string) bool) {
	r := resp.(*pelotonv1.ListJobsResponse)
	kept := r.Jobs[:0]
	for _, j := range r.Jobs {
		if canView(j.GetSpec().GetPool()) {
			kept = append(kept, j)
		}
	}
	r.Jobs = kept
}

func filterPools(resp any, canView func(string) bool) {
	r := resp.(*pelotonv1.ListPoolsResponse)
	kept := r.Pools[:0]
	for _, p := range r.Pools {
		if canView(p.GetPath()) {
			kept = append(kept, p)
		}
	}
	r.Pools = kept
}

func (s *Server) listUpdatesPools(ctx context.Context, req any) ([]string, error) {
	if req.(*pelotonv1.ListUpdatesRequest).GetJobId() == "" {
		return nil, nil
	}
	return s.jobPools(ctx, req)
}

func (s *Server) filterUpdates(resp any, canView func(string) bool) {
	r := resp.(*pelotonv1.ListUpdatesResponse)
	kept := r.Updates[:0]
	// One look per job: an archived job's updates are all of one job, read
	// from the archive once.
	pools := map[string]string{}
	for _, u := range r.Updates {
		p, ok := pools[u.GetJobId()]
		if !ok {
			ps, err := s.jobPools(context.Background(), u)
			if err != nil {
				continue
			}
			p, pools[u.GetJobId()] = ps[0], ps[0]
		}
		if canView(p) {
			kept = append(kept, u)
		}
	}
	r.Updates = kept
}
