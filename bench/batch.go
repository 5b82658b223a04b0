package bench

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var batchFigures = []string{
	"submitLatencyMsP50", "submitLatencyMsP99", "submitMs", "allLaunchedMs", "tasksLaunchedPerSec",
	"allSucceededMs", "tasksSucceededPerSec", "etcdWritesPerTask", "storeCeilingRecordsPerSec",
	"launchVsStoreCeiling", "taskRecordBytes", "placementRounds", "placementConflictRate", "cpuUsPerTask", "peakRssMb",
}

// BatchConfig sizes the batch scenario (the placement issue's workload).
type BatchConfig struct {
	Hosts   int
	Tasks   int
	JobSize int
	// HostCPU is the CPUs of each simulated host (0: sim's 32).
	HostCPU float64
	// TaskCPU and TaskMemoryMB size every task.
	TaskCPU      float64
	TaskMemoryMB float64
	// Poll is how often every job's task counts are read (default 100ms).
	Poll time.Duration
	// Engines is the number of placement engines (active-active).
	Engines int
	// Submitters is how many clients submit the jobs at once (default 1:
	// one CreateJob after the other, as every figure before the
	// throughput issue was measured).
	Submitters int
	// CeilingWriters and CeilingFor size the store-ceiling probe run
	// before the scenario (CeilingFor 0: no probe).
	CeilingWriters int
	CeilingFor     time.Duration
}

// DefaultBatchConfig is the size: 50,000 tasks in jobs of 1,000 on
// 5,000 hosts.
func DefaultBatchConfig() BatchConfig {
	return BatchConfig{Hosts: 5000, Tasks: 50000, JobSize: 1000, TaskCPU: 1, TaskMemoryMB: 128, Poll: 100 * time.Millisecond,
		Engines: 1, Submitters: 1, CeilingWriters: 1024, CeilingFor: 4 * time.Second}
}

// Validate checks the config; every error names the flag at fault.
func (c *BatchConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.Tasks < 1 || c.Tasks > maxTasks:
		return fmt.Errorf("--tasks %d: must be 1..%d", c.Tasks, maxTasks)
	case c.JobSize < 1 || c.JobSize > maxInstances:
		return fmt.Errorf("--job-size %d: must be 1..%d", c.JobSize, maxInstances)
	case c.HostCPU < 0:
		return fmt.Errorf("--host-cpu %g: must be >= 0", c.HostCPU)
	case c.TaskCPU <= 0 || c.TaskMemoryMB <= 0:
		return fmt.Errorf("--task-cpu and --task-memory-mb: must be > 0")
	case c.Poll <= 0:
		return fmt.Errorf("--poll %s: must be > 0", c.Poll)
	case c.Engines < 1 || c.Engines > 64:
		return fmt.Errorf("--placement-engines %d: must be 1..64", c.Engines)
	case c.Submitters < 1 || c.Submitters > 64:
		return fmt.Errorf("--submitters %d: must be 1..64", c.Submitters)
	case c.CeilingFor < 0 || c.CeilingFor > time.Minute:
		return fmt.Errorf("--ceiling-for %s: must be 0 (no probe) to 1m", c.CeilingFor)
	case c.CeilingFor > 0 && (c.CeilingWriters < 1 || c.CeilingWriters > 10000):
		return fmt.Errorf("--ceiling-writers %d: must be 1..10000", c.CeilingWriters)
	}
	return nil
}

