package cli

import (
	"bytes"
	"context"
	"errors"
	"io"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// tailLogs is task logs --tail n: the last n lines of the run's output so
// far, then, with --follow, what the run writes after them. The output is
// read whole and cut here (the server streams bytes, not lines); with
// --follow the run is pinned first, so that the output followed is the
// same run's, and the bytes already printed are skipped from the follow
// stream (a run's output only grows; with --since, fixed to one time, and
// --timestamps, the times of lines already written do not change either).
func (a *app) tailLogs(ctx context.Context, c *client, req *pelotonv1.GetTaskLogsRequest, n int) error {
	once := &pelotonv1.GetTaskLogsRequest{JobId: req.GetJobId(), InstanceId: req.GetInstanceId(), RunId: req.GetRunId(), Stream: req.GetStream(),
		Since: req.GetSince(), Timestamps: req.GetTimestamps()}
	if req.GetFollow() && once.RunId == 0 {
		t, err := call(ctx, c, c.Tasks.GetTask, &pelotonv1.GetTaskRequest{JobId: req.GetJobId(), InstanceId: req.GetInstanceId()})
		if err != nil {
			return err
		}
		once.RunId = latestStartedRun(t.GetTask().GetStatus())
	}
	var all bytes.Buffer
	if err := a.readLogs(ctx, c, once, &all); err != nil {
		return err
	}
	if _, err := a.stdout.Write(lastLines(all.Bytes(), n)); err != nil {
		return err
	}
	if !req.GetFollow() {
		return nil
	}
	follow := &pelotonv1.GetTaskLogsRequest{JobId: once.JobId, InstanceId: once.InstanceId, RunId: once.RunId, Stream: once.Stream, Follow: true,
		Since: once.Since, Timestamps: once.Timestamps}
	return a.readLogs(ctx, c, follow, &skipWriter{w: a.stdout, skip: all.Len()})
}

// latestStartedRun is the run GetTaskLogs reads for run 0: the current
// one, or the one before while a new run has not reached a host.
func latestStartedRun(st *pelotonv1.TaskStatus) uint32 {
	if st.GetHost() == "" && st.GetRunId() > 1 {
		return st.GetRunId() - 1
	}
	return st.GetRunId()
}

// readLogs copies the chunks of one GetTaskLogs stream to w.
func (a *app) readLogs(ctx context.Context, c *client, req *pelotonv1.GetTaskLogsRequest, w io.Writer) error {
	stream, err := c.Tasks.GetTaskLogs(ctx, req)
	if err != nil {
		return c.wrap(err)
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.wrap(err)
		}
		if _, err := w.Write(chunk.GetData()); err != nil {
			return err
		}
	}
}

// lastLines is the last n lines of b (a last line without a newline
// counts as one).
func lastLines(b []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}

// skipWriter drops the first skip bytes written to it.
type skipWriter struct {
	w    io.Writer
	skip int
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip >= n {
		s.skip -= n
		return n, nil
	}
	p = p[s.skip:]
	s.skip = 0
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
