package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var largeJobFigures = []string{
	"requestBytes", "submitLatencyMs", "allTasksCreatedMs", "storedBytesPerTask", "storedTaskRecords",
	"bytesPerTaskRecord", "storedJobBytes", "peakRssMb",
}

// LargeJobConfig sizes the large-job scenario.
type LargeJobConfig struct {
	Tasks int
	// OverrideEvery gives every n-th instance a per-instance override (0: none).
	OverrideEvery int
	// Hosts is kept small on purpose: the job's tasks sleep for an hour, and
	// only the few that fit run; the scenario is about the job, not its run.
	Hosts int
	// Settle is how long to wait after the tasks exist before counting the
	// bytes at rest, so the tasks that fit have been launched (default 2s).
	Settle time.Duration
}

// DefaultLargeJobConfig is the size: one job of 100,000 instances.
func DefaultLargeJobConfig() LargeJobConfig {
	return LargeJobConfig{Tasks: 100000, OverrideEvery: 10, Hosts: 10, Settle: 2 * time.Second}
}

// Validate checks the config; every error names the flag at fault.
func (c *LargeJobConfig) Validate() error {
	switch {
	case c.Tasks < 1 || c.Tasks > maxInstances:
		return fmt.Errorf("--tasks %d: must be 1..%d (one job's instance limit)", c.Tasks, maxInstances)
	case c.OverrideEvery < 0:
		return fmt.Errorf("--override-every %d: must be >= 0", c.OverrideEvery)
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.Settle < 0:
		return fmt.Errorf("--settle %s: must be >= 0", c.Settle)
	}
	return nil
}

