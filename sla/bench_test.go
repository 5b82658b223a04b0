package sla

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRequestRelease measures one Request of one instance plus its
// Release on a Local holding 10,000 jobs of 100 instances (budget 10), each
// with one long-lived grant already in place, so the expiry heap is full.
func BenchmarkRequestRelease(b *testing.B) {
	const jobs, instances = 10_000, 100
	l := NewLocal(nil)
	ids := make([]string, jobs)
	for n := range jobs {
		ids[n] = fmt.Sprintf("job-%05d", n)
		l.SetJob(ctx, JobSLA{JobID: ids[n], InstanceCount: instances, MaximumUnavailableInstances: 10})
		if _, err := l.Request(ctx, Request{JobID: ids[n], Instances: []uint32{0}, Holder: "update/bg", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	req := Request{Instances: []uint32{0}, Holder: "drain/h1", TTL: time.Minute}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		req.JobID = ids[n%jobs]
		req.Instances[0] = uint32(1 + (n/jobs)%(instances-1))
		g, err := l.Request(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, g.ID); err != nil {
			b.Fatal(err)
		}
		n++
	}
}
