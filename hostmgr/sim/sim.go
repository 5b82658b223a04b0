// Package sim is the hostmgr backend of simulated hosts: thousands of hosts
// in this process whose tasks run nothing and "take" the time their command
// declares (see interpret: sleep S, true, false, exit N). Benchmarks and
// scale tests use it to drive the same jobmgr, resmgr, placement and hostmgr
// code as the real backends, without processes, containers or a cluster.
//
// It owns only in-memory state: the hosts fixed at New, the runs it was
// asked to launch, and a short memory of finished runs for Status and Logs.
// Nothing survives Close or a restart of the control plane; after one, every
// run is unknown (ErrUnknownTask), which is what a real backend reports for
// a host that lost its tasks.
//
// The package is built for scale, not realism. There is no goroutine or
// timer per task: one scheduler goroutine keeps running tasks in a min-heap
// by finish time, and health reports in a second one by due time, behind a
// single timer, and one delivery goroutine passes events to the sink from a
// queue, so Launch is O(log n), never waits for the sink, and a task costs a
// couple of hundred bytes.
//
// Long-running runs get what the local backend gives them, simulated (see
// longrun.go): ports numbered from 31000 per host, one health report per
// run computed from its check, and volumes remembered per host in memory.
//
// It must not import jobmgr, resmgr or placement: it imports only hostmgr,
// internal/resources and the API types.
package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// BackendName is the value of the backend flag that selects this backend.
const BackendName = "sim"

// Label keys and values with a meaning to this backend.
const (
	// LabelBackend is the label key naming the backend a host belongs to;
	// every simulated host has it, with the value BackendName.
	LabelBackend = "peloton.io/backend"
	// LabelPartition is the label key that, when given in Config.Labels,
	// sets a host's partition instead of DefaultPartition.
	LabelPartition = "peloton.io/partition"
	// DefaultPartition is the partition of hosts without LabelPartition.
	DefaultPartition = "default"
)

// Reasons on terminal events. Fixed words that users and tests can grep.
const (
	ReasonExitZero    = "exit-zero"
	ReasonExitNonzero = "exit-nonzero"
	ReasonKilled      = "killed"
)

// DefaultHostCapacity is what a host declares in a kind that
// Config.HostCapacity leaves zero, for CPU and memory: a typical large
// machine (32 CPUs, 128 GiB). Disk and GPU default to none.
var DefaultHostCapacity = resources.Resources{MilliCPU: 32000, MemoryMB: 131072}

const (
	// defaultMaxFinished bounds how many finished runs Status and Logs still
	// know. Older ones answer ErrUnknownTask, as after a restart, so a long
	// benchmark does not grow without bound.
	defaultMaxFinished = 100_000
	// defaultCloseWait bounds how long Close waits for the delivery goroutine,
	// which may be stuck in a sink that no one drains any more.
	defaultCloseWait = 5 * time.Second
	// popBatch bounds how many due tasks the scheduler finishes per hold of
	// the lock, so that a burst of deadlines does not stall Launch.
	popBatch = 1024
)

// Config configures a sim Backend.
type Config struct {
	// Hosts is the number of simulated hosts (default 1).
	Hosts int
	// HostCapacity is what every host declares. A zero CPU or memory means
	// DefaultHostCapacity's; disk and GPU are taken as given.
	HostCapacity resources.Resources
	// Labels are "key=value" entries spread over the hosts round-robin per
	// key: host i gets the (i mod n)-th of the n values given for a key. So
	// zone=a,zone=b,rack=r1 puts even hosts in zone a, odd ones in zone b,
	// and all in rack r1. The key LabelPartition sets the host's partition.
	Labels []string
	// Logger receives operational logs (default slog.Default()). Nothing is
	// logged per task.
	Logger *slog.Logger
	// Clock drives simulated durations (default: real time). Tests pass a
	// clockwork.FakeClock to advance time by hand.
	Clock clockwork.Clock
}

