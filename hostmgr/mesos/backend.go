package mesos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var (
	_ hostmgr.Backend           = (*Backend)(nil)
	_ hostmgr.RunLister         = (*Backend)(nil)
	_ hostmgr.HostWatcher       = (*Backend)(nil)
	_ hostmgr.PartitionApplier  = (*Backend)(nil)
	_ hostmgr.VolumeReleaser    = (*Backend)(nil)
	_ hostmgr.MaintenanceSource = (*Backend)(nil)
	_ hostmgr.SubstrateReporter = (*Backend)(nil)
)

// ErrNoLogs is returned by Logs: the scheduler API carries no task output.
var ErrNoLogs = errors.New("mesos: task output is in the agent's sandbox (the agent's /files API), which the scheduler API does not serve")

// Backend runs a cluster stack as a Mesos framework through the v1
// scheduler HTTP API. See doc.go.
type Backend struct {
	cfg   Config
	url   string
	codec encoding.Codec
	log   *slog.Logger
	// newClient makes the HTTP client of the calls; caller is the
	// subscription state machine over one (mesos-go's httpsched). Both are
	// made anew when the state machine refuses a SUBSCRIBE as "already
	// subscribed": one whose stream ended under load was seen left
	// believing it was still subscribed, refusing every later SUBSCRIBE.
	// (NewCaller changes the client it is given, so the two go together.)
	newClient func() *httpcli.Client
	caller    atomic.Pointer[callerBox]
	batcher   *store.Batcher

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	acks   chan ack
	kick   chan struct{} // the launcher: something to do
	hostK  chan struct{} // the host notifier
	evK    chan struct{} // the event deliverer

	mu          sync.Mutex
	frameworkID string
	agents      map[string]*agent // by agent ID
	byHost      map[string]*agent
	runs        map[string]*run
	held        map[string]*usage // by agent ID: what our live runs hold
	acking      map[string]bool   // uuids whose acknowledgement is queued or in flight
	volUse      map[string]string // host + "\x00" + volume ID → the live run using it
	releases    []*releaseReq
	queue       []*launchReq
	gangSince   map[string]time.Time // by gangKey: when its first member was queued
	parts       map[string]string    // partitions hostmgr gave hosts
	connected   bool
	streamNo    int // counts subscriptions; a stale stream's events are ignored
	heartbeat   time.Duration
	suppressed  bool
	lastDemand  time.Time
	lastRevive  time.Time
	fatal       error
	offersSeen  bool
	reconciling map[string]bool // explicit reconciliation answers still due
	ready       chan struct{}   // closed once subscribed and reconciled
	stream      mesosv1.Response
	watch       func()
	maintWatch  func(host string, down bool)
	maintQ      map[string]bool // maintenance changes for maintWatch, by host
	sink        func(hostmgr.TaskEvent)
	events      []hostmgr.TaskEvent
	closed      bool

	// sub is whether the master is reachable (substrate.go), written by
	// the subscription loop alone; unreachable is closed the first time it
	// is not, which ends Start's wait.
	sub             atomic.Pointer[hostmgr.SubstrateStatus]
	unreachable     chan struct{}
	unreachableOnce sync.Once
}

// agent is one Mesos agent as offers show it.
type agent struct {
	id, host  string
	labels    map[string]string
	partition string
	// capacity is what the agent had for us when it last offered:
	// its outstanding offers plus our runs on it.
	capacity resources.Resources
	offers   map[string]*heldOffer
	// inverse holds outstanding inverse offers: the agent is to go into
	// maintenance, so it takes no new runs.
	inverse map[string]bool
	// unavailable: the agent has a maintenance window scheduled (an
	// inverse offer came, or its offers carry an unavailability), so it
	// takes no new runs until an offer comes without one.
	unavailable bool
	// vols are the persistent volumes its offers showed.
	vols map[string]bool
	// told is whether hostmgr was told of its maintenance, toldDown what.
	told, toldDown bool
}

// inMaintenance: the agent has a maintenance window scheduled.
func (a *agent) inMaintenance() bool { return a.unavailable || len(a.inverse) > 0 }

type heldOffer struct {
	offer mesosv1.Offer
	at    time.Time
}

