package cluster

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/grpc"

	"github.com/peloton-sched/peloton/advisor"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/auth"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// startAdvisor runs the host advisor in this process when cfg asks for
// it, against the stack's API over its in-memory listener (as the
// principal system:advisor): the API `peloton serve advisor` calls from
// another process. stop ends it; it may be called
// more than once.
func startAdvisor(ctx context.Context, dial func(principal string) (*grpc.ClientConn, error), cfg Config, log *slog.Logger) (stop func(), err error) {
	if cfg.AdvisorMode == "" || cfg.AdvisorMode == "off" {
		return func() {}, nil
	}
	conn, err := dial(auth.PrincipalAdvisor)
	if err != nil {
		return nil, err
	}
	stale := cfg.UsageStaleAfter
	if stale <= 0 {
		stale = hostmgr.DefaultUsageStaleAfter
	}
	a, err := advisor.New(advisor.Options{Mode: cfg.AdvisorMode, Config: cfg.Advisor, Interval: cfg.AdvisorInterval,
		Logger: log.With("component", "advisor"),
		Cluster: &advisor.APICluster{StaleAfter: stale, API: advisor.APIClients{Hosts: pelotonv1.NewHostServiceClient(conn),
			Jobs: pelotonv1.NewJobServiceClient(conn), Partitions: pelotonv1.NewPartitionServiceClient(conn)}}})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			_ = conn.Close()
		})
	}, nil
}
