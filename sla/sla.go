// Package sla is the SLA evaluator: the one place every voluntary disruption
// of a job's instances asks first — an update batch, a kill or restart of a
// service instance, a host drain, a preemption, later a partition move or a
// federated rollout. Per job it knows the budget (maximumUnavailableInstances),
// the instances that are down for involuntary reasons (crashed, pending, lost,
// as reported by jobmgr) and the instances already granted to go down, and it
// refuses, with a reason a user can read, any request that would push the job
// beyond its budget.
//
// A grant is a lease, not a permanent record. The holder (an update, a drain,
// the preemptor) may die between asking and finishing; if a grant lived until
// released, a crashed drain would eat its jobs' budgets for ever and block
// every later update. So each grant carries a TTL: the holder renews it while
// it works and releases it when done, and a grant nobody renews stops counting
// at its expiry instant. A holder that loses its lease must ask again.
//
// The decisions live in a pure core (no clock, no goroutine, no I/O; time is
// an argument), wrapped by Local, which adds a mutex and a clock. The
// federation will implement the same Evaluator interface across clusters.
//
// This package imports nothing of Peloton's other packages (standard library
// only): jobmgr, resmgr, hostmgr, the advisor and the federation all call it,
// so any import from here would be a cycle waiting to happen, and a budget
// check must not depend on how jobs are stored or hosts are run.
package sla

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Evaluator decides whether a voluntary disruption may go ahead. Local is the
// in-process implementation; the federation's global evaluator, in another
// process, is the other.
//
// Every call takes a context and may fail for reasons other than the budget
// (a remote evaluator times out, is unreachable, restarts). Callers treat
// any error as "not now": an error from Request is never a grant, and a
// failed report, release or renew is sent again later. Callers must not hold
// a lock of their own across a call: a remote call may take as long as its
// context allows.
type Evaluator interface {
	// Request asks to take req.Instances of req.JobID down. On success the
	// returned grant holds them until it is released or expires. A refusal
	// over the budget or a conflicting grant is a *RefusedError.
	Request(ctx context.Context, req Request) (Grant, error)
	// Release ends a grant early; its instances stop counting at once.
	// It returns ErrUnknownGrant for a grant that was released, expired or
	// whose job was removed.
	Release(ctx context.Context, grantID string) error
	// Renew extends a live grant to expire ttl from now. An expired grant
	// cannot be renewed (ErrUnknownGrant): its instances may already have
	// been granted to someone else.
	Renew(ctx context.Context, grantID string, ttl time.Duration) error
	// SetJob registers a job or updates its instance count and budget.
	// Lowering the budget refuses new requests but revokes no grant.
	SetJob(ctx context.Context, job JobSLA) error
	// RemoveJob forgets a job and drops its grants. Removing an unknown job
	// is not an error.
	RemoveJob(ctx context.Context, jobID string) error
	// ReportAvailability replaces the set of the job's instances that are
	// down for involuntary reasons. They consume budget like grants do.
	// Reports for unknown jobs and instance IDs outside the job are dropped.
	ReportAvailability(ctx context.Context, jobID string, unavailable []uint32) error
	// Status returns the job's current accounting, or ErrUnknownJob if the
	// job is not known.
	Status(ctx context.Context, jobID string) (JobStatus, error)
}

// FallbackReporter is implemented by an evaluator that asks another one
// for some jobs and, when it cannot reach it, decides them itself on a
// fallback budget (sla/fed's Router for federated services). The
// job manager shows it in the job's status.
type FallbackReporter interface {
	// InFallback reports whether jobID's disruptions are decided on its
	// fallback budget now.
	InFallback(jobID string) bool
}

// JobSLA is what the evaluator needs to know about a job.
type JobSLA struct {
	JobID string
	// InstanceCount bounds the instance IDs: the job's instances are
	// among 0..InstanceCount-1. A job whose scale removed instances has
	// holes below it, which the job manager never reports down nor asks
	// about, so the budget counts only instances that exist.
	InstanceCount uint32
	// MaximumUnavailableInstances is the budget: at most this many of the
	// job's instances may be unavailable at once because of voluntary
	// disruptions. 0 means no voluntary disruption at all.
	MaximumUnavailableInstances uint32
	// Group names the whole the job is a part of, when there is one: the
	// federated service whose part it is in this cluster (its label
	// GroupLabel). An evaluator that budgets the whole asks about it;
	// the in-process one ignores it.
	Group string
}

// GroupLabel is the job label that names a job's Group: the federation
// puts it on the job it makes in a cluster for a federated service.
const GroupLabel = "peloton.io/federated-service"

// FederationCallKey is the gRPC metadata key the federation sets on the
// calls it makes to a cluster to keep a federated service's job as the
// service says (its name is the value). A cluster refuses a scale or an
// update of a job labelled GroupLabel without it: the federation would
// undo the change a second later. The REST gateway drops every caller's
// x-peloton-* headers, and with a policy on the cluster only a caller
// holding admin there (the federation's principal) is believed.
const FederationCallKey = "x-peloton-federation"

// Request asks for permission to take instances of a job down.
type Request struct {
	JobID     string
	Instances []uint32
	// Holder names who disrupts, e.g. "update/<id>", "drain/<host>",
	// "preempt". Requests of the same holder may overlap; different holders
	// never get the same instance at once.
	Holder string
	// Reason is free text for logs and the user ("update to spec v7").
	Reason string
	// TTL is how long the grant lives unless renewed; must be > 0.
	TTL time.Duration
	// Partial grants the longest prefix of Instances, in the given order,
	// that fits, instead of all or nothing. It is refused only when not even
	// the first instance fits.
	Partial bool
}

// Grant is a lease on instances of one job to go down.
type Grant struct {
	// ID names the grant in Release and Renew: 128 random bits in hex.
	ID    string
	JobID string
	// Instances are the instances granted, each once, in request order
	// (for a Partial request, the prefix that fitted).
	Instances []uint32
	Holder    string
	Reason    string
	// Expires is the instant the grant stops counting unless renewed.
	Expires time.Time
}

// JobStatus is a job's accounting at one instant.
type JobStatus struct {
	JobSLA
	// Down is the reported involuntarily unavailable instances, sorted.
	Down []uint32
	// Grants is the live grants on the job, sorted by ID.
	Grants []Grant
	// Unavailable is the number of distinct instances below InstanceCount
	// that are down or in a live grant: what the budget is compared with.
	Unavailable int
}

var (
	// ErrUnknownJob: the job was never registered with SetJob, or was removed.
	ErrUnknownJob = errors.New("not known to the SLA evaluator")
	// ErrUnknownGrant: no live grant has this ID (released, expired, or its
	// job removed).
	ErrUnknownGrant = errors.New("unknown or expired")
	// ErrUnknownInstance: an instance ID is not below the job's instance count.
	ErrUnknownInstance = errors.New("no such instance")
	// ErrInvalidRequest: the request itself is malformed (no instances, no
	// holder, TTL not positive).
	ErrInvalidRequest = errors.New("invalid request")
)

// RefusedError says why a request was refused: the job is at or would go over
// its budget, or an instance is already granted to a different holder.
type RefusedError struct {
	JobID string
	// Requested is how many more instances the request would take down
	// (those not already unavailable).
	Requested int
	// Unavailable is how many would be unavailable if it were granted.
	Unavailable int
	// Budget is the job's maximumUnavailableInstances.
	Budget int
	// Reason is the full explanation after "job <id>: ", for users.
	Reason string
}

// Error implements error.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("job %s: %s", e.JobID, e.Reason)
}
