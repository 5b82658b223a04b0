package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// CreateJob stores a new job after validating its spec; a request id makes
// it safe to retry.
func (s *Server) CreateJob(ctx context.Context, req *pelotonv1.CreateJobRequest) (*pelotonv1.CreateJobResponse, error) {
	if err := s.checkInstances("spec.instanceCount", req.GetSpec().GetInstanceCount()); err != nil {
		return nil, err
	}
	if req.GetDryRun() {
		spec, err := s.jm.CheckCreateJob(req.GetSpec())
		if err != nil {
			return nil, err
		}
		return &pelotonv1.CreateJobResponse{DryRun: true, Spec: spec}, nil
	}
	r, err := requestid.New(requestid.Job, req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	id, err := s.jm.CreateJobOnce(ctx, req.GetSpec(), r)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CreateJobResponse{JobId: id}, nil
}

// GetJob returns a job with its status.
func (s *Server) GetJob(ctx context.Context, req *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	j, err := s.jm.GetJob(req.GetJobId())
	if err != nil {
		a, err := s.archived(ctx, req.GetJobId(), err)
		if err != nil {
			return nil, err
		}
		return &pelotonv1.GetJobResponse{Job: archivedJobProto(a)}, nil
	}
	return &pelotonv1.GetJobResponse{Job: j}, nil
}

// ListJobs returns jobs matching the filters: the live ones, or with
// archived the archive's.
func (s *Server) ListJobs(ctx context.Context, req *pelotonv1.ListJobsRequest) (*pelotonv1.ListJobsResponse, error) {
	f, err := jobFilter(req)
	if err != nil {
		return nil, err
	}
	if req.GetArchived() {
		return s.listArchivedJobs(ctx, f, req.GetPageSize(), req.GetPageToken())
	}
	js, next, err := s.jm.ListJobsPage(f, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.ListJobsResponse{Jobs: js, NextPageToken: next}, nil
}

// jobFilter checks ListJobs' filters.
func jobFilter(req *pelotonv1.ListJobsRequest) (jobmgr.JobFilter, error) {
	f := jobmgr.JobFilter{Pool: req.GetPool(), States: req.GetStates(), Name: req.GetName(), Labels: req.GetLabels()}
	if f.Pool != "" {
		p, err := resmgr.NormalizePath(f.Pool, "pool")
		if err != nil {
			return f, err
		}
		f.Pool = p
	}
	for k := range f.Labels {
		if k == "" {
			return f, apierr.Invalid("labels", "a label key must not be empty")
		}
	}
	if ts := req.GetCreatedSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return f, apierr.Invalid("createdSince", "not a valid time: %v", err)
		}
		f.CreatedSince = ts.AsTime()
	}
	if ts := req.GetCreatedUntil(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return f, apierr.Invalid("createdUntil", "not a valid time: %v", err)
		}
		f.CreatedUntil = ts.AsTime()
	}
	if !f.CreatedSince.IsZero() && !f.CreatedUntil.IsZero() && !f.CreatedUntil.After(f.CreatedSince) {
		return f, apierr.Invalid("createdUntil", "%s is not after createdSince %s: no job was created in between",
			f.CreatedUntil.Format(time.RFC3339Nano), f.CreatedSince.Format(time.RFC3339Nano))
	}
	return f, nil
}

// CancelJob kills every instance of a job.
func (s *Server) CancelJob(ctx context.Context, req *pelotonv1.CancelJobRequest) (*pelotonv1.CancelJobResponse, error) {
	if err := s.jm.CancelJob(ctx, req.GetJobId()); err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "cancelled", err)
	}
	return &pelotonv1.CancelJobResponse{}, nil
}

// DeleteJob removes a finished job: from the live store, or, when it is
// archived, from the archive (an operator's purge).
func (s *Server) DeleteJob(ctx context.Context, req *pelotonv1.DeleteJobRequest) (*pelotonv1.DeleteJobResponse, error) {
	id := req.GetJobId()
	if err := s.jm.DeleteJob(ctx, id); err != nil {
		if _, err := s.archived(ctx, id, err); err != nil {
			return nil, err
		}
		return &pelotonv1.DeleteJobResponse{}, s.purgeArchived(ctx, id, true)
	}
	// A job being archived is in both stores for a moment: deleting it
	// deletes it from both, or it would come back as archived.
	return &pelotonv1.DeleteJobResponse{}, s.purgeArchived(ctx, id, false)
}

