package jobmgr

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// BenchmarkRecovery measures what a control plane killed with -9 costs to
// come back with many tasks in etcd: a first process runs one batch job of
// PELOTON_BENCH_TASKS instances (default 100,000) on sandboxes that outlive
// it (as pods and adopted local runs do); it is crashed, 1% of the runs end
// while no process watches, and a second process starts on the same store
// and sandboxes. Figures: readyMs (Start: load every job and task,
// reconcile each active run with the backend, re-queue; the API serves
// after it), reconcilePassMs (one periodic pass over every run), and
// missedEnds (the ends found, all of which must be).
//
//	go test -run XXX -bench Recovery -benchtime 1x -count 3 ./jobmgr/
func BenchmarkRecovery(b *testing.B) {
	n := benchTasks(b, 100000)
	for range b.N {
		b.StopTimer()
		e, _ := storetest.StartEtcd(b)
		s := newSandboxes(0)
		for i := range 100 {
			s.hosts = append(s.hosts, hostmgr.HostInfo{Name: fmt.Sprintf("h%d", i), Partition: "default",
				Capacity: resources.Resources{MilliCPU: int64(n) * 20, MemoryMB: int64(n) * 20, DiskMB: 1 << 20}})
		}
		first := startProcessWith(b, e, s, Options{LostBackoff: 10 * time.Millisecond, ReconcileEvery: time.Hour})
		spec := sleepers("recovery", uint32(n))
		spec.DefaultSpec.Resources = &pelotonv1.Resources{Cpu: 0.01, MemoryMb: 1}
		id, err := first.jm.CreateJob(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		testutil.Eventually(b, 10*time.Minute, "every instance running", func() error {
			j, err := first.jm.GetJob(id)
			if err != nil {
				return err
			}
			if got := j.Status.TaskCounts["RUNNING"]; got != uint32(n) {
				return fmt.Errorf("%d of %d running", got, n)
			}
			return nil
		})
		first.crash()
		ended := 0
		for inst := 0; inst < n; inst += 100 {
			s.finish(resmgr.RunTaskID(id, uint32(inst), 1), pelotonv1.TaskState_SUCCEEDED, true)
			ended++
		}
		runtime.GC()

		b.StartTimer()
		start := time.Now()
		second := startProcessOn(b, e, s, Options{ReconcileEvery: time.Hour}, procConfig{level: slog.LevelError, noEngines: true}).jm
		ready := time.Since(start)
		passStart := time.Now()
		_, _, _ = second.recs.reconcileOnce(context.Background())
		pass := time.Since(passStart)
		b.StopTimer()

		tk, err := second.GetTask(id, 0)
		if err != nil {
			b.Fatal(err)
		}
		if tk.Status.State != pelotonv1.TaskState_SUCCEEDED {
			b.Fatalf("instance 0 ended while no process watched, and is %v after recovery", tk.Status.State)
		}
		b.ReportMetric(float64(ready.Milliseconds()), "readyMs")
		b.ReportMetric(float64(pass.Milliseconds()), "reconcilePassMs")
		b.ReportMetric(float64(ended), "missedEnds")
	}
}

// BenchmarkOutageCatchUp measures how long the job manager takes, once etcd
// answers again, to write the task events that came while it did not: 10,000
// runs (PELOTON_BENCH_TASKS) end during an outage, and the figure catchUpMs
// is from the store's return to the last of their ends written (the queue
// of unwritten events empty and every instance SUCCEEDED in memory).
//
//	go test -run XXX -bench OutageCatchUp -benchtime 1x -count 3 ./jobmgr/
func BenchmarkOutageCatchUp(b *testing.B) {
	n := benchTasks(b, 10000)
	for range b.N {
		b.StopTimer()
		s := newSandboxes(0)
		for i := range 20 {
			s.hosts = append(s.hosts, hostmgr.HostInfo{Name: fmt.Sprintf("h%d", i), Partition: "default",
				Capacity: resources.Resources{MilliCPU: int64(n) * 20, MemoryMB: int64(n) * 20, DiskMB: 1 << 20}})
		}
		p := startFaultProcess(b, s, Options{ReconcileEvery: time.Hour})
		spec := sleepers("catch-up", uint32(n))
		spec.DefaultSpec.Resources = &pelotonv1.Resources{Cpu: 0.01, MemoryMb: 1}
		id, err := p.jm.CreateJob(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		waitCount(b, p.jm, id, "RUNNING", n)
		p.fs.mode.Store(storeDown)
		for inst := 0; inst < n; inst++ {
			s.finish(resmgr.RunTaskID(id, uint32(inst), 1), pelotonv1.TaskState_SUCCEEDED, false)
		}
		testutil.Eventually(b, 2*time.Minute, "every event queued during the outage", func() error {
			if got := p.jm.UnwrittenEvents(); got < n {
				return fmt.Errorf("%d of %d queued", got, n)
			}
			return nil
		})
		b.StartTimer()
		start := time.Now()
		p.fs.mode.Store(storeUp)
		waitCount(b, p.jm, id, "SUCCEEDED", n)
		pollFine(b, time.Millisecond, "every queued event written", func() error {
			if left := p.jm.UnwrittenEvents(); left > 0 {
				return fmt.Errorf("%d events not written", left)
			}
			return nil
		})
		b.StopTimer()
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "catchUpMs")
		b.ReportMetric(float64(n), "pendingChanges")
	}
}

// waitCount waits (up to ten minutes) until n instances of job id are in state.
func waitCount(b *testing.B, jm *Manager, id, state string, n int) {
	pollFine(b, 5*time.Millisecond, fmt.Sprintf("%d instances %s", n, state), func() error {
		j, err := jm.GetJob(id)
		if err != nil {
			b.Fatal(err)
		}
		if got := j.Status.TaskCounts[state]; got != uint32(n) {
			return fmt.Errorf("%d of %d", got, n)
		}
		return nil
	})
}

// pollFine waits, up to ten minutes, until cond holds, checking it every
// period. The benchmarks time these waits, so the period is fixed and well
// under what they measure; testutil.Eventually backs off to 50 ms.
func pollFine(b *testing.B, period time.Duration, what string, cond func() error) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within 10 minutes: %v", what, err)
		}
		// The poll's period bounds the error of the benchmark's figure;
		// no event of the manager tells when its counts change.
		time.Sleep(period)
	}
}

// benchTasks is PELOTON_BENCH_TASKS, or def.
func benchTasks(b *testing.B, def int) int {
	v := os.Getenv("PELOTON_BENCH_TASKS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 || n > MaxInstances {
		b.Fatalf("PELOTON_BENCH_TASKS %q: must be 100..%d", v, MaxInstances)
	}
	return n
}
