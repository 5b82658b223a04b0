package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Read-through of archived jobs. A finished job leaves etcd for the history
// store once its time to live has passed; the calls about one job then find
// it there: jobmgr answers NotFound, and the archive answers instead. An
// archived job can no longer change: the calls that would change it answer
// FailedPrecondition, except DeleteJob, which purges it from the archive.

// SetHistory sets the archive of finished jobs the API reads through, and
// the name this cluster's jobs are archived under. nil h: no archive; calls
// about a job jobmgr does not know answer NotFound, and ListJobs with
// archived set answers FailedPrecondition.
func (s *Server) SetHistory(h history.Store, cluster string) {
	s.history, s.historyCluster = h, cluster
}

// archived returns job id from the archive when err, jobmgr's answer about
// it, is NotFound and the archive has it. Otherwise it returns err (no
// archive, or the archive does not have the job either), or Unavailable
// when the archive cannot be reached.
func (s *Server) archived(ctx context.Context, id string, err error) (*history.Job, error) {
	if s.history == nil || apierr.Code(err) != codes.NotFound {
		return nil, err
	}
	if _, lerr := s.jm.JobPool(id); lerr == nil {
		return nil, err // the job is live: what is not found is in it (an instance, a run)
	}
	j, herr := s.history.Get(ctx, s.historyCluster, id)
	switch {
	case herr == nil:
		return j, nil
	case errors.Is(herr, history.ErrNotFound), errors.Is(herr, history.ErrInvalid):
		// An id the archive could not hold is not in it either.
		return nil, err
	case errors.Is(herr, history.ErrUnavailable):
		return nil, archiveUnavailable(herr)
	}
	return nil, fmt.Errorf("read job %s from the archive: %w", id, herr)
}

func archiveUnavailable(err error) error {
	return apierr.Unavailable("the archive of finished jobs cannot be reached; retry later: %v", err)
}

// refuseArchived turns err, jobmgr's answer to a change of job id, into
// FailedPrecondition when the job is archived.
func (s *Server) refuseArchived(ctx context.Context, id, what string, err error) error {
	if _, aerr := s.archived(ctx, id, err); aerr != nil {
		return aerr
	}
	return apierr.FailedPrecondition("job %s is archived (it finished and its time to live passed): it cannot be %s; "+
		"create a new job, or delete it to purge it from the archive", id, what)
}

// purgeArchived deletes job id from the archive. With mustExist, a job the
// archive no longer has is NotFound (someone purged it first); without, it
// is nothing to do (DeleteJob of a live job purges the copy of a job being
// archived as it is deleted, if there is one).
func (s *Server) purgeArchived(ctx context.Context, id string, mustExist bool) error {
	if s.history == nil {
		return nil
	}
	err := s.history.Delete(ctx, s.historyCluster, id)
	switch {
	case err == nil:
		if mustExist {
			s.log.Info("archived job purged", "job", id)
		}
		return nil
	case errors.Is(err, history.ErrNotFound), errors.Is(err, history.ErrInvalid):
		if mustExist {
			return apierr.NotFound("job %s does not exist", id)
		}
		return nil
	case errors.Is(err, history.ErrUnavailable):
		if mustExist {
			return archiveUnavailable(err)
		}
		return apierr.Unavailable("job %s is deleted from the live store, but the archive of finished jobs cannot be reached "+
			"to delete the copy it may hold of it; retry the delete: %v", id, err)
	}
	return fmt.Errorf("delete job %s from the archive: %w", id, err)
}

// archivedJobProto is an archived job as GetJob returns it: its final
// status, marked archived, with the spec in force when it finished.
func archivedJobProto(j *history.Job) *pelotonv1.Job {
	st := proto.Clone(j.Status).(*pelotonv1.JobStatus)
	st.Archived = true
	return &pelotonv1.Job{Id: j.ID, Spec: j.Spec(), Status: st}
}

// archivedTask is instance inst of an archived job as jobmgr renders a
// task: its final status (a task never created is INITIALIZED, "task not
// created yet"), the id of its last run, and with withSpec the effective
// spec of the version it ran.
func archivedTask(j *history.Job, inst uint32, withSpec bool) *pelotonv1.Task {
	if !jobmgr.HasInstance(j.Spec(), inst) {
		return nil // removed by a scale: no instance (jobmgr/holes.go)
	}
	out := &pelotonv1.Task{JobId: j.ID, InstanceId: inst}
	if int(inst) < len(j.Tasks) && j.Tasks[inst] != nil {
		out.Status = proto.Clone(j.Tasks[inst]).(*pelotonv1.TaskStatus)
	} else {
		out.Status = &pelotonv1.TaskStatus{State: pelotonv1.TaskState_INITIALIZED, Message: "task not created yet"}
	}
	out.TaskId = resmgr.RunTaskID(j.ID, inst, out.Status.RunId)
	out.Status.Revocable = j.Spec().GetSla().GetRevocable()
	if withSpec {
		if v := j.Version(out.Status.SpecVersion).GetSpec(); v != nil {
			out.Spec = jobmgr.InstanceSpec(v, inst)
		}
	}
	return out
}

