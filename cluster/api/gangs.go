package api

import (
	"context"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// GetGang returns one gang of a job and where its members run.
func (s *Server) GetGang(ctx context.Context, req *pelotonv1.GetGangRequest) (*pelotonv1.Gang, error) {
	g, err := s.jm.GetGang(req.GetJobId(), req.GetGang())
	if err != nil {
		return nil, s.refuseArchived(ctx, req.GetJobId(), "asked for its gangs, which no longer run", err)
	}
	return g, nil
}
