package hostagent

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// SourceRuns is the source of a virtual host's usage: the sum of its runs.
const SourceRuns = "runs"

// HostSource reads a machine's cumulative counters. *HostReader reads the
// real ones; the sim backend and tests bring their own.
type HostSource interface {
	// Read reads one Sample stamped with now.
	Read(now time.Time) (Sample, error)
	// Source names where it reads from (SourceCgroup2, SourceCgroup1,
	// SourceProc, "sim"), as reports carry it.
	Source() string
}

var _ HostSource = (*HostReader)(nil)

// RunSource finds a host's task runs and reads each one's cumulative
// counters. EnvRuns finds them by their environment.
type RunSource interface {
	// Runs returns a Sample per run, by task run id
	// (<job>-<instance>-<run>), stamped with now.
	Runs(now time.Time) (map[string]Sample, error)
}

// RunInfoSource is a RunSource that says more of each run than its
// counters: which are revocable, where each serves its metrics (RunInfo).
// An agent whose Runs is one reads its runs through RunInfo, one scan for
// everything, and reports its runs' latency; EnvRuns is one. With a plain
// RunSource it reports usage only.
type RunInfoSource interface {
	RunSource
	// RunInfo is Runs, with what else the scan found of each run.
	RunInfo(now time.Time) (map[string]RunInfo, error)
}

// Defaults of Config.
const (
	DefaultInterval   = 5 * time.Second
	DefaultRetryMin   = 500 * time.Millisecond
	DefaultRetryMax   = 30 * time.Second
	DefaultAckTimeout = 30 * time.Second
)

// retryJitter spreads reconnects: each wait is up to this fraction longer
// than the backoff step, so that the agents of a whole cluster, cut off
// together when the stack restarts, do not come back in one burst.
const retryJitter = 0.2

// Config configures an Agent.
type Config struct {
	// Host is the host the agent reports for, as the cluster names it.
	// Required.
	Host string
	// AgentID names this agent process in its reports; a new id starts a
	// new sequence. Default: 128 random bits in hex.
	AgentID string
	// Interval is the time between readings. Default DefaultInterval.
	Interval time.Duration
	// Source reads the machine's own counters. Nil only with Virtual.
	Source HostSource
	// Virtual says the host is one of several virtual hosts of the local
	// backend sharing one machine, whose counters are therefore not the
	// host's: its usage is the sum of its runs' (source "runs") and what it
	// has available is unknown (memory_available_mb 0). Source must then be
	// nil.
	Virtual bool
	// Runs finds the host's runs. Required. When it is a RunInfoSource
	// (EnvRuns is), the agent also reads the latency of each run that
	// declares metrics (see Agent).
	Runs RunSource
	// Client is the stack's HostAgentService. Required. The agent opens
	// its streams on it; the connection is the caller's to close.
	Client pelotonv1.HostAgentServiceClient
	// Logger receives what the agent has to say; nil discards it.
	Logger *slog.Logger
	// RetryMin and RetryMax bound the wait before reopening a stream that
	// ended: it starts at RetryMin, doubles per failure up to RetryMax,
	// each wait up to 20% longer at random, and starts over once a report
	// is acknowledged. Defaults DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// AckTimeout is how long a sent report may stay unacknowledged before
	// the stream is taken for dead and reopened: a stack that vanished
	// without closing the connection leaves it open for the kernel's
	// timeouts, many minutes. Default DefaultAckTimeout.
	AckTimeout time.Duration

	// QoS turns the QoS controller on (nil: off): when the host runs hot,
	// the agent kills revocable runs itself, at once (see
	// QoSPolicy.Decide). Runs must then be a QoSRuns, which EnvRuns is.
	QoS *QoSPolicy
	// Capacity is the host's, what QoS measures use against. Default, for
	// a host that is not virtual, its Source's capacity when it knows it
	// (HostReader.Capacity: the machine's, or its cgroup's limits). A
	// virtual host must be given its own, the share of the machine it
	// stands for. Unused without QoS.
	Capacity Resources
	// QoSAckWait is how long a kill waits for the stack to acknowledge the
	// report that names the run revoked, before killing anyway. Default
	// DefaultQoSAckWait.
	QoSAckWait time.Duration
}

