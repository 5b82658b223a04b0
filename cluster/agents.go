package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/peloton-sched/peloton/hostagent"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local"
	"github.com/peloton-sched/peloton/hostmgr/sim"
	"github.com/peloton-sched/peloton/internal/auth"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// localAgents runs a host agent in this process for each virtual host of
// the local backend: the runs of those hosts are this machine's processes,
// found by their PELOTON_HOST, and a virtual host's usage is the sum of
// its runs' (the machine is shared by all of them). The agents report to
// the stack over its in-memory listener, through the same API and guard
// as every agent (as the principal system:host-agent), so
// `peloton up` shows usage and slack exactly as a cluster of real hosts
// with `peloton serve hostagent` on each would.
type localAgents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conn   *grpc.ClientConn
}

// startLocalAgents starts them; stop ends them. With the sim backend
// (simb set) each simulated host gets an agent too, whose runs' use
// follows the sim backend's usage curves (hostmgr/sim/usage.go).
func startLocalAgents(ctx context.Context, dial func(principal string) (*grpc.ClientConn, error), hm *hostmgr.Manager, lb *local.Backend, simb *sim.Backend, cfg Config, log *slog.Logger) (*localAgents, error) {
	conn, err := dial(auth.PrincipalHostAgent)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	la := &localAgents{cancel: cancel, conn: conn}
	client := pelotonv1.NewHostAgentServiceClient(conn)
	for _, h := range hm.ListHosts() {
		var runs hostagent.QoSRuns = ownRuns{env: &hostagent.EnvRuns{ProcRoot: "/proc", Host: h.Name}, hm: hm, lb: lb, host: h.Name}
		if simb != nil {
			runs = &simRuns{b: simb, host: h.Name, cum: map[string]float64{}}
		}
		// A virtual host runs hot against its own declared capacity.
		capacity := hostagent.Resources{CPU: h.GetCapacity().GetCpu(), MemoryMB: int64(h.GetCapacity().GetMemoryMb())}
		a, err := hostagent.New(hostagent.Config{Host: h.Name, Virtual: true, Runs: runs, Capacity: capacity, QoS: cfg.HostAgentQoS,
			Client: client, Interval: cfg.HostAgentInterval, Logger: log.With("component", "hostagent")}) // the agent adds its host
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
	lb   *local.Backend // nil: no run has a cgroup
	host string
}

func (o ownRuns) Runs(now time.Time) (map[string]hostagent.Sample, error) {
	info, err := o.RunInfo(now)
	runs := make(map[string]hostagent.Sample, len(info))
	for id, r := range info {
		runs[id] = r.Sample
	}
	return runs, err
}

func (o ownRuns) RunInfo(now time.Time) (map[string]hostagent.RunInfo, error) {
	runs, err := o.env.RunInfo(now)
	for id, r := range runs {
		if !o.hm.HoldsOn(o.host, id) {
			delete(runs, id)
			continue
		}
		// A run in a cgroup of its own is read there: exact where a
		// sum of its processes' resident sets counts shared pages twice.
		if s, ok := o.cgroupSample(id, now); ok {
			r.Sample = s
			runs[id] = r
		}
	}
	return runs, err
}

// cgroupSample reads run id's usage from its cgroup, if it has one.
func (o ownRuns) cgroupSample(id string, now time.Time) (hostagent.Sample, bool) {
	if o.lb == nil {
		return hostagent.Sample{}, false
	}
	dirs, ok := o.lb.RunCgroup(id)
	if !ok {
		return hostagent.Sample{}, false
	}
	var s hostagent.Sample
	var err error
	switch {
	case dirs.Version == 2:
		s, err = hostagent.ReadCgroup2(dirs.Memory, now)
	case dirs.CPU != "":
		s, err = hostagent.ReadCgroup1(dirs.CPU, dirs.Memory, now)
	default:
		return hostagent.Sample{}, false
	}
	return s, err == nil
}

func (o ownRuns) Kill(id string, run hostagent.RunInfo) error { return o.env.Kill(id, run) }

var _ hostagent.QoSRuns = ownRuns{}

// simRuns are a simulated host's runs, as its sim agent reads them: each
// run's use from its curve, CPU integrated into the counter a real host
// keeps.
type simRuns struct {
	b    *sim.Backend
	host string

	mu   sync.Mutex
	cum  map[string]float64 // CPU seconds so far, by run
	last time.Time
}

func (s *simRuns) RunInfo(now time.Time) (map[string]hostagent.RunInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dt := 0.0
	if !s.last.IsZero() {
		dt = now.Sub(s.last).Seconds()
	}
	s.last = now
	out := map[string]hostagent.RunInfo{}
	for _, u := range s.b.HostUsage(s.host, now) {
		s.cum[u.TaskID] += u.CPU * dt
		out[u.TaskID] = hostagent.RunInfo{Sample: hostagent.Sample{CPUSeconds: s.cum[u.TaskID], MemUsed: uint64(u.MemoryMB) << 20, Time: now},
			Revocable: u.Revocable, Priority: u.Priority, Started: time.Duration(u.Started.UnixNano())}
	}
	for id := range s.cum {
		if _, ok := out[id]; !ok {
			delete(s.cum, id)
		}
	}
	return out, nil
}

func (s *simRuns) Runs(now time.Time) (map[string]hostagent.Sample, error) {
	info, err := s.RunInfo(now)
	out := make(map[string]hostagent.Sample, len(info))
	for id, r := range info {
		out[id] = r.Sample
	}
	return out, err
}

// Kill ends a simulated run as the QoS controller's kill of its processes
// would: at once.
func (s *simRuns) Kill(id string, _ hostagent.RunInfo) error {
	return s.b.Kill(context.Background(), id, 0)
}

var _ hostagent.QoSRuns = (*simRuns)(nil)