// run is one task this framework launched (or found by reconciliation).
type run struct {
	id, host, agentID string
	res               resources.Resources
	ports             map[string]uint32
	last              hostmgr.TaskEvent
	has               bool // an event was reported
	ended             bool
	accepted          bool // in an ACCEPT: counts on its agent
	counted           bool // its resources are in held[agentID]
	pending           *launchReq
	// spec is kept until the run is known to have started, so that a
	// launch whose offers were void (rescinded as the ACCEPT went out) is
	// tried again on the next offers.
	spec *hostmgr.LaunchSpec
	// volKey is its volume's key in volUse, if it has one.
	volKey string
}

type launchReq struct {
	spec hostmgr.LaunchSpec
	run  *run
	done chan error // cap 1
}

type ack struct {
	agentID, taskID string
	uuid            []byte
	persist         *run // a terminal run whose end is stored before the ack
}

// New makes an unstarted backend.
func New(cfg Config) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	url, _ := ParseMaster(cfg.Master)
	codec, _ := Codec(cfg.ContentType)
	b := &Backend{cfg: cfg, url: url, codec: codec, log: cfg.Logger,
		agents: map[string]*agent{}, byHost: map[string]*agent{}, runs: map[string]*run{}, parts: map[string]string{},
		held: map[string]*usage{}, maintQ: map[string]bool{}, gangSince: map[string]time.Time{}, acking: map[string]bool{}, volUse: map[string]string{},
		acks: make(chan ack, 4096), kick: make(chan struct{}, 1), hostK: make(chan struct{}, 1), evK: make(chan struct{}, 1),
		ready: make(chan struct{}), unreachable: make(chan struct{})}
	st := hostmgr.NewSubstrateStatus("mesos master "+cfg.Master, time.Now())
	b.sub.Store(&st)
	return b, nil
}

// Name implements hostmgr.Backend.
func (b *Backend) Name() string { return BackendName }

// FrameworkID is the framework's ID (empty before the first subscription).
func (b *Backend) FrameworkID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frameworkID
}

// WatchMaintenance implements hostmgr.MaintenanceSource: an agent with a
// maintenance window scheduled (an inverse offer, or offers that carry an
// unavailability) is down, and up again once its offers come without one
// (the window ended or was cancelled). Each agent is reported when first
// seen, and then on every change.
func (b *Backend) WatchMaintenance(changed func(host string, down bool)) {
	b.mu.Lock()
	b.maintWatch = changed
	b.mu.Unlock()
}

// noteMaintenance queues a's maintenance for the watcher if hostmgr was not
// told of it yet. b.mu is held.
func (b *Backend) noteMaintenance(a *agent) {
	down := a.inMaintenance()
	if a.told && a.toldDown == down {
		return
	}
	a.told, a.toldDown = true, down
	b.maintQ[a.host] = down
	signal(b.hostK)
}

// WatchHosts implements hostmgr.HostWatcher.
func (b *Backend) WatchHosts(changed func()) {
	b.mu.Lock()
	b.watch = changed
	b.mu.Unlock()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Start subscribes, reconciles the runs the store records, and returns
// once the master answered and its first offers came (or StartTimeout).
// It returns as soon as a subscription attempt fails instead: the master
// is not there, or what answers is not a master. The stack then serves
// without it, the backend subscribes again with backoff until it answers
// (Substrate says why it does not), and its agents become hosts then.
func (b *Backend) Start(ctx context.Context, sink func(hostmgr.TaskEvent)) error {
	b.ctx, b.cancel = context.WithCancel(ctx)
	b.sink = sink
	b.batcher = store.NewBatcher(b.cfg.Store, store.BatcherOptions{})
	lctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	if err := b.load(lctx); err != nil {
		b.Close()
		return err
	}
	b.newClient = func() *httpcli.Client {
		return httpcli.New(httpcli.Endpoint(b.url), httpcli.Codec(b.codec), httpcli.ErrorMapper(mapAnswer), httpcli.Do(httpcli.With(
			httpcli.Transport(func(t *http.Transport) {
				t.MaxIdleConnsPerHost = 128
				t.MaxIdleConns = 256
				t.ResponseHeaderTimeout = 15 * time.Second
			}))))
	}
	b.newCaller()
	b.wg.Add(4)
	go b.subscribeLoop()
	go b.launcher()
	go b.deliver()
	go b.notifyHosts()
	for range ackers {
		b.wg.Add(1)
		go b.acker()
	}
	select {
	case <-b.ready:
	case <-b.unreachable:
		return nil
	case <-lctx.Done():
		if ctx.Err() != nil {
			b.Close()
			return ctx.Err()
		}
		// An attempt still under way (an address that does not answer at
		// all), or subscribed with reconciliation answers still due: go on
		// without them, as after a failed attempt.
		b.log.Warn("mesos: not subscribed and reconciled within the start timeout; the stack serves meanwhile",
			"master", b.cfg.Master, "timeout", b.cfg.StartTimeout, "substrate", b.Substrate().Reason)
		return nil
	}
	// Hosts are known once the first offers came; a cluster with nothing
	// free offers nothing, so this wait is short and not an error.
	deadline := time.NewTimer(min(b.cfg.StartTimeout, 3*time.Second))
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b.mu.Lock()
		seen := b.offersSeen
		b.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			b.Close()
			return ctx.Err()
		}
	}
}