// AgentStats is what an Agent did so far.
type AgentStats struct {
	// Sent counts reports sent, resends included; Acked counts acks.
	Sent, Acked uint64
	// LastAcked is the highest sequence acknowledged.
	LastAcked uint64
	// Reconnects counts attempts to open a stream after the first.
	Reconnects int
	// LastError is the last stream error, "" if none yet; it stays after
	// the agent recovers.
	LastError string
	// LastReport is a copy of the newest report built, sent or not; nil
	// before the first.
	LastReport *pelotonv1.UsageReport
	// QoSKills counts the runs the QoS controller killed, and LastQoSKill
	// is when it last did (zero before the first); QoSMemoryKills counts
	// those of them killed because memory ran hot.
	QoSKills       uint64
	QoSMemoryKills uint64
	LastQoSKill    time.Time
	// Settings are the partition profile's settings the stack sent with
	// its last ack (nil: none; the config stands). See settings.go.
	Settings *pelotonv1.AgentSettings
}

// Agent reads its host's usage every interval and reports it to the stack
// over one stream, which it keeps open.
//
// Reports are state, not events: each carries the host's usage over the
// last interval, and a newer one supersedes an older one not yet sent. So
// the agent keeps one pending report, the newest; the sender sends it when
// it was not acknowledged already, and after a reconnect sends it again.
// The stack drops what it took before (same agent id, sequence not above
// the last), so resending is safe, and a sequence skipped because a newer
// report came first loses nothing the stack needs.
//
// A reading that fails sends nothing: the stack sees the age of the host's
// last report grow, which is how it knows the numbers are stale. Nothing is
// made up to fill the gap.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	running atomic.Bool

	// Owned by Run's reading loop.
	seq      uint64
	prev     reading
	failures int // readings failed in a row

	// infoRuns is Runs when it is a RunInfoSource, else nil.
	infoRuns RunInfoSource
	// The latency reader's (scrape.go), owned by the reading loop.
	scraper *http.Client
	scrapes map[string]*scrapeState // by run id
	round   uint64                  // readings that scraped so far

	// The QoS controller's, owned by the reading loop; qosRuns is nil when
	// it is off.
	qos      QoSPolicy
	qosRuns  QoSRuns
	qosState QoSState
	killed   map[string]bool // runs revoked, while the scan still finds them
	// baseQoS is the config's policy (nil: QoS off unless a profile turns
	// it on), and settingsSeen the generation of settings applied
	// (settings.go); both owned by the reading loop.
	baseQoS      *QoSPolicy
	settingsSeen uint64

	// wake tells the sender a new report is pending.
	wake chan struct{}

	mu      sync.Mutex
	pending *pelotonv1.UsageReport // immutable once built
	stats   AgentStats             // LastReport unused: pending is it
	// revoking holds the runs revoked that no acknowledged report named
	// yet, each with the first report that did (see revokedLocked).
	revoking map[string]revocation
	// ackCh is closed, and replaced, at every ack.
	ackCh chan struct{}
	// settingsGen counts the changes of stats.Settings.
	settingsGen uint64
}

