package history

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Store is the archive of finished jobs. Every method takes the cluster the
// job belongs to: one store holds many clusters' history, and the
// federation's under its own name. Implementations are safe for concurrent
// use.
type Store interface {
	// Put archives jobs, all of them or, when it returns an error, none.
	// Archiving a job again (same cluster and id) is not an error and
	// keeps one record, the one put last: a collector that archived a job
	// and died before removing it from etcd archives it again.
	Put(ctx context.Context, jobs ...*Job) error
	// Get returns one archived job, or an error that errors.Is ErrNotFound.
	Get(ctx context.Context, cluster, jobID string) (*Job, error)
	// List returns one page of the jobs f selects, newest first (by
	// creation time, then id), each as ListJobs shows a job (Summary), and
	// the token of the next page ("" after the last). pageSize 0 is
	// DefaultPageSize; a page also ends before it would pass 2 MiB.
	// Paging is by position, not by offset: a job put or deleted while
	// someone pages neither repeats nor hides any other job.
	List(ctx context.Context, f Filter, pageSize uint32, pageToken string) ([]*pelotonv1.Job, string, error)
	// Delete removes one archived job (an operator's purge), or returns an
	// error that errors.Is ErrNotFound.
	Delete(ctx context.Context, cluster, jobID string) error

	// PutFederated archives objects of a federation (federated jobs and
	// services), all of them or, when it returns an error, none; as Put,
	// archiving one again keeps one record, the one put last.
	PutFederated(ctx context.Context, objs ...*Federated) error
	// GetFederated returns one archived object, or an error that
	// errors.Is ErrNotFound.
	GetFederated(ctx context.Context, federation string, kind Kind, id string) (*Federated, error)
	// ListFederated returns one page of the objects f selects, newest
	// first (by creation time, then id), and the token of the next page
	// ("" after the last); pages as List's.
	ListFederated(ctx context.Context, f FederatedFilter, pageSize uint32, pageToken string) ([]*Federated, string, error)
	// DeleteFederated removes one archived object, or returns an error
	// that errors.Is ErrNotFound.
	DeleteFederated(ctx context.Context, federation string, kind Kind, id string) error

	// Close releases the store; calls after it fail with ErrClosed.
	Close() error
}

// Job is one archived job: what the job manager answers about a finished
// job, as it answered it when the job was archived. GetJob is Status with
// the spec of its version (Spec), ListJobVersions is Versions, ListTasks
// and GetTask are Tasks (the effective task spec of an instance comes from
// Version(task.SpecVersion)), and ListJobs is Summary.
type Job struct {
	// Cluster is the name of the cluster the job ran in; the federation
	// archives its own objects under its own name.
	Cluster string
	// ID is the job's id.
	ID string
	// Versions is every spec version of the job, oldest first; one of them
	// is Status.SpecVersion.
	Versions []*pelotonv1.JobVersion
	// Status is the job's final status (its createTime is required: lists
	// page by it).
	Status *pelotonv1.JobStatus
	// Tasks is the final TaskStatus of each instance, by instance id, with
	// its transitions (TaskStatus.history, the instance's events); nil for
	// an instance that never had a task record.
	Tasks []*pelotonv1.TaskStatus
	// Updates is the job's updates (rolling updates, restarts, rollbacks),
	// oldest first: the job's own events.
	Updates []*pelotonv1.Update
	// ArchiveTime is when the job was archived, by the caller's clock.
	ArchiveTime time.Time
}

// Version returns spec version v of the job, or nil when it has none.
func (j *Job) Version(v uint64) *pelotonv1.JobVersion {
	for _, jv := range j.Versions {
		if jv.GetVersion() == v {
			return jv
		}
	}
	return nil
}

// Spec returns the spec in force when the job finished (the version its
// status names), or nil when it has none.
func (j *Job) Spec() *pelotonv1.JobSpec {
	return j.Version(j.Status.GetSpecVersion()).GetSpec()
}

// Summary returns the job as a job list shows it: its id, its status and
// the summary of its spec that ListJobs returns (name, type, pool,
// instance count, SLA, labels and foreign owner).
func (j *Job) Summary() *pelotonv1.Job {
	return &pelotonv1.Job{Id: j.ID, Spec: summarize(j.Spec()), Status: j.Status}
}

// summarize is the part of a spec a job list shows: what jobmgr's
// ListJobs returns, so that an archived job lists as a live one does.
func summarize(s *pelotonv1.JobSpec) *pelotonv1.JobSpec {
	if s == nil {
		return nil
	}
	return &pelotonv1.JobSpec{Name: s.Name, Type: s.Type, Pool: s.Pool, InstanceCount: s.InstanceCount,
		Sla: s.Sla, Labels: s.Labels, Foreign: s.Foreign}
}