func (b *Backend) fatalErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fatal
}

// Close stops the backend without tearing the framework down: its tasks
// keep running, and the next stack subscribing with the stored framework
// ID (within the failover timeout) takes them over.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	q := b.queue
	b.queue = nil
	s := b.stream
	b.mu.Unlock()
	for _, req := range q {
		req.done <- errors.New("mesos: backend closed")
	}
	if b.cancel != nil {
		b.cancel()
	}
	if s != nil {
		s.Close()
	}
	b.wg.Wait()
	if b.batcher != nil {
		b.batcher.Close()
	}
	return nil
}

// Hosts implements hostmgr.Backend: the agents that offered, by hostname.
func (b *Backend) Hosts() []hostmgr.HostInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]hostmgr.HostInfo, 0, len(b.byHost))
	for _, a := range b.byHost {
		labels := make(map[string]string, len(a.labels)+1)
		for k, v := range a.labels {
			labels[k] = v
		}
		part := a.partition
		if p, ok := b.parts[a.host]; ok {
			part = p
		}
		labels[b.cfg.PartitionAttribute] = part
		out = append(out, hostmgr.HostInfo{Name: a.host, Capacity: a.capacity, Labels: labels, Partition: part,
			Unschedulable: len(a.inverse) > 0 || a.unavailable})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ApplyPartition implements hostmgr.PartitionApplier. A framework cannot
// change an agent's attributes, so the partition hostmgr gives a host is
// kept here and overrides the attribute (hostmgr persists it and applies
// it again after a restart).
func (b *Backend) ApplyPartition(_ context.Context, host, partition string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byHost[host] == nil {
		return fmt.Errorf("mesos: apply partition: unknown host %q", host)
	}
	if b.parts[host] == partition {
		return nil
	}
	b.parts[host] = partition
	signal(b.hostK)
	return nil
}

// Launch implements hostmgr.Backend: the run is recorded in the store,
// queued for an offer of its host's agent, and launched in the next ACCEPT
// on that agent's offers (with the other runs waiting for it). It returns
// once the master accepted the call.
func (b *Backend) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	if spec.Volume != nil && b.cfg.Role == DefaultRole {
		return fmt.Errorf("mesos: launch %s: %w: a persistent volume is reserved disk, and Mesos reserves only for a role: set --mesos-role", spec.TaskID, hostmgr.ErrLaunchBlocked)
	}
	if spec.Foreign != nil {
		return fmt.Errorf("mesos: launch %s: %w: the mesos backend has no foreign tasks", spec.TaskID, hostmgr.ErrLaunchBlocked)
	}
	b.mu.Lock()
	if b.fatal != nil {
		err := b.fatal
		b.mu.Unlock()
		return err
	}
	if b.closed {
		b.mu.Unlock()
		return errors.New("mesos: backend closed")
	}
	if _, ok := b.runs[spec.TaskID]; ok {
		b.mu.Unlock()
		return fmt.Errorf("mesos: launch %s: %w", spec.TaskID, hostmgr.ErrAlreadyLaunched)
	}
	a := b.byHost[spec.Host]
	if a == nil {
		b.mu.Unlock()
		return fmt.Errorf("mesos: launch %s: unknown host %q", spec.TaskID, spec.Host)
	}
	r := &run{id: spec.TaskID, host: spec.Host, agentID: a.id, res: spec.Resources, spec: &spec}
	if spec.Volume != nil {
		key := spec.Host + "\x00" + spec.Volume.ID
		if user, busy := b.volUse[key]; busy {
			b.mu.Unlock()
			return fmt.Errorf("mesos: launch %s: volume %s on %s is in use by run %s", spec.TaskID, spec.Volume.ID, spec.Host, user)
		}
		b.volUse[key], r.volKey = spec.TaskID, key
	}
	req := &launchReq{spec: spec, run: r, done: make(chan error, 1)}
	r.pending = req
	b.runs[spec.TaskID] = r
	b.mu.Unlock()

	if err := b.writeRecord(ctx, r, store.MustNotExist); err != nil {
		b.mu.Lock()
		delete(b.runs, spec.TaskID)
		b.freeVolume(r)
		b.mu.Unlock()
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("mesos: launch %s: %w (recorded in the store)", spec.TaskID, hostmgr.ErrAlreadyLaunched)
		}
		return fmt.Errorf("mesos: launch %s: recording the run: %w", spec.TaskID, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errors.New("mesos: backend closed")
	}
	if r.pending != nil { // Kill may have come first
		b.enqueue(req)
		b.lastDemand = time.Now()
	}
	b.mu.Unlock()
	signal(b.kick)

	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
	}
	// Withdraw it if no ACCEPT took it yet; else its answer is near.
	b.mu.Lock()
	withdrawn := false
	for i, q := range b.queue {
		if q == req {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			withdrawn = true
			break
		}
	}
	if withdrawn {
		r.pending = nil
		delete(b.runs, spec.TaskID)
		b.freeVolume(r)
	}
	b.mu.Unlock()
	if withdrawn {
		b.deleteRecord(context.WithoutCancel(ctx), spec.TaskID)
		return fmt.Errorf("mesos: launch %s: no offer of host %s: %w", spec.TaskID, spec.Host, ctx.Err())
	}
	return <-req.done
}

