package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// quarantinedCounter reads peloton_store_quarantined_records_total.
func (s *stack) quarantinedCounter() float64 {
	s.t.Helper()
	code, raw := s.rest("GET", "/metrics", nil, nil)
	m := regexp.MustCompile(`(?m)^peloton_store_quarantined_records_total (\S+)$`).FindStringSubmatch(raw)
	if code != 200 || m == nil {
		s.t.Fatalf("metrics: %d, no peloton_store_quarantined_records_total", code)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// TestCorruptRecordsDoNotStopARestart: garbage written under a task key and
// a job key while the stack is down does not keep it from starting. Both
// records are moved under quarantine/, the metric counts them, /readyz
// says the stack is degraded (still 200) and names them, the job whose
// runtime is gone answers FailedPrecondition, the instance whose record is
// gone runs again, and the other jobs, and new ones, run.
func TestCorruptRecordsDoNotStopARestart(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{})
	create := func(s *stack, name string, n uint32) string {
		t.Helper()
		resp, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: batch(name, n, "sleep", "3600")})
		if err != nil {
			t.Fatal(err)
		}
		return resp.JobId
	}
	lostTask, lostJob, bystander := create(s, "lost-task", 2), create(s, "lost-job", 1), create(s, "bystander", 2)
	for _, id := range []string{lostTask, lostJob, bystander} {
		s.waitJob(id, pelotonv1.JobState_JOB_RUNNING, 60*time.Second)
	}
	s.stop()

	// The stack is down: write garbage into its etcd, as a bad disk or a
	// bad hand would.
	taskKey, jobKey := "tasks/"+lostTask+"/1", "jobs/"+lostJob+"/runtime"
	func() {
		e, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: filepath.Join(dir, "etcd"), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		st, err := store.NewEtcd(context.Background(), store.EtcdConfig{Endpoints: e.Endpoints(), Prefix: cluster.ClusterPrefix(cluster.DefaultClusterName)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, k := range []string{taskKey, jobKey} {
			if _, err := st.Txn(context.Background(), store.Put(k, []byte("\xff\xfe this is not a record"), store.AnyRevision)); err != nil {
				t.Fatal(err)
			}
		}
	}()

	s2 := startStack(t, dir, stackOpts{})
	if n := s2.quarantinedCounter(); n < 2 {
		t.Errorf("peloton_store_quarantined_records_total is %v, want at least 2", n)
	}
	code, body := s2.rest("GET", "/readyz", nil, nil)
	if code != 200 || !strings.HasPrefix(body, "ok (degraded: 2 records in quarantine") ||
		!strings.Contains(body, "quarantine/"+taskKey+"@") || !strings.Contains(body, "quarantine/"+jobKey+"@") {
		t.Errorf("/readyz: %d %q, want 200, degraded, naming both records", code, body)
	}
	req := fmt.Sprintf("http://%s/readyz", s2.ready.HTTPAddr)
	var answer struct {
		Status string   `json:"status"`
		Count  int      `json:"count"`
		Items  []string `json:"items"`
	}
	if err := readyzJSON(req, &answer); err != nil || answer.Status != "degraded" || answer.Count != 2 || len(answer.Items) != 2 {
		t.Errorf("/readyz in JSON: %+v %v", answer, err)
	}

	if _, err := s2.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: lostJob}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "quarantine") {
		t.Errorf("GetJob of the job whose runtime is quarantined: %v, want FailedPrecondition", err)
	}
	testutil.Eventually(t, 60*time.Second, "the job that lost a task record runs both instances again", func() error {
		j, err := s2.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: lostTask})
		if err != nil {
			return err
		}
		if n := j.Job.Status.TaskCounts["RUNNING"]; n != 2 {
			return fmt.Errorf("%v", j.Job.Status.TaskCounts)
		}
		return nil
	})
	s2.waitJob(bystander, pelotonv1.JobState_JOB_RUNNING, 60*time.Second)
	s2.waitJob(create(s2, "after", 1), pelotonv1.JobState_JOB_RUNNING, 60*time.Second)
}

// readyzJSON GETs url asking for JSON and decodes the answer.
func readyzJSON(url string, out any) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}
