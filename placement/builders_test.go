package placement

import (
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Fixture builders: MakeHost("a").CPU(8).Mem(1024).Used(2, 0).Label("zone", "x").Obj()
// and MakeTask("j", 0).CPU(1).Spread().In("zone", "x").Obj().

type hostBuilder struct{ o hostmgr.HostOffer }

func MakeHost(name string) *hostBuilder {
	r := resources.Resources{MilliCPU: 8000, MemoryMB: 8192}
	return &hostBuilder{hostmgr.HostOffer{Name: name, Capacity: r, Free: r, Labels: map[string]string{}}}
}

// CPU sets capacity and free CPU, in cores.
func (b *hostBuilder) CPU(cores float64) *hostBuilder {
	b.o.Capacity.MilliCPU = int64(cores * 1000)
	b.o.Free.MilliCPU = b.o.Capacity.MilliCPU
	return b
}

// Mem sets capacity and free memory, in MiB.
func (b *hostBuilder) Mem(mb int64) *hostBuilder {
	b.o.Capacity.MemoryMB, b.o.Free.MemoryMB = mb, mb
	return b
}

// GPU sets capacity and free GPUs.
func (b *hostBuilder) GPU(n int64) *hostBuilder {
	b.o.Capacity.GPU, b.o.Free.GPU = n, n
	return b
}

// Used takes cores and MiB off the free resources.
func (b *hostBuilder) Used(cores float64, mb int64) *hostBuilder {
	b.o.Free = b.o.Capacity.Sub(resources.Resources{MilliCPU: int64(cores * 1000), MemoryMB: mb})
	return b
}

func (b *hostBuilder) Label(k, v string) *hostBuilder  { b.o.Labels[k] = v; return b }
func (b *hostBuilder) Partition(p string) *hostBuilder { b.o.Partition = p; return b }

// Running says the host already holds n runs of job.
func (b *hostBuilder) Running(job string, n int) *hostBuilder {
	if b.o.JobCounts == nil {
		b.o.JobCounts = map[string]int{}
	}
	b.o.JobCounts[job] = n
	return b
}
func (b *hostBuilder) Obj() hostmgr.HostOffer { return b.o }

type taskBuilder struct {
	t *resmgr.Task
	p *pelotonv1.PlacementSpec
}

func MakeTask(job string, inst uint32) *taskBuilder {
	return &taskBuilder{t: &resmgr.Task{JobID: job, Instance: inst, RunID: 1, Pool: "/default",
		Resources: resources.Resources{MilliCPU: 1000, MemoryMB: 128}, Strategy: pelotonv1.PlacementStrategy_PACK}}
}

func (b *taskBuilder) placement() *pelotonv1.PlacementSpec {
	if b.p == nil {
		b.p = &pelotonv1.PlacementSpec{}
	}
	return b.p
}

func (b *taskBuilder) CPU(cores float64) *taskBuilder {
	b.t.Resources.MilliCPU = int64(cores * 1000)
	return b
}
func (b *taskBuilder) Mem(mb int64) *taskBuilder  { b.t.Resources.MemoryMB = mb; return b }
func (b *taskBuilder) GPU(n int64) *taskBuilder   { b.t.Resources.GPU = n; return b }
func (b *taskBuilder) Prev(h string) *taskBuilder { b.t.PrevHost = h; return b }

// Bound binds the task to host h (a STATEFUL instance's volume, a DAEMON's host).
func (b *taskBuilder) Bound(h string) *taskBuilder { b.t.BoundHost = h; return b }
func (b *taskBuilder) Spread() *taskBuilder {
	b.t.Strategy = pelotonv1.PlacementStrategy_SPREAD
	b.placement().Strategy = pelotonv1.PlacementStrategy_SPREAD
	return b
}
func (b *taskBuilder) MaxPerHost(n uint32) *taskBuilder {
	b.placement().MaxInstancesPerHost = n
	return b
}
func (b *taskBuilder) Partition(p string) *taskBuilder { b.placement().Partition = p; return b }
func (b *taskBuilder) Where(label string, op pelotonv1.ConstraintOp, values ...string) *taskBuilder {
	b.placement().Constraints = append(b.placement().Constraints, &pelotonv1.Constraint{Label: label, Op: op, Values: values})
	return b
}

func (b *taskBuilder) Obj() *resmgr.Task {
	b.t.Placement = b.p
	return b.t
}

// instances builds n tasks of one job that share one placement spec (the
// first one's), as jobmgr hands them over.
func instances(job string, n int, edit func(*taskBuilder)) []*resmgr.Task {
	out := make([]*resmgr.Task, n)
	for i := range out {
		b := MakeTask(job, uint32(i))
		if edit != nil {
			edit(b)
		}
		out[i] = b.Obj()
		if i > 0 {
			out[i].Placement = out[0].Placement
		}
	}
	return out
}

// singles wraps each task in a gang of one.
func singles(ts ...*resmgr.Task) []*resmgr.Gang {
	out := make([]*resmgr.Gang, len(ts))
	for i, t := range ts {
		out[i] = resmgr.NewGang(t)
	}
	return out
}

// AnyOf adds terms, of which the host must pass one.
func (b *taskBuilder) AnyOf(terms ...*pelotonv1.ConstraintTerm) *taskBuilder {
	b.placement().AnyOf = append(b.placement().AnyOf, terms...)
	return b
}

// Tolerate adds tolerations of host taints.
func (b *taskBuilder) Tolerate(tols ...*pelotonv1.Toleration) *taskBuilder {
	b.placement().Tolerations = append(b.placement().Tolerations, tols...)
	return b
}

func objs(bs []*taskBuilder) []*resmgr.Task {
	out := make([]*resmgr.Task, len(bs))
	for i, b := range bs {
		out[i] = b.Obj()
	}
	return out
}
