//go:build soak

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// TestSoak is `make soak`: for PELOTON_SOAK_DURATION (default 10 minutes)
// it does random things to a `peloton up` process, as operators and users
// would, all at once: creates batch jobs and services, kills tasks of batch
// jobs, rolls services onto new specs, scales them, drains and returns
// hosts, and kills the server with SIGKILL and starts it again. All the
// while it checks the invariants:
//   - no instance ever has two runs alive at once (every run logs its start
//     and end);
//   - no service has more instances down than its budget, counting those
//     that ran once (a new instance waiting for its first run is not down);
//   - no task waits (PENDING, or INITIALIZED between runs) with neither a
//     pending reason nor a message for longer than stuckBound.
//
// It is bounded in time and in steps, and not part of `make test`.
func TestSoak(t *testing.T) {
	duration := 10 * time.Minute
	if v := os.Getenv("PELOTON_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PELOTON_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	const (
		maxSteps   = 100000
		stuckBound = 2 * time.Minute
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	bin := buildPeloton(t)
	dir := t.TempDir()
	logf := newRunLog(t)
	p := startUp(t, bin, dir)
	ctx := func() context.Context { return ctxT(t) }

	type svc struct {
		id     string
		spec   *pelotonv1.JobSpec
		budget int
	}
	var services []*svc
	var batches []string
	waitingSince := map[string]time.Time{} // task -> when first seen waiting without a reason
	counts := map[string]int{}
	lastRestart := time.Now()
	deadline := time.Now().Add(duration)

	check := func() {
		for _, s := range services {
			resp, err := p.tasks.ListTasks(ctx(), &pelotonv1.ListTasksRequest{JobId: s.id})
			if err != nil {
				continue // the server may be restarting
			}
			down := 0
			var seen []string
			for _, tk := range resp.Tasks {
				// An instance a scale-down removes is not down; one that
				// never ran yet (new, or scaled up) is not either. A new
				// instance may start above run 1 (its ids continue those of
				// an instance of the same number removed earlier), so what
				// tells is whether it was ever RUNNING.
				ran := tk.Status.StartTime != nil
				for _, h := range tk.Status.History {
					ran = ran || h.State == pelotonv1.TaskState_RUNNING
				}
				if ran && tk.InstanceId < s.spec.InstanceCount && tk.Status.State != pelotonv1.TaskState_RUNNING {
					down++
				}
				seen = append(seen, fmt.Sprintf("%d:%s/%d %s %s", tk.InstanceId, tk.Status.State, tk.Status.RunId, tk.Status.Reason, tk.Status.Message))
			}
			if down > s.budget {
				t.Errorf("service %s: %d instances down at once, budget %d: %v", s.id, down, s.budget, seen)
			}
		}
		for _, id := range append(append([]string(nil), batches...), func() []string {
			var ids []string
			for _, s := range services {
				ids = append(ids, s.id)
			}
			return ids
		}()...) {
			resp, err := p.tasks.ListTasks(ctx(), &pelotonv1.ListTasksRequest{JobId: id})
			if err != nil {
				continue
			}
			for _, tk := range resp.Tasks {
				key := fmt.Sprintf("%s/%d/%d", id, tk.InstanceId, tk.Status.RunId)
				st := tk.Status
				waiting := (st.State == pelotonv1.TaskState_PENDING || st.State == pelotonv1.TaskState_INITIALIZED) &&
					st.PendingReason == "" && st.Message == ""
				if !waiting {
					delete(waitingSince, key)
					continue
				}
				if since, ok := waitingSince[key]; !ok {
					waitingSince[key] = time.Now()
				} else if time.Since(since) > stuckBound {
					t.Errorf("task %s waits without a reason since %s", key, since.Format("15:04:05"))
					delete(waitingSince, key)
				}
			}
		}
	}

	for step := 0; step < maxSteps && time.Now().Before(deadline); step++ {
		switch r := rng.IntN(100); {
		case r < 25:
			spec := batch(fmt.Sprintf("soak-batch-%d", step), uint32(1+rng.IntN(20)), logf.command(0.5+rng.Float64()*3)...)
			spec.DefaultSpec.Resources.Cpu = 0.05
			spec.DefaultSpec.RestartPolicy = &pelotonv1.RestartPolicy{MaxFailures: 3}
			if cr, err := p.jobs.CreateJob(ctx(), &pelotonv1.CreateJobRequest{Spec: spec}); err == nil {
				batches = append(batches, cr.JobId)
				counts["batch created"]++
			}
		case r < 35 && len(services) < 8:
			budget := 1 + rng.IntN(2)
			spec := service(fmt.Sprintf("soak-svc-%d", step), uint32(2+rng.IntN(5)), uint32(budget), "sh", "-c", "exec sleep 3600 # "+logf.marker)
			spec.DefaultSpec.Resources.Cpu = 0.05
			if cr, err := p.jobs.CreateJob(ctx(), &pelotonv1.CreateJobRequest{Spec: spec}); err == nil {
				services = append(services, &svc{id: cr.JobId, spec: spec, budget: budget})
				counts["service created"]++
			}
		case r < 50 && len(batches) > 0:
			id := batches[rng.IntN(len(batches))]
			if _, err := p.tasks.KillTask(ctx(), &pelotonv1.KillTaskRequest{JobId: id, InstanceId: 0}); err == nil {
				counts["batch task killed"]++
			}
		case r < 62 && len(services) > 0:
			s := services[rng.IntN(len(services))]
			next := proto.Clone(s.spec).(*pelotonv1.JobSpec)
			next.DefaultSpec.Command = []string{"sh", "-c", fmt.Sprintf("exec sleep %d # %s", 3600+step, logf.marker)}
			if _, err := p.updates.CreateUpdate(ctx(), &pelotonv1.CreateUpdateRequest{JobId: s.id, Spec: next,
				UpdateSpec: &pelotonv1.UpdateSpec{BatchSize: 1, MinReadySeconds: 1}}); err == nil {
				s.spec = next
				counts["service updated"]++
			}
		case r < 70 && len(services) > 0:
			s := services[rng.IntN(len(services))]
			n := uint32(2 + rng.IntN(6))
			if _, err := p.jobs.ScaleJob(ctx(), &pelotonv1.ScaleJobRequest{JobId: s.id, InstanceCount: n}); err == nil {
				s.spec.InstanceCount = n
				counts["service scaled"]++
			}
		case r < 78:
			host := fmt.Sprintf("local-%d", rng.IntN(2))
			if rng.IntN(2) == 0 {
				if _, err := p.api.Hosts.StartMaintenance(ctx(), &pelotonv1.StartMaintenanceRequest{Hosts: []string{host}}); err == nil {
					counts["host drain started"]++
				}
			} else if _, err := p.api.Hosts.CompleteMaintenance(ctx(), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{host}}); err == nil {
				counts["host returned"]++
			}
		case time.Since(lastRestart) > 45*time.Second:
			p.kill()
			p = startUp(t, bin, dir)
			lastRestart = time.Now()
			counts["kill -9 and restart"]++
		}
		check()
		// The soak's pace: a random gap between two disturbances is
		// the scenario, not a wait for anything.
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
	}
	// Return both hosts so that everything can finish, then check the runs.
	_, _ = p.api.Hosts.CompleteMaintenance(ctx(), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{"local-0", "local-1"}})
	spans := logf.spans(t)
	runs := 0
	for _, ss := range spans {
		runs += len(ss)
	}
	logf.checkNoOverlap(t, len(spans))
	t.Logf("soak for %s: %v; %d batch instances ran %d runs", duration, counts, len(spans), runs)
}
