package jobmgr

import (
	"strconv"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/paging"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// Page sizes of the list calls (package paging: a page also ends before
// it would pass pageBytes, so that no answer nears gRPC's 4 MiB default
// whatever the items hold).
const (
	DefaultPageSize = paging.DefaultSize
	MaxPageSize     = paging.MaxSize
	pageBytes       = paging.MaxBytes
)

// pageSize checks a requested page size; 0 means the default.
func pageSize(n uint32) (int, error) { return paging.Size(n, "pageSize") }

// Page tokens are opaque to clients (paging.Encode).
func decodeToken(token, kind string, n int) ([]string, error) {
	return paging.Decode(token, "pageToken", kind, n)
}

// JobFilter selects jobs for ListJobsPage; every filter that is set must
// hold. The API checks Labels and the creation bounds before it calls.
type JobFilter struct {
	Pool   string
	States []pelotonv1.JobState
	Name   string
	// Labels selects jobs that have every one of these labels, with these
	// values.
	Labels map[string]string
	// CreatedSince and CreatedUntil select jobs created at or after
	// CreatedSince and before CreatedUntil (zero: no bound).
	CreatedSince, CreatedUntil time.Time
}

// matches reports whether j passes the filters ListJobs does not apply
// itself (labels and creation time).
func (f JobFilter) matches(j *pelotonv1.Job) bool {
	if !f.CreatedSince.IsZero() || !f.CreatedUntil.IsZero() {
		ct := j.GetStatus().GetCreateTime().AsTime()
		if !f.CreatedSince.IsZero() && ct.Before(f.CreatedSince) {
			return false
		}
		if !f.CreatedUntil.IsZero() && !ct.Before(f.CreatedUntil) {
			return false
		}
	}
	for k, v := range f.Labels {
		if got, ok := j.GetSpec().GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
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
		if !f.matches(j) {
			continue
		}
		j.Spec = summarize(j.Spec)
		size := proto.Size(j)
		if len(out) == n || (len(out) > 0 && bytes+size > pageBytes) {
			last := out[len(out)-1]
			return out, paging.Encode("jobs", strconv.FormatInt(last.Status.GetCreateTime().AsTime().UnixNano(), 10), last.Id), nil
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
	if _, err := pageSize(size); err != nil {
		return nil, "", err
	}
	j, err := m.getJob(jobID)
	if err != nil {
		return nil, "", err
	}
	return TasksPage(jobID, len(j.tasks()), func(inst uint32) *pelotonv1.Task {
		if j.removed(inst) {
			return nil
		}
		return m.taskProto(j, inst, false)
	}, states, size, token)
}

// TasksPage is one page of the instances 0 to count-1 of job jobID, as
// ListTasks pages them: in instance order, only those whose task (as task
// renders it; nil for a removed instance, which is left out) is in one of
// states when states is set, and the token of the
// next page ("" after the last). The API pages an archived job's tasks
// with it, so a token means the same whichever store the job is in.
func TasksPage(jobID string, count int, task func(inst uint32) *pelotonv1.Task, states []pelotonv1.TaskState, size uint32, token string) ([]*pelotonv1.Task, string, error) {
	n, err := pageSize(size)
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
	out := make([]*pelotonv1.Task, 0, min(n, max(count-from, 0)))
	bytes := 0
	for i := from; i < count; i++ {
		tp := task(uint32(i))
		if tp == nil || len(want) > 0 && !want[tp.Status.State] {
			continue
		}
		size := proto.Size(tp)
		if len(out) == n || (len(out) > 0 && bytes+size > pageBytes) {
			return out, paging.Encode("tasks", jobID, strconv.Itoa(i)), nil
		}
		out = append(out, tp)
		bytes += size
	}
	return out, "", nil
}

// InstanceSpec is the effective task spec of instance inst under job spec
// s (its default spec with its override merged in): the spec GetTask
// returns with a task. The API renders archived tasks with it.
func InstanceSpec(s *pelotonv1.JobSpec, inst uint32) *pelotonv1.TaskSpec {
	return instanceSpec(s, inst)
}
