package resmgr

import (
	"context"
	"fmt"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// admissionBench is a manager with leaf pools /adm-000 ... on a cluster
// large enough to admit everything, so the benchmarks measure the queues
// and admission, not waiting.
func admissionBench(b *testing.B, pools int) *Manager {
	b.Helper()
	_, st := storetest.StartEtcd(b)
	m, err := New(context.Background(), st, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for i := range pools {
		if _, err := m.CreatePool(context.Background(), fmt.Sprintf("/adm-%03d", i), &pelotonv1.PoolSpec{}); err != nil {
			b.Fatal(err)
		}
	}
	m.SetCapacity(resources.Resources{MilliCPU: 1 << 50, MemoryMB: 1 << 50, DiskMB: 1 << 50, GPU: 1 << 20})
	return m
}

// admissionJobs builds the gangs of one iteration: jobs of perJob
// single-task preemptible gangs, job j in pool j mod pools, the way jobmgr
// enqueues a batch job's instances.
func admissionJobs(iter, tasks, perJob, pools int) [][]*Gang {
	var jobs [][]*Gang
	for j := 0; j*perJob < tasks; j++ {
		pool := fmt.Sprintf("/adm-%03d", j%pools)
		id := fmt.Sprintf("job-%d-%d", iter, j)
		n := min(perJob, tasks-j*perJob)
		gangs := make([]*Gang, n)
		for i := range gangs {
			gangs[i] = NewGang(&Task{JobID: id, Instance: uint32(i), RunID: 1, Pool: pool, Preemptible: true,
				Resources: resources.Resources{MilliCPU: 1000, MemoryMB: 128}})
		}
		jobs = append(jobs, gangs)
	}
	return jobs
}

// BenchmarkAdmission pushes 200,000 single-task preemptible gangs over 100
// leaf pools through what sits between jobmgr and placement: per job of
// 1,000 instances one Enqueue, one admission round (admitOnce, as Run does
// when kicked) and one DequeueGangs of the placement engine's batch size.
// It reports tasks/s through the whole of it; the resource-manager issue
// asks for >= 200,000 tasks/s on 2 cores. Building the gangs and releasing
// the tasks afterwards are not timed.
func BenchmarkAdmission(b *testing.B) {
	const pools, tasks, perJob = 100, 200_000, 1000
	m := admissionBench(b, pools)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for iter := range b.N {
		b.StopTimer()
		jobs := admissionJobs(iter, tasks, perJob, pools)
		b.StartTimer()
		out := 0
		for _, gangs := range jobs {
			if err := m.Enqueue(gangs...); err != nil {
				b.Fatal(err)
			}
			m.admitOnce()
			out += len(m.DequeueGangs(ctx, perJob, 0))
		}
		b.StopTimer()
		if out != tasks {
			b.Fatalf("%d gangs reached placement, want %d", out, tasks)
		}
		for _, gangs := range jobs {
			for _, g := range gangs {
				m.Release(g.Tasks[0].JobID, g.Tasks[0].Instance)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(tasks)*float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
