package api

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ReportUsage takes one host agent's stream of reports (hostmgr.TakeUsage)
// and acknowledges each one taken or dropped as a duplicate. A stream
// speaks for one host: its first report names it. A report that cannot be
// taken ends the stream with the reason (the agent logs it and connects
// again later); so does the stack's shutdown (EndStreams).
func (s *Server) ReportUsage(stream pelotonv1.HostAgentService_ReportUsageServer) error {
	reports := make(chan *pelotonv1.UsageReport)
	ended := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				ended <- err
				return
			}
			select {
			case reports <- r:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	host := ""
	for {
		var r *pelotonv1.UsageReport
		select {
		case <-s.ending:
			return status.Error(codes.Unavailable, "the cluster stack is shutting down; report to the one that serves next")
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case r = <-reports:
		}
		switch {
		case host == "":
			host = r.GetHost()
		case r.GetHost() != host:
			return apierr.Invalid("host", "this stream reports host %s, not %s: one stream per host", host, r.GetHost())
		}
		if _, err := s.usage.TakeUsage(r); err != nil {
			return err
		}
		// Each ack carries the host's profile settings: the agent learns
		// them, and a change of them, from its next report's ack.
		if err := stream.Send(&pelotonv1.UsageAck{Sequence: r.GetSequence(), Settings: s.usage.AgentSettings(host)}); err != nil {
			return err
		}
	}
}
