package cli

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// lossyJobs answers CreateJob with Unavailable for the first fail calls (as
// if the answer were lost) and records the request id of every call.
type lossyJobs struct {
	pelotonv1.UnimplementedJobServiceServer
	mu   sync.Mutex
	fail int
	ids  []string
}

func (l *lossyJobs) CreateJob(_ context.Context, req *pelotonv1.CreateJobRequest) (*pelotonv1.CreateJobResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, req.GetRequestId())
	if l.fail > 0 {
		l.fail--
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	return &pelotonv1.CreateJobResponse{JobId: "job-1"}, nil
}

func (l *lossyJobs) calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

func startLossy(t *testing.T, l *lossyJobs) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pelotonv1.RegisterJobServiceServer(g, l)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func TestCreateRetriesWithTheSameRequestID(t *testing.T) {
	l := &lossyJobs{fail: 1}
	addr := startLossy(t, l)
	spec := "name: j\ninstanceCount: 1\ndefaultSpec: {command: [\"true\"]}\n"
	r := runCLI(t, spec, "--server", addr, "job", "create", "-f", "-")
	if r.code != exitOK || r.stdout != "job-1\n" {
		t.Fatalf("job create after a lost answer: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	ids := l.calls()
	if len(ids) != 2 || ids[0] != ids[1] || len(ids[0]) != 32 {
		t.Fatalf("request ids sent: %q; want one fresh id, sent twice", ids)
	}

	// The next invocation is a new request with a new id.
	if r := runCLI(t, spec, "--server", addr, "job", "create", "-f", "-"); r.code != exitOK {
		t.Fatalf("second job create: %+v", r)
	}
	if ids := l.calls(); len(ids) != 3 || ids[2] == ids[0] {
		t.Fatalf("request ids sent: %q; want a fresh id per invocation", ids)
	}

	// --request-id is sent as given.
	if r := runCLI(t, spec, "--server", addr, "job", "create", "-f", "-", "--request-id", "deploy-42"); r.code != exitOK {
		t.Fatalf("job create --request-id: %+v", r)
	}
	if ids := l.calls(); ids[len(ids)-1] != "deploy-42" {
		t.Fatalf("request ids sent: %q; want deploy-42 last", ids)
	}

	// A server that never answers is tried a bounded number of times.
	l2 := &lossyJobs{fail: 100}
	addr2 := startLossy(t, l2)
	r = runCLI(t, spec, "--server", addr2, "job", "create", "-f", "-")
	if r.code != exitError || len(l2.calls()) != createAttempts {
		t.Fatalf("always Unavailable: exit %d after %d calls, stderr %q", r.code, len(l2.calls()), r.stderr)
	}
}

// TestRequestIDAndZeroValuesOnAStack runs the CLI against the whole stack:
// a create repeated with its request id creates one job, the id reused for
// another spec is refused, and -o json / -o yaml show zero values.
func TestRequestIDAndZeroValuesOnAStack(t *testing.T) {
	s := startStack(t)
	spec := "name: once\ntype: BATCH\npool: /default\ninstanceCount: 1\nsla: {preemptible: true}\ndefaultSpec: {command: [\"true\"], resources: {cpu: 0.1, memoryMb: 32}}\n"
	first := runCLI(t, spec, "--server", s.addr, "job", "create", "-f", "-", "--request-id", "once-1")
	again := runCLI(t, spec, "--server", s.addr, "job", "create", "-f", "-", "--request-id", "once-1")
	if first.code != exitOK || again.code != exitOK || first.stdout != again.stdout {
		t.Fatalf("job create twice with one request id: %+v, %+v", first, again)
	}
	if n := strings.Count(s.ok("job", "list"), "once"); n != 1 {
		t.Fatalf("%d jobs named once, want 1", n)
	}
	r := runCLI(t, "name: other\ntype: BATCH\npool: /default\ninstanceCount: 1\ndefaultSpec: {command: [\"true\"]}\n", "--server", s.addr, "job", "create", "-f", "-", "--request-id", "once-1")
	if r.code != exitError || !strings.Contains(r.stderr, "AlreadyExists") || !strings.Contains(r.stderr, "requestId: ") {
		t.Fatalf("request id reused for another spec: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, spec, "--server", s.addr, "job", "create", "-f", "-", "--request-id", "a/b")
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, `Error: invalid --request-id "a/b": character '/' at offset 1 is not allowed`) {
		t.Fatalf("bad request id: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"pool", "create", "/once"}, {"pool", "create", "/once"}} {
		r := runCLI(t, "{}\n", append([]string{"--server", s.addr}, append(args, "-f", "-", "--request-id", "pool-1")...)...)
		if r.code != exitOK {
			t.Fatalf("pool create with a request id: exit %d, stderr %q", r.code, r.stderr)
		}
	}

	id := strings.TrimSpace(first.stdout)
	s.waitFor(60*time.Second, "job once to succeed", func() (bool, string) {
		out := s.ok("job", "get", id)
		return strings.Contains(out, "SUCCEEDED"), out
	})
	js := s.ok("task", "get", id, "0", "-o", "json")
	if !strings.Contains(js, `"instanceId": 0`) || !strings.Contains(js, `"exitCode": 0`) {
		t.Errorf("task get -o json lacks zero values:\n%s", js)
	}
	y := s.ok("task", "get", id, "0", "-o", "yaml")
	if !strings.Contains(y, "instanceId: 0\n") {
		t.Errorf("task get -o yaml lacks instanceId: 0:\n%s", y)
	}
}
