package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/testing/pgtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// listAll pages through ListJobs (archived or live) for jobs named name*.
func listAll(t *testing.T, jobs pelotonv1.JobServiceClient, name string, archived bool) ([]*pelotonv1.Job, error) {
	t.Helper()
	var out []*pelotonv1.Job
	token := ""
	for page := 0; page < 1000; page++ {
		resp, err := jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{Name: name, Archived: archived, PageToken: token, PageSize: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Jobs...)
		if token = resp.NextPageToken; token == "" {
			return out, nil
		}
	}
	t.Fatal("more than 1,000 pages")
	return nil, nil
}

// jobKeys counts the records of the jobs of ids left under the cluster's
// prefix of the etcd at endpoints.
func jobKeys(t *testing.T, endpoints []string, ids map[string]bool) []string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctxT(t), cluster.ClusterPrefix("local"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), cluster.ClusterPrefix("local"))
		if strings.HasPrefix(k, "requests/") {
			continue
		}
		for _, part := range strings.Split(k, "/") {
			if ids[part] {
				left = append(left, k)
			}
		}
	}
	return left
}

// TestFinishedJobsReadFromTheArchiveAcrossRestarts: a job whose spec
// gives it no time to live after it finished is archived and leaves the
// store; GetJob, ListTasks, GetTask and ListJobVersions still answer for
// it, marked archived, and the archived list has it. A job kept live by
// the cluster's time to live is still live after a restart (loaded when
// asked for), and so is the archived one archived.
func TestFinishedJobsReadFromTheArchiveAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	hour := time.Hour
	opts := stackOpts{backend: "sim", hosts: 4, configure: func(c *cluster.Config) { c.FinishedJobTTL = &hour }}
	s := startStack(t, dir, opts)
	gone := batch("gone", 3, "sleep", "0.05")
	gone.TtlSecondsAfterFinished = proto.Uint32(0)
	goneID := s.createJob(gone)
	keptID := s.createJob(batch("kept", 2, "sleep", "0.05"))
	s.waitJob(keptID, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)
	checkArchived := func(s *stack) {
		t.Helper()
		testutil.Eventually(t, time.Minute, "job gone archived", func() error {
			resp, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: goneID})
			if err != nil {
				return err
			}
			if !resp.Job.Status.Archived {
				return fmt.Errorf("still live: %v", resp.Job.Status.State)
			}
			return nil
		})
		resp, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: goneID})
		if err != nil || resp.Job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || resp.Job.Spec.GetName() != "gone" {
			t.Fatalf("archived GetJob: %v, %v", resp, err)
		}
		ts, err := s.tasks.ListTasks(ctxT(t), &pelotonv1.ListTasksRequest{JobId: goneID})
		if err != nil || len(ts.Tasks) != 3 {
			t.Fatalf("archived ListTasks: %v, %v", ts, err)
		}
		for _, tk := range ts.Tasks {
			if tk.Status.State != pelotonv1.TaskState_SUCCEEDED || tk.Status.Host == "" {
				t.Errorf("archived task: %v", tk.Status)
			}
		}
		if tk, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: goneID, InstanceId: 2}); err != nil || tk.Task.Status.State != pelotonv1.TaskState_SUCCEEDED {
			t.Errorf("archived GetTask: %v, %v", tk, err)
		}
		if vs, err := s.jobs.ListJobVersions(ctxT(t), &pelotonv1.ListJobVersionsRequest{JobId: goneID}); err != nil || len(vs.Versions) != 1 {
			t.Errorf("archived ListJobVersions: %v, %v", vs, err)
		}
		if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: goneID}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("cancel of an archived job: %v, want FailedPrecondition", err)
		}
		archived, err := listAll(t, s.jobs, "", true)
		if err != nil || len(archived) != 1 || archived[0].Id != goneID || !archived[0].Status.Archived {
			t.Errorf("archived list: %v, %v", archived, err)
		}
		live, err := listAll(t, s.jobs, "", false)
		if err != nil || len(live) != 1 || live[0].Id != keptID || live[0].Status.Archived {
			t.Errorf("live list: %v, %v", live, err)
		}
		if left := jobKeys(t, s.ready.EtcdEndpoints, map[string]bool{goneID: true}); len(left) > 0 {
			t.Errorf("records of the archived job left in etcd: %v", left)
		}
		kept := s.waitJob(keptID, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)
		if kept.Status.Archived || kept.Spec.DefaultSpec == nil {
			t.Errorf("the job kept live: %v", kept)
		}
	}
	checkArchived(s)
	s.stop()
	s = startStack(t, dir, opts)
	checkArchived(s)
}

