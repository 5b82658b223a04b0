package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func sleeper(name, pool string, n uint32, cpu float64) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: pool, InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "300"},
			Resources: &pelotonv1.Resources{Cpu: cpu, MemoryMb: 16}, KillGracePeriodSeconds: 1}}
}

// waitPools waits until cond holds for the pools' status, or fails with it.
func (s *stack) waitPools(what string, within time.Duration, cond func(map[string]*pelotonv1.Pool) bool) map[string]*pelotonv1.Pool {
	s.t.Helper()
	var m map[string]*pelotonv1.Pool
	peltest.Eventually(s.t, within, "pools: "+what, func() error {
		resp, err := s.pools.ListPools(context.Background(), &pelotonv1.ListPoolsRequest{})
		if err != nil {
			s.t.Fatal(err)
		}
		m = map[string]*pelotonv1.Pool{}
		var b strings.Builder
		for _, p := range resp.Pools {
			m[p.Path] = p
			fmt.Fprintf(&b, "\n%s: %v", p.Path, p.Status)
		}
		if cond(m) {
			return nil
		}
		return errors.New("they are:" + b.String())
	})
	return m
}

// waitAdmissionRounds waits until n more rounds of the resource manager's
// admission loop have passed (the stack runs in this process, so the count
// is its own): a claim that a round changed nothing then means something.
func waitAdmissionRounds(t *testing.T, n float64) {
	t.Helper()
	want := testutil.ToFloat64(metrics.AdmissionRounds) + n
	peltest.Eventually(t, 30*time.Second, fmt.Sprintf("%v admission rounds", n), func() error {
		if got := testutil.ToFloat64(metrics.AdmissionRounds); got < want {
			return fmt.Errorf("%v of %v", got, want)
		}
		return nil
	})
}

// TestReclaimPreemptionEndToEnd: three pools share a 6-CPU cluster of real
// processes. Two busy pools split it; when the third wants its share, the
// other two are preempted down to their new entitlements and the preempted
// instances go back to PENDING (visible in their history).
func TestReclaimPreemptionEndToEnd(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 3, hostMem: 4096})
	ctx := ctxT(t)
	// The metrics registry is process-wide: count this test's preemptions only.
	reclaimsBefore := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("reclaim"))
	for _, p := range []string{"/p1", "/p2", "/p3"} {
		if _, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: p,
			Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 512}}}); err != nil {
			t.Fatal(err)
		}
	}
	j2, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sleeper("two", "/p2", 12, 0.25)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sleeper("three", "/p3", 12, 0.25)}); err != nil {
		t.Fatal(err)
	}
	s.waitPools("p2 and p3 each run 3 CPU", 30*time.Second, func(m map[string]*pelotonv1.Pool) bool {
		return m["/p2"].Status.Allocation.Cpu == 3 && m["/p3"].Status.Allocation.Cpu == 3
	})
	if _, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sleeper("one", "/p1", 8, 0.25)}); err != nil {
		t.Fatal(err)
	}
	m := s.waitPools("every pool at entitlement 2 CPU with p1 running 2", 30*time.Second, func(m map[string]*pelotonv1.Pool) bool {
		for _, p := range []string{"/p1", "/p2", "/p3"} {
			if m[p].Status.Entitlement.GetCpu() != 2 || m[p].Status.Allocation.GetCpu() != 2 {
				return false
			}
		}
		return m["/p1"].Status.RunningTasks == 8
	})
	_ = m
	// Each busy pool lost 4 instances; each went PREEMPTING, then back to PENDING as a new run.
	tasks, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: j2.JobId})
	if err != nil {
		t.Fatal(err)
	}
	preempted := 0
	for _, tk := range tasks.Tasks {
		var sawPreempting, sawPendingAfter bool
		for _, h := range tk.Status.History {
			if h.State == pelotonv1.TaskState_PREEMPTING {
				sawPreempting = true
			}
			if sawPreempting && h.State == pelotonv1.TaskState_PENDING {
				sawPendingAfter = true
			}
		}
		if sawPreempting {
			preempted++
			if !sawPendingAfter || tk.Status.RunId != 2 || tk.Status.FailureCount != 0 {
				t.Errorf("instance %d: preempted but history %v run %d failures %d", tk.InstanceId, tk.Status.History, tk.Status.RunId, tk.Status.FailureCount)
			}
		}
	}
	if preempted != 4 {
		t.Fatalf("%d instances of /p2 preempted, want 4", preempted)
	}
	// Settled: no more preemptions over the next dozen admission rounds,
	// three seconds when they come from the loop's tick alone, well past
	// the reclaim delay (1s) a wrong preemption would have waited.
	waitAdmissionRounds(t, 12)
	tasks2, _ := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: j2.JobId})
	for i, tk := range tasks2.Tasks {
		if tk.Status.RunId != tasks.Tasks[i].Status.RunId {
			t.Fatalf("instance %d was preempted again after settling", i)
		}
	}
	code, raw := s.rest("GET", "/metrics", nil, nil)
	if code != 200 {
		t.Fatal(code)
	}
	mustContain(t, raw, `peloton_preemptions_total{reason="reclaim"}`, "preemption metric")
	if d := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("reclaim")) - reclaimsBefore; d != 8 {
		t.Fatalf("peloton_preemptions_total{reason=\"reclaim\"} grew by %v, want 8", d)
	}
	mustContain(t, raw, `peloton_pool_resources{pool="/p1",resource="cpu",type="entitlement"} 2`, "entitlement gauge")
}
