package api

import (
	"context"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/requestid"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScaleJob changes a job's instance count.
func (s *Server) ScaleJob(ctx context.Context, req *pelotonv1.ScaleJobRequest) (*pelotonv1.ScaleJobResponse, error) {
	if err := s.checkInstances("instanceCount", req.GetInstanceCount()); err != nil {
		return nil, err
	}
	if err := s.refuseFederated(ctx, req.GetJobId(), "scale"); err != nil {
		return nil, err
	}
	if err := s.checkSelfScale(ctx, req); err != nil {
		return nil, err
	}
	scale := s.jm.Updates().ScaleJob
	if req.GetDryRun() {
		scale = func(_ context.Context, id string, n uint32, remove []uint32, v uint64) (uint64, error) {
			return s.jm.Updates().CheckScale(id, n, remove, v)
		}
	}
	v, err := scale(ctx, req.GetJobId(), req.GetInstanceCount(), req.GetRemoveInstances(), req.GetVersion())
	if err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "scaled", err)
	}
	return &pelotonv1.ScaleJobResponse{SpecVersion: v, DryRun: req.GetDryRun()}, nil
}

// ListJobVersions returns a job's spec history.
func (s *Server) ListJobVersions(ctx context.Context, req *pelotonv1.ListJobVersionsRequest) (*pelotonv1.ListJobVersionsResponse, error) {
	vs, err := s.jm.Updates().ListJobVersions(req.GetJobId())
	if err != nil {
		a, err := s.archived(ctx, req.GetJobId(), err)
		if err != nil {
			return nil, err
		}
		vs = a.Versions
	}
	return &pelotonv1.ListJobVersionsResponse{Versions: vs}, nil
}

// CreateUpdate starts a rolling update; a request id makes it safe to retry.
func (s *Server) CreateUpdate(ctx context.Context, req *pelotonv1.CreateUpdateRequest) (*pelotonv1.CreateUpdateResponse, error) {
	if err := s.checkInstances("spec.instanceCount", req.GetSpec().GetInstanceCount()); err != nil {
		return nil, err
	}
	if err := s.refuseFederated(ctx, req.GetJobId(), "update"); err != nil {
		return nil, err
	}
	if req.GetDryRun() {
		u, err := s.jm.Updates().CheckUpdate(req.GetJobId(), req.GetSpec(), req.GetUpdateSpec(), req.GetJobVersion())
		if err != nil {
			return nil, s.refuseArchived(ctx, req.GetJobId(), "updated", err)
		}
		return &pelotonv1.CreateUpdateResponse{Update: u, DryRun: true}, nil
	}
	r, err := requestid.New(requestid.Update, req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	u, err := s.jm.Updates().CreateUpdateOnce(ctx, req.GetJobId(), req.GetSpec(), req.GetUpdateSpec(), req.GetJobVersion(), r)
	if err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "updated", err)
	}
	return &pelotonv1.CreateUpdateResponse{Update: u}, nil
}

// GetUpdate returns one update.
func (s *Server) GetUpdate(ctx context.Context, req *pelotonv1.GetUpdateRequest) (*pelotonv1.GetUpdateResponse, error) {
	u, err := s.jm.Updates().GetUpdate(req.GetUpdateId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetUpdateResponse{Update: u}, nil
}

// ListUpdates returns updates, newest first: every live job's, or one
// job's, live or archived.
func (s *Server) ListUpdates(ctx context.Context, req *pelotonv1.ListUpdatesRequest) (*pelotonv1.ListUpdatesResponse, error) {
	us, err := s.jm.Updates().ListUpdates(req.GetJobId())
	if err != nil {
		a, err := s.archived(ctx, req.GetJobId(), err)
		if err != nil {
			return nil, err
		}
		us = archivedUpdates(a)
	}
	return &pelotonv1.ListUpdatesResponse{Updates: us}, nil
}

// PauseUpdate pauses an update.
func (s *Server) PauseUpdate(ctx context.Context, req *pelotonv1.PauseUpdateRequest) (*pelotonv1.PauseUpdateResponse, error) {
	u, err := s.jm.Updates().PauseUpdate(ctx, req.GetUpdateId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.PauseUpdateResponse{Update: u}, nil
}

// ResumeUpdate resumes a paused update.
func (s *Server) ResumeUpdate(ctx context.Context, req *pelotonv1.ResumeUpdateRequest) (*pelotonv1.ResumeUpdateResponse, error) {
	u, err := s.jm.Updates().ResumeUpdate(ctx, req.GetUpdateId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.ResumeUpdateResponse{Update: u}, nil
}

// AbortUpdate stops an update for good.
func (s *Server) AbortUpdate(ctx context.Context, req *pelotonv1.AbortUpdateRequest) (*pelotonv1.AbortUpdateResponse, error) {
	u, err := s.jm.Updates().AbortUpdate(ctx, req.GetUpdateId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.AbortUpdateResponse{Update: u}, nil
}

// RollbackUpdate rolls an update back.
func (s *Server) RollbackUpdate(ctx context.Context, req *pelotonv1.RollbackUpdateRequest) (*pelotonv1.RollbackUpdateResponse, error) {
	u, err := s.jm.Updates().RollbackUpdate(ctx, req.GetUpdateId())
	if err != nil {
		return nil, err
	}
	return &pelotonv1.RollbackUpdateResponse{Update: u}, nil
}

// checkSelfScale holds a job that scales itself with its own token to its
// spec.selfScale bounds; other callers may scale it to any count.
func (s *Server) checkSelfScale(ctx context.Context, req *pelotonv1.ScaleJobRequest) error {
	if id, ok := auth.FromContext(ctx); !ok || id.Method != auth.MethodJobToken {
		return nil
	}
	j, err := s.jm.GetJob(req.GetJobId())
	if err != nil {
		return err
	}
	ss := j.GetSpec().GetSelfScale()
	n := req.GetInstanceCount()
	if ss != nil && n == 0 && len(req.GetRemoveInstances()) > 0 {
		// A removal alone: jobmgr holds it to selfScale.min (and names
		// the instances it does not know).
		return nil
	}
	if ss == nil || n < ss.GetMin() || n > ss.GetMax() {
		return apierr.Invalid("instanceCount", "a job scaling itself stays within spec.selfScale's %d..%d, got %d", ss.GetMin(), ss.GetMax(), n)
	}
	return nil
}