// TestKill9DuringCollectionArchivesEachJobOnce SIGKILLs `peloton up` while
// its collector moves hundreds of finished jobs to the archive, then
// starts it again: every job ends in the archive exactly once, none is
// lost, and none is left in etcd.
func TestKill9DuringCollectionArchivesEachJobOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts peloton up")
	}
	bin := buildPeloton(t)
	dir := t.TempDir()
	flags := []string{"--backend", "sim", "--hosts", "50", "--finished-job-ttl", "0s"}
	p := startUpWith(t, bin, dir, flags...)
	const n = 300
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		resp, err := p.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: batch(fmt.Sprintf("k9-%03d", i), 4, "sleep", "0.05")})
		if err != nil {
			t.Fatal(err)
		}
		ids[resp.JobId] = true
	}
	// Kill once the collector has begun and before it has ended.
	var archivedAtKill, liveAtKill int
	testutil.Eventually(t, 2*time.Minute, "the collector under way", func() error {
		a, err := listAll(t, p.jobs, "k9-", true)
		if err != nil {
			return err
		}
		if len(a) == 0 {
			return fmt.Errorf("nothing archived yet")
		}
		archivedAtKill = len(a)
		return nil
	})
	p.kill()
	p = startUpWith(t, bin, dir, flags...)
	if live, err := listAll(t, p.jobs, "k9-", false); err == nil {
		liveAtKill = len(live)
	}
	t.Logf("killed with %d jobs archived; %d live after the restart", archivedAtKill, liveAtKill)
	var archived []*pelotonv1.Job
	testutil.Eventually(t, 3*time.Minute, "every job archived", func() error {
		live, err := listAll(t, p.jobs, "k9-", false)
		if err != nil {
			return err
		}
		if archived, err = listAll(t, p.jobs, "k9-", true); err != nil {
			return err
		}
		if len(live) > 0 || len(archived) < n {
			return fmt.Errorf("%d live, %d archived", len(live), len(archived))
		}
		return nil
	})
	seen := map[string]int{}
	for _, j := range archived {
		seen[j.Id]++
		if j.Status.State != pelotonv1.JobState_JOB_SUCCEEDED || j.Status.TaskCounts["SUCCEEDED"] != 4 {
			t.Errorf("archived job %s: %v %v", j.Id, j.Status.State, j.Status.TaskCounts)
		}
	}
	var twice, missing []string
	for id, c := range seen {
		if c > 1 {
			twice = append(twice, id)
		}
	}
	for id := range ids {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(twice)
	if len(twice) > 0 || len(missing) > 0 || len(archived) != n {
		t.Fatalf("%d archived for %d jobs; twice: %v; missing: %v", len(archived), n, twice, missing)
	}
}

// TestPostgresArchiveRestartUnderLoad runs a stack whose archive is a
// real PostgreSQL server, with jobs finishing all the while, and stops the
// server for a few seconds in the middle: no job leaves the store before
// it is archived (each is readable throughout, live or archived), the
// collector waits and retries (/readyz says degraded meanwhile), and once
// the server is back every job is archived and gone from etcd.
func TestPostgresArchiveRestartUnderLoad(t *testing.T) {
	pg := pgtest.New(t)
	url := pg.URL(pg.NewDatabase(t))
	zero := time.Duration(0)
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 20, configure: func(c *cluster.Config) {
		c.Archive, c.FinishedJobTTL = url, &zero
	}})
	ids := map[string]bool{}
	create := func(i int) {
		ids[s.createJob(batch(fmt.Sprintf("pg-%03d", i), 3, "sleep", "0.05"))] = true
	}
	// readable checks that every job is live or archived: a job that is
	// neither was removed before it was archived.
	readable := func(archiveDown bool) {
		t.Helper()
		for id := range ids {
			resp, err := s.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
			switch {
			case err == nil:
				if archiveDown && resp.Job.Status.Archived {
					t.Errorf("job %s read from an archive that is down", id)
				}
			case archiveDown && status.Code(err) == codes.Unavailable:
				// Archived before the server stopped: the archive cannot
				// be read now, and says so.
			default:
				t.Fatalf("job %s: %v", id, err)
			}
		}
	}
	for i := 0; i < 40; i++ {
		create(i)
	}
	testutil.Eventually(t, time.Minute, "jobs archived", func() error {
		a, err := listAll(t, s.jobs, "pg-", true)
		if err != nil || len(a) == 0 {
			return fmt.Errorf("%d archived (%v)", len(a), err)
		}
		return nil
	})
	pg.Stop(t)
	before := len(ids)
	for i := before; i < before+40; i++ {
		create(i)
	}
	// Readable all through the outage of the archive, until the collector
	// has failed to archive twice and /readyz says it cannot.
	failuresBefore := promtest.ToFloat64(metrics.JobsCollectFailures)
	testutil.Eventually(t, 30*time.Second, "two failed archive writes and /readyz degraded", func() error {
		readable(true)
		if n := promtest.ToFloat64(metrics.JobsCollectFailures) - failuresBefore; n < 2 {
			return fmt.Errorf("%v failed archive writes", n)
		}
		if code, body := s.rest("GET", "/readyz", nil, nil); code != 200 || !strings.Contains(body, "degraded") || !strings.Contains(body, "cannot be archived") {
			return fmt.Errorf("/readyz: %d %q", code, body)
		}
		return nil
	})
	readable(true)
	if _, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{Archived: true}); status.Code(err) != codes.Unavailable {
		t.Errorf("archived list while the archive is down: %v, want Unavailable", err)
	}
	pg.Start(t)
	testutil.Eventually(t, 2*time.Minute, "every job archived", func() error {
		live, err := listAll(t, s.jobs, "pg-", false)
		if err != nil {
			return err
		}
		a, err := listAll(t, s.jobs, "pg-", true)
		if err != nil {
			return err
		}
		if len(live) > 0 || len(a) != len(ids) {
			return fmt.Errorf("%d live, %d archived of %d", len(live), len(a), len(ids))
		}
		return nil
	})
	readable(false)
	testutil.Eventually(t, 30*time.Second, "/readyz ok", func() error {
		if code, body := s.rest("GET", "/readyz", nil, nil); code != 200 || strings.Contains(body, "degraded") {
			return fmt.Errorf("/readyz: %d %q", code, body)
		}
		return nil
	})
	if left := jobKeys(t, s.ready.EtcdEndpoints, ids); len(left) > 0 {
		t.Errorf("records left in etcd: %v", left)
	}
}