// task is one run. Its fields are guarded by Backend.mu. It is kept small on
// purpose: a scale test holds 150,000 of them.
type task struct {
	id   string
	host string
	cmd  string // the command as shown in the logs
	// env is the launch's environment, kept as given (the backend's
	// caller builds one per launch) for Env to show what a run was told.
	env map[string]string
	// deadline is when a sleeping task finishes; index is its position in
	// the heap, -1 when not in it.
	deadline time.Time
	index    int
	// The last event, without the parts the task already holds.
	state    pelotonv1.TaskState
	exitCode int32
	reason   string
	at       time.Time
	// ended is created by the first following log reader of a running task
	// and closed when it ends; most tasks never have one.
	ended chan struct{}
	// lr holds ports, health and volume; nil for a batch task.
	lr *longRun
	// res is what the run was launched with (for Runs).
	res resources.Resources
	// use is the curve its use of the host follows (usage.go).
	use usageModel
}

func (t *task) terminal() bool {
	switch t.state {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
		return true
	}
	return false
}

// event is the task's last event. Each carries its own copy of the ports,
// so a sink may keep or change it; Health is set on RUNNING events only.
func (t *task) event() hostmgr.TaskEvent {
	ev := hostmgr.TaskEvent{TaskID: t.id, Host: t.host, State: t.state, ExitCode: t.exitCode, Reason: t.reason, Time: t.at}
	if t.lr != nil {
		if t.lr.ports != nil {
			ev.Ports = maps.Clone(t.lr.ports)
		}
		if t.state == pelotonv1.TaskState_RUNNING {
			ev.Health = t.lr.health
		}
	}
	return ev
}

// Backend simulates hosts and runs tasks on them in memory. It is safe for
// concurrent use.
//
// Every state change is decided under mu and appended, in that order, to one
// FIFO queue that a single goroutine hands to the sink; that is what keeps
// each task's events in order (and all events, in fact) without a goroutine
// per task. Status answers the decided state, which may be ahead of what the
// sink has seen by the length of the queue.
type Backend struct {
	log     *slog.Logger
	clock   clockwork.Clock
	hosts   []hostmgr.HostInfo
	hostSet map[string]struct{}
	// parts holds the partitions hostmgr gave hosts (ApplyPartition),
	// which override the configured ones.
	partMu      sync.Mutex
	parts       map[string]string
	maxFinished int
	closeWait   time.Duration

	// mu guards the runs below; a method named ...Locked needs it held
	// (partMu, above, guards only parts).
	mu      sync.Mutex
	started bool
	closed  bool
	tasks   map[string]*task
	// byHost indexes the live runs by host (usage.go reads a host's).
	byHost  map[string]map[string]struct{}
	running deadlineHeap
	health  healthHeap // runs whose health report is still due
	// hostPorts counts, per host and port number, the live runs holding
	// it; a host without any is absent.
	hostPorts map[string]map[uint32]int32
	// volumes maps each volume kept (volumeKey) to the live run using it,
	// or "" when none does.
	volumes  map[string]string
	pending  []hostmgr.TaskEvent // events not yet taken by the delivery goroutine
	finished []string            // ring of finished task IDs, oldest at finHead once full
	finHead  int

	kick     chan struct{} // wakes the delivery goroutine; capacity 1
	wake     chan struct{} // wakes the scheduler when the earliest deadline moves; capacity 1
	stop     chan struct{} // closed by Close
	stopped  atomic.Bool   // set by Close; checked before every sink call
	schedRun chan struct{} // closed when the scheduler goroutine returns
	delivRun chan struct{} // closed when the delivery goroutine returns

	closeOnce sync.Once
	closeErr  error
}

var (
	_ hostmgr.Backend          = (*Backend)(nil)
	_ hostmgr.PartitionApplier = (*Backend)(nil)
)