// ceilingPerKey is how many times the ceiling probe writes one key: a
// create and the replacements of a task's record through its states.
const ceilingPerKey = 4

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Batch submits ceil(tasks/jobSize) BATCH jobs of `sleep 0` tasks, one
// CreateJob after the other by each of Submitters clients, and measures how
// fast the tasks are launched and the jobs succeed. Launch progress is read from every job's task counts
// (GetJob), polled every Poll, so launch times are late by up to one poll.
// The time origin is the first CreateJob call.
func Batch(ctx context.Context, env Env, cfg BatchConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioBatch)
	r.param("hosts", cfg.Hosts)
	r.param("tasks", cfg.Tasks)
	r.param("jobSize", cfg.JobSize)
	r.param("taskCpu", cfg.TaskCPU)
	r.param("taskMemoryMb", cfg.TaskMemoryMB)
	r.param("pollMs", cfg.Poll.Milliseconds())
	r.param("placementEngines", cfg.Engines)
	r.param("submitters", cfg.Submitters)
	rssReset := resetPeakRSS()

	env.progress("batch: starting the stack with %d simulated hosts and %d placement engines", cfg.Hosts, cfg.Engines)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, HostCPU: cfg.HostCPU, PlacementEngines: cfg.Engines})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	// The ceiling first, on the same etcd, before the scenario writes.
	var ceiling float64
	var recordBytes int
	if cfg.CeilingFor > 0 {
		record, err := taskRecord(ctx, s, cfg)
		if err != nil {
			return nil, err
		}
		recordBytes = len(record)
		env.progress("batch: measuring the store's ceiling for %s (%d writers, records of %d bytes)", cfg.CeilingFor, cfg.CeilingWriters, recordBytes)
		r.param("ceilingWriters", cfg.CeilingWriters)
		if ceiling, err = storeCeiling(ctx, s, record, cfg.CeilingWriters, ceilingPerKey, cfg.CeilingFor); err != nil {
			return nil, err
		}
	}
	rounds0, conflicts0 := histogramCount(metrics.PlacementLatency), counterValue(metrics.PlacementConflicts)

	type jobRef struct {
		id        string
		n         uint32
		launched  uint32
		succeeded bool
	}
	writes0 := counterSum(metrics.StoreWrites)
	env.progress("batch: submitting %d tasks in jobs of %d, %d client(s) at once", cfg.Tasks, cfg.JobSize, cfg.Submitters)
	var sizes []int
	for left := cfg.Tasks; left > 0; left -= min(left, cfg.JobSize) {
		sizes = append(sizes, min(left, cfg.JobSize))
	}
	jobs := make([]*jobRef, len(sizes))
	latencies := make([]float64, len(sizes))
	start, cpu0 := time.Now(), processCPU()
	// Each client takes the next job to submit; the jobs keep their order
	// in jobs whichever client submitted them.
	var next sync.Mutex
	taken := 0
	var submitErr error
	var swg sync.WaitGroup
	for range cfg.Submitters {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for {
				next.Lock()
				i := taken
				taken++
				stop := i >= len(sizes) || submitErr != nil
				next.Unlock()
				if stop {
					return
				}
				spec := &pelotonv1.JobSpec{
					Name: fmt.Sprintf("bench-batch-%d", i), Type: pelotonv1.JobType_BATCH, Pool: "/default",
					InstanceCount: uint32(sizes[i]),
					DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0"},
						Resources: &pelotonv1.Resources{Cpu: cfg.TaskCPU, MemoryMb: cfg.TaskMemoryMB}},
				}
				t := time.Now()
				id, err := s.createJob(ctx, spec)
				if err != nil {
					next.Lock()
					submitErr = cmp.Or(submitErr, err)
					next.Unlock()
					return
				}
				latencies[i] = ms(time.Since(t))
				jobs[i] = &jobRef{id: id, n: uint32(sizes[i])}
			}
		}()
	}
	swg.Wait()
	if submitErr != nil {
		return nil, submitErr
	}
	submitted := time.Since(start)
	env.progress("batch: %d jobs submitted in %s", len(jobs), submitted.Round(time.Millisecond))

	var allLaunched, allSucceeded time.Duration
	// Poll the unfinished jobs concurrently (a few at a time): one slow
	// answer must not make every other job's count late.
	const pollers = 8
	lastReport := time.Now()
	err = waitFor(ctx, cfg.Poll, "waiting for the batch jobs", func() (bool, string, error) {
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, pollers)
		var wg sync.WaitGroup
		for _, j := range jobs {
			if j.succeeded {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				got, err := s.getJob(ctx, j.id)
				if err == nil {
					err = notFailed(got)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				j.launched = max(j.launched, launchedOrLater(got.Status.TaskCounts))
				if got.Status.State == pelotonv1.JobState_JOB_SUCCEEDED {
					j.launched, j.succeeded = j.n, true
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return false, "", firstErr
		}
		now := time.Since(start)
		var launched, doneJobs int
		for _, j := range jobs {
			launched += int(j.launched)
			if j.succeeded {
				doneJobs++
			}
		}
		if allLaunched == 0 && launched == cfg.Tasks {
			allLaunched = now
		}
		status := fmt.Sprintf("%d of %d tasks launched, %d of %d jobs succeeded", launched, cfg.Tasks, doneJobs, len(jobs))
		if time.Since(lastReport) >= 5*time.Second {
			env.progress("batch: %s", status)
			lastReport = time.Now()
		}
		if doneJobs == len(jobs) {
			allSucceeded = now
			return true, status, nil
		}
		return false, status, nil
	})
	if err != nil {
		return nil, err
	}
	cpu := processCPU() - cpu0
	writes := counterSum(metrics.StoreWrites) - writes0
	rounds, conflicts := histogramCount(metrics.PlacementLatency)-rounds0, counterValue(metrics.PlacementConflicts)-conflicts0

	r.add("submitLatencyMsP50", percentile(latencies, 50), "ms", "CreateJob round trip, each client one job at a time")
	r.add("submitLatencyMsP99", percentile(latencies, 99), "ms", "")
	r.add("submitMs", ms(submitted), "ms", fmt.Sprintf("all %d CreateJob calls", len(jobs)))
	r.add("allLaunchedMs", ms(allLaunched), "ms", "first CreateJob call to every task LAUNCHED or later")
	r.add("tasksLaunchedPerSec", perSec(cfg.Tasks, allLaunched), "tasks/s", "goal ≥ 30,000 at 50,000 tasks on 5,000 hosts (performance issue)")
	r.add("allSucceededMs", ms(allSucceeded), "ms", "first CreateJob call to every job JOB_SUCCEEDED")
	r.add("tasksSucceededPerSec", perSec(cfg.Tasks, allSucceeded), "tasks/s", "")
	perTask := writes / float64(cfg.Tasks)
	r.add("etcdWritesPerTask", perTask, "", "records jobmgr wrote (peloton_store_writes_total), per task")
	if ceiling > 0 {
		r.add("storeCeilingRecordsPerSec", ceiling, "records/s", fmt.Sprintf("task records the same etcd commits through a batcher like the stack's, %d writers, before the scenario", cfg.CeilingWriters))
		r.add("launchVsStoreCeiling", perSec(cfg.Tasks, allLaunched)*perTask/ceiling, "", "tasks launched/s × records per task ÷ ceiling; goal ≥ 0.8")
		r.add("taskRecordBytes", float64(recordBytes), "bytes", "a finished task's record, as the probe writes it")
	}
	r.add("placementRounds", rounds, "", "placement rounds during the scenario, all engines")
	r.add("placementConflictRate", ratio(conflicts, rounds), "", "rounds whose commit hostmgr refused (lease conflicts between engines), per round")
	r.add("cpuUsPerTask", float64(cpu.Microseconds())/float64(cfg.Tasks), "µs",
		"CPU of the whole process (stack, etcd, the bench's polling), first CreateJob to every job succeeded, per task; steadier than the rates on a busy machine")
	r.add("peakRssMb", PeakRSSMB(), "MiB", "whole process: stack, embedded etcd and client")
	if !rssReset {
		r.note("peakRssMb is the process's peak since it started (/proc/self/clear_refs was not writable)")
	}
	return r.finish(), nil
}
