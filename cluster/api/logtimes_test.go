package api_test

import (
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestLogsTimesOfABackendWithout: since and timestamps asked of a backend
// that keeps no time per line (sim) are FailedPrecondition, naming what is
// missing, for a live job and an archived one alike; a since that is no
// time is InvalidArgument naming the field.
func TestLogsTimesOfABackendWithout(t *testing.T) {
	h := openBolt(t)
	s := startArchiveStack(t, h)
	id := s.finished(t, batchSpec("untimed", nil))
	since := timestamppb.New(time.Now().Add(-time.Hour))
	check := func(what string) {
		t.Helper()
		for name, req := range map[string]*pelotonv1.GetTaskLogsRequest{
			"since":      {JobId: id, Stream: pelotonv1.LogStream_STDOUT, Since: since},
			"timestamps": {JobId: id, Stream: pelotonv1.LogStream_STDOUT, Timestamps: true, Follow: true},
		} {
			_, err := readLogsErr(s.tasks, req)
			wantCode(t, what+" logs with "+name, err, codes.FailedPrecondition, "the sim backend makes its output up on demand and keeps no times")
		}
		_, err := readLogsErr(s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: id, Stream: pelotonv1.LogStream_STDOUT,
			Since: &timestamppb.Timestamp{Seconds: 1, Nanos: 2e9}})
		wantCode(t, what+" logs since no time", err, codes.InvalidArgument, "since:")
		if out := readLogs(t, s.tasks, &pelotonv1.GetTaskLogsRequest{JobId: id, Stream: pelotonv1.LogStream_STDOUT}); out == "" {
			t.Errorf("%s logs without since or timestamps are empty", what)
		}
	}
	check("live")
	s.archive(t, h, s.view(t, id))
	check("archived")
}