// New validates cfg and builds the hosts. Call Start before Launch.
func New(cfg Config) (*Backend, error) {
	n := cfg.Hosts
	switch {
	case n == 0:
		n = 1
	case n < 0:
		return nil, fmt.Errorf("sim: config.hosts: must be >= 0, got %d", cfg.Hosts)
	}
	c := cfg.HostCapacity
	if c.MilliCPU < 0 || c.MemoryMB < 0 || c.DiskMB < 0 || c.GPU < 0 {
		return nil, fmt.Errorf("sim: config.hostCapacity: must be >= 0, got %v", c)
	}
	if c.MilliCPU == 0 {
		c.MilliCPU = DefaultHostCapacity.MilliCPU
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultHostCapacity.MemoryMB
	}
	keys, values, err := parseLabels(cfg.Labels)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	clock := cfg.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	b := &Backend{
		log:         log.With("component", "hostmgr/sim"),
		clock:       clock,
		hosts:       make([]hostmgr.HostInfo, n),
		hostSet:     make(map[string]struct{}, n),
		maxFinished: defaultMaxFinished,
		closeWait:   defaultCloseWait,
		tasks:       map[string]*task{},
		byHost:      map[string]map[string]struct{}{},
		hostPorts:   map[string]map[uint32]int32{},
		volumes:     map[string]string{},
		kick:        make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		schedRun:    make(chan struct{}),
		delivRun:    make(chan struct{}),
	}
	for i := range n {
		name := hostName(i)
		labels := make(map[string]string, len(keys)+1)
		for _, k := range keys {
			vs := values[k]
			labels[k] = vs[i%len(vs)]
		}
		labels[LabelBackend] = BackendName
		part := DefaultPartition
		if p, ok := labels[LabelPartition]; ok {
			part = p
		}
		b.hosts[i] = hostmgr.HostInfo{Name: name, Capacity: c, Labels: labels, Partition: part}
		b.hostSet[name] = struct{}{}
	}
	return b, nil
}

// hostName is sim-00000, sim-00001, ...: zero-padded so that names sort in
// host order up to 100,000 hosts (and still unique beyond).
func hostName(i int) string { return fmt.Sprintf("sim-%05d", i) }

// parseLabels checks the "key=value" entries and groups the values by key,
// keeping the order in which keys first appear and values are given.
func parseLabels(entries []string) (keys []string, values map[string][]string, err error) {
	values = map[string][]string{}
	for i, e := range entries {
		k, v, ok := strings.Cut(strings.TrimSpace(e), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "":
			return nil, nil, fmt.Errorf("sim: config.labels[%d]: %q: want key=value", i, e)
		case strings.ContainsAny(k, " \t\n,="):
			return nil, nil, fmt.Errorf("sim: config.labels[%d]: %q: key must not contain spaces, commas or '='", i, e)
		case k == LabelBackend:
			return nil, nil, fmt.Errorf("sim: config.labels[%d]: %q: %s is set by the backend", i, e, LabelBackend)
		case k == LabelPartition && v == "":
			return nil, nil, fmt.Errorf("sim: config.labels[%d]: %q: partition must not be empty", i, e)
		}
		if _, seen := values[k]; !seen {
			keys = append(keys, k)
		}
		values[k] = append(values[k], v)
	}
	return keys, values, nil
}

// Name returns "sim".
func (b *Backend) Name() string { return BackendName }

// Start records sink and starts the scheduler and delivery goroutines. The
// sink is called from one goroutine, in the order events were decided, never
// with a lock held, so it may call Kill, Status or Logs. The hosts are fixed
// at New, so Start does not wait for anything; ctx is not retained (Close,
// not ctx, ends the backend). Start may be called once.
func (b *Backend) Start(ctx context.Context, sink func(hostmgr.TaskEvent)) error {
	if sink == nil {
		return errors.New("sim: start: nil sink")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return errors.New("sim: start: backend closed")
	case b.started:
		return errors.New("sim: start: already started")
	}
	b.started = true
	go b.schedule()
	go b.deliver(sink)
	b.log.Info("simulated hosts ready", "hosts", len(b.hosts), "hostCapacity", b.hosts[0].Capacity.String())
	return nil
}

