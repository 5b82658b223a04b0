package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// runStack runs one stack (no election) of the named cluster on the sim
// backend against endpoints until stop is called; it fails the test if the
// stack does not serve.
func runStack(t *testing.T, clusterName string, endpoints []string) (c api, stop func()) {
	t.Helper()
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := cluster.Config{
		ClusterName: clusterName, DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		EtcdEndpoints: endpoints, Backend: "sim", Hosts: 2, ShutdownGrace: 2 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnReady: func(r cluster.ReadyInfo) { ready <- r },
	}
	go func() { done <- cluster.Run(ctx, cfg) }()
	select {
	case r := <-ready:
		if r.ClusterName != cfg.ClusterName && !(cfg.ClusterName == "" && r.ClusterName == cluster.DefaultClusterName) {
			t.Errorf("ready for cluster %q, want %q", r.ClusterName, cfg.ClusterName)
		}
		c = dial(t, r.GRPCAddr)
	case err := <-done:
		cancel()
		t.Fatalf("stack of %q did not start: %v", clusterName, err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("stack of %q did not serve within 60s", clusterName)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack of %q: Run: %v", clusterName, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("stack of %q did not stop within 30s", clusterName)
		}
	}
	t.Cleanup(stop)
	return c, stop
}

// toLegacy moves the default cluster's keys of dirs back to where a
// version without cluster names kept them.
func toLegacy(t *testing.T, cli *clientv3.Client, dirs ...string) {
	t.Helper()
	n, err := store.MoveKeys(context.Background(), cli, store.Move{From: cluster.ClusterPrefix(cluster.DefaultClusterName), To: store.DefaultPrefix, Dirs: dirs})
	if err != nil || n == 0 {
		t.Fatalf("back to the old layout: %d keys, %v", n, err)
	}
}

func countKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestOldLayoutMovesToLocal: the data of a cluster from before clusters
// had names - here half of it, as a move cut short would leave it - is the
// default cluster's after its next start, and only its; a cluster of
// another name neither takes nor sees it.
func TestOldLayoutMovesToLocal(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	c, stop := runStack(t, "", e.Endpoints())
	if _, err := c.pools.CreatePool(callCtx(t), &pelotonv1.CreatePoolRequest{Path: "/team", Spec: &pelotonv1.PoolSpec{}}); err != nil {
		t.Fatal(err)
	}
	job, err := c.jobs.CreateJob(callCtx(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "old", Type: pelotonv1.JobType_BATCH, Pool: "/team", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 16}}}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the job succeeds", func() error {
		j, err := c.jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: job.GetJobId()})
		if err != nil {
			return err
		}
		if st := j.GetJob().GetStatus().GetState(); st != pelotonv1.JobState_JOB_SUCCEEDED {
			return errors.New(st.String())
		}
		return nil
	})
	stop()

	cli := s.Client()
	// Pools and jobs in the old layout, tasks already moved.
	toLegacy(t, cli, "pools/", "jobs/")
	if countKeys(t, cli, store.DefaultPrefix+"jobs/") == 0 || countKeys(t, cli, cluster.ClusterPrefix("local")+"tasks/") == 0 {
		t.Fatal("the test did not set up a half-moved layout")
	}

	// Another cluster's start moves nothing and sees none of it.
	other, stopOther := runStack(t, "other", e.Endpoints())
	if _, err := other.jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: job.GetJobId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("cluster other: GetJob of the unnamed cluster's job: %v, want NotFound", err)
	}
	stopOther()
	if countKeys(t, cli, store.DefaultPrefix+"jobs/") == 0 {
		t.Fatal("cluster other moved the unnamed cluster's keys")
	}

	// An old replica still campaigning blocks the move, and the start
	// waits for it to go.
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), store.DefaultPrefix+cluster.LeaderKey+"/1", "old", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not stop within 30s")
		}
	}()
	go func() {
		done <- cluster.Run(ctx, cluster.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
			EtcdEndpoints: e.Endpoints(), Backend: "sim", ShutdownGrace: 2 * time.Second,
			Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			OnReady: func(r cluster.ReadyInfo) { ready <- r }})
	}()
	testutil.Eventually(t, 30*time.Second, "the old replica warned about", func() error {
		if !strings.Contains(logs.String(), "a replica of an older Peloton still campaigns for this cluster") {
			return errors.New("no warning about the old replica yet")
		}
		return nil
	})
	select {
	case <-ready:
		t.Fatal("the stack served while an old replica campaigned")
	case err := <-done:
		t.Fatalf("Run beside an old replica: %v, want it to wait", err)
	default:
	}
	if countKeys(t, cli, store.DefaultPrefix+"jobs/") == 0 {
		t.Fatal("keys moved while an old replica campaigned")
	}
	// The old replica stops; the default cluster's start takes it all.
	if _, err := cli.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ready:
		c = dial(t, r.GRPCAddr)
	case err := <-done:
		t.Fatalf("Run after the old replica stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the stack did not serve within 60s of the old replica stopping")
	}
	j, err := c.jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: job.GetJobId()})
	if err != nil || j.GetJob().GetStatus().GetState() != pelotonv1.JobState_JOB_SUCCEEDED || j.GetJob().GetSpec().GetPool() != "/team" {
		t.Fatalf("after the move: GetJob = %v, %v", j, err)
	}
	if _, err := c.pools.GetPool(callCtx(t), &pelotonv1.GetPoolRequest{Path: "/team"}); err != nil {
		t.Fatalf("after the move: GetPool /team: %v", err)
	}
	if !strings.Contains(logs.String(), "moved the data of the unnamed cluster") {
		t.Errorf("no log of the move:\n%s", logs.String())
	}
	for _, dir := range []string{"pools/", "jobs/", "tasks/"} {
		if n := countKeys(t, cli, store.DefaultPrefix+dir); n != 0 {
			t.Errorf("%d keys left under %s", n, store.DefaultPrefix+dir)
		}
	}
}