// checkArchivedInstance answers as jobmgr does for an instance a job does
// not have.
func checkArchivedInstance(j *history.Job, inst uint32) error {
	if n := len(j.Tasks); int(inst) >= n {
		return apierr.NotFound("job %s has no instance %d (instanceCount %d)", j.ID, inst, n)
	}
	if !jobmgr.HasInstance(j.Spec(), inst) {
		return apierr.NotFound("job %s has no instance %d: it was removed by a scale (spec.removedInstances)", j.ID, inst)
	}
	return nil
}

// archivedLogs opens the output of run run of instance inst of an archived
// job (run 0: the instance's last run that started), straight from the
// backend: the job manager no longer knows the job. Backends keep an ended
// run's output for a while only.
func (s *Server) archivedLogs(ctx context.Context, j *history.Job, inst, run uint32, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	if err := checkArchivedInstance(j, inst); err != nil {
		return nil, err
	}
	t := j.Tasks[inst]
	if t == nil || t.RunId == 0 {
		return nil, apierr.FailedPrecondition("instance %d of archived job %s never started", inst, j.ID)
	}
	cur := t.RunId
	if run == 0 {
		run = cur
		if t.Host == "" && run > 1 {
			run-- // its last run was created but never started: show the one before
		}
	}
	if run > cur {
		return nil, apierr.NotFound("instance %d of archived job %s has no run %d (its last run is %d)", inst, j.ID, run, cur)
	}
	opts.Follow = false
	rc, err := s.hm.Logs(ctx, resmgr.RunTaskID(j.ID, inst, run), opts)
	if errors.Is(err, hostmgr.ErrUnknownTask) {
		return nil, apierr.NotFound("the output of run %d of instance %d of archived job %s is no longer kept "+
			"(the backend keeps an ended run's output for a while only, e.g. the local backend's --log-retention)", run, inst, j.ID)
	}
	if errors.Is(err, hostmgr.ErrNoLogTimes) {
		return nil, apierr.FailedPrecondition("since, timestamps: run %d of instance %d of archived job %s: %v", run, inst, j.ID, err)
	}
	if err != nil {
		return nil, apierr.Unavailable("open logs: %v", err)
	}
	return rc, nil
}

// archivedPool is the pool of an archived job, for authorization.
func (s *Server) archivedPool(ctx context.Context, id string, err error) (string, error) {
	j, aerr := s.archived(ctx, id, err)
	if aerr != nil {
		return "", aerr
	}
	return j.Spec().GetPool(), nil
}

// listArchivedJobs is ListJobs over the archive.
func (s *Server) listArchivedJobs(ctx context.Context, f jobmgr.JobFilter, size uint32, token string) (*pelotonv1.ListJobsResponse, error) {
	if s.history == nil {
		return nil, apierr.FailedPrecondition("archived: this cluster keeps no archive of finished jobs (start it with --archive)")
	}
	js, next, err := s.history.List(ctx, history.Filter{Cluster: s.historyCluster, Name: f.Name, Pool: f.Pool, States: f.States,
		Labels: f.Labels, CreatedSince: f.CreatedSince, CreatedUntil: f.CreatedUntil}, size, token)
	var fe *history.FieldError
	switch {
	case errors.As(err, &fe):
		return nil, apierr.Invalid(fe.Field, "%s", fe.Reason)
	case errors.Is(err, history.ErrUnavailable):
		return nil, archiveUnavailable(err)
	case err != nil:
		return nil, fmt.Errorf("list the archive: %w", err)
	}
	for _, j := range js {
		if j.Status == nil {
			j.Status = &pelotonv1.JobStatus{}
		}
		j.Status.Archived = true
	}
	return &pelotonv1.ListJobsResponse{Jobs: js, NextPageToken: next}, nil
}

// archivedUpdates is an archived job's updates as ListUpdates returns
// them: newest first (by creation time, then id).
func archivedUpdates(j *history.Job) []*pelotonv1.Update {
	out := append([]*pelotonv1.Update(nil), j.Updates...)
	sort.SliceStable(out, func(a, b int) bool {
		ta, tb := out[a].GetStatus().GetCreateTime().AsTime(), out[b].GetStatus().GetCreateTime().AsTime()
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return out[a].GetId() < out[b].GetId()
	})
	return out
}