// New checks cfg, fills in its defaults and returns an agent ready to Run.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Host == "":
		return nil, errors.New("hostagent: config.host: required")
	case cfg.Client == nil:
		return nil, errors.New("hostagent: config.client: required")
	case cfg.Runs == nil:
		return nil, errors.New("hostagent: config.runs: required")
	case cfg.Virtual && cfg.Source != nil:
		return nil, errors.New("hostagent: config.source: must be nil for a virtual host, whose usage is the sum of its runs")
	case !cfg.Virtual && cfg.Source == nil:
		return nil, errors.New("hostagent: config.source: required unless the host is virtual")
	case cfg.Interval < 0, cfg.RetryMin < 0, cfg.RetryMax < 0, cfg.AckTimeout < 0, cfg.QoSAckWait < 0:
		return nil, errors.New("hostagent: config: interval, retryMin, retryMax, ackTimeout and qosAckWait must be >= 0")
	}
	if cfg.AgentID == "" {
		var b [16]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("hostagent: agent id: %w", err)
		}
		cfg.AgentID = hex.EncodeToString(b[:])
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.RetryMax < cfg.RetryMin {
		return nil, fmt.Errorf("hostagent: config.retryMax: %s is below retryMin %s", cfg.RetryMax, cfg.RetryMin)
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.QoSAckWait == 0 {
		cfg.QoSAckWait = DefaultQoSAckWait
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg:      cfg,
		log:      log.With("host", cfg.Host, "agent", cfg.AgentID),
		wake:     make(chan struct{}, 1),
		killed:   map[string]bool{},
		revoking: map[string]revocation{},
		ackCh:    make(chan struct{}),
		scraper:  newScrapeClient(cfg.Interval),
		scrapes:  map[string]*scrapeState{},
	}
	a.infoRuns, _ = cfg.Runs.(RunInfoSource)
	if cfg.QoS != nil {
		if err := a.qosConfig(*cfg.QoS); err != nil { // a copy: the caller's may change under us
			return nil, err
		}
		base := a.qos
		a.baseQoS = &base
	}
	return a, nil
}

// qosConfig checks policy p, with the rest of the config QoS needs, fills
// in its defaults and makes it the agent's.
func (a *Agent) qosConfig(p QoSPolicy) error {
	cfg := &a.cfg
	if err := p.Validate(); err != nil {
		return fmt.Errorf("hostagent: config.%w", err)
	}
	if p.Samples == 0 {
		p.Samples = DefaultQoSSamples
	}
	runs, ok := cfg.Runs.(QoSRuns)
	if !ok {
		return fmt.Errorf("hostagent: config.runs: %T cannot say which runs are revocable nor kill them (not a QoSRuns), as qos needs", cfg.Runs)
	}
	if cfg.Capacity == (Resources{}) {
		src, ok := cfg.Source.(capacitySource)
		if cfg.Virtual || !ok {
			return errors.New("hostagent: config.capacity: required with qos for a virtual host, or a source that does not know its capacity")
		}
		c, err := src.Capacity()
		if err != nil {
			return fmt.Errorf("hostagent: config.capacity: not given, and the host's cannot be read: %w", err)
		}
		cfg.Capacity = c
	}
	switch {
	case cfg.Capacity.CPU < 0 || cfg.Capacity.MemoryMB < 0:
		return fmt.Errorf("hostagent: config.capacity: %+v must not be negative", cfg.Capacity)
	case p.CPUHigh > 0 && cfg.Capacity.CPU == 0:
		return errors.New("hostagent: config.capacity.cpu: required, qos watches cpu")
	case p.MemHigh > 0 && cfg.Capacity.MemoryMB == 0:
		return errors.New("hostagent: config.capacity.memoryMB: required, qos watches memory")
	}
	a.qos, a.qosRuns = p, runs
	return nil
}

// AgentID is the agent's id, as its reports carry it.
func (a *Agent) AgentID() string { return a.cfg.AgentID }

// Stats returns what the agent did so far. It is safe to call at any time.
func (a *Agent) Stats() AgentStats {
	a.mu.Lock()
	s, p := a.stats, a.pending
	a.mu.Unlock()
	if p != nil {
		s.LastReport = proto.Clone(p).(*pelotonv1.UsageReport)
	}
	return s
}