// Kill implements hostmgr.Backend through KILL, with the grace as the
// task's kill policy.
func (b *Backend) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	b.mu.Lock()
	r := b.runs[taskID]
	if r == nil {
		b.mu.Unlock()
		return fmt.Errorf("mesos: kill %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	if r.ended {
		b.mu.Unlock()
		return nil
	}
	if req := r.pending; req != nil && !r.accepted {
		// Not launched yet: it never will be.
		for i, q := range b.queue {
			if q == req {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		r.pending = nil
		b.report(r, hostmgr.TaskEvent{State: pelotonv1.TaskState_KILLED, Reason: ReasonKilled, Message: "killed before launch"})
		b.mu.Unlock()
		req.done <- nil
		b.persistEnd(r)
		return nil
	}
	agentID := r.agentID
	b.mu.Unlock()
	call := calls.Kill(taskID, agentID)
	if grace > 0 {
		call.Kill.KillPolicy = &mesosv1.KillPolicy{GracePeriod: &mesosv1.DurationInfo{Nanoseconds: grace.Nanoseconds()}}
	}
	if err := b.call(ctx, call); err != nil {
		return fmt.Errorf("mesos: kill %s: %w", taskID, err)
	}
	return nil
}

// Status implements hostmgr.Backend.
func (b *Backend) Status(taskID string) (hostmgr.TaskEvent, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.runs[taskID]
	if r == nil {
		return hostmgr.TaskEvent{}, fmt.Errorf("mesos: status %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	if !r.has {
		return hostmgr.TaskEvent{TaskID: taskID, Host: r.host, State: pelotonv1.TaskState_LAUNCHED, Time: time.Now(), Ports: r.ports}, nil
	}
	return r.last, nil
}

// Runs implements hostmgr.RunLister.
func (b *Backend) Runs() []hostmgr.RunInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]hostmgr.RunInfo, 0, len(b.runs))
	for _, r := range b.runs {
		if r.ended || !r.has {
			continue
		}
		out = append(out, hostmgr.RunInfo{TaskID: r.id, Host: r.host, Resources: r.res, Last: r.last})
	}
	return out
}

