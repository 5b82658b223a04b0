package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// runUntilReady starts cluster.Run with cfg (its listeners on free ports,
// its log discarded unless set) and returns where it serves; the stack
// stops at the test's end.
func runUntilReady(t *testing.T, cfg cluster.Config) cluster.ReadyInfo {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.OnReady = func(r cluster.ReadyInfo) {
		select {
		case ready <- r:
		default:
		}
	}
	go func() { done <- cluster.Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the stack did not stop within 60s")
		}
	})
	select {
	case r := <-ready:
		return r
	case err := <-done:
		done <- err
		t.Fatalf("Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the stack did not serve within 60s")
	}
	return cluster.ReadyInfo{}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// TestEmbeddedEtcdOnItsSocketOnly: a stack with an embedded etcd listens on
// TCP for its gRPC and HTTP APIs only; its etcd answers on a socket in the
// data dir, which the user nobody cannot connect to (it can connect to the
// API, so the check can tell).
func TestEmbeddedEtcdOnItsSocketOnly(t *testing.T) {
	before := testutil.ListeningTCPPorts(t)
	dataDir := t.TempDir()
	r := runUntilReady(t, cluster.Config{DataDir: dataDir, Backend: "sim"})
	sock := filepath.Join(dataDir, "etcd", "client.sock")
	if len(r.EtcdEndpoints) != 1 || r.EtcdEndpoints[0] != "unix://"+sock {
		t.Fatalf("etcd endpoints %q, want unix://%s", r.EtcdEndpoints, sock)
	}
	api := map[int]bool{portOf(t, r.GRPCAddr): true, portOf(t, r.HTTPAddr): true}
	for p := range testutil.ListeningTCPPorts(t) {
		if !before[p] && !api[p] {
			t.Errorf("the stack listens on TCP port %d, which is neither its gRPC (%s) nor its HTTP (%s)", p, r.GRPCAddr, r.HTTPAddr)
		}
	}
	if os.Geteuid() != 0 {
		return // cannot run a process as nobody
	}
	if got := testutil.DialAs(t, "nobody", "unix", sock); !strings.Contains(got, "permission denied") {
		t.Errorf("nobody dialling the etcd socket: %q, want permission denied", got)
	}
	if got := testutil.DialAs(t, "nobody", "tcp", r.GRPCAddr); got != "connected" {
		t.Errorf("nobody dialling the gRPC API: %q, want connected", got)
	}
}