// Hosts returns the simulated hosts. The result is a copy.
func (b *Backend) Hosts() []hostmgr.HostInfo {
	b.partMu.Lock()
	defer b.partMu.Unlock()
	out := make([]hostmgr.HostInfo, len(b.hosts))
	for i, h := range b.hosts {
		labels := make(map[string]string, len(h.Labels))
		for k, v := range h.Labels {
			labels[k] = v
		}
		if p, ok := b.parts[h.Name]; ok {
			h.Partition = p
			labels[LabelPartition] = p
		}
		h.Labels = labels
		out[i] = h
	}
	return out
}

// ApplyPartition sets host's partition attribute (and its LabelPartition
// label), which Hosts reports from then on.
func (b *Backend) ApplyPartition(_ context.Context, host, partition string) error {
	if _, ok := b.hostSet[host]; !ok {
		return fmt.Errorf("sim: no host %s", host)
	}
	b.partMu.Lock()
	defer b.partMu.Unlock()
	if b.parts == nil {
		b.parts = map[string]string{}
	}
	b.parts[host] = partition
	return nil
}

// Launch accepts a run and returns at once: LAUNCHED and RUNNING are queued
// for the sink, and a command that takes no time (true, false, exit N,
// sleep 0, anything unknown) has its terminal event queued right behind
// them. A sleep joins the scheduler's heap, O(log n); with a health check,
// so does its one health report (see healthAfter), a RUNNING event with
// Health set, unless the run ends first. Every event carries the run's
// ports. It returns an error, and leaves nothing behind, when the backend
// is not started or closed, spec.Host is not a simulated host, the command
// is empty, the TaskID is already known, the ports, health check or volume
// are invalid, the volume is in use by another live run, or the host has no
// port left. spec.Env is recorded (Env) and read for usage
// (PELOTON_SIM_CPU...); spec.Image, spec.Resources and spec.KillGrace are
// ignored.
func (b *Backend) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: launch %s: %w", spec.TaskID, err)
	}
	switch {
	case spec.TaskID == "":
		return errors.New("sim: launch: spec.taskId: must not be empty")
	case len(spec.Command) == 0 || spec.Command[0] == "":
		return fmt.Errorf("sim: launch %s: spec.command: must not be empty", spec.TaskID)
	}
	if _, ok := b.hostSet[spec.Host]; !ok {
		return fmt.Errorf("sim: launch %s: spec.host: %q is not a host of the sim backend", spec.TaskID, spec.Host)
	}
	long := needsLongRun(&spec)
	if long {
		if err := validateLongRunning(&spec); err != nil {
			return fmt.Errorf("sim: launch %s: %w", spec.TaskID, err)
		}
	}
	out := interpret(spec.Command)
	t := &task{id: spec.TaskID, host: spec.Host, cmd: showCommand(spec.Command), env: spec.Env, index: -1, res: spec.Resources,
		use: newUsageModel(spec.TaskID, spec.Env, b.clock.Now())}

	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("sim: launch %s: backend closed", spec.TaskID)
	case !b.started:
		return fmt.Errorf("sim: launch %s: backend not started", spec.TaskID)
	}
	if _, ok := b.tasks[spec.TaskID]; ok {
		return fmt.Errorf("sim: launch %s: spec.taskId: %w", spec.TaskID, hostmgr.ErrAlreadyLaunched)
	}
	if long {
		if err := b.startLongRunLocked(t, &spec); err != nil {
			return fmt.Errorf("sim: launch %s: %w", spec.TaskID, err)
		}
	}
	b.tasks[spec.TaskID] = t
	if b.byHost[spec.Host] == nil {
		b.byHost[spec.Host] = map[string]struct{}{}
	}
	b.byHost[spec.Host][spec.TaskID] = struct{}{}
	now := b.clock.Now()
	b.setLocked(t, pelotonv1.TaskState_LAUNCHED, 0, "", now)
	b.setLocked(t, pelotonv1.TaskState_RUNNING, 0, "", now)
	if out.Duration <= 0 {
		b.endLocked(t, out.State, out.ExitCode, now)
		return nil
	}
	t.deadline = now.Add(out.Duration)
	heap.Push(&b.running, t)
	earlier := t.index == 0
	if spec.HealthCheck != nil {
		b.scheduleHealthLocked(t, spec.HealthCheck, now)
		earlier = earlier || t.lr.hindex == 0
	}
	if earlier {
		// The earliest deadline moved forward: the scheduler's timer is late.
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// setLocked records a state change of t and queues it for the sink.
func (b *Backend) setLocked(t *task, state pelotonv1.TaskState, exitCode int32, reason string, at time.Time) {
	t.state, t.exitCode, t.reason, t.at = state, exitCode, reason, at
	if len(b.pending) == 0 {
		// The delivery goroutine empties pending whenever it takes a batch,
		// so a non-empty queue already has a wake-up on its way.
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	b.pending = append(b.pending, t.event())
}

// endLocked ends t in a terminal state, giving back its ports and volume
// and dropping its health report if still due. t must not be in the
// deadline heap.
func (b *Backend) endLocked(t *task, state pelotonv1.TaskState, exitCode int32, at time.Time) {
	if t.lr != nil {
		b.endLongRunLocked(t)
	}
	reason := ReasonExitZero
	switch {
	case state == pelotonv1.TaskState_KILLED:
		reason = ReasonKilled
	case exitCode != 0 || state == pelotonv1.TaskState_FAILED:
		reason = ReasonExitNonzero
	}
	b.setLocked(t, state, exitCode, reason, at)
	if t.ended != nil {
		close(t.ended)
	}
	delete(b.byHost[t.host], t.id)
	b.forgetOldLocked(t.id)
}

// forgetOldLocked remembers that id has ended and forgets the oldest finished
// run once more than maxFinished are remembered.
func (b *Backend) forgetOldLocked(id string) {
	if len(b.finished) < b.maxFinished {
		b.finished = append(b.finished, id)
		return
	}
	delete(b.tasks, b.finished[b.finHead])
	b.finished[b.finHead] = id
	b.finHead = (b.finHead + 1) % len(b.finished)
}

// schedule ends sleeping tasks when their deadline passes and makes health
// reports when they are due. It is the only goroutine that waits on time,
// with one timer set to the earliest time in either heap. Due items are
// taken from the two heaps in time order, a health report before a deadline
// at the same instant, so a run's events never go back in time.
func (b *Backend) schedule() {
	defer close(b.schedRun)
	timer := b.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return
		}
		now := b.clock.Now()
		n := 0
		for ; n < popBatch; n++ {
			next, isHealth, ok := b.nextDueLocked()
			if !ok || next.After(now) {
				break
			}
			if isHealth {
				b.reportHealthLocked(heap.Pop(&b.health).(*task))
				continue
			}
			t := heap.Pop(&b.running).(*task)
			b.endLocked(t, pelotonv1.TaskState_SUCCEEDED, 0, t.deadline)
		}
		wait := time.Duration(-1)
		if next, _, ok := b.nextDueLocked(); ok {
			wait = max(next.Sub(now), 0)
		}
		b.mu.Unlock()
		if n == popBatch {
			continue // more may be due; let Launch in between batches
		}
		var fire <-chan time.Time
		if wait >= 0 {
			// A stale tick left from an earlier Reset only causes one extra,
			// harmless pass over the heap.
			timer.Reset(wait)
			fire = timer.Chan()
			if b.clock.Since(now) > time.Millisecond {
				// Time moved on while the lock was let go (a fake clock
				// advanced before the Reset): the timer is that much late,
				// so look at the heaps again.
				continue
			}
		}
		select {
		case <-b.stop:
			return
		case <-b.wake:
		case <-fire:
		}
	}
}

