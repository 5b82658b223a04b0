package sla

import (
	"context"
	"time"
)

// ctx is the context of calls to a Local that are not about contexts.
var ctx = context.Background()

// Fixture builders: MakeJob("j").Instances(10).Budget(2).Obj() and
// MakeReq("j", "update/a", 1, 2).TTL(time.Second).Partial().Obj().

type jobBuilder struct{ s JobSLA }

// MakeJob starts a job of 10 instances with a budget of 1.
func MakeJob(id string) *jobBuilder {
	return &jobBuilder{JobSLA{JobID: id, InstanceCount: 10, MaximumUnavailableInstances: 1}}
}

// Instances sets the instance count.
func (b *jobBuilder) Instances(n uint32) *jobBuilder { b.s.InstanceCount = n; return b }

// Budget sets maximumUnavailableInstances.
func (b *jobBuilder) Budget(n uint32) *jobBuilder { b.s.MaximumUnavailableInstances = n; return b }

// Obj returns the built JobSLA.
func (b *jobBuilder) Obj() JobSLA { return b.s }

type reqBuilder struct{ r Request }

// MakeReq starts an all-or-nothing request with a TTL of 10s.
func MakeReq(job, holder string, instances ...uint32) *reqBuilder {
	return &reqBuilder{Request{JobID: job, Holder: holder, Instances: instances, TTL: 10 * time.Second}}
}

// TTL sets the lease duration.
func (b *reqBuilder) TTL(d time.Duration) *reqBuilder { b.r.TTL = d; return b }

// Partial asks for the longest prefix that fits.
func (b *reqBuilder) Partial() *reqBuilder { b.r.Partial = true; return b }

// Obj returns the built Request.
func (b *reqBuilder) Obj() Request { return b.r }
