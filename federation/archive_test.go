package federation

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/pgtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func openBoltHistory(t *testing.T) history.Store {
	t.Helper()
	h, err := history.OpenBolt(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// clock is a test's clock, moved by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Unix(1_000_000, 0).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func batchSpec(name string) *pelotonv1.FederatedJobSpec {
	return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: name, Pool: "/p", InstanceCount: 1, Labels: map[string]string{"team": "ml"}}}
}

// doneJob creates a federated job and kills it before dispatch: DONE.
func doneJob(t *testing.T, f *Federation, name string) string {
	t.Helper()
	ctx := context.Background()
	id, err := f.Jobs().CreateJob(ctx, batchSpec(name), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Jobs().KillJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func inEtcd(t *testing.T, st store.Store, key string) bool {
	t.Helper()
	_, err := st.Get(context.Background(), key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func archivedJobs(t *testing.T, h history.Store) []*history.Federated {
	t.Helper()
	objs, _, err := h.ListFederated(context.Background(), history.FederatedFilter{Federation: DefaultHistoryName, Kind: history.KindFederatedJob}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestArchiveFinishedJobs runs the collector as the federation runs it:
// a job done for its TTL is archived, then leaves etcd; one not yet past
// it, and one not done, stay; reads of the archived job come from the
// archive, marked archived, by id and in the archived list.
func TestArchiveFinishedJobs(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	h := openBoltHistory(t)
	clk := newClock()
	f := New(st, Options{Now: clk.now, History: h, FinishedJobTTL: time.Hour, ArchiveEvery: 20 * time.Millisecond})
	ctx := context.Background()
	old := doneJob(t, f, "old")
	clk.advance(30 * time.Minute)
	young := doneJob(t, f, "young")
	pending, err := f.Jobs().CreateJob(ctx, batchSpec("pending"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Nothing is due: three passes of the collector, with the clock before
	// any TTL, archive nothing.
	testutil.Eventually(t, 10*time.Second, "three passes of the collector", func() bool { return f.passes.archive.Load() >= 3 })
	if n := len(archivedJobs(t, h)); n != 0 {
		t.Fatalf("%d jobs archived before their TTL", n)
	}
	clk.advance(45 * time.Minute) // old: done 75 min ago; young: 45 min
	testutil.Eventually(t, 10*time.Second, "the collector to archive the old job", func() error {
		if inEtcd(t, st, jobKey(old)) {
			return errors.New("the old done job is still in etcd")
		}
		return nil
	})
	objs := archivedJobs(t, h)
	if len(objs) != 1 || objs[0].ID != old || objs[0].Job.GetDispatchState() != pelotonv1.DispatchState_DISPATCH_DONE {
		t.Fatalf("archived %v, want only %s, done", objs, old)
	}
	if objs[0].Labels["team"] != "ml" || !objs[0].ArchiveTime.Equal(clk.now()) {
		t.Errorf("archived record: labels %v, archive time %v", objs[0].Labels, objs[0].ArchiveTime)
	}
	for _, id := range []string{young, pending} {
		if !inEtcd(t, st, jobKey(id)) {
			t.Errorf("job %s left etcd before it was due", id)
		}
	}

	srv := NewServer(f, f.log)
	got, err := srv.GetFederatedJob(ctx, &pelotonv1.GetFederatedJobRequest{JobId: old})
	if err != nil || !got.Job.GetArchived() || got.Job.GetId() != old || !got.Job.GetKilled() {
		t.Fatalf("read-through of the archived job: %v, %v", got, err)
	}
	live, err := srv.GetFederatedJob(ctx, &pelotonv1.GetFederatedJobRequest{JobId: young})
	if err != nil || live.Job.GetArchived() {
		t.Fatalf("a live job: %v, %v", live, err)
	}
	if _, err := srv.GetFederatedJob(ctx, &pelotonv1.GetFederatedJobRequest{JobId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown job: %v, want NotFound", err)
	}
	list, err := srv.ListFederatedJobs(ctx, &pelotonv1.ListFederatedJobsRequest{Archived: true})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].Id != old || !list.Jobs[0].Archived {
		t.Fatalf("archived list: %v, %v", list, err)
	}
	liveList, err := srv.ListFederatedJobs(ctx, &pelotonv1.ListFederatedJobsRequest{})
	if err != nil || len(liveList.Jobs) != 2 {
		t.Fatalf("live list: %v, %v; want the two jobs still in etcd", liveList, err)
	}
	if _, err := srv.ListFederatedJobs(ctx, &pelotonv1.ListFederatedJobsRequest{Archived: true, PageSize: 9000}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pageSize") {
		t.Fatalf("archived list with a bad page size: %v", err)
	}
}

// TestArchiveWithoutHistory: no archive, nothing archived and the archived
// list says why; done jobs stay until JobRetention as before.
func TestArchiveWithoutHistory(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	clk := newClock()
	f := New(st, Options{Now: clk.now, FinishedJobTTL: time.Minute})
	defer f.Close()
	id := doneJob(t, f, "done")
	clk.advance(time.Hour)
	if n, err := f.archivePass(context.Background()); n != 0 || err != nil {
		t.Fatalf("pass without an archive: %d, %v", n, err)
	}
	if !inEtcd(t, st, jobKey(id)) {
		t.Fatal("a done job left etcd with no archive to go to")
	}
	if _, _, err := f.ListArchivedJobs(context.Background(), "", 0, ""); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("archived list without an archive: %v, want FailedPrecondition", err)
	}
}

// failingDeletes fails every etcd delete of a job record while armed, as
// a federation killed right after its archive put would never make them.
type failingDeletes struct {
	store.Store
	armed atomic.Bool
}

func (s *failingDeletes) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	if s.armed.Load() {
		for _, op := range ops {
			if op.Kind == store.OpDelete {
				return 0, errors.New("injected: the process died before its delete")
			}
		}
	}
	return s.Store.Txn(ctx, ops...)
}

// TestArchiveCrashBetweenArchiveAndDelete: the first federation archives
// and never deletes; the next one, over the same etcd and archive,
// archives the job again (one record, not two) and deletes it.
func TestArchiveCrashBetweenArchiveAndDelete(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	h := openBoltHistory(t)
	clk := newClock()
	fs := &failingDeletes{Store: st}
	f1 := New(fs, Options{Now: clk.now, History: h, FinishedJobTTL: time.Hour})
	id := doneJob(t, f1, "j")
	clk.advance(2 * time.Hour)
	fs.armed.Store(true)
	if n, err := f1.archivePass(context.Background()); err == nil || n != 0 {
		t.Fatalf("pass whose delete failed: %d, %v; want the error", n, err)
	}
	f1.Close()
	if objs := archivedJobs(t, h); len(objs) != 1 || objs[0].ID != id {
		t.Fatalf("after the first pass the archive holds %v, want %s", objs, id)
	}
	if !inEtcd(t, st, jobKey(id)) {
		t.Fatal("the job left etcd though its delete failed")
	}
	firstArchive := archivedJobs(t, h)[0].ArchiveTime

	clk.advance(time.Minute)
	f2 := New(st, Options{Now: clk.now, History: h, FinishedJobTTL: time.Hour, ArchiveEvery: time.Hour})
	if err := f2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if n, err := f2.archivePass(context.Background()); err != nil || n != 1 {
		t.Fatalf("pass after the restart: %d, %v; want the job removed", n, err)
	}
	objs := archivedJobs(t, h)
	if len(objs) != 1 || objs[0].ID != id || !objs[0].ArchiveTime.After(firstArchive) {
		t.Fatalf("archive after the restart: %v; want one record of %s, archived again", objs, id)
	}
	if inEtcd(t, st, jobKey(id)) {
		t.Fatal("the job is still in etcd")
	}
	if j, err := f2.GetJobOrArchived(context.Background(), id); err != nil || !j.Archived {
		t.Fatalf("read-through after the restart: %v, %v", j, err)
	}
}

// TestArchiveUnavailable: with the archive (a real PostgreSQL) down, a
// pass deletes nothing, a deleted service stays in etcd, and reads say
// Unavailable; once it is back, both are archived and leave etcd.
func TestArchiveUnavailable(t *testing.T) {
	srv := pgtest.New(t)
	ctx := context.Background()
	h, err := history.OpenPostgres(ctx, srv.URL(srv.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, st := storetest.StartEtcd(t)
	clk := newClock()
	f := New(st, Options{Now: clk.now, History: h, FinishedJobTTL: time.Hour})
	defer f.Close()
	id := doneJob(t, f, "j")
	svc := deletedService(t, f, false)
	clk.advance(2 * time.Hour)

	srv.Stop(t)
	for i := 0; i < 2; i++ {
		if n, err := f.archivePass(ctx); err == nil || n != 0 || !errors.Is(err, history.ErrUnavailable) {
			t.Fatalf("pass with the archive down: %d, %v; want ErrUnavailable and nothing deleted", n, err)
		}
	}
	if err := f.Services().DeleteService(ctx, svc); err != nil {
		t.Fatalf("delete of a service with the archive down: %v (the delete is recorded; its archive waits)", err)
	}
	if !inEtcd(t, st, jobKey(id)) || !inEtcd(t, st, serviceKey(svc)) {
		t.Fatal("a record left etcd while the archive was down")
	}
	if _, err := f.Jobs().GetJob(id); err != nil {
		t.Fatalf("the job is no longer served: %v", err)
	}
	if _, err := f.GetJobOrArchived(ctx, "gone"); status.Code(err) != codes.Unavailable {
		t.Fatalf("read-through with the archive down: %v, want Unavailable", err)
	}

	srv.Start(t)
	testutil.Eventually(t, 30*time.Second, "a pass once the archive is back", func() error {
		_, err := f.archivePass(ctx)
		return err
	})
	if inEtcd(t, st, jobKey(id)) || inEtcd(t, st, serviceKey(svc)) {
		t.Fatal("records still in etcd after the archive came back")
	}
	j, err := f.GetJobOrArchived(ctx, id)
	if err != nil || !j.Archived {
		t.Fatalf("archived job: %v, %v", j, err)
	}
	s, err := f.GetServiceOrArchived(ctx, svc)
	if err != nil || !s.Archived || !s.Deleting {
		t.Fatalf("archived service: %v, %v", s, err)
	}
}

// deletedService makes a federated service in a registered cluster that
// is then deregistered, so that a delete drops its part at once; with
// del, it deletes it.
func deletedService(t *testing.T, f *Federation, del bool) string {
	t.Helper()
	ctx := context.Background()
	if _, err := f.Register(ctx, &pelotonv1.RegisterClusterRequest{Name: "gone", Endpoint: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	svc, err := f.Services().CreateService(ctx, &pelotonv1.FederatedServiceSpec{
		Job: &pelotonv1.JobSpec{Name: "web", Pool: "/p", InstanceCount: 2, Labels: map[string]string{"tier": "web"},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}},
		Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Name: "gone", Weight: 1}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Deregister(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if del {
		if err := f.Services().DeleteService(ctx, svc.Id); err != nil {
			t.Fatal(err)
		}
	}
	return svc.Id
}

// TestArchiveDeletedService: a deleted service's final record, rollouts
// included, is archived as it leaves etcd, and is read through and
// listed.
func TestArchiveDeletedService(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	h := openBoltHistory(t)
	clk := newClock()
	f := New(st, Options{Now: clk.now, History: h})
	defer f.Close()
	ctx := context.Background()
	id := deletedService(t, f, true)
	if inEtcd(t, st, serviceKey(id)) {
		t.Fatal("the deleted service is still in etcd")
	}
	o, err := h.GetFederated(ctx, DefaultHistoryName, history.KindFederatedService, id)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Service.Deleting || o.Service.Spec.GetJob().GetName() != "web" || len(o.Service.Versions) != 1 || o.Labels["tier"] != "web" {
		t.Fatalf("archived service: %v", o)
	}
	srv := NewServer(f, f.log)
	got, err := srv.GetFederatedService(ctx, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
	if err != nil || !got.Service.Archived || got.Service.Id != id {
		t.Fatalf("read-through: %v, %v", got, err)
	}
	list, err := srv.ListFederatedServices(ctx, &pelotonv1.ListFederatedServicesRequest{Archived: true})
	if err != nil || len(list.Services) != 1 || !list.Services[0].Archived {
		t.Fatalf("archived list: %v, %v", list, err)
	}
	if _, err := srv.ListFederatedServices(ctx, &pelotonv1.ListFederatedServicesRequest{Archived: true, Cluster: "a"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cluster") {
		t.Fatalf("archived list by cluster: %v, want InvalidArgument naming cluster", err)
	}
}