// nextDueLocked returns the earliest time in either heap, and whether it
// is a health report.
func (b *Backend) nextDueLocked() (at time.Time, isHealth, ok bool) {
	switch {
	case len(b.health) > 0 && (len(b.running) == 0 || !b.running[0].deadline.Before(b.health[0].lr.healthAt)):
		return b.health[0].lr.healthAt, true, true
	case len(b.running) > 0:
		return b.running[0].deadline, false, true
	}
	return time.Time{}, false, false
}

// deliver hands queued events to the sink, in queue order. It swaps the
// whole queue out under the lock and calls the sink without it, reusing the
// two buffers in turn.
func (b *Backend) deliver(sink func(hostmgr.TaskEvent)) {
	defer close(b.delivRun)
	var batch []hostmgr.TaskEvent
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		}
		b.mu.Lock()
		batch, b.pending = b.pending, batch[:0]
		b.mu.Unlock()
		for i := range batch {
			if b.stopped.Load() {
				return
			}
			sink(batch[i])
			batch[i] = hostmgr.TaskEvent{}
		}
		if cap(batch) > 1<<16 {
			batch = nil // give a burst's buffer back rather than keep it forever
		}
	}
}

// Kill ends a running task at once with KILLED (reason "killed"); there is
// no process to signal, so grace is ignored. Killing a finished run is a
// no-op; an unknown or forgotten run returns ErrUnknownTask.
func (b *Backend) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[taskID]
	if !ok {
		return fmt.Errorf("sim: kill %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	if t.terminal() || b.closed {
		return nil
	}
	if t.index >= 0 {
		heap.Remove(&b.running, t.index)
	}
	b.endLocked(t, pelotonv1.TaskState_KILLED, 0, b.clock.Now())
	return nil
}

