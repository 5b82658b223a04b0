package federation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The federation's history (issue 31): etcd holds what the federation
// must act on, the history store what it did. With Options.History set,
//
//   - a federated job done for FinishedJobTTL (by the end its cluster
//     reported, or its creation when none is known) is archived, then its
//     record leaves etcd (archiveJobs, a bounded pass every ArchiveEvery);
//   - a deleted federated service's final record, its rollouts in it, is
//     archived before the record leaves etcd (forgetIfGone);
//   - GetFederatedJob and GetFederatedService of an object no longer in
//     etcd read it from the archive, marked archived, and the lists list
//     the archive when asked to (archived).
//
// Always archive, then delete: a process killed between the two finds the
// record in etcd at its next start and archives it again (a put of the
// same object keeps one record), so nothing is lost and nothing doubles.
// A pass whose put fails deletes nothing.

// DefaultHistoryName is the name the federation archives under when
// Options.HistoryName is empty: the "cluster" of its records, which live
// apart from the clusters' jobs (history.Federated).
const DefaultHistoryName = "federation"

// DefaultFinishedJobTTL is how long a done federated job stays in etcd
// before it is archived, when Options.FinishedJobTTL is 0.
const DefaultFinishedJobTTL = 24 * time.Hour

// LabelArchivedCluster is added to an archived federated job's labels,
// naming the cluster it last ran in, so that a list of archived jobs can
// select a cluster's.
const LabelArchivedCluster = "peloton.io/federated-job-cluster"

// Pace of the collector: a pass every ArchiveEvery (default), looking at
// no more than archivePassLimit jobs, put archivePutChunk at a time, each
// put bounded by archiveCallTimeout.
const (
	defaultArchiveEvery = time.Minute
	archivePassLimit    = 1000
	archivePutChunk     = 100
	archiveCallTimeout  = 30 * time.Second
)

// archiveLoop runs the collector until ctx ends.
func (f *Federation) archiveLoop(ctx context.Context) {
	t := time.NewTicker(f.opts.ArchiveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := f.archivePass(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("archive of finished federated objects: nothing deleted that was not archived; retried next pass", "archived", n, "err", err)
		}
		f.passes.archive.Add(1)
	}
}

// archivePass archives and removes from etcd the jobs done for longer than
// FinishedJobTTL, at most archivePassLimit of them, oldest first, and
// finishes the services deleting with no part left (forgetIfGone archives
// each first). It returns how many jobs it removed from etcd.
func (f *Federation) archivePass(ctx context.Context) (int, error) {
	if f.opts.History == nil {
		return 0, nil
	}
	n, err := f.archiveJobs(ctx, archivePassLimit)
	if err != nil {
		return n, err
	}
	f.mu.Lock()
	var gone []string
	for id, s := range f.services {
		if s.rec.Deleting && len(s.rec.Clusters) == 0 {
			gone = append(gone, id)
		}
	}
	f.mu.Unlock()
	sort.Strings(gone)
	if len(gone) > archivePassLimit {
		gone = gone[:archivePassLimit]
	}
	for _, id := range gone {
		if err := f.Services().forgetIfGone(ctx, id); err != nil {
			return n, err
		}
	}
	return n, nil
}

// jobFinished is when a done job ended: the end its cluster reported, or
// its creation when none is known (killed before dispatch).
func jobFinished(rec *pelotonv1.FederatedJob) time.Time {
	if ct := rec.Status.GetCompletionTime(); ct != nil {
		return ct.AsTime()
	}
	return rec.CreateTime.AsTime()
}

// archiveJobs archives up to limit jobs done for longer than
// FinishedJobTTL, then deletes them from etcd, and returns how many it
// deleted. A job written since it was archived (its revision moved) stays
// in etcd; a later pass archives it again.
func (f *Federation) archiveJobs(ctx context.Context, limit int) (int, error) {
	cutoff := f.opts.Now().Add(-f.opts.FinishedJobTTL)
	type victim struct {
		rec *pelotonv1.FederatedJob
		rev int64
		at  time.Time
	}
	var victims []victim
	f.mu.Lock()
	for _, j := range f.jobs {
		if j.rec.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE || j.busy {
			continue
		}
		if at := jobFinished(j.rec); at.Before(cutoff) {
			victims = append(victims, victim{proto.Clone(j.rec).(*pelotonv1.FederatedJob), j.rev, at})
		}
	}
	f.mu.Unlock()
	sort.Slice(victims, func(a, b int) bool {
		if !victims[a].at.Equal(victims[b].at) {
			return victims[a].at.Before(victims[b].at)
		}
		return victims[a].rec.Id < victims[b].rec.Id
	})
	if len(victims) > limit {
		victims = victims[:limit]
	}
	deleted := 0
	for start := 0; start < len(victims); start += archivePutChunk {
		chunk := victims[start:min(start+archivePutChunk, len(victims))]
		objs := make([]*history.Federated, len(chunk))
		for i, v := range chunk {
			objs[i] = f.archivedJobRecord(v.rec, v.at)
		}
		pctx, cancel := context.WithTimeout(ctx, archiveCallTimeout)
		err := f.opts.History.PutFederated(pctx, objs...)
		cancel()
		if err != nil {
			return deleted, fmt.Errorf("archive %d federated jobs: %w", len(objs), err)
		}
		for _, v := range chunk {
			if _, err := f.batch.Write(ctx, store.Delete(jobKey(v.rec.Id), v.rev)); err != nil {
				if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
					continue // written meanwhile: a later pass archives it again
				}
				return deleted, err
			}
			f.mu.Lock()
			if j := f.jobs[v.rec.Id]; j != nil && j.rev == v.rev {
				delete(f.jobs, v.rec.Id)
			}
			f.mu.Unlock()
			deleted++
		}
	}
	if deleted > 0 {
		f.log.Info("archived finished federated jobs", "jobs", deleted)
	}
	return deleted, nil
}

