package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// benchHosts is a cluster of n hosts in three shapes (a tenth with GPUs) over
// three zones, some already partly used.
func benchHosts(n int) []hostmgr.HostOffer {
	rng := rand.New(rand.NewPCG(1, 2))
	hs := make([]hostmgr.HostOffer, n)
	for i := range hs {
		c := resources.Resources{MilliCPU: 32000, MemoryMB: 128 << 10, DiskMB: 1 << 20}
		switch i % 10 {
		case 0:
			c = resources.Resources{MilliCPU: 64000, MemoryMB: 256 << 10, DiskMB: 1 << 20, GPU: 8}
		case 1, 2, 3:
			c = resources.Resources{MilliCPU: 16000, MemoryMB: 64 << 10, DiskMB: 1 << 19}
		}
		free := c
		if rng.IntN(4) == 0 {
			free = c.Sub(resources.Resources{MilliCPU: int64(rng.IntN(8)) * 1000, MemoryMB: int64(rng.IntN(16)) << 10})
		}
		hs[i] = hostmgr.HostOffer{Name: fmt.Sprintf("host-%05d", i), Free: free, Capacity: c,
			Labels: map[string]string{"zone": string(rune('a' + i%3))}, Partition: "default"}
	}
	return hs
}

// benchTasks is n single-task gangs of mixed sizes from jobs of perJob
// instances each, every job with the given strategy.
func benchTasks(n, perJob int, strategy pelotonv1.PlacementStrategy) []*resmgr.Gang {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []resources.Resources{
		{MilliCPU: 500, MemoryMB: 512},
		{MilliCPU: 1000, MemoryMB: 2048},
		{MilliCPU: 2000, MemoryMB: 4096, DiskMB: 10240},
		{MilliCPU: 4000, MemoryMB: 8192},
		{MilliCPU: 4000, MemoryMB: 16384, GPU: 1},
	}
	gangs := make([]*resmgr.Gang, n)
	var p *pelotonv1.PlacementSpec
	var size resources.Resources
	for i := range gangs {
		if i%perJob == 0 {
			p = &pelotonv1.PlacementSpec{Strategy: strategy}
			size = sizes[rng.IntN(len(sizes))]
		}
		gangs[i] = resmgr.NewGang(&resmgr.Task{JobID: fmt.Sprintf("job-%d", i/perJob), Instance: uint32(i % perJob), RunID: 1,
			Pool: "/default", Resources: size, Strategy: strategy, Placement: p})
	}
	return gangs
}

func benchPlace(b *testing.B, hosts []hostmgr.HostOffer, gangs []*resmgr.Gang) {
	b.ReportAllocs()
	placed := 0
	for b.Loop() {
		placed += len(Place(gangs, hosts).Placed)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
}

// BenchmarkPlace5000Hosts50000Tasks: 50,000 single-task gangs of mixed
// sizes (BATCH jobs of 100 instances, packed) onto 5,000 hosts in one call.
func BenchmarkPlace5000Hosts50000Tasks(b *testing.B) {
	benchPlace(b, benchHosts(5000), benchTasks(50000, 100, pelotonv1.PlacementStrategy_PACK))
}

// BenchmarkPlace5000Hosts50000TasksSpread: the same with every job spread.
func BenchmarkPlace5000Hosts50000TasksSpread(b *testing.B) {
	benchPlace(b, benchHosts(5000), benchTasks(50000, 100, pelotonv1.PlacementStrategy_SPREAD))
}

// BenchmarkPlace5000Hosts1000Tasks is one default-sized engine round.
func BenchmarkPlace5000Hosts1000Tasks(b *testing.B) {
	benchPlace(b, benchHosts(5000), benchTasks(1000, 100, pelotonv1.PlacementStrategy_PACK))
}

// BenchmarkPlace5000HostsManySmallSpreadJobs: 50,000 SPREAD jobs of one
// instance each, so every task starts a new job's spreader on a filling
// cluster.
func BenchmarkPlace5000HostsManySmallSpreadJobs(b *testing.B) {
	benchPlace(b, benchHosts(5000), benchTasks(50000, 1, pelotonv1.PlacementStrategy_SPREAD))
}

// BenchmarkPlace5000HostsLargeJobsMaxOnePerHost: jobs of 5,000 instances
// capped at one per host, packed: each search would walk past every host
// the job already uses without the job's own pack trees.
func BenchmarkPlace5000HostsLargeJobsMaxOnePerHost(b *testing.B) {
	gangs := benchTasks(20000, 5000, pelotonv1.PlacementStrategy_PACK)
	for _, g := range gangs {
		g.Tasks[0].Placement.MaxInstancesPerHost = 1
	}
	benchPlace(b, benchHosts(5000), gangs)
}

// bindSome binds one gang in a hundred to a random host (STATEFUL volumes,
// DAEMONs).
func bindSome(hosts []hostmgr.HostOffer, gangs []*resmgr.Gang) []*resmgr.Gang {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < len(gangs); i += 100 {
		gangs[i].Tasks[0].BoundHost = hosts[rng.IntN(len(hosts))].Name
	}
	return gangs
}

// BenchmarkPlace5000Hosts1000TasksSomeBound: the engine's default round
// with one task in a hundred bound to a host. A bound task costs a lookup
// and a fit test on its host, not a search: this should stay close to
// BenchmarkPlace5000Hosts1000Tasks.
func BenchmarkPlace5000Hosts1000TasksSomeBound(b *testing.B) {
	hosts := benchHosts(5000)
	benchPlace(b, hosts, bindSome(hosts, benchTasks(1000, 100, pelotonv1.PlacementStrategy_PACK)))
}

// BenchmarkPlace5000Hosts50000TasksSomeBound: the same in one 50,000-task
// round. It is several times slower than the unbound round, as it is with
// previous hosts instead of bound ones: the hosts these tasks fill lie out
// of the pack trees' order (sorted once per round), and a full host's low
// key keeps every subtree holding it from being pruned. Engine rounds are
// small enough (1,000 tasks) not to build this up.
func BenchmarkPlace5000Hosts50000TasksSomeBound(b *testing.B) {
	hosts := benchHosts(5000)
	benchPlace(b, hosts, bindSome(hosts, benchTasks(50000, 100, pelotonv1.PlacementStrategy_PACK)))
}
