// Package e2e runs the whole Peloton stack in-process - embedded etcd, the
// cluster stack on the local backend with real processes, gRPC, REST and the
// CLI - and drives it as a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// stack is one running Peloton process (in this test process).
type stack struct {
	t       *testing.T
	dataDir string
	ready   cluster.ReadyInfo
	cancel  context.CancelFunc
	done    chan error
	// api is the stack's API through cluster/client, as every client of a
	// cluster builds it; the fields below are shorthands for its services.
	api *client.Client

	jobs    pelotonv1.JobServiceClient
	tasks   pelotonv1.TaskServiceClient
	pools   pelotonv1.PoolServiceClient
	hosts   pelotonv1.HostServiceClient
	updates pelotonv1.UpdateServiceClient
}

type stackOpts struct {
	hosts   int
	hostCPU float64
	hostMem int64
	// backend is the hostmgr backend (default "local").
	backend string
	// engines is the number of placement engines (default 1).
	engines int
	// labels are the sim backend's host labels (key=value, round-robin per key).
	labels []string
	// kube configures the kubernetes backend.
	kube cluster.KubeConfig
	// sla is the SLA evaluator (nil: the stack's own in-process one).
	sla sla.Evaluator
	// etcd, if set, are the endpoints of an external etcd (none embedded).
	etcd []string
	// agentInterval is the in-process host agents' report interval (local
	// backend; 0: their default).
	agentInterval time.Duration
	// configure, if set, changes the stack's config last.
	configure func(*cluster.Config)
}

// startStack starts Peloton on loopback ports chosen by the kernel, with its
// data in dataDir, and stops it when the test ends.
func startStack(t *testing.T, dataDir string, o stackOpts) *stack {
	t.Helper()
	if o.hosts == 0 {
		o.hosts = 2
	}
	if o.hostCPU == 0 {
		o.hostCPU = 4
	}
	if o.hostMem == 0 {
		o.hostMem = 4096
	}
	if o.backend == "" {
		o.backend = "local"
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyCh := make(chan cluster.ReadyInfo, 1)
	s := &stack{t: t, dataDir: dataDir, cancel: cancel, done: make(chan error, 1)}
	logLevel := slog.LevelWarn
	if os.Getenv("PELOTON_TEST_DEBUG") != "" {
		logLevel = slog.LevelDebug
	}
	cfg := cluster.Config{
		DataDir: dataDir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Backend: o.backend, Hosts: o.hosts, HostCPU: o.hostCPU, HostMemoryMB: o.hostMem, HostDiskMB: 10000, HostLabels: o.labels, PlacementEngines: o.engines,
		ShutdownGrace: 5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})),
		OnReady:       func(r cluster.ReadyInfo) { readyCh <- r },
	}
	cfg.Kube = o.kube
	cfg.SLA = o.sla
	cfg.EtcdEndpoints = o.etcd
	cfg.HostAgentInterval = o.agentInterval
	if o.configure != nil {
		o.configure(&cfg)
	}
	go func() { s.done <- cluster.Run(ctx, cfg) }()
	select {
	case s.ready = <-readyCh:
	case err := <-s.done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatal("stack did not become ready within 90s")
	}
	s.connect(t)
	var once sync.Once
	t.Cleanup(func() { once.Do(s.stopNow) })
	return s
}

// connect builds the stack's API client.
func (s *stack) connect(t *testing.T) {
	t.Helper()
	api, err := client.New(s.ready.GRPCAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.api = api
	s.jobs, s.tasks, s.pools, s.hosts, s.updates = api.Jobs, api.Tasks, api.Pools, api.Hosts, api.Updates
}

func (s *stack) stopNow() {
	s.api.Close()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("stack stopped with error: %v", err)
		}
	case <-time.After(60 * time.Second):
		s.t.Error("stack did not stop within 60s")
	}
}

// stop shuts the stack down now (for restart tests).
func (s *stack) stop() { s.stopNow(); s.done <- nil }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loadSpec reads a YAML job spec the way users write it.
func loadSpec(t *testing.T, path string) *pelotonv1.JobSpec {
	t.Helper()
	y, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	spec := &pelotonv1.JobSpec{}
	if err := protojson.Unmarshal(j, spec); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return spec
}

func repoPath(rel string) string { return filepath.Join("..", "..", rel) }

// waitJob waits until the job reaches want, failing at once if it ends
// in another state.
func (s *stack) waitJob(id string, want pelotonv1.JobState, within time.Duration) *pelotonv1.Job {
	s.t.Helper()
	var last *pelotonv1.Job
	failed := func() {
		s.t.Helper()
		tasks, _ := s.tasks.ListTasks(context.Background(), &pelotonv1.ListTasksRequest{JobId: id})
		s.t.Fatalf("job %s: state %s, want %s\njob: %v\ntasks: %v", id, last.GetStatus().GetState(), want, last, tasks)
	}
	testutil.Eventually(s.t, within, fmt.Sprintf("job %s %s", id, want), func() error {
		resp, err := s.jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			s.t.Fatalf("GetJob: %v", err)
		}
		last = resp.Job
		switch st := last.Status.State; st {
		case want:
			return nil
		case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
			failed()
		}
		return fmt.Errorf("job: %v", last)
	})
	return last
}

// logs reads a run's whole stdout (or stderr) through gRPC.
func (s *stack) logs(jobID string, inst, run uint32, stream pelotonv1.LogStream) string {
	s.t.Helper()
	cl, err := s.tasks.GetTaskLogs(ctxT(s.t), &pelotonv1.GetTaskLogsRequest{JobId: jobID, InstanceId: inst, RunId: run, Stream: stream})
	if err != nil {
		s.t.Fatalf("GetTaskLogs: %v", err)
	}
	var b bytes.Buffer
	for {
		c, err := cl.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.t.Fatalf("GetTaskLogs recv: %v", err)
		}
		b.Write(c.Data)
	}
	return b.String()
}

// rest sends one REST request and decodes the JSON answer into out (if non-nil).
func (s *stack) rest(method, path string, body any, out any) (int, string) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://"+s.ready.HTTPAddr+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, string(raw)
}

func (s *stack) jobCount() int {
	resp, err := s.jobs.ListJobs(context.Background(), &pelotonv1.ListJobsRequest{})
	if err != nil {
		s.t.Fatal(err)
	}
	return len(resp.Jobs)
}

func mustContain(t *testing.T, got, want, what string) {
	t.Helper()
	if !strings.Contains(got, want) {
		if len(got) > 2000 {
			got = got[:2000] + "...(truncated)"
		}
		t.Fatalf("%s: %q does not contain %q", what, got, want)
	}
}

var _ = fmt.Sprintf