// archivedJobRecord is the archive's record of a done job.
func (f *Federation) archivedJobRecord(rec *pelotonv1.FederatedJob, finished time.Time) *history.Federated {
	labels := map[string]string{}
	for k, v := range rec.Spec.GetJob().GetLabels() {
		labels[k] = v
	}
	if rec.Cluster != "" {
		labels[LabelArchivedCluster] = rec.Cluster
	}
	rec.Version = 0
	return &history.Federated{Federation: f.opts.HistoryName, Kind: history.KindFederatedJob, ID: rec.Id, Job: rec,
		CreateTime: rec.CreateTime.AsTime(), FinishTime: finished, Labels: labels, ArchiveTime: f.opts.Now()}
}

// archiveService archives the final record of a deleted service (nil
// History: nothing to do).
func (f *Federation) archiveService(ctx context.Context, rec *pelotonv1.FederatedService) error {
	if f.opts.History == nil {
		return nil
	}
	rec = proto.Clone(rec).(*pelotonv1.FederatedService)
	rec.Version = 0
	now := f.opts.Now()
	pctx, cancel := context.WithTimeout(ctx, archiveCallTimeout)
	defer cancel()
	return f.opts.History.PutFederated(pctx, &history.Federated{Federation: f.opts.HistoryName, Kind: history.KindFederatedService,
		ID: rec.Id, Service: rec, CreateTime: rec.CreateTime.AsTime(), FinishTime: now, Labels: rec.Spec.GetJob().GetLabels(), ArchiveTime: now})
}

// archiveErr is the API's error of a read of the archive that failed.
func archiveErr(what string, err error) error {
	var fe *history.FieldError
	switch {
	case errors.Is(err, history.ErrUnavailable), errors.Is(err, history.ErrClosed):
		return apierr.Unavailable("%s: the federation's history cannot be read now: %v", what, err)
	case errors.As(err, &fe):
		return apierr.Invalid(fe.Field, "%s", fe.Reason)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// GetJobOrArchived is GetJob, then the archive for a job no longer in
// etcd: an archived job is returned with archived set.
func (f *Federation) GetJobOrArchived(ctx context.Context, id string) (*pelotonv1.FederatedJob, error) {
	j, err := f.Jobs().GetJob(id)
	if f.opts.History == nil || apierr.Code(err) != codes.NotFound {
		return j, err
	}
	o, aerr := f.opts.History.GetFederated(ctx, f.opts.HistoryName, history.KindFederatedJob, id)
	switch {
	case errors.Is(aerr, history.ErrNotFound):
		return nil, err
	case aerr != nil:
		return nil, archiveErr("federated job "+id, aerr)
	}
	out := o.Job
	out.Archived = true
	return out, nil
}

// GetServiceOrArchived is GetService, then the archive for a service no
// longer in etcd (deleted): an archived service is its final record, with
// archived set.
func (f *Federation) GetServiceOrArchived(ctx context.Context, id string) (*pelotonv1.FederatedService, error) {
	s, err := f.Services().GetService(id)
	if f.opts.History == nil || apierr.Code(err) != codes.NotFound {
		return s, err
	}
	o, aerr := f.opts.History.GetFederated(ctx, f.opts.HistoryName, history.KindFederatedService, id)
	switch {
	case errors.Is(aerr, history.ErrNotFound):
		return nil, err
	case aerr != nil:
		return nil, archiveErr("federated service "+id, aerr)
	}
	out := o.Service
	out.Archived = true
	out.Message = "deleted"
	return out, nil
}

// ListArchivedJobs lists the archived federated jobs, newest first, those
// that last ran in cluster when it is set.
func (f *Federation) ListArchivedJobs(ctx context.Context, cluster string, pageSize uint32, token string) ([]*pelotonv1.FederatedJob, string, error) {
	if f.opts.History == nil {
		return nil, "", apierr.FailedPrecondition("archived: this federation keeps no history (start it with --archive)")
	}
	filter := history.FederatedFilter{Federation: f.opts.HistoryName, Kind: history.KindFederatedJob}
	if cluster != "" {
		filter.Labels = map[string]string{LabelArchivedCluster: cluster}
	}
	objs, next, err := f.opts.History.ListFederated(ctx, filter, pageSize, token)
	if err != nil {
		return nil, "", archiveErr("list archived federated jobs", err)
	}
	out := make([]*pelotonv1.FederatedJob, len(objs))
	for i, o := range objs {
		out[i] = o.Job
		out[i].Archived = true
	}
	return out, next, nil
}

// ListArchivedServices lists the archived (deleted) federated services,
// newest first. Their parts left before they were archived, so they
// cannot be selected by cluster.
func (f *Federation) ListArchivedServices(ctx context.Context, cluster string, pageSize uint32, token string) ([]*pelotonv1.FederatedService, string, error) {
	if f.opts.History == nil {
		return nil, "", apierr.FailedPrecondition("archived: this federation keeps no history (start it with --archive)")
	}
	if cluster != "" {
		return nil, "", apierr.Invalid("cluster", "archived services have no parts left to select by cluster; list without cluster")
	}
	objs, next, err := f.opts.History.ListFederated(ctx, history.FederatedFilter{Federation: f.opts.HistoryName, Kind: history.KindFederatedService}, pageSize, token)
	if err != nil {
		return nil, "", archiveErr("list archived federated services", err)
	}
	out := make([]*pelotonv1.FederatedService, len(objs))
	for i, o := range objs {
		out[i] = o.Service
		out[i].Archived = true
		out[i].Message = "deleted"
	}
	return out, next, nil
}