// TestTaskUserCannotReachEtcd: a job's task on a stack with --task-user
// nobody and an embedded etcd runs as nobody, and can neither list the etcd
// data nor connect to etcd's socket, nor read /etc/shadow.
func TestTaskUserCannotReachEtcd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running tasks as nobody needs root")
	}
	// A data dir nobody may pass through to its sandbox: under a
	// searchable directory, not t.TempDir's 0700 ones.
	base, err := os.MkdirTemp("", "peloton-iso-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, "data")
	r := runUntilReady(t, cluster.Config{DataDir: dataDir, Backend: "local", TaskUser: "nobody", Hosts: 1,
		HostCPU: 1, HostMemoryMB: 512, NoHostAgents: true})
	sock := strings.TrimPrefix(r.EtcdEndpoints[0], "unix://")
	argv, env := testutil.DialHelperCommand(t, "unix", sock)
	k, v, _ := strings.Cut(env, "=")

	conn, err := grpc.NewClient(r.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	jobs, tasks := pelotonv1.NewJobServiceClient(conn), pelotonv1.NewTaskServiceClient(conn)
	pools := pelotonv1.NewPoolServiceClient(conn)
	if _, err := pools.CreatePool(callCtx(t), &pelotonv1.CreatePoolRequest{Path: "/iso",
		Spec: &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 1, MemoryMb: 512}}}); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`id -u; ls %s >/dev/null 2>&1; echo "ls=$?"; cat /etc/shadow >/dev/null 2>&1; echo "shadow=$?"; %s`,
		filepath.Join(dataDir, "etcd"), argv[0])
	resp, err := jobs.CreateJob(callCtx(t), &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "reach-etcd", Type: pelotonv1.JobType_BATCH, Pool: "/iso", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", script}, Env: map[string]string{k: v},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 64}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJobId()
	testutil.Eventually(t, 60*time.Second, "the job ends", func() error {
		j, err := jobs.GetJob(callCtx(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			return err
		}
		switch s := j.GetJob().GetStatus().GetState(); s {
		case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED:
			return nil
		default:
			return fmt.Errorf("job %s is %s", id, s)
		}
	})
	stream, err := tasks.GetTaskLogs(callCtx(t), &pelotonv1.GetTaskLogsRequest{JobId: id, InstanceId: 0, Stream: pelotonv1.LogStream_STDOUT})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(c.GetData())
	}
	// The dial helper exits 3 when it cannot connect: the job fails,
	// and its output says why.
	want := "65534\nls=2\nshadow=1\ndial unix " + sock + ": connect: permission denied\n"
	if out.String() != want {
		t.Errorf("the task printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestEtcdTLSReachesEveryClient: a stack with leader election on an etcd
// that wants TLS and client certificates campaigns (replica's client) and
// serves (the store's) with the files; with a CA that did not sign the
// server, it fails to start and says so.
func TestEtcdTLSReachesEveryClient(t *testing.T) {
	e := storetest.StartTLSEtcd(t)
	files := tlsfiles.Client{CAFile: e.CAFile, CertFile: e.ClientCert, KeyFile: e.ClientKey}
	r := runUntilReady(t, cluster.Config{DataDir: t.TempDir(), Backend: "sim", EtcdEndpoints: []string{e.Endpoint},
		EtcdTLS: files, LeaderElect: true, LeaderLease: testLease})
	if len(r.EtcdEndpoints) != 1 || r.EtcdEndpoints[0] != e.Endpoint {
		t.Errorf("etcd endpoints %q, want %s", r.EtcdEndpoints, e.Endpoint)
	}
	c := dial(t, r.GRPCAddr)
	if _, err := c.pools.CreatePool(callCtx(t), &pelotonv1.CreatePoolRequest{Path: "/over-tls",
		Spec: &pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}); err != nil {
		t.Fatalf("a write through the stack: %v", err)
	}

	files.CAFile = e.OtherCAFile
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cluster.Run(ctx, cluster.Config{DataDir: t.TempDir(), Backend: "sim", EtcdEndpoints: []string{e.Endpoint}, EtcdTLS: files,
		Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("Run with a CA that did not sign etcd's certificate: %v", err)
	}
}

// TestWarnings: a stack whose embedded etcd also listens on TCP says that
// every process of the machine can reach it; one that runs local tasks as
// root says what they can read, and names --task-user.
func TestWarnings(t *testing.T) {
	var logs testutil.SyncBuffer
	r := runUntilReady(t, cluster.Config{DataDir: t.TempDir(), Backend: "local", Hosts: 1, HostCPU: 1, HostMemoryMB: 256,
		NoHostAgents: true, EtcdListen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if len(r.EtcdEndpoints) != 1 || !strings.HasPrefix(r.EtcdEndpoints[0], "unix://") {
		t.Errorf("the stack's own etcd endpoints %q, want only the socket", r.EtcdEndpoints)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "every process of this machine, tasks included, can connect to it") ||
		!strings.Contains(out, "--etcd-listen") || !strings.Contains(out, "http://127.0.0.1:") {
		t.Errorf("no warning about the TCP listener naming it and --etcd-listen:\n%s", out)
	}
	if os.Geteuid() == 0 && (!strings.Contains(out, "tasks run as root: they can read and change every file of this machine") ||
		!strings.Contains(out, "--task-user")) {
		t.Errorf("no warning that tasks run as root naming --task-user:\n%s", out)
	}
}
