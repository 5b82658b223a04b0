package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLargestJobListsThroughCLIAndREST: every instance of a job at the
// documented maximum (100,000) is listed by `peloton task list` and through
// REST pages, where one answer of them all used to exceed gRPC's 4 MiB.
func TestLargestJobListsThroughCLIAndREST(t *testing.T) {
	if testing.Short() {
		t.Skip("a 100,000-instance job")
	}
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 2})
	const n = 100000
	spec := batch("largest", n, "sleep", "3600")
	spec.DefaultSpec.Resources.Cpu = 1 // a few run; the rest wait, and are listed all the same
	cr, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	s.waitJob(cr.JobId, pelotonv1.JobState_JOB_RUNNING, 90e9)

	out, errOut, err := s.runCLI("task", "list", cr.JobId, "-o", "json")
	if err != nil {
		t.Fatalf("task list: %v\n%s", err, errOut)
	}
	var all struct {
		Tasks []struct {
			InstanceID uint32 `json:"instanceId"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("task list -o json: %v", err)
	}
	if len(all.Tasks) != n {
		t.Fatalf("task list printed %d tasks, want %d", len(all.Tasks), n)
	}
	for i, tk := range all.Tasks {
		if tk.InstanceID != uint32(i) {
			t.Fatalf("task list: row %d is instance %d", i, tk.InstanceID)
		}
	}
	out, _, err = s.runCLI("task", "list", cr.JobId, "--limit", "7")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 7 { // a header and 7 rows
		t.Fatalf("task list --limit 7: %v\n%s", err, out)
	}

	seen, pages, token := 0, 0, ""
	for pages < 100 {
		var page struct {
			Tasks         []json.RawMessage `json:"tasks"`
			NextPageToken string            `json:"nextPageToken"`
		}
		code, raw := s.rest("GET", fmt.Sprintf("/v1/jobs/%s/tasks?pageSize=5000&pageToken=%s", cr.JobId, url.QueryEscape(token)), nil, &page)
		if code != 200 {
			t.Fatalf("REST page %d: %d %.300s", pages, code, raw)
		}
		if len(page.Tasks) > 5000 {
			t.Fatalf("REST page of %d tasks, asked for 5000", len(page.Tasks))
		}
		seen += len(page.Tasks)
		pages++
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if seen != n || pages != n/5000 {
		t.Fatalf("REST listed %d tasks in %d pages, want %d in %d", seen, pages, n, n/5000)
	}
	if code, raw := s.rest("GET", "/v1/jobs/"+cr.JobId+"/tasks?pageSize=5001", nil, nil); code != 400 || !strings.Contains(raw, "pageSize: at most 5000") {
		t.Errorf("pageSize 5001: %d %.200s", code, raw)
	}
	if code, raw := s.rest("GET", "/v1/jobs/"+cr.JobId+"/tasks?pageToken=garbage", nil, nil); code != 400 || !strings.Contains(raw, "pageToken:") {
		t.Errorf("a bad page token: %d %.200s", code, raw)
	}
}

// TestBigDescriptionsListFine: jobs with descriptions at the limit are
// created, listed and got; one over it is refused naming the field, and
// the list does not carry descriptions (GetJob does).
func TestBigDescriptionsListFine(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 2})
	var ids []string
	for i := range 3 {
		spec := batch(fmt.Sprintf("described-%d", i), 1, "true")
		spec.Description = strings.Repeat("d", 64<<10)
		cr, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cr.JobId)
	}
	tooBig := batch("too-described", 1, "true")
	tooBig.Description = strings.Repeat("d", 10<<20)
	_, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: tooBig})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.description: at most 65536 bytes") {
		t.Fatalf("a 10 MB description: %v", err)
	}
	out, errOut, err := s.runCLI("job", "list", "-o", "json")
	if err != nil {
		t.Fatalf("job list: %v\n%s", err, errOut)
	}
	if strings.Count(out, `"described-`) != 3 || strings.Contains(out, "dddd") {
		t.Fatalf("job list -o json: want the 3 jobs without their descriptions, got %d bytes", len(out))
	}
	out, _, err = s.runCLI("job", "get", ids[0], "-o", "json")
	if err != nil || !strings.Contains(out, strings.Repeat("d", 64<<10)) {
		t.Fatalf("job get of a job with a 64 KiB description: %v (%d bytes)", err, len(out))
	}
	out, _, err = s.runCLI("job", "list", "--limit", "2")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 2 {
		t.Fatalf("job list --limit 2: %v\n%s", err, out)
	}
	// Paging by one: every job once, newest first.
	var got []string
	req := &pelotonv1.ListJobsRequest{PageSize: 1}
	for range 10 {
		resp, err := s.jobs.ListJobs(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.Jobs {
			got = append(got, j.Id)
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	if len(got) != 3 || got[0] != ids[2] || got[2] != ids[0] {
		t.Fatalf("jobs paged one at a time: %v, want %v newest first", got, ids)
	}
}
