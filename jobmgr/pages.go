package jobmgr

import (
	"encoding/base64"

	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// Page sizes of the list calls. A page also ends before it would pass
// pageBytes, so that no answer nears gRPC's 4 MiB default whatever the
// items hold.
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
	pageBytes       = 2 << 20
)

// pageSize checks a requested page size; 0 means the default.
func pageSize(n uint32) (int, error) {
	switch {
	case n == 0:
		return DefaultPageSize, nil
	case n > MaxPageSize:
		return 0, apierr.Invalid("pageSize", "at most %d, got %d", MaxPageSize, n)
	}
	return int(n), nil
}

// Page tokens are opaque to clients: base64 of "<kind>:<fields>".
func encodeToken(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, "\x00")))
}

func decodeToken(token, kind string, n int) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	parts := strings.Split(string(b), "\x00")
	if err != nil || len(parts) != n+1 || parts[0] != kind {
		return nil, apierr.Invalid("pageToken", "not a token this list returned; pass next_page_token of the previous page, or nothing for the first")
	}
	return parts[1:], nil
}

// JobFilter selects jobs for ListJobsPage.
type JobFilter struct {
	Pool   string
	States []pelotonv1.JobState
	Name   string
}

// ListJobsPage is one page of ListJobs (newest first), with job specs
// summarized, and the token of the next page ("" after the last).
func (m *Manager) ListJobsPage(f JobFilter, size uint32, token string) ([]*pelotonv1.Job, string, error) {
	n, err := pageSize(size)
	if err != nil {
		return nil, "", err
	}
	var afterNanos int64
	var afterID string
	if token != "" {
		parts, err := decodeToken(token, "jobs", 2)
		if err != nil {
			return nil, "", err
		}
		if afterNanos, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
			return nil, "", apierr.Invalid("pageToken", "not a token this list returned")
		}
		afterID = parts[1]
	}
	all, err := m.ListJobs(f.Pool, f.States, f.Name)
	if err != nil {
		return nil, "", err
	}
	out := make([]*pelotonv1.Job, 0, min(n, len(all)))
	bytes := 0
	for _, j := range all {
		t := j.Status.GetCreateTime().AsTime().UnixNano()
		if token != "" && (t > afterNanos || t == afterNanos && j.Id <= afterID) {
			continue // on an earlier page
		}
		j.Spec = summarize(j.Spec)
		size := proto.Size(j)
		if len(out) == n || (len(out) > 0 && bytes+size > pageBytes) {
			last := out[len(out)-1]
			return out, encodeToken("jobs", strconv.FormatInt(last.Status.GetCreateTime().AsTime().UnixNano(), 10), last.Id), nil
		}
		out = append(out, j)
		bytes += size
	}
	return out, "", nil
}

// summarize is the part of a spec a list shows: no description, no task
// specs (GetJob has them).
func summarize(s *pelotonv1.JobSpec) *pelotonv1.JobSpec {
	if s == nil {
		return nil
	}
	return &pelotonv1.JobSpec{Name: s.Name, Type: s.Type, Pool: s.Pool, InstanceCount: s.InstanceCount, Sla: s.Sla, Labels: s.Labels, Foreign: s.Foreign}
}

// ListTasksPage is one page of ListTasks (in instance order) and the token
// of the next page ("" after the last).
func (m *Manager) ListTasksPage(jobID string, states []pelotonv1.TaskState, size uint32, token string) ([]*pelotonv1.Task, string, error) {
	n, err := pageSize(size)
	if err != nil {
		return nil, "", err
	}
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, "", err
	}
	from := 0
	if token != "" {
		parts, err := decodeToken(token, "tasks", 2)
		if err != nil {
			return nil, "", err
		}
		next, perr := strconv.Atoi(parts[1])
		if parts[0] != jobID || perr != nil || next < 0 {
			return nil, "", apierr.Invalid("pageToken", "not a token of this job's task list")
		}
		from = next
	}
	want := map[pelotonv1.TaskState]bool{}
	for _, s := range states {
		want[s] = true
	}
	count := len(j.tasks())
	out := make([]*pelotonv1.Task, 0, min(n, max(count-from, 0)))
	bytes := 0
	for i := from; i < count; i++ {
		tp := m.taskProto(j, uint32(i), false)
		if len(want) > 0 && !want[tp.Status.State] {
			continue
		}
		size := proto.Size(tp)
		if len(out) == n || (len(out) > 0 && bytes+size > pageBytes) {
			return out, encodeToken("tasks", jobID, strconv.Itoa(i)), nil
		}
		out = append(out, tp)
		bytes += size
	}
	return out, "", nil
}