// Status returns the last event of a run, as decided: the sink may not have
// received it yet. Runs forgotten after maxFinished others finished, and all
// runs of another Backend, return ErrUnknownTask.
func (b *Backend) Status(taskID string) (hostmgr.TaskEvent, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[taskID]
	if !ok {
		return hostmgr.TaskEvent{}, fmt.Errorf("sim: status %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	return t.event(), nil
}

// Env is the environment run taskID was launched with, as a simulated
// process would see it: what a test of the stack on the sim backend reads
// to check what a run was told (a gang member's peers, say).
func (b *Backend) Env(taskID string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[taskID]
	if !ok {
		return nil, fmt.Errorf("sim: env %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	return maps.Clone(t.env), nil
}

var _ hostmgr.RunLister = (*Backend)(nil)

// Runs lists the runs that have not ended. A sim backend's runs live in its
// memory only, so after a restart it lists (and knows) none of the old ones.
func (b *Backend) Runs() []hostmgr.RunInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []hostmgr.RunInfo
	for _, t := range b.tasks {
		if !t.terminal() {
			out = append(out, hostmgr.RunInfo{TaskID: t.id, Host: t.host, Resources: t.res, Last: t.event()})
		}
	}
	return out
}

// Close stops the scheduler and delivery goroutines and waits for them, for
// at most 5s: the delivery goroutine may be inside a sink call that blocks.
// Running tasks are dropped without events, and the sink is called no more
// once Close returns (but for that one blocked call, which is then reported
// as an error). Launch fails after Close; Close is idempotent and returns the
// same result every time.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		started := b.started
		b.stopped.Store(true)
		close(b.stop) // also ends following log readers
		b.running = nil
		b.health = nil
		b.pending = nil
		b.mu.Unlock()
		if !started {
			return
		}
		deadline := time.NewTimer(b.closeWait)
		defer deadline.Stop()
		for _, done := range []chan struct{}{b.schedRun, b.delivRun} {
			select {
			case <-done:
			case <-deadline.C:
				b.closeErr = fmt.Errorf("sim: close: event delivery still blocked in the sink after %s", b.closeWait)
				b.log.Error("close: event delivery blocked in the sink")
				return
			}
		}
	})
	return b.closeErr
}

// showCommand renders argv for the logs, quoting words that need it.
func showCommand(argv []string) string {
	var sb strings.Builder
	for i, a := range argv {
		if i > 0 {
			sb.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			fmt.Fprintf(&sb, "%q", a)
		} else {
			sb.WriteString(a)
		}
	}
	return sb.String()
}

// deadlineHeap is a min-heap of sleeping tasks by deadline, tracking each
// task's index so that Kill can remove it in O(log n).
type deadlineHeap []*task

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *deadlineHeap) Push(x any) {
	t := x.(*task)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}
