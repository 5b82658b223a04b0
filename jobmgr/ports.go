package jobmgr

import (
	"context"
	"io"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Hosts is what jobmgr uses of hostmgr, and nothing more: *hostmgr.Manager
// satisfies it (the wiring passes it), and a test may pass a fake. The
// methods are grouped by what jobmgr does with them.
type Hosts interface {
	// Runs: launch, replace, kill and watch them, and read their output.
	Launch(ctx context.Context, spec hostmgr.LaunchSpec) error
	CheckReplace(old string, next hostmgr.LaunchSpec) error
	Replace(ctx context.Context, old string, next hostmgr.LaunchSpec) error
	Kill(ctx context.Context, taskID string, grace time.Duration) error
	Status(taskID string) (hostmgr.TaskEvent, error)
	Runs() []hostmgr.RunInfo
	Events() <-chan hostmgr.TaskEvent
	Logs(ctx context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error)
	Prefetch(ctx context.Context, hosts []string, image string) error
	ReleaseVolume(ctx context.Context, host, volumeID string) error
	RemoveJobOutput(ctx context.Context, jobID string) error
	Foreign() hostmgr.ForeignSource

	// Holds: what each run holds on its host, re-reserved after a restart.
	Recover(taskID, hostName string, r resources.Resources)
	RecoverRevocable(taskID, hostName string, r resources.Resources)
	Recovered()
	ReleaseTask(taskID string)
	TransferHold(from, to string) (string, bool)
	HoldsExactly(taskID string, r resources.Resources) bool

	// Hosts: their state, size and substrate.
	HostUp(name string) bool
	LargestHost() resources.Resources
	ListHosts() []*pelotonv1.Host
	Substrate() hostmgr.SubstrateStatus

	// Drains: moving runs off hosts in maintenance or moving partition.
	Drains(ctx context.Context) []hostmgr.DrainRequest
	Draining(host string) bool
	SetDrainNote(host, note string)

	// Usage: what the host agents said of a run.
	Revoked(taskID string) bool
	RunUsage(taskID string) *pelotonv1.TaskUsage
}

// Resources is what jobmgr uses of resmgr, and nothing more:
// *resmgr.Manager satisfies it (the wiring passes it), and a test may pass
// a recording fake. The methods are grouped by what jobmgr does with them.
type Resources interface {
	// Queue: work goes in, placed runs and preemption victims come out.
	Enqueue(gangs ...*resmgr.Gang) error
	GetPlacements(ctx context.Context, max int) []resmgr.Placement
	GetPreemptions(ctx context.Context) []resmgr.Victim

	// Runs: what each holds in its pool, re-reserved after a restart, and
	// given back when it ends.
	Recover(t *resmgr.Task)
	MarkRunning(jobID string, instance uint32)
	Release(jobID string, instance uint32)
	ReleaseRun(jobID string, instance, run uint32)
	TaskState(jobID string, instance uint32) (pelotonv1.TaskState, string, bool)
	// JobHostReservation is the hosts set aside for one of the job's gangs
	// (nil: none), for GetJob.
	JobHostReservation(jobID string) *pelotonv1.GangReservation

	// Pools: a job's pool must be a leaf; a pool with jobs cannot go.
	CheckLeafPool(path, field string) (string, error)
	SetJobChecker(fn func(pool string) bool)
}