// RestartJob starts new runs of a job's instances.
func (s *Server) RestartJob(ctx context.Context, req *pelotonv1.RestartJobRequest) (*pelotonv1.RestartJobResponse, error) {
	if err := s.jm.RestartJob(ctx, req.GetJobId(), req.GetInstances()); err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "restarted", err)
	}
	return &pelotonv1.RestartJobResponse{}, nil
}

// ListTasks returns a job's instances.
func (s *Server) ListTasks(ctx context.Context, req *pelotonv1.ListTasksRequest) (*pelotonv1.ListTasksResponse, error) {
	ts, next, err := s.jm.ListTasksPage(req.GetJobId(), req.GetStates(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		a, err := s.archived(ctx, req.GetJobId(), err)
		if err != nil {
			return nil, err
		}
		ts, next, err = jobmgr.TasksPage(a.ID, len(a.Tasks), func(inst uint32) *pelotonv1.Task { return archivedTask(a, inst, false) },
			req.GetStates(), req.GetPageSize(), req.GetPageToken())
		if err != nil {
			return nil, err
		}
	}
	return &pelotonv1.ListTasksResponse{Tasks: ts, NextPageToken: next}, nil
}

// GetTask returns one instance.
func (s *Server) GetTask(ctx context.Context, req *pelotonv1.GetTaskRequest) (*pelotonv1.GetTaskResponse, error) {
	t, err := s.jm.GetTask(req.GetJobId(), req.GetInstanceId())
	if err != nil {
		a, aerr := s.archived(ctx, req.GetJobId(), err)
		if aerr != nil {
			return nil, aerr
		}
		if err := checkArchivedInstance(a, req.GetInstanceId()); err != nil {
			return nil, err
		}
		t = archivedTask(a, req.GetInstanceId(), true)
	}
	return &pelotonv1.GetTaskResponse{Task: t}, nil
}

// KillTask kills one instance.
func (s *Server) KillTask(ctx context.Context, req *pelotonv1.KillTaskRequest) (*pelotonv1.KillTaskResponse, error) {
	if err := s.jm.KillTask(ctx, req.GetJobId(), req.GetInstanceId()); err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "killed", err)
	}
	return &pelotonv1.KillTaskResponse{}, nil
}

// logChunkSize bounds one streamed message.
const logChunkSize = 32 << 10

// GetTaskLogs streams a run's stdout or stderr.
func (s *Server) GetTaskLogs(req *pelotonv1.GetTaskLogsRequest, stream pelotonv1.TaskService_GetTaskLogsServer) error {
	if req.GetStream() != pelotonv1.LogStream_STDOUT && req.GetStream() != pelotonv1.LogStream_STDERR {
		return apierr.Invalid("stream", "must be STDOUT or STDERR")
	}
	opts := hostmgr.LogOptions{Stream: req.GetStream(), Follow: req.GetFollow(), Timestamps: req.GetTimestamps()}
	if req.Since != nil {
		if err := req.GetSince().CheckValid(); err != nil {
			return apierr.Invalid("since", "%v", err)
		}
		opts.Since = req.GetSince().AsTime()
	}
	rc, err := s.jm.Logs(stream.Context(), req.GetJobId(), req.GetInstanceId(), req.GetRunId(), opts)
	if err != nil {
		a, err := s.archived(stream.Context(), req.GetJobId(), err)
		if err != nil {
			return err
		}
		// An archived run has ended: following it ends with its output.
		if rc, err = s.archivedLogs(stream.Context(), a, req.GetInstanceId(), req.GetRunId(), opts); err != nil {
			return err
		}
	}
	defer rc.Close()
	if req.GetFollow() {
		// An empty chunk first: a follower of a run that has written
		// nothing yet sees the stream open (over REST, the gateway sends
		// the response's headers with its first message).
		if err := stream.Send(&pelotonv1.LogChunk{}); err != nil {
			return err
		}
	}
	buf := make([]byte, logChunkSize)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if serr := stream.Send(&pelotonv1.LogChunk{Data: append([]byte(nil), buf[:n]...)}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if stream.Context().Err() != nil {
				return stream.Context().Err()
			}
			return apierr.Unavailable("read logs: %v", err)
		}
	}
}

