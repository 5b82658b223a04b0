package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/hostagent"
	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// localAgents runs a host agent in this process for each virtual host of
// the local backend: the runs of those hosts are this machine's processes,
// found by their PELOTON_HOST, and a virtual host's usage is the sum of
// its runs' (the machine is shared by all of them). The agents report to
// the stack over its own gRPC listener, the path every agent takes, so
// `peloton up` shows usage and slack exactly as a cluster of real hosts
// with `peloton serve hostagent` on each would.
type localAgents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conn   *grpc.ClientConn
}

// startLocalAgents starts them; stop ends them.
func startLocalAgents(ctx context.Context, grpcAddr string, hm *hostmgr.Manager, cfg Config, log *slog.Logger) (*localAgents, error) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	la := &localAgents{cancel: cancel, conn: conn}
	client := pelotonv1.NewHostAgentServiceClient(conn)
	for _, h := range hm.ListHosts() {
		runs := ownRuns{env: &hostagent.EnvRuns{ProcRoot: "/proc", Host: h.Name}, hm: hm, host: h.Name}
		// A virtual host runs hot against its own declared capacity.
		capacity := hostagent.Resources{CPU: h.GetCapacity().GetCpu(), MemoryMB: int64(h.GetCapacity().GetMemoryMb())}
		a, err := hostagent.New(hostagent.Config{Host: h.Name, Virtual: true, Runs: runs, Capacity: capacity, QoS: cfg.HostAgentQoS,
			Client: client, Interval: cfg.HostAgentInterval, Logger: log.With("component", "hostagent", "host", h.Name)})
		if err != nil {
			la.stop()
			return nil, err
		}
		la.wg.Go(func() { _ = a.Run(ctx) })
	}
	return la, nil
}

func (la *localAgents) stop() {
	la.cancel()
	la.wg.Wait()
	_ = la.conn.Close()
}

// ownRuns are the runs of a virtual host that this stack placed there.
// Several stacks on one machine (tests, `peloton up` twice) may name their
// virtual hosts alike; the processes alone cannot tell whose a run is.
type ownRuns struct {
	env  *hostagent.EnvRuns
	hm   *hostmgr.Manager
	host string
}

func (o ownRuns) Runs(now time.Time) (map[string]hostagent.Sample, error) {
	runs, err := o.env.Runs(now)
	for id := range runs {
		if !o.hm.HoldsOn(o.host, id) {
			delete(runs, id)
		}
	}
	return runs, err
}

func (o ownRuns) RunInfo(now time.Time) (map[string]hostagent.RunInfo, error) {
	runs, err := o.env.RunInfo(now)
	for id := range runs {
		if !o.hm.HoldsOn(o.host, id) {
			delete(runs, id)
		}
	}
	return runs, err
}

func (o ownRuns) Kill(id string, run hostagent.RunInfo) error { return o.env.Kill(id, run) }

var _ hostagent.QoSRuns = ownRuns{}
