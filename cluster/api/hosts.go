package api

import (
	"time"

	"context"
	"io"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Hosts is what the API serves of hostmgr, one interface per part of it,
// each of exactly the methods the API calls. The wiring fills it from a
// *hostmgr.Manager: Cache is the manager itself, Maintenance and Usage its
// parts of the same names.
type Hosts struct {
	Cache       HostCache
	Maintenance HostMaintenance
	Usage       HostUsage
}

// HostCache lists hosts, with their runs if asked, the substrate's status,
// and a run's output.
type HostCache interface {
	ListHosts() []*pelotonv1.Host
	ListHostsWithRuns() []*pelotonv1.Host
	SubstrateProto() *pelotonv1.Substrate
	// LargestHost is the capacity of the largest host in service, per
	// kind (zero when there is none).
	LargestHost() resources.Resources
	Logs(ctx context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error)
}

// HostMaintenance starts and completes maintenance, moves hosts between
// partitions and lists the moves.
type HostMaintenance interface {
	StartMaintenance(ctx context.Context, names []string) ([]*pelotonv1.Host, error)
	CompleteMaintenance(ctx context.Context, names []string) ([]*pelotonv1.Host, error)
	MoveHostDrain(ctx context.Context, name, partition, reason string, window time.Duration, finish []string) (*pelotonv1.Host, error)
	CancelMove(ctx context.Context, name, reason string) (*pelotonv1.Host, error)
	Leaving(names []string) (runs []hostmgr.LeavingRun, stay []hostmgr.HostClass, known bool)
	ListPartitionMoves(host string, limit uint32) ([]*pelotonv1.PartitionMove, error)
}

// HostUsage takes the host agents' reports and the advisor's advice, and
// summarizes the partitions.
type HostUsage interface {
	TakeUsage(r *pelotonv1.UsageReport) (hostmgr.UsageResult, error)
	// AgentSettings are the settings of the partition profile the host
	// took, sent to its agent with each ack (nil: none).
	AgentSettings(host string) *pelotonv1.AgentSettings
	UsageReports() uint64
	PublishAdvice(ctx context.Context, req *pelotonv1.PublishAdviceRequest) error
	ListPartitions() ([]*pelotonv1.Partition, *pelotonv1.AdvisorStatus)
}