// CreatePool adds a pool to the tree; a request id makes it safe to retry.
func (s *Server) CreatePool(ctx context.Context, req *pelotonv1.CreatePoolRequest) (*pelotonv1.CreatePoolResponse, error) {
	r, err := requestid.New(requestid.Pool, req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	p, err := s.rm.CreatePoolOnce(ctx, req.GetPath(), req.GetSpec(), r)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CreatePoolResponse{Pool: p, Warnings: s.reservationWarnings(req.GetSpec())}, nil
}

// reservationWarnings says which kinds of spec's reservation exceed the
// cluster's capacity (the root pool's entitlement: the hosts in service).
// Such a pool is valid, since hosts may join, but until they do its
// reservation is only partly honoured, and whoever made it should know.
func (s *Server) reservationWarnings(spec *pelotonv1.PoolSpec) []string {
	res, err := resources.FromProto(spec.GetReservation(), "")
	if err != nil || res.IsZero() {
		return nil
	}
	root, err := s.rm.GetPool("/")
	if err != nil {
		return nil
	}
	capacity, _ := resources.FromProto(root.GetStatus().GetEntitlement(), "")
	var out []string
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if res.Get(k) > capacity.Get(k) {
			out = append(out, fmt.Sprintf("reservation %s %s exceeds the cluster's capacity %s; it will be honoured only when hosts join",
				k, resources.FormatAmount(k, res.Get(k)), resources.FormatAmount(k, capacity.Get(k))))
		}
	}
	return out
}

// GetPool returns a pool with its status.
func (s *Server) GetPool(ctx context.Context, req *pelotonv1.GetPoolRequest) (*pelotonv1.GetPoolResponse, error) {
	p, err := s.rm.GetPool(req.GetPath())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetPoolResponse{Pool: p}, nil
}