// Filter selects archived jobs for List: the filters of `peloton job list`.
// Every filter that is set must hold.
type Filter struct {
	// Cluster is the cluster whose jobs are listed (required).
	Cluster string
	// Name selects jobs whose name contains it.
	Name string
	// Pool selects jobs of this pool (the path as the job's spec has it).
	Pool string
	// States selects jobs in one of these states.
	States []pelotonv1.JobState
	// Labels selects jobs that have every one of these labels, with these
	// values.
	Labels map[string]string
	// CreatedSince and CreatedUntil select jobs created at or after
	// CreatedSince and before CreatedUntil (zero: no bound).
	CreatedSince, CreatedUntil time.Time
}

// Page sizes of List, as the job manager's lists have them. A page also
// ends before it would pass pageBytes.
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
	pageBytes       = 2 << 20
)

// Limits on what identifies a record, so that every store can index it.
const (
	maxClusterLen = 128
	maxIDLen      = 256
)

var (
	// ErrNotFound is the error (wrapped) of Get and Delete for a job the
	// store does not hold.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable is the error (wrapped, in an *UnavailableError) of a
	// call that failed because the store's server could not be reached or
	// went away: the call may be retried, and a Put that failed so stored
	// all of its jobs or none (retrying it is safe: Put is idempotent).
	ErrUnavailable = errors.New("archive unavailable")
	// ErrInvalid is the error (wrapped, in a *FieldError) of a call with
	// an argument no store could take.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed is the error of a call after Close.
	ErrClosed = errors.New("history: store closed")
)

// FieldError is an invalid argument, named by its field path
// (jobs[0].status.createTime, pageToken).
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "history: " + e.Field + ": " + e.Reason }

// Is makes a FieldError errors.Is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// UnavailableError is a call that failed for want of the store's server;
// it errors.Is ErrUnavailable and unwraps to the driver's error.
type UnavailableError struct {
	// Op says what failed ("put 3 jobs", "get job x of cluster a").
	Op  string
	Err error
}

func (e *UnavailableError) Error() string {
	return "history: " + e.Op + ": archive unavailable, retry later: " + e.Err.Error()
}

// Is makes an UnavailableError errors.Is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *UnavailableError) Unwrap() error { return e.Err }

// putOp names a put in errors: the job, or how many.
func putOp(jobs []*Job) string {
	if len(jobs) == 1 {
		return "put job " + jobs[0].ID + " of cluster " + jobs[0].Cluster
	}
	return fmt.Sprintf("put %d jobs", len(jobs))
}

func notFound(cluster, id string) error {
	return fmt.Errorf("history: job %s of cluster %s: %w", id, cluster, ErrNotFound)
}

// checkName checks a string the stores index: every store takes valid
// UTF-8 without NUL (PostgreSQL's text refuses NUL).
func checkName(field, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return invalid(field, "required")
	case len(s) > max:
		return invalid(field, "at most %d bytes, got %d", max, len(s))
	}
	return checkText(field, s)
}

func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return invalid(field, "not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalid(field, "contains a NUL byte")
	}
	return nil
}

// checkKey checks the cluster and job id of Get and Delete.
func checkKey(cluster, id string) error {
	if err := checkName("cluster", cluster, maxClusterLen, true); err != nil {
		return err
	}
	return checkName("jobId", id, maxIDLen, true)
}

// checkJobs checks what Put stores: every job must be one a store can
// index and a reader can render, and no job may appear twice.
func checkJobs(jobs []*Job) error {
	seen := make(map[[2]string]int, len(jobs))
	for i, j := range jobs {
		f := fmt.Sprintf("jobs[%d]", i)
		if j == nil {
			return invalid(f, "required")
		}
		if err := checkName(f+".cluster", j.Cluster, maxClusterLen, true); err != nil {
			return err
		}
		if err := checkName(f+".id", j.ID, maxIDLen, true); err != nil {
			return err
		}
		k := [2]string{j.Cluster, j.ID}
		if prev, dup := seen[k]; dup {
			return invalid(f, "job %s of cluster %s is also jobs[%d]", j.ID, j.Cluster, prev)
		}
		seen[k] = i
		if j.Status == nil {
			return invalid(f+".status", "required")
		}
		if ct := j.Status.GetCreateTime(); ct == nil {
			return invalid(f+".status.createTime", "required: lists page by it")
		} else if err := ct.CheckValid(); err != nil {
			return invalid(f+".status.createTime", "%v", err)
		} else if t := ct.AsTime(); t.Before(minTime) || t.After(maxTime) {
			return invalid(f+".status.createTime", "%s is outside the years 1678 to 2262 that lists can sort", t.Format(time.RFC3339))
		}
		if len(j.Versions) == 0 {
			return invalid(f+".versions", "required: at least the version in force")
		}
		for vi, v := range j.Versions {
			if v.GetSpec() == nil {
				return invalid(fmt.Sprintf("%s.versions[%d].spec", f, vi), "required")
			}
		}
		spec := j.Spec()
		if spec == nil {
			return invalid(f+".status.specVersion", "version %d is not among the job's versions", j.Status.GetSpecVersion())
		}
		if err := checkText(f+".spec.name", spec.Name); err != nil {
			return err
		}
		if err := checkText(f+".spec.pool", spec.Pool); err != nil {
			return err
		}
		for k, v := range spec.Labels {
			if err := checkText(f+".spec.labels", k); err != nil {
				return err
			}
			if err := checkText(f+".spec.labels["+k+"]", v); err != nil {
				return err
			}
		}
		if uint64(len(j.Tasks)) > math.MaxUint32 {
			return invalid(f+".tasks", "at most %d instances", uint64(math.MaxUint32))
		}
	}
	return nil
}

