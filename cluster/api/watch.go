package api

import (
	"context"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// watchBuffer bounds the changes a watcher has not taken yet. A change only
// names a record, and a watcher takes every change waiting at once and
// reads each record once, so it falls behind only when it cannot send as
// fast as the cluster changes; then it is ended, never waited for.
var watchBuffer = 4096

// Why a watch ends, in words a client can show (and the CLI does).
var (
	errWatcherBehind = status.Error(codes.ResourceExhausted, "watcher fell behind; watch again")
	errServerEnding  = status.Error(codes.Unavailable, "the server is stopping (or no longer leads); watch again")
)

// WatchTasks streams a job's instances: each as it is, a synced marker,
// then each instance that changes.
func (s *Server) WatchTasks(req *pelotonv1.WatchTasksRequest, stream pelotonv1.TaskService_WatchTasksServer) error {
	id := req.GetJobId()
	if id == "" {
		return apierr.Invalid("job_id", "must be set")
	}
	ctx := stream.Context()
	w := s.jm.Watches().Subscribe([]string{id}, watchBuffer)
	defer w.Close()
	ts, err := s.jm.ListTasks(id, nil)
	if err != nil {
		// An archived job no longer changes: its tasks, and the end.
		a, aerr := s.archived(ctx, id, err)
		if aerr != nil {
			return aerr
		}
		for inst := range a.Tasks {
			t := archivedTask(a, uint32(inst), false)
			if t == nil {
				continue // a removed instance
			}
			if err := stream.Send(&pelotonv1.TaskChange{Task: t}); err != nil {
				return err
			}
		}
		return stream.Send(&pelotonv1.TaskChange{Synced: true})
	}
	sent := make(map[uint32]*pelotonv1.Task, len(ts))
	for _, t := range ts {
		if err := stream.Send(&pelotonv1.TaskChange{Task: t}); err != nil {
			return err
		}
		sent[t.InstanceId] = t
	}
	if err := stream.Send(&pelotonv1.TaskChange{Synced: true}); err != nil {
		return err
	}
	for {
		batch, err := s.nextChanges(ctx, w)
		if err != nil {
			return err
		}
		for _, c := range batch {
			if c.Gone {
				// Archived: it can no longer change, and the watch is over.
				if _, err := s.archived(ctx, id, apierr.NotFound("job %s was deleted", id)); err != nil {
					return err
				}
				return nil
			}
			if err := s.sendTaskChanges(stream, id, c, sent); err != nil {
				return err
			}
		}
	}
}

// removedTask marks an instance in sendTaskChanges' sent whose removal
// was sent.
var removedTask = &pelotonv1.Task{}

// sendTaskChanges sends what c changed of job id's instances that differs
// from what was sent: the instance, or, for a change of the job, the
// instances a scale added or removed.
func (s *Server) sendTaskChanges(stream pelotonv1.TaskService_WatchTasksServer, id string, c jobmgr.Change, sent map[uint32]*pelotonv1.Task) error {
	var insts []uint32
	if c.Instance >= 0 {
		if sent[uint32(c.Instance)] == removedTask {
			return nil
		}
		insts = []uint32{uint32(c.Instance)}
	} else {
		j, err := s.jm.GetJob(id)
		if err != nil {
			return apierr.NotFound("job %s was deleted", id)
		}
		spec := j.GetSpec()
		n := jobmgr.InstanceExtent(spec) // the IDs, holes included
		var removed []uint32
		for inst, t := range sent {
			if t != removedTask && !jobmgr.HasInstance(spec, inst) {
				removed = append(removed, inst)
			}
		}
		sort.Slice(removed, func(a, b int) bool { return removed[a] < removed[b] })
		for _, inst := range removed {
			sent[inst] = removedTask // its last changes while it stops are not news
			if err := stream.Send(&pelotonv1.TaskChange{Task: &pelotonv1.Task{JobId: id, InstanceId: inst}, Removed: true}); err != nil {
				return err
			}
		}
		for inst := uint32(0); inst < n; inst++ {
			if (sent[inst] == nil || sent[inst] == removedTask) && jobmgr.HasInstance(spec, inst) {
				insts = append(insts, inst)
			}
		}
	}
	for _, inst := range insts {
		t, err := s.jm.GetTask(id, inst)
		if err != nil {
			continue // removed by a scale-down since: its job's change says so
		}
		t.Spec = nil
		if proto.Equal(t, sent[inst]) {
			continue
		}
		sent[inst] = t
		if err := stream.Send(&pelotonv1.TaskChange{Task: t}); err != nil {
			return err
		}
	}
	return nil
}

// nextChanges waits for changes and returns every one waiting, one per
// record, in the order they first came; or why the watch ends.
func (s *Server) nextChanges(ctx context.Context, w *jobmgr.Watch) ([]jobmgr.Change, error) {
	var first jobmgr.Change
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ending:
		return nil, errServerEnding
	case <-w.Lost():
		return nil, errWatcherBehind
	case first = <-w.Changes():
	}
	batch := []jobmgr.Change{first}
	seen := map[jobmgr.Change]bool{first: true}
	for {
		select {
		case c := <-w.Changes():
			if !seen[c] {
				seen[c] = true
				batch = append(batch, c)
			}
		default:
			return batch, nil
		}
	}
}