// LargeJob submits one job of Tasks `sleep 3600` instances with an override
// on every OverrideEvery-th instance, on a cluster too small to run more than
// a few hundred of them, and measures the CreateJob round trip, the time
// until the job leaves JOB_INITIALIZED (every task record exists), what the
// job costs at rest in etcd, and the process's peak RSS. The job is left
// running; stopping the stack ends it.
//
// The state change is seen by watching the job's runtime key in etcd, which
// costs the stack nothing: polling GetJob would ship the whole spec (with
// every override) on each poll.
func LargeJob(ctx context.Context, env Env, cfg LargeJobConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Second
	}
	r := newResult(ScenarioLargeJob)
	r.param("tasks", cfg.Tasks)
	r.param("overrideEvery", cfg.OverrideEvery)
	r.param("hosts", cfg.Hosts)
	rssReset := resetPeakRSS()

	env.progress("large-job: starting the stack with %d simulated hosts", cfg.Hosts)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	st, err := s.store(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	spec := &pelotonv1.JobSpec{
		Name: "bench-large-job", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: uint32(cfg.Tasks),
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:   []string{"sleep", "3600"},
			Env:       map[string]string{"ROLE": "worker"},
			Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 128},
		},
	}
	if cfg.OverrideEvery > 0 {
		spec.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{}
		for i := 0; i < cfg.Tasks; i += cfg.OverrideEvery {
			// A typical override: a different shard argument and a bigger box.
			spec.InstanceSpecs[uint32(i)] = &pelotonv1.TaskSpec{
				Env:       map[string]string{"ROLE": "leader", "SHARD": strconv.Itoa(i / cfg.OverrideEvery)},
				Resources: &pelotonv1.Resources{Cpu: 2, MemoryMb: 256},
			}
		}
	}

	// Watch every job runtime from now on: the job's ID is known only once
	// CreateJob returns, and its state may change before that.
	cli := st.Client()
	head, err := cli.Get(ctx, st.Prefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("bench: read etcd revision: %w", err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wch := cli.Watch(watchCtx, st.Prefix()+"jobs/", clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1))

	env.progress("large-job: CreateJob with %d instances (%d overrides, %d bytes)", cfg.Tasks, len(spec.InstanceSpecs), proto.Size(spec))
	start := time.Now()
	id, err := s.createJob(ctx, spec)
	if err != nil {
		return nil, err
	}
	submit := time.Since(start)

	runtimeKey := st.Prefix() + "jobs/" + id + "/runtime"
	var created time.Duration
	for created == 0 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: waiting for job %s to leave JOB_INITIALIZED: %w", id, ctx.Err())
		case wr, ok := <-wch:
			if !ok {
				return nil, fmt.Errorf("bench: etcd watch ended: %w", ctx.Err())
			}
			if err := wr.Err(); err != nil {
				return nil, fmt.Errorf("bench: etcd watch: %w", err)
			}
			for _, ev := range wr.Events {
				if string(ev.Kv.Key) != runtimeKey || ev.Type != clientv3.EventTypePut {
					continue
				}
				js := &pelotonv1.JobStatus{}
				if err := proto.Unmarshal(ev.Kv.Value, js); err != nil {
					return nil, fmt.Errorf("bench: decode %s: %w", runtimeKey, err)
				}
				if js.State != pelotonv1.JobState_JOB_INITIALIZED {
					created = time.Since(start)
					break
				}
			}
		}
	}
	stopWatch()
	env.progress("large-job: job %s left JOB_INITIALIZED after %s; settling %s", id, created.Round(time.Millisecond), cfg.Settle)

	select {
	case <-time.After(cfg.Settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	taskBytes, records, err := prefixBytes(ctx, st, "tasks/"+id+"/")
	if err != nil {
		return nil, err
	}
	jobBytes, _, err := prefixBytes(ctx, st, "jobs/"+id+"/")
	if err != nil {
		return nil, err
	}
	j, err := s.getJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := notFailed(j); err != nil {
		return nil, err
	}

	r.add("requestBytes", float64(proto.Size(spec)), "B", "the JobSpec on the wire")
	r.add("submitLatencyMs", ms(submit), "ms", "CreateJob round trip")
	r.add("allTasksCreatedMs", ms(created), "ms", "CreateJob call to the job leaving JOB_INITIALIZED (etcd watch)")
	r.add("storedBytesPerTask", float64(taskBytes+jobBytes)/float64(cfg.Tasks), "B",
		"values under tasks/<job>/ plus jobs/<job>/ (spec, runtime), per instance")
	r.add("storedTaskRecords", float64(records), "", fmt.Sprintf("task records in etcd after %s (of %d instances)", cfg.Settle, cfg.Tasks))
	perRecord := 0.0
	if records > 0 {
		perRecord = float64(taskBytes) / float64(records)
	}
	r.add("bytesPerTaskRecord", perRecord, "B", "mean size of one task record")
	r.add("storedJobBytes", float64(jobBytes), "B", "the job's spec and runtime records")
	r.add("peakRssMb", PeakRSSMB(), "MiB", "whole process: stack, embedded etcd and client")
	r.note("task counts when measured: %s", countsLine(j.Status.TaskCounts))
	if records < cfg.Tasks {
		r.note("%d of %d instances have a task record: jobmgr writes an instance's record at its first launch, so "+
			"instances that have not run cost nothing at rest; bytesPerTaskRecord is what one costs once it has", records, cfg.Tasks)
	}
	if !rssReset {
		r.note("peakRssMb is the process's peak since it started (/proc/self/clear_refs was not writable)")
	}
	return r.finish(), nil
}

// prefixBytes sums the value sizes of every record under prefix.
func prefixBytes(ctx context.Context, st store.Store, prefix string) (int64, int, error) {
	kvs, err := st.List(ctx, prefix)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: list %s: %w", prefix, err)
	}
	var n int64
	for _, kv := range kvs {
		n += int64(len(kv.Value))
	}
	return n, len(kvs), nil
}

func countsLine(counts map[string]uint32) string {
	var parts []string
	for s := pelotonv1.TaskState(0); int(s) < len(pelotonv1.TaskState_name); s++ {
		if c := counts[s.String()]; c > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", s, c))
		}
	}
	return strings.Join(parts, " ")
}
