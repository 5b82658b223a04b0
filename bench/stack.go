package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Env is what every scenario gets from its caller besides its own config.
type Env struct {
	// Logger receives the stack's logs (default: discarded). The CLI passes
	// one at warn level on stderr, so a failing stack says why.
	Logger *slog.Logger
	// Progress, if set, is told what the scenario is doing, one line at a
	// time, for runs that take minutes.
	Progress func(string)
}

func (e Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return e.Logger
}

func (e Env) progress(format string, args ...any) {
	if e.Progress != nil {
		e.Progress(fmt.Sprintf(format, args...))
	}
}

// Limits every scenario checks its config against, so that a typo cannot ask
// for a run that never ends or exhausts the machine.
const (
	maxHosts = 100_000
	maxTasks = 1_000_000
	// maxInstances is the API's limit on one job's instanceCount.
	maxInstances = 100_000
	// callTimeout bounds each API call the harness makes (the client's
	// per-call deadline).
	callTimeout = 60 * time.Second
	// maxMsgBytes lets the harness read big answers (ListTasks of a large
	// gang, GetJob of a job with many overrides).
	maxMsgBytes = 256 << 20
)

// stackConfig sizes the in-process cluster.
type stackConfig struct {
	Hosts        int
	HostCPU      float64
	HostMemoryMB int64
	// ReclaimDelay is resmgr's reclaim hysteresis (0: its default, 1s).
	ReclaimDelay time.Duration
	// ReservationAfter is how long a gang that cannot fit waits before
	// hosts are set aside for it (0: resmgr's default, 1m; < 0: never).
	ReservationAfter time.Duration
	// Kube, if set, runs the stack on the kubernetes backend against that
	// cluster instead of sim (Hosts and the host sizes are then unused).
	Kube *cluster.KubeConfig
	// Mesos, if set, runs the stack on the mesos backend against that
	// master instead of sim.
	Mesos *cluster.MesosConfig
	// AgentInterval, if set, gives every simulated host an in-process
	// agent reporting at that interval (cluster.Config.SimHostAgents).
	AgentInterval time.Duration
	// PlacementEngines is how many placement engines run (0: one).
	PlacementEngines int
}

// stack is one Peloton process (cluster.Run) running in this process on the
// sim backend (or the kubernetes one, for the kubernetes scenario), with an embedded etcd, in a temp dir that Close removes.
type stack struct {
	ready  cluster.ReadyInfo
	dir    string
	cancel context.CancelFunc
	done   chan error
	// api is the stack's API, as any client of a cluster sees it.
	api *client.Client
}

// startStack runs cluster.Run exactly as `peloton up --backend sim` does,
// but on port-0 loopback listeners and a fresh temp dir, and connects a gRPC
// client to it.
func startStack(ctx context.Context, env Env, sc stackConfig) (*stack, error) {
	dir, err := os.MkdirTemp("", "peloton-bench-*")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &stack{dir: dir, cancel: cancel, done: make(chan error, 1)}
	readyCh := make(chan cluster.ReadyInfo, 1)
	cfg := cluster.Config{
		DataDir: dir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Backend: "sim", Hosts: sc.Hosts, HostCPU: sc.HostCPU, HostMemoryMB: sc.HostMemoryMB,
		ReclaimDelay: sc.ReclaimDelay, ReservationAfter: sc.ReservationAfter, ShutdownGrace: 10 * time.Second, PlacementEngines: sc.PlacementEngines,
		Logger:  env.logger(),
		OnReady: func(r cluster.ReadyInfo) { readyCh <- r },
	}
	if sc.Kube != nil {
		cfg.Backend, cfg.Kube = kubernetes.BackendName, *sc.Kube
	}
	if sc.Mesos != nil {
		cfg.Backend, cfg.Mesos = "mesos", *sc.Mesos
	}
	if sc.AgentInterval > 0 {
		cfg.SimHostAgents, cfg.HostAgentInterval = true, sc.AgentInterval
	}
	go func() { s.done <- cluster.Run(runCtx, cfg) }()
	select {
	case s.ready = <-readyCh:
	case err := <-s.done:
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: the stack did not start: %w", err)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("bench: the stack did not start: %w", ctx.Err())
	}
	api, err := client.New(s.ready.GRPCAddr, client.Options{Timeout: callTimeout, MaxMsgBytes: maxMsgBytes})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bench: connect to %s: %w", s.ready.GRPCAddr, err)
	}
	s.api = api
	return s, nil
}