// UpdatePool replaces a pool's spec.
func (s *Server) UpdatePool(ctx context.Context, req *pelotonv1.UpdatePoolRequest) (*pelotonv1.UpdatePoolResponse, error) {
	p, err := s.rm.UpdatePool(ctx, req.GetPath(), req.GetSpec(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.UpdatePoolResponse{Pool: p}, nil
}

// DeletePool removes an empty leaf pool.
func (s *Server) DeletePool(ctx context.Context, req *pelotonv1.DeletePoolRequest) (*pelotonv1.DeletePoolResponse, error) {
	return &pelotonv1.DeletePoolResponse{}, s.rm.DeletePool(ctx, req.GetPath())
}

// ListPools returns the whole tree.
func (s *Server) ListPools(ctx context.Context, req *pelotonv1.ListPoolsRequest) (*pelotonv1.ListPoolsResponse, error) {
	resp := &pelotonv1.ListPoolsResponse{Pools: s.rm.ListPools()}
	// A backend that never reached its substrate knows no host: say
	// nothing rather than "nothing fits".
	if largest := s.hm.LargestHost(); !largest.IsZero() || s.hm.SubstrateProto().GetReachable() {
		resp.LargestHost = largest.ToProto()
	}
	return resp, nil
}

// ListHosts returns the cluster's hosts, and whether the backend reaches
// its substrate (while it does not, the hosts are as last seen).
func (s *Server) ListHosts(ctx context.Context, req *pelotonv1.ListHostsRequest) (*pelotonv1.ListHostsResponse, error) {
	if req.GetIncludeRuns() {
		return &pelotonv1.ListHostsResponse{Hosts: s.hm.ListHostsWithRuns(), Substrate: s.hm.SubstrateProto()}, nil
	}
	return &pelotonv1.ListHostsResponse{Hosts: s.hm.ListHosts(), Substrate: s.hm.SubstrateProto()}, nil
}

// ListPartitions summarizes the partitions and the advisor's status.
func (s *Server) ListPartitions(ctx context.Context, _ *pelotonv1.ListPartitionsRequest) (*pelotonv1.ListPartitionsResponse, error) {
	ps, st := s.usage.ListPartitions()
	return &pelotonv1.ListPartitionsResponse{Partitions: ps, Advisor: st}, nil
}

// ListPartitionMoves returns the move history, newest first.
func (s *Server) ListPartitionMoves(ctx context.Context, req *pelotonv1.ListPartitionMovesRequest) (*pelotonv1.ListPartitionMovesResponse, error) {
	ms, err := s.maint.ListPartitionMoves(req.GetHost(), req.GetLimit())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.ListPartitionMovesResponse{Moves: ms}, nil
}

// PublishAdvice takes the host advisor's advice of one round.
func (s *Server) PublishAdvice(ctx context.Context, req *pelotonv1.PublishAdviceRequest) (*pelotonv1.PublishAdviceResponse, error) {
	if err := s.usage.PublishAdvice(ctx, req); err != nil {
		return nil, err
	}
	return &pelotonv1.PublishAdviceResponse{}, nil
}

// StartMaintenance takes hosts out of service; they drain, then are drained.
func (s *Server) StartMaintenance(ctx context.Context, req *pelotonv1.StartMaintenanceRequest) (*pelotonv1.StartMaintenanceResponse, error) {
	if !req.GetForce() {
		if err := s.checkStranded(req.GetHosts(), "drain"); err != nil {
			return nil, err
		}
	}
	hs, err := s.maint.StartMaintenance(ctx, req.GetHosts())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.StartMaintenanceResponse{Hosts: hs}, nil
}

// CompleteMaintenance returns hosts to service.
func (s *Server) CompleteMaintenance(ctx context.Context, req *pelotonv1.CompleteMaintenanceRequest) (*pelotonv1.CompleteMaintenanceResponse, error) {
	hs, err := s.maint.CompleteMaintenance(ctx, req.GetHosts())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CompleteMaintenanceResponse{Hosts: hs}, nil
}

// MoveHost moves a host to another partition: it drains (SLA-checked, as
// maintenance drains) and then joins the new partition.
func (s *Server) MoveHost(ctx context.Context, req *pelotonv1.MoveHostRequest) (*pelotonv1.MoveHostResponse, error) {
	if req.GetCancel() {
		switch {
		case req.GetPartition() != "":
			return nil, apierr.Invalid("partition", "leave it empty to cancel a move: the host returns to the partition it was leaving")
		case req.GetForce():
			return nil, apierr.Invalid("force", "a cancel needs no force")
		case req.GetDrainSeconds() != 0 || len(req.GetFinishTaskIds()) > 0:
			return nil, apierr.Invalid("drain_seconds", "a cancel has no drain window")
		}
		h, err := s.maint.CancelMove(ctx, req.GetHost(), req.GetReason())
		if err != nil {
			return nil, err
		}
		return &pelotonv1.MoveHostResponse{Host: h}, nil
	}
	if !req.GetForce() && req.GetHost() != "" {
		if err := s.checkStranded([]string{req.GetHost()}, "move"); err != nil {
			return nil, err
		}
	}
	h, err := s.maint.MoveHostDrain(ctx, req.GetHost(), req.GetPartition(), req.GetReason(), time.Duration(req.GetDrainSeconds())*time.Second, req.GetFinishTaskIds())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.MoveHostResponse{Host: h}, nil
}

// checkStranded refuses to take hosts out of service (what: "drain" or
// "move") when the instances that must leave them fit no host that stays
// in service: preempted, they would wait with nowhere to go, and a drain
// waiting on a service's SLA would never end. It names the first such job.
func (s *Server) checkStranded(hosts []string, what string) error {
	runs, stay, known := s.maint.Leaving(hosts)
	if !known {
		return nil // the change itself refuses an unknown host, naming it
	}
	st := s.jm.Stranded(runs, stay)
	if len(st) == 0 {
		return nil
	}
	j := st[0]
	job := cmp.Or(j.Name, j.JobID)
	insts := "instance " + jobmgr.InstanceRanges(j.Instances)
	if len(j.Instances) > 1 {
		insts = "instances " + jobmgr.InstanceRanges(j.Instances)
	}
	who := fmt.Sprintf("%s is the only host that fits", hosts[0])
	if len(hosts) > 1 {
		who = fmt.Sprintf("no host but %s fits", strings.Join(hosts, ", "))
	}
	more := ""
	if len(st) > 1 {
		more = fmt.Sprintf(" (and %d more jobs)", len(st)-1)
	}
	field := "host"
	if what == "drain" {
		field = "hosts"
	}
	return apierr.FailedPrecondition("%s: %s job %s's %s%s: they would have nowhere to go and the %s would not end; add --force (force: true) to %s anyway",
		field, who, job, insts, more, what, what)
}

// MovePool moves a pool and its children under another parent.
func (s *Server) MovePool(ctx context.Context, req *pelotonv1.MovePoolRequest) (*pelotonv1.MovePoolResponse, error) {
	p, err := s.rm.MovePool(ctx, req.GetPath(), req.GetNewParent())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.MovePoolResponse{Pool: p}, nil
}