// checkFilter checks List's filter and page size and returns the page
// size to use.
func checkFilter(f Filter, size uint32) (int, error) {
	if err := checkName("cluster", f.Cluster, maxClusterLen, true); err != nil {
		return 0, err
	}
	if !f.CreatedSince.IsZero() && !f.CreatedUntil.IsZero() && f.CreatedSince.After(f.CreatedUntil) {
		return 0, invalid("createdSince", "%s is after createdUntil %s", f.CreatedSince.Format(time.RFC3339Nano), f.CreatedUntil.Format(time.RFC3339Nano))
	}
	for k, v := range f.Labels {
		if k == "" {
			return 0, invalid("labels", "a label key must not be empty")
		}
		if err := checkText("labels", k); err != nil {
			return 0, err
		}
		if err := checkText("labels["+k+"]", v); err != nil {
			return 0, err
		}
	}
	for _, s := range []struct{ field, v string }{{"name", f.Name}, {"pool", f.Pool}} {
		if err := checkText(s.field, s.v); err != nil {
			return 0, err
		}
	}
	switch {
	case size == 0:
		return DefaultPageSize, nil
	case size > MaxPageSize:
		return 0, invalid("pageSize", "at most %d, got %d", MaxPageSize, size)
	}
	return int(size), nil
}

// cursor is a position in a list: the last job of a page, by creation
// time (nanoseconds since 1970) and id.
type cursor struct {
	createNanos int64
	id          string
}

// Page tokens are opaque to clients: base64 of "h1", the creation time
// and the id of the last job of the page. The two stores read each
// other's tokens.
const tokenKind = "h1"

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(tokenKind + "\x00" + strconv.FormatInt(c.createNanos, 10) + "\x00" + c.id))
}

func parseToken(token string) (c cursor, ok bool, err error) {
	if token == "" {
		return cursor{}, false, nil
	}
	bad := invalid("pageToken", "not a token this list returned; pass the next page token of the previous page, or nothing for the first")
	b, derr := base64.RawURLEncoding.DecodeString(token)
	parts := strings.SplitN(string(b), "\x00", 3)
	if derr != nil || len(parts) != 3 || parts[0] != tokenKind || parts[2] == "" {
		return cursor{}, false, bad
	}
	n, perr := strconv.ParseInt(parts[1], 10, 64)
	if perr != nil {
		return cursor{}, false, bad
	}
	return cursor{createNanos: n, id: parts[2]}, true, nil
}

// createNanos is a job's creation time in nanoseconds since 1970, the
// lists' sort key (Put checks that it fits).
func createNanos(j *Job) int64 {
	return timeNanos(j.Status.GetCreateTime().AsTime())
}

// timeNanos is t in nanoseconds since 1970, clamped to what an int64
// holds (a filter's bound may lie anywhere).
func timeNanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return minTime.UnixNano()
	case t.After(maxTime):
		return maxTime.UnixNano()
	}
	return t.UnixNano()
}

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// matches reports whether the summary of a job passes the filters that
// are not the list's order (name, pool, states, labels).
func matches(f Filter, j *pelotonv1.Job, states map[pelotonv1.JobState]bool) bool {
	spec := j.GetSpec()
	if f.Pool != "" && spec.GetPool() != f.Pool {
		return false
	}
	if f.Name != "" && !strings.Contains(spec.GetName(), f.Name) {
		return false
	}
	if len(states) > 0 && !states[j.GetStatus().GetState()] {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := spec.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func stateSet(states []pelotonv1.JobState) map[pelotonv1.JobState]bool {
	if len(states) == 0 {
		return nil
	}
	m := make(map[pelotonv1.JobState]bool, len(states))
	for _, s := range states {
		m[s] = true
	}
	return m
}