// Logs implements hostmgr.Backend: Mesos keeps task output in the agent's
// sandbox, which the scheduler API does not reach. Since and Timestamps
// are refused as ErrNoLogTimes as well, saying so.
func (b *Backend) Logs(_ context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	b.mu.Lock()
	_, ok := b.runs[taskID]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("mesos: logs %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	if opts.NeedsTimes() {
		return nil, fmt.Errorf("logs %s: %w: %w", taskID, hostmgr.ErrNoLogTimes, ErrNoLogs)
	}
	return nil, fmt.Errorf("logs %s: %w", taskID, ErrNoLogs)
}

// report records ev as r's latest event and queues it for the sink,
// reporting LAUNCHED first if nothing was reported yet. b.mu is held.
func (b *Backend) report(r *run, ev hostmgr.TaskEvent) {
	if r.ended {
		return
	}
	ev.TaskID, ev.Host, ev.Ports = r.id, r.host, r.ports
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if !r.has && ev.State != pelotonv1.TaskState_LAUNCHED {
		b.report(r, hostmgr.TaskEvent{State: pelotonv1.TaskState_LAUNCHED, Time: ev.Time})
	}
	r.has = true
	r.last = ev
	r.ended = terminal(ev.State)
	if r.ended {
		b.uncount(r)
		b.freeVolume(r)
	}
	b.events = append(b.events, ev)
	signal(b.evK)
}

// deliver passes events to the sink in the order they were reported.
func (b *Backend) deliver() {
	defer b.wg.Done()
	for {
		select {
		case <-b.evK:
		case <-b.ctx.Done():
			return
		}
		for {
			b.mu.Lock()
			evs := b.events
			b.events = nil
			b.mu.Unlock()
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				b.sink(ev)
			}
		}
	}
}

// notifyHosts calls the host watcher after host changes, coalesced, then
// the maintenance watcher with the agents' maintenance changes.
func (b *Backend) notifyHosts() {
	defer b.wg.Done()
	for {
		select {
		case <-b.hostK:
		case <-b.ctx.Done():
			return
		}
		b.mu.Lock()
		w, mw, mq := b.watch, b.maintWatch, b.maintQ
		b.maintQ = map[string]bool{}
		b.mu.Unlock()
		if w != nil {
			w()
		}
		// After the hosts, so that hostmgr knows a host it is told of.
		if mw != nil {
			hosts := make([]string, 0, len(mq))
			for h := range mq {
				hosts = append(hosts, h)
			}
			sort.Strings(hosts)
			for _, h := range hosts {
				mw(h, mq[h])
			}
		}
	}
}

// persistEnd stores a run's end (best effort: a failure is logged, and the
// run is reconciled again after a restart).
func (b *Backend) persistEnd(r *run) {
	if err := b.writeRecord(b.ctx, r, store.AnyRevision); err != nil && b.ctx.Err() == nil {
		b.log.Warn("mesos: recording a run's end", "task", r.id, "err", err)
	}
}

// acker stores ends and acknowledges status updates. An end is stored
// before its update is acknowledged, so a stack that dies in between gets
// the update again from the master.
func (b *Backend) acker() {
	defer b.wg.Done()
	for {
		var a ack
		select {
		case a = <-b.acks:
		case <-b.ctx.Done():
			return
		}
		if a.persist != nil {
			if err := b.writeRecord(b.ctx, a.persist, store.AnyRevision); err != nil {
				if b.ctx.Err() == nil {
					b.log.Warn("mesos: recording a run's end; not acknowledging it, so the master sends it again", "task", a.taskID, "err", err)
				}
				b.mu.Lock()
				delete(b.acking, string(a.uuid))
				b.mu.Unlock()
				continue
			}
		}
		if a.uuid == nil {
			continue
		}
		if err := b.call(b.ctx, calls.Acknowledge(a.agentID, a.taskID, a.uuid)); err != nil && b.ctx.Err() == nil {
			b.log.Debug("mesos: acknowledge failed; the master will send the update again", "task", a.taskID, "err", err)
		}
		b.mu.Lock()
		delete(b.acking, string(a.uuid))
		b.mu.Unlock()
	}
}

