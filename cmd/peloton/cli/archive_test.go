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
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// archiveFake answers as a cluster with an archive does: one live job and
// one archived job; ListJobs with archived lists the archived one.
type archiveFake struct {
	pelotonv1.UnimplementedJobServiceServer

	mu      sync.Mutex
	listReq *pelotonv1.ListJobsRequest
}

func archivedFixture() *pelotonv1.Job {
	j := makeJob("old-1").Name("nightly").Instances(2).State(pelotonv1.JobState_JOB_SUCCEEDED).Tasks("SUCCEEDED", 2).
		Created(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)).Obj()
	j.Status.Archived = true
	return j
}

func (f *archiveFake) ListJobs(_ context.Context, req *pelotonv1.ListJobsRequest) (*pelotonv1.ListJobsResponse, error) {
	f.mu.Lock()
	f.listReq = req
	f.mu.Unlock()
	if req.GetCreatedSince() != nil && req.GetCreatedUntil() != nil && !req.GetCreatedUntil().AsTime().After(req.GetCreatedSince().AsTime()) {
		return nil, status.Error(codes.InvalidArgument, "createdUntil: 2026-01-01T00:00:00Z is not after createdSince 2026-01-02T00:00:00Z: no job was created in between")
	}
	if req.GetArchived() {
		return &pelotonv1.ListJobsResponse{Jobs: []*pelotonv1.Job{archivedFixture()}}, nil
	}
	return &pelotonv1.ListJobsResponse{Jobs: []*pelotonv1.Job{makeJob("live-1").Name("web").State(pelotonv1.JobState_JOB_RUNNING).Obj()}}, nil
}

func (f *archiveFake) GetJob(_ context.Context, req *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	if req.GetJobId() == "old-1" {
		return &pelotonv1.GetJobResponse{Job: archivedFixture()}, nil
	}
	return nil, status.Errorf(codes.NotFound, "job %s does not exist", req.GetJobId())
}

func (f *archiveFake) CancelJob(_ context.Context, req *pelotonv1.CancelJobRequest) (*pelotonv1.CancelJobResponse, error) {
	return nil, status.Errorf(codes.FailedPrecondition, "job %s is archived (it finished and its time to live passed): it cannot be cancelled; "+
		"create a new job, or delete it to purge it from the archive", req.GetJobId())
}

