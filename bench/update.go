package bench

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var updateFigures = []string{
	"instances", "batches", "updateMs", "perBatchMs", "batchP50Ms", "batchP99Ms", "instancesPerSec",
	"etcdWritesPerInstance", "maxUnavailableSeen", "peakRssMb",
}

// UpdateConfig sizes the rolling-update scenario.
type UpdateConfig struct {
	Instances int
	BatchSize int
	Hosts     int
	HostCPU   float64
	// InPlace restarts every instance on its host.
	InPlace bool
	// Poll is the pause between two GetUpdate calls.
	Poll time.Duration
}

// DefaultUpdateConfig is the size: 10,000 instances, batches of 1,000.
func DefaultUpdateConfig() UpdateConfig {
	return UpdateConfig{Instances: 10000, BatchSize: 1000, Hosts: 1000, HostCPU: 32, Poll: 10 * time.Millisecond}
}

// Validate checks the config; every error names the flag at fault.
func (c *UpdateConfig) Validate() error {
	switch {
	case c.Instances < 1 || c.Instances > maxInstances:
		return fmt.Errorf("--instances %d: must be 1..%d (one job's instance limit)", c.Instances, maxInstances)
	case c.BatchSize < 1 || c.BatchSize > c.Instances:
		return fmt.Errorf("--batch-size %d: must be 1..--instances (%d)", c.BatchSize, c.Instances)
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case c.HostCPU <= 0:
		return fmt.Errorf("--host-cpu %g: must be > 0", c.HostCPU)
	case float64(c.Hosts)*c.HostCPU < float64(c.Instances)*updateTaskCPU:
		return fmt.Errorf("--hosts %d x --host-cpu %g cannot hold %d instances of %g CPU", c.Hosts, c.HostCPU, c.Instances, updateTaskCPU)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %s: must be > 0", c.Poll)
	}
	return nil
}

const updateTaskCPU = 0.5

// Update runs a SERVICE job of Instances simulated `sleep 3600` instances on
// the sim backend, waits until all run, then rolls a new command out with
// batches of BatchSize (and sla.maximumUnavailableInstances equal to it) and
// measures how long the update takes. Simulated instances start at once, so
// the time per batch is the scheduler's own overhead: SLA grants, kills,
// resmgr admission, placement, launch, and the etcd writes of each step.
func Update(ctx context.Context, env Env, cfg UpdateConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newResult(ScenarioUpdate)
	r.param("instances", cfg.Instances)
	r.param("batchSize", cfg.BatchSize)
	r.param("hosts", cfg.Hosts)
	r.param("inPlace", cfg.InPlace)
	rssReset := resetPeakRSS()

	env.progress("update: starting the stack with %d simulated hosts", cfg.Hosts)
	s, err := startStack(ctx, env, stackConfig{Hosts: cfg.Hosts, HostCPU: cfg.HostCPU})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	spec := &pelotonv1.JobSpec{
		Name: "bench-service", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: uint32(cfg.Instances),
		Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: uint32(cfg.BatchSize)},
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:   []string{"sleep", "3600"},
			Resources: &pelotonv1.Resources{Cpu: updateTaskCPU, MemoryMb: 64},
		},
	}
	id, err := s.createJob(ctx, spec)
	if err != nil {
		return nil, err
	}
	env.progress("update: waiting for %d instances to run", cfg.Instances)
	if err := s.waitRunning(ctx, id, uint32(cfg.Instances)); err != nil {
		return nil, err
	}

	spec.DefaultSpec.Command = []string{"sleep", "3601"}
	writesBefore := counterSum(metrics.StoreWrites)
	start := time.Now()
	resp, err := s.api.Updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: spec,
		UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: uint32(cfg.BatchSize), InPlace: cfg.InPlace}})
	if err != nil {
		return nil, fmt.Errorf("CreateUpdate: %w", err)
	}
	updates := s.api.Updates
	env.progress("update: rolling out %s", resp.Update.Id)
	// The instant each multiple of BatchSize instances was done.
	var marks []time.Duration
	maxDown := 0
	err = waitFor(ctx, cfg.Poll, "waiting for update "+resp.Update.Id, func() (bool, string, error) {
		g, err := updates.GetUpdate(ctx, &pelotonv1.GetUpdateRequest{UpdateId: resp.Update.Id})
		if err != nil {
			return false, "", err
		}
		st := g.Update.Status
		for len(marks) < int(st.InstancesDone)/cfg.BatchSize {
			marks = append(marks, time.Since(start))
		}
		j, err := s.getJob(ctx, id)
		if err != nil {
			return false, "", err
		}
		maxDown = max(maxDown, cfg.Instances-int(j.Status.TaskCounts[pelotonv1.TaskState_RUNNING.String()]))
		switch st.State {
		case pelotonv1.UpdateState_UPDATE_SUCCEEDED:
			return true, "", nil
		case pelotonv1.UpdateState_UPDATE_ROLLING_FORWARD:
			return false, fmt.Sprintf("%d of %d done", st.InstancesDone, st.InstancesTotal), nil
		}
		return false, "", fmt.Errorf("bench: update %s ended %s: %s", g.Update.Id, st.State, st.Message)
	})
	if err != nil {
		return nil, err
	}
	total := time.Since(start)
	writes := counterSum(metrics.StoreWrites) - writesBefore
	var gaps []float64
	prev := time.Duration(0)
	for _, m := range marks {
		gaps = append(gaps, ms(m-prev))
		prev = m
	}
	sort.Float64s(gaps)
	batches := (cfg.Instances + cfg.BatchSize - 1) / cfg.BatchSize
	r.add("instances", float64(cfg.Instances), "", "")
	r.add("batches", float64(batches), "", "")
	r.add("updateMs", ms(total), "ms", "CreateUpdate to SUCCEEDED")
	r.add("perBatchMs", ms(total)/float64(batches), "ms", "goal < 1000 beyond the instances' own start (0 here)")
	r.add("batchP50Ms", percentile(gaps, 50), "ms", "between successive batches done")
	r.add("batchP99Ms", percentile(gaps, 99), "ms", "")
	r.add("instancesPerSec", perSec(cfg.Instances, total), "/s", "")
	r.add("etcdWritesPerInstance", writes/float64(cfg.Instances), "", "task and update records")
	r.add("maxUnavailableSeen", float64(maxDown), "", fmt.Sprintf("sla.maximumUnavailableInstances %d", cfg.BatchSize))
	if rssReset {
		r.add("peakRssMb", PeakRSSMB(), "MiB", "whole process, during the update")
	} else {
		r.add("peakRssMb", PeakRSSMB(), "MiB", "whole process since start")
	}
	return r.finish(), nil
}