// Run reads and reports until ctx ends, then closes its stream and returns
// nil. The first reading is the baseline the second is measured against, so
// the first report comes one interval after Run starts. Run may be called
// again after it returned (the sequence goes on), not while it runs.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("hostagent: agent already running")
	}
	defer a.running.Store(false)
	// Every scrape ends before its reading does; the connections kept
	// between readings end with the agent.
	defer a.scraper.CloseIdleConnections()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { a.sendLoop(ctx) })

	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	// A new baseline: usage over the time the agent did not run would be
	// an average nobody asked for.
	a.prev = reading{}
	for {
		// Stamped when read, not when the tick fired: the counters are
		// as of now, and a late tick would inflate the usage.
		a.read(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reading is one pass over the sources.
type reading struct {
	taken bool // false before the first reading
	time  time.Time
	host  Sample // zero for a virtual host
	runs  map[string]Sample
	info  map[string]RunInfo // with a RunInfoSource, what runs was made of
}

// read takes a reading and, when it gives a usage, makes the report of it
// the pending one. With QoS on, it then decides on the reading, and
// carries out the decision before it returns.
func (a *Agent) read(ctx context.Context, now time.Time) {
	since := a.prev.time
	rep, err := a.measure(ctx, now)
	if err != nil || rep == nil {
		// No usage, no decision; and a gap in the readings breaks a run
		// of hot ones.
		a.qosState = QoSState{}
	}
	if err != nil {
		a.failures++
		if a.failures == 1 {
			a.log.Warn("no report this interval, nor until a reading succeeds", "err", err)
		} else {
			a.log.Debug("no report this interval", "err", err, "failed_in_a_row", a.failures)
		}
		return
	}
	if a.failures > 0 {
		a.log.Info("reading again", "failed_in_a_row", a.failures)
		a.failures = 0
	}
	if rep == nil {
		return // the baseline
	}
	var victims []QoSVictim
	var in QoSInput
	a.takeSettings()
	if a.qosRuns != nil {
		runUse := make(map[string]Resources, len(rep.Runs))
		for id, u := range rep.Runs {
			runUse[id] = Resources{CPU: u.GetCpu(), MemoryMB: u.GetMemoryUsedMb()}
		}
		in = a.qosInput(Resources{CPU: rep.GetUsage().GetCpu(), MemoryMB: rep.GetUsage().GetMemoryUsedMb()}, runUse, now.Sub(since))
		a.qosState, victims = a.qos.Choose(a.qosState, in)
	}
	a.mu.Lock()
	rep.Revoked, rep.RevokedResources = a.revokedLocked(rep.Sequence, victims)
	a.pending = rep
	a.mu.Unlock()
	// Sent at once, whether the sender was waiting for the next interval
	// or not: a revocation is news the stack needs before the kill.
	select {
	case a.wake <- struct{}{}:
	default: // the sender has a wake-up coming already
	}
	if len(victims) > 0 {
		a.qosKill(ctx, rep.Sequence, victims, in)
	}
}

// measure reads the sources and returns the report of the interval since the
// previous reading; nil, nil for the first reading.
//
// It scrapes the runs that declare metrics after reading the counters (they
// are stamped now, and a slow endpoint must not stretch the interval they
// measure), so the report, and a QoS decision on it, waits for the scrapes:
// at most scrapeTimeout, half an interval or less.
func (a *Agent) measure(ctx context.Context, now time.Time) (*pelotonv1.UsageReport, error) {
	cur := reading{taken: true, time: now}
	var err error
	if !a.cfg.Virtual {
		if cur.host, err = a.cfg.Source.Read(now); err != nil {
			return nil, fmt.Errorf("read host: %w", err)
		}
	}
	if a.infoRuns != nil {
		if cur.info, err = a.infoRuns.RunInfo(now); err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		cur.runs = make(map[string]Sample, len(cur.info))
		for id, in := range cur.info {
			cur.runs[id] = in.Sample
		}
	} else if cur.runs, err = a.cfg.Runs.Runs(now); err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	// A failed reading (above) keeps the previous one, and the next report
	// covers the longer interval since it; a reading that gives no usage
	// (below) becomes the next one's baseline all the same.
	// Scraped at every reading the runs were read at, the first one too,
	// so that the first report already has a P99 for every run running.
	latency := a.scrapeRuns(ctx, cur.info, now)
	prev := a.prev
	a.prev = cur
	if !prev.taken {
		return nil, nil
	}
	source := SourceRuns
	if !a.cfg.Virtual {
		source = a.cfg.Source.Source()
	}
	rep, err := usageReport(prev, cur, a.cfg.Virtual, source)
	if err != nil {
		return nil, err
	}
	// A run without usage this interval (first seen, counter reset) gets
	// no latency either: a TaskUsage with only a latency in it would read
	// as a run using nothing.
	for id, u := range rep.Runs {
		if l, ok := latency[id]; ok {
			u.LatencyP99Seconds, u.LatencyError = l.p99, l.err
		}
	}
	a.seq++
	rep.Host, rep.AgentId, rep.Sequence = a.cfg.Host, a.cfg.AgentID, a.seq
	return rep, nil
}

// usageReport computes the usage between two readings; the caller fills in
// who reports it. A run not in prev (first seen) is measured from its start
// if it began since prev and has run a fifth of the interval (at most a
// second); otherwise it, like a run whose counter went down, is left out:
// it has no usage over this interval, and is measured from the next one on. A virtual host's usage is the sum of the runs reported;
// any other host's comes from its own counters, and when those give no
// usage, neither does the report.
func usageReport(prev, cur reading, virtual bool, source string) (*pelotonv1.UsageReport, error) {
	rep := &pelotonv1.UsageReport{Runs: make(map[string]*pelotonv1.TaskUsage, len(cur.runs))}
	var cpu float64
	var mem uint64
	// A run first seen now that began after the previous reading is
	// measured from its start, its counter's beginning, if it has run long
	// enough for the clock ticks its CPU is counted in to say something:
	// a busy run is then seen an interval sooner, which is what the QoS
	// controller's reaction time hangs on.
	minAge := min(cur.time.Sub(prev.time)/5, time.Second)
	for id, s := range cur.runs {
		p, ok := prev.runs[id]
		if !ok {
			if s.Began.IsZero() || !s.Began.After(prev.time) || s.Time.Sub(s.Began) < minAge {
				continue
			}
			p = Sample{Time: s.Began}
		}
		u, err := HostUsage(p, s)
		if err != nil {
			continue
		}
		rep.Runs[id] = &pelotonv1.TaskUsage{
			Cpu:          u.CPUCores,
			MemoryUsedMb: mib(u.MemUsed),
			SampleTime:   timestamppb.New(s.Time),
		}
		cpu += u.CPUCores
		mem += u.MemUsed
	}
	if virtual {
		rep.Usage = &pelotonv1.HostUsage{
			Cpu:          cpu,
			MemoryUsedMb: mib(mem),
			Source:       source,
			SampleTime:   timestamppb.New(cur.time),
		}
		return rep, nil
	}
	u, err := HostUsage(prev.host, cur.host)
	if err != nil {
		return nil, fmt.Errorf("host usage: %w", err)
	}
	rep.Usage = &pelotonv1.HostUsage{
		Cpu:               u.CPUCores,
		MemoryUsedMb:      mib(u.MemUsed),
		MemoryAvailableMb: mib(u.MemAvailable),
		Source:            source,
		SampleTime:        timestamppb.New(cur.host.Time),
	}
	return rep, nil
}

// mib converts bytes to whole MiB, rounding down.
func mib(b uint64) int64 { return int64(b >> 20) }

// errNoAck ends a stream on which a report went unacknowledged too long.
var errNoAck = errors.New("no ack")

// sendLoop keeps one stream open and sends the pending report on it, until
// ctx ends.
func (a *Agent) sendLoop(ctx context.Context) {
	bo := a.backoff(a.cfg.RetryMin)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			a.mu.Lock()
			a.stats.Reconnects++
			a.mu.Unlock()
		}
		acked, err := a.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if acked {
			bo = a.backoff(a.cfg.RetryMin)
		}
		a.mu.Lock()
		a.stats.LastError = err.Error()
		a.mu.Unlock()
		var delay time.Duration
		switch st, _ := status.FromError(err); st.Code() {
		case codes.NotFound, codes.InvalidArgument:
			// The stack will not take this agent's reports as they are.
			// Retrying soon would not change that; retrying at all still
			// may (the host is added to the cluster later), so wait the
			// longest.
			bo = a.backoff(a.cfg.RetryMax)
			delay = bo.Step()
			a.log.Error("stack refuses the reports; retrying", "code", st.Code().String(), "reason", st.Message(), "retry_in", delay)
		default:
			delay = bo.Step()
			a.log.Warn("report stream ended; reconnecting", "err", err, "retry_in", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff returns the reconnect backoff starting at d.
func (a *Agent) backoff(d time.Duration) *retryBackoff {
	return &retryBackoff{next: d, max: a.cfg.RetryMax}
}

// retryBackoff is a doubling delay, capped, each step up to retryJitter longer
// at random so that agents cut off together do not come back together.
type retryBackoff struct{ next, max time.Duration }

// Step returns the next delay.
func (b *retryBackoff) Step() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d + time.Duration(rand.Float64()*retryJitter*float64(d))
}

// stream opens one stream and sends on it until it ends or ctx does. It
// returns whether a report was acknowledged on it, and why it ended.
func (a *Agent) stream(ctx context.Context) (acked bool, err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st, err := a.cfg.Client.ReportUsage(sctx)
	if err != nil {
		return false, err
	}
	w := &ackWatch{timeout: a.cfg.AckTimeout}
	w.timer = time.AfterFunc(math.MaxInt64, func() {
		cancel(fmt.Errorf("%w for report %d in %s", errNoAck, w.outstanding(), a.cfg.AckTimeout))
	})
	w.timer.Stop()
	defer w.timer.Stop()

	// The reader takes the acks; it must not wait on the sender, which may
	// be blocked in Send.
	var recvErr error
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			ack, err := st.Recv()
			if err != nil {
				recvErr = err
				return
			}
			w.acked(ack.Sequence)
			a.noteAck(ack.Sequence)
			a.noteSettings(ack.GetSettings())
		}
	}()
	// Whatever ends the stream, the reader ends with it before we return.
	defer func() { cancel(nil); <-recvDone }()
	// why turns the end of the stream into its reason: the watchdog's,
	// the stack's status, or the stack closing the stream.
	why := func(err error) error {
		if cause := context.Cause(sctx); sctx.Err() != nil && ctx.Err() == nil && cause != nil {
			err = cause
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("the stack closed the stream")
		}
		return err
	}

	var sent uint64 // highest sequence sent on this stream
	for {
		if r := a.toSend(sent); r != nil {
			// Watch before sending: a Send blocked on a dead connection's
			// flow control is ended by the watchdog's cancel too.
			w.sending(r.Sequence)
			if err := st.Send(r); err != nil {
				if errors.Is(err, io.EOF) {
					// The stream ended; Recv has its status.
					<-recvDone
					err = recvErr
				}
				return w.ackedAny(), why(err)
			}
			sent = r.Sequence
			a.mu.Lock()
			a.stats.Sent++
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			return w.ackedAny(), ctx.Err()
		case <-a.wake:
		case <-recvDone:
			return w.ackedAny(), why(recvErr)
		}
	}
}

// toSend returns the pending report when it is newer than sent and not
// acknowledged, and nil otherwise.
func (a *Agent) toSend(sent uint64) *pelotonv1.UsageReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pending; p != nil && p.Sequence > sent && p.Sequence > a.stats.LastAcked {
		return p
	}
	return nil
}

func (a *Agent) noteAck(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Acked++
	a.stats.LastAcked = max(a.stats.LastAcked, seq)
	// Every report from a revocation's first on names it, so the report
	// acknowledged did if it is that one or later.
	for id, r := range a.revoking {
		if r.first <= seq {
			delete(a.revoking, id)
		}
	}
	close(a.ackCh)
	a.ackCh = make(chan struct{})
}

// ackWatch is one stream's watchdog: its timer runs while a report sent on
// the stream is unacknowledged, restarting at each ack that leaves some
// still unacknowledged.
type ackWatch struct {
	timeout time.Duration
	timer   *time.Timer

	mu         sync.Mutex
	sent, acks uint64 // highest sequence sent, acknowledged
	anyAcked   bool
}

func (w *ackWatch) sending(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent <= w.acks {
		w.timer.Reset(w.timeout)
	}
	w.sent = seq
}

func (w *ackWatch) acked(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.anyAcked = true
	w.acks = max(w.acks, seq)
	if w.acks >= w.sent {
		w.timer.Stop()
	} else {
		w.timer.Reset(w.timeout)
	}
}

func (w *ackWatch) ackedAny() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.anyAcked
}

func (w *ackWatch) outstanding() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}