// call makes a call that answers with no data (202 Accepted).
func (b *Backend) call(ctx context.Context, c *scheduler.Call) error {
	b.mu.Lock()
	c.FrameworkID = &mesosv1.FrameworkID{Value: b.frameworkID}
	connected := b.connected
	b.mu.Unlock()
	if !connected {
		return errNotSubscribed
	}
	resp, err := b.caller.Load().Call(ctx, c)
	if resp != nil {
		resp.Close()
	}
	return err
}

// callerBox holds a calls.Caller for an atomic.Pointer.
type callerBox struct{ calls.Caller }

// newCaller makes a fresh client and subscription state machine. Errors
// come back at once instead of being retried against the same URL
// (subscribeLoop retries with its own backoff); a master's redirect to the
// leader is still followed.
func (b *Backend) newCaller() {
	b.caller.Store(&callerBox{httpsched.NewCaller(b.newClient(), httpsched.EndpointCandidates(func() string { return "" }))})
}

// stuckSubscribed reports whether err is the state machine refusing a
// SUBSCRIBE because it believes it is subscribed still.
func stuckSubscribed(err error) bool {
	var se httpsched.StateError
	return errors.As(err, &se) && strings.Contains(string(se), "already subscribed")
}

var errNotSubscribed = errors.New("mesos: not subscribed to the master (reconnecting)")

// usage is what the live runs of one agent hold.
type usage struct {
	res resources.Resources
	n   int
}

// count adds a run taken by an ACCEPT to its agent's held resources;
// uncount takes it out (it ended, or waits for offers again). b.mu is held.
func (b *Backend) count(r *run) {
	if r.counted || r.ended {
		return
	}
	u := b.held[r.agentID]
	if u == nil {
		u = &usage{}
		b.held[r.agentID] = u
	}
	u.res, u.n, r.counted = u.res.Add(r.res), u.n+1, true
}

func (b *Backend) uncount(r *run) {
	if !r.counted {
		return
	}
	u := b.held[r.agentID]
	u.res, u.n, r.counted = u.res.Sub(r.res), u.n-1, false
	if u.n == 0 {
		delete(b.held, r.agentID)
	}
}

// ackers is how many acknowledgements (and stored ends) are in flight at
// once: each is an HTTP call, and the master sends a task's next update
// only after the last one's acknowledgement.
const ackers = 64

// freeVolume: r no longer uses its volume. b.mu is held.
func (b *Backend) freeVolume(r *run) {
	if r.volKey != "" && b.volUse[r.volKey] == r.id {
		delete(b.volUse, r.volKey)
	}
}

// releaseReq is a ReleaseVolume waiting for an offer of its agent.
type releaseReq struct {
	agentID, id string
	done        chan error // cap 1
}

// ReleaseVolume implements hostmgr.VolumeReleaser: on the next offer of
// the host's agent that holds the volume, DESTROY it and UNRESERVE its
// disk. A volume the agent no longer offers is gone already (nil); one
// that a live run uses is not released.
func (b *Backend) ReleaseVolume(ctx context.Context, host, volumeID string) error {
	b.mu.Lock()
	if user, busy := b.volUse[host+"\x00"+volumeID]; busy {
		b.mu.Unlock()
		return fmt.Errorf("mesos: release volume %s on %s: in use by run %s", volumeID, host, user)
	}
	a := b.byHost[host]
	if a == nil {
		b.mu.Unlock()
		return fmt.Errorf("mesos: release volume %s: unknown host %q", volumeID, host)
	}
	req := &releaseReq{agentID: a.id, id: volumeID, done: make(chan error, 1)}
	b.releases = append(b.releases, req)
	b.mu.Unlock()
	signal(b.kick)
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("mesos: release volume %s on %s: %w", volumeID, host, err)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		for i, q := range b.releases {
			if q == req {
				b.releases = append(b.releases[:i], b.releases[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return fmt.Errorf("mesos: release volume %s on %s: no offer of its agent: %w", volumeID, host, ctx.Err())
	}
}