// Close stops the stack, waits for it (bounded) and removes its data.
func (s *stack) Close() error {
	if s.api != nil {
		s.api.Close()
	}
	s.cancel()
	var err error
	select {
	case err = <-s.done:
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	case <-time.After(60 * time.Second):
		err = errors.New("bench: the stack did not stop within 60s")
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// store opens a store on the stack's embedded etcd, under the cluster's
// prefix, for reading what a job costs at rest. The caller closes it.
func (s *stack) store(ctx context.Context) (*store.Etcd, error) {
	return s.storeAt(ctx, cluster.ClusterPrefix(s.ready.ClusterName))
}

// storeAt opens a store under prefix on the stack's etcd through the
// client the stack's own store uses: in-process calls to its embedded etcd.
func (s *stack) storeAt(ctx context.Context, prefix string) (*store.Etcd, error) {
	cfg := store.EtcdConfig{Endpoints: s.ready.EtcdEndpoints, Prefix: prefix}
	if s.ready.InProcessEtcd != nil {
		cfg.Client = s.ready.InProcessEtcd()
	}
	return store.NewEtcd(ctx, cfg)
}

func (s *stack) createJob(ctx context.Context, spec *pelotonv1.JobSpec) (string, error) {
	resp, err := s.api.Jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		return "", fmt.Errorf("CreateJob %s: %w", spec.Name, err)
	}
	return resp.JobId, nil
}

func (s *stack) getJob(ctx context.Context, id string) (*pelotonv1.Job, error) {
	resp, err := s.api.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		return nil, fmt.Errorf("GetJob %s: %w", id, err)
	}
	return resp.Job, nil
}

func (s *stack) getPool(ctx context.Context, path string) (*pelotonv1.Pool, error) {
	resp, err := s.api.Pools.GetPool(ctx, &pelotonv1.GetPoolRequest{Path: path})
	if err != nil {
		return nil, fmt.Errorf("GetPool %s: %w", path, err)
	}
	return resp.Pool, nil
}

// waitFor calls check every interval until it reports done, returns an
// error, or ctx ends; what describes the wait for the timeout error, and
// check's last status is appended to it.
func waitFor(ctx context.Context, interval time.Duration, what string, check func() (done bool, status string, err error)) error {
	var status string
	for {
		done, st, err := check()
		if err != nil {
			return err
		}
		status = st
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if status != "" {
				return fmt.Errorf("bench: %s: %w (%s)", what, ctx.Err(), status)
			}
			return fmt.Errorf("bench: %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// waitRunning waits until every instance of job id runs.
func (s *stack) waitRunning(ctx context.Context, id string, n uint32) error {
	return waitFor(ctx, 100*time.Millisecond, "waiting for job "+id+" to run", func() (bool, string, error) {
		j, err := s.getJob(ctx, id)
		if err != nil {
			return false, "", err
		}
		if err := notFailed(j); err != nil {
			return false, "", err
		}
		running := j.Status.TaskCounts[pelotonv1.TaskState_RUNNING.String()]
		return running == n, fmt.Sprintf("%d of %d running", running, n), nil
	})
}

// notFailed is an error when a job ended in a way no scenario expects.
func notFailed(j *pelotonv1.Job) error {
	switch st := j.GetStatus().GetState(); st {
	case pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
		return fmt.Errorf("bench: job %s (%s) ended %s: %s", j.Id, j.GetSpec().GetName(), st, j.GetStatus().GetMessage())
	}
	return nil
}

// launchedOrLater counts a job's instances whose current run reached
// LAUNCHED or any later state.
func launchedOrLater(counts map[string]uint32) uint32 {
	var n uint32
	for name, c := range counts {
		if isLaunchedOrLater(pelotonv1.TaskState(pelotonv1.TaskState_value[name])) {
			n += c
		}
	}
	return n
}

func isLaunchedOrLater(s pelotonv1.TaskState) bool {
	switch s {
	case pelotonv1.TaskState_LAUNCHED, pelotonv1.TaskState_STARTING, pelotonv1.TaskState_RUNNING,
		pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_LOST,
		pelotonv1.TaskState_KILLED, pelotonv1.TaskState_PREEMPTING, pelotonv1.TaskState_KILLING, pelotonv1.TaskState_PREEMPTED:
		return true
	}
	return false
}

// counterSum reads a counter vector from the in-process metrics registry,
// summed over its labels. Collect is cheap (no /proc reads, unlike Gather),
// so it can be polled every millisecond.
func counterSum(c *prometheus.CounterVec) float64 {
	return collectSum(c, func(d *dto.Metric) float64 { return d.GetCounter().GetValue() })
}

// histogramCount reads how many observations a histogram holds.
func histogramCount(h prometheus.Histogram) float64 {
	return collectSum(h, func(d *dto.Metric) float64 { return float64(d.GetHistogram().GetSampleCount()) })
}

func collectSum(c prometheus.Collector, value func(*dto.Metric) float64) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			sum += value(&d)
		}
	}
	return sum
}

func ptr[T any](v T) *T { return &v }