// WatchJobs streams jobs: each watched job as it is, a synced marker, then
// each watched job that changes.
func (s *Server) WatchJobs(req *pelotonv1.WatchJobsRequest, stream pelotonv1.JobService_WatchJobsServer) error {
	for k := range req.GetLabels() {
		if k == "" {
			return apierr.Invalid("labels", "a label key must not be empty")
		}
	}
	for i, id := range req.GetJobIds() {
		if id == "" {
			return apierr.Invalid("job_ids", "entry %d is empty", i)
		}
	}
	ctx := stream.Context()
	w := s.jm.Watches().Subscribe(req.GetJobIds(), watchBuffer)
	defer w.Close()
	var initial []*pelotonv1.Job
	if len(req.GetJobIds()) == 0 {
		// Every job as ListJobs has it: a finished job that left memory
		// is shown by its index entry, not loaded back to be shown.
		js, err := s.jm.ListJobs("", nil, "")
		if err != nil {
			return err
		}
		initial = js
	}
	for _, id := range req.GetJobIds() {
		j, err := s.jm.GetJob(id)
		if err != nil {
			a, aerr := s.archived(ctx, id, err)
			if aerr != nil {
				return aerr
			}
			j = archivedJobProto(a)
		}
		initial = append(initial, j)
	}
	sent := map[string]*pelotonv1.Job{}
	for _, j := range initial {
		id := j.GetId()
		if !hasLabels(j, req.GetLabels()) {
			continue
		}
		sent[id] = j
		if err := stream.Send(&pelotonv1.JobChange{Job: j}); err != nil {
			return err
		}
	}
	if err := stream.Send(&pelotonv1.JobChange{Synced: true}); err != nil {
		return err
	}
	for {
		batch, err := s.nextChanges(ctx, w)
		if err != nil {
			return err
		}
		done := map[string]bool{}
		for _, c := range batch {
			if done[c.Job] {
				continue
			}
			done[c.Job] = true
			if err := s.sendJobChange(stream, c, req.GetLabels(), sent); err != nil {
				return err
			}
		}
	}
}

// sendJobChange sends job c.Job as it is now (from the archive once it was
// archived), if it differs from what was sent; or that it was deleted (or
// no longer has the labels watched).
func (s *Server) sendJobChange(stream pelotonv1.JobService_WatchJobsServer, c jobmgr.Change, labels map[string]string, sent map[string]*pelotonv1.Job) error {
	j, err := s.jm.GetJob(c.Job)
	if c.Gone || err != nil {
		// Archived rather than deleted: sent as the archive has it.
		if a, aerr := s.archived(stream.Context(), c.Job, apierr.NotFound("job %s was deleted", c.Job)); aerr == nil {
			j, err = archivedJobProto(a), nil
		}
	}
	if err != nil || !hasLabels(j, labels) {
		if sent[c.Job] == nil {
			return nil
		}
		delete(sent, c.Job)
		return stream.Send(&pelotonv1.JobChange{Job: &pelotonv1.Job{Id: c.Job}, Deleted: true})
	}
	if proto.Equal(j, sent[c.Job]) {
		return nil
	}
	sent[c.Job] = j
	return stream.Send(&pelotonv1.JobChange{Job: j})
}

// hasLabels says whether j carries every label of want with its value.
func hasLabels(j *pelotonv1.Job, want map[string]string) bool {
	for k, v := range want {
		if got, ok := j.GetSpec().GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}