func startArchiveFake(t *testing.T, f *archiveFake) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pelotonv1.RegisterJobServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestJobListArchived: job list passes --archived, --label, --created-since
// and --created-until to ListJobs, and its table marks archived jobs.
func TestJobListArchived(t *testing.T) {
	f := &archiveFake{}
	addr := startArchiveFake(t, f)
	before := time.Now()
	r := runCLI(t, "", "--server", addr, "job", "list", "--archived", "--label", "team=data", "--label", "tier=a=b",
		"--created-since", "2026-01-01T00:00:00+01:00", "--created-until", "90m")
	after := time.Now()
	if r.code != exitOK {
		t.Fatalf("job list --archived: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "old-1") || !strings.Contains(lines[1], "JOB_SUCCEEDED (archived)") {
		t.Errorf("job list --archived printed %q; want old-1 marked archived", r.stdout)
	}
	req := f.listReq
	if !req.GetArchived() || !proto.Equal(&pelotonv1.ListJobsRequest{Labels: req.GetLabels()}, &pelotonv1.ListJobsRequest{Labels: map[string]string{"team": "data", "tier": "a=b"}}) {
		t.Errorf("ListJobs request %v: want archived and labels team=data, tier=a=b", req)
	}
	if since := req.GetCreatedSince().AsTime(); !since.Equal(time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("--created-since sent %s", since)
	}
	if until := req.GetCreatedUntil().AsTime(); until.Before(before.Add(-90*time.Minute)) || until.After(after.Add(-90*time.Minute)) {
		t.Errorf("--created-until 90m sent %s; want 90 minutes before %s", until, before)
	}

	r = runCLI(t, "", "--server", addr, "job", "list", "--created-since", "7d")
	if r.code != exitOK || strings.Contains(r.stdout, "archived") || !strings.Contains(r.stdout, "live-1") {
		t.Errorf("job list: exit %d, stdout %q; want live-1, nothing archived", r.code, r.stdout)
	}
	if f.listReq.GetArchived() || f.listReq.GetLabels() != nil {
		t.Errorf("job list without --archived sent %v", f.listReq)
	}
	if since := f.listReq.GetCreatedSince().AsTime(); since.After(time.Now().Add(-7*24*time.Hour)) || since.Before(before.Add(-7*24*time.Hour-time.Minute)) {
		t.Errorf("--created-since 7d sent %s", since)
	}

	r = runCLI(t, "", "--server", addr, "job", "list", "--archived", "-o", "json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"archived": true`) {
		t.Errorf("job list --archived -o json: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestJobListArchivedBadFlags: bad filters fail before any call, naming the
// flag; what only the server can check comes back in its words.
func TestJobListArchivedBadFlags(t *testing.T) {
	f := &archiveFake{}
	addr := startArchiveFake(t, f)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--label", "team"}, `Error: invalid --label "team": want key=value, e.g. team=data`},
		{[]string{"--label", "=x"}, `Error: invalid --label "=x": want key=value, e.g. team=data`},
		{[]string{"--label", "a=1", "--label", "a=2"}, `Error: invalid --label "a=2": label a is already given as "1", and a job has one value per label`},
		{[]string{"--created-since", "yesterday"}, `Error: invalid --created-since "yesterday": want an RFC 3339 time (2026-01-02T15:04:05Z) or how long ago (24h, 90m, 7d)`},
		{[]string{"--created-until", "-3h"}, `Error: invalid --created-until "-3h": want an RFC 3339 time (2026-01-02T15:04:05Z) or how long ago (24h, 90m, 7d)`},
		{[]string{"--created-since", "2026-01-02"}, `Error: invalid --created-since "2026-01-02": want an RFC 3339 time (2026-01-02T15:04:05Z) or how long ago (24h, 90m, 7d)`},
	} {
		f.listReq = nil
		r := runCLI(t, "", append([]string{"--server", addr, "job", "list", "--archived"}, c.args...)...)
		line, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || line != c.want || f.listReq != nil {
			t.Errorf("job list %q: exit %d, stderr %q, called %v; want exit %d and %q", c.args, r.code, r.stderr, f.listReq != nil, exitUsage, c.want)
		}
	}
	r := runCLI(t, "", "--server", addr, "job", "list", "--archived", "--created-since", "2026-01-02T00:00:00Z", "--created-until", "2026-01-01T00:00:00Z")
	if r.code != exitError || !strings.HasPrefix(r.stderr, "Error: InvalidArgument: createdUntil: ") {
		t.Errorf("created-until before created-since: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestJobGetArchived: job get says an archived job is archived; a change
// of it fails in the API's words.
func TestJobGetArchived(t *testing.T) {
	addr := startArchiveFake(t, &archiveFake{})
	r := runCLI(t, "", "--server", addr, "job", "get", "old-1")
	if r.code != exitOK || !strings.Contains(r.stdout, "JOB_SUCCEEDED (archived)") || !strings.Contains(r.stdout, "\narchived: the job finished and was moved to the archive") {
		t.Errorf("job get of an archived job: exit %d, stdout %q", r.code, r.stdout)
	}
	r = runCLI(t, "", "--server", addr, "job", "get", "old-1", "-o", "yaml")
	if r.code != exitOK || !strings.Contains(r.stdout, "archived: true") {
		t.Errorf("job get -o yaml of an archived job: exit %d, stdout %q", r.code, r.stdout)
	}
	r = runCLI(t, "", "--server", addr, "job", "cancel", "old-1")
	if r.code != exitError || !strings.HasPrefix(r.stderr, "Error: FailedPrecondition: job old-1 is archived (it finished and its time to live passed)") {
		t.Errorf("job cancel of an archived job: exit %d, stderr %q", r.code, r.stderr)
	}
}
