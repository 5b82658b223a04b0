package hostmgr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/sanitize"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// HostOffer is a leased host and what it has free.
type HostOffer struct {
	Name      string
	Free      resources.Resources
	Capacity  resources.Resources
	Labels    map[string]string
	Partition string
	// JobCounts is how many runs of each job the host holds, for the jobs
	// the lease asked about (HostFilter.Jobs); jobs with none are absent.
	JobCounts map[string]int
}

// HostFilter says which hosts AcquireHosts may lease.
type HostFilter struct {
	// Max is the most hosts to lease.
	Max int
	// Partitions limits the lease to hosts of these partitions; empty means
	// any partition.
	Partitions []string
	// MinFree skips hosts that do not have at least this much free in every
	// kind (the smallest task of the round). Hosts without free CPU or memory
	// are always skipped: every task needs both.
	MinFree resources.Resources
	// Jobs are the jobs whose per-host run counts the caller needs in
	// HostOffer.JobCounts (to spread them or cap them per host).
	Jobs map[string]bool
	// Revocable leases hosts for revocable runs: a host's free is then its
	// slack left (slack.go), and hosts without slack are skipped.
	Revocable bool
	// Hosts are hosts the caller asks for by name: those its tasks are
	// bound to, or ran on before. Each one that is up and not leased is offered whatever Max,
	// Partitions and MinFree say (even when full, so that the caller sees
	// how little it has free), in this order and before the others. They
	// do not count towards Max, Demand or MinHosts, and finding them costs
	// a lookup each, not a scan.
	Hosts []string
	// Demand is what the caller means to place on the hosts the scan finds
	// (not those of Hosts): the summed resources of a placement round's
	// tasks. When it is set the scan stops, short of Max, once the hosts it
	// took have half as much again as Demand free in every kind and number
	// at least the floor (leaseFloor, or MinHosts with the same headroom,
	// whichever is more). Hosts with GPUs count only towards a demand for
	// GPUs; a demand for none still takes those the scan meets, without
	// counting them. A round then holds hosts in proportion to its work,
	// and other engines' rounds find hosts free at the same time. Zero
	// leases up to Max.
	Demand resources.Resources
	// MinHosts is how many hosts the caller's tasks need at least, whatever
	// they ask for in resources: a job that spreads its instances or caps
	// them per host needs one host per instance or per cap's worth. Used
	// only with Demand.
	MinHosts int
	// FillFirst scans from the first host instead of where the last lease
	// stopped, and leaves that place as it is. With a demand, successive
	// leases then hold the same hosts first, so that a caller that packs
	// fills hosts already in use rather than moving on to fresh ones each
	// time; a lease held at the same time still gets other hosts.
	FillFirst bool
	// Lease, if set, adds the hosts to that lease, which the caller holds,
	// instead of starting one: a round whose tasks did not all fit asks
	// for more hosts and still commits once. The lease keeps its end. A
	// lease that ended gets nothing.
	Lease string
}

// How much a lease with a demand (HostFilter.Demand) takes beyond the
// demand. Resources free on the hosts taken are not all usable: a task
// needs its whole size on one host, so the free that is left on each host
// after the tasks that fit there is wasted, and placement needs choice to
// be good at all. PACK looks for the fullest host that fits, which it can
// only find among several; SPREAD and a job's cap per host need hosts
// apart from resources (MinHosts). Half as much again as the demand, and
// never fewer than leaseFloor hosts, leaves that choice and covers the
// waste of tasks up to a third of a host's free in size; a round whose
// tasks still do not fit leaves them to the next round, which starts
// where this one stopped. Large enough to place well, small enough that
// a few rounds of modest demand leave most of the cluster to the others.
const (
	// leaseHeadroomNum / leaseHeadroomDen is the headroom factor, 1.5, in
	// integers so that the comparison is exact.
	leaseHeadroomNum = 3
	leaseHeadroomDen = 2
	// leaseFloor is the fewest hosts a lease with a demand takes, if there
	// are that many.
	leaseFloor = 8
)

// demandGoal is when a lease with a demand has enough: the free of the
// hosts it took, times the headroom's denominator, must cover the demand
// times its numerator in every kind, and it must hold want hosts.
type demandGoal struct {
	need resources.Resources
	want int
}

func newDemandGoal(f HostFilter) demandGoal {
	want := max(leaseFloor, (f.MinHosts*leaseHeadroomNum+leaseHeadroomDen-1)/leaseHeadroomDen)
	return demandGoal{need: f.Demand.Scale(leaseHeadroomNum), want: want}
}

// met reports whether hosts hosts with free between them are enough.
func (g demandGoal) met(free resources.Resources, hosts int) bool {
	return hosts >= g.want && g.need.FitsIn(free.Scale(leaseHeadroomDen))
}

// HostStatus is what hostmgr knows of one host, leased or not, in service or
// not: enough for a caller that asked for the host by name (HostFilter.Hosts)
// to tell why it was not offered.
type HostStatus struct {
	State     pelotonv1.HostState
	Capacity  resources.Resources
	Labels    map[string]string
	Partition string
	// Unschedulable: the backend says the host takes no new runs (a
	// cordoned or not-ready node).
	Unschedulable bool
	// MovingTo is the partition the host is moving to; while it moves it
	// takes no new runs.
	MovingTo string
}

// HostClass is a set of hosts that look the same to placement: same
// capacity, partition and labels. Placement judges whether a task could
// ever run anywhere against the classes of every host, leased or not.
type HostClass struct {
	Capacity  resources.Resources
	Labels    map[string]string
	Partition string
	// Count is how many hosts are in the class.
	Count int
}

// Assignment reserves resources for one task on one leased host.
type Assignment struct {
	TaskID string
	// JobID is the task's job, counted per host for MaxPerHost.
	JobID     string
	Host      string
	Resources resources.Resources
	// MaxPerHost is the most runs of JobID the host may hold, this one
	// included (0 = no limit).
	MaxPerHost uint32
	// Revocable: the run holds the host's slack, not its capacity
	// (slack.go), and must fit in what slack is left.
	Revocable bool
}

// Fits is the one fit test of a task on a host: placement decides with it and
// Commit verifies with it, so the deciders and the verifying applier cannot
// disagree. need is the task's resources, maxPerHost its job's cap per host
// (0 = none), free what the host has free and jobCount how many runs of the
// task's job the host already holds.
func Fits(need resources.Resources, maxPerHost uint32, free resources.Resources, jobCount int) bool {
	return need.FitsIn(free) && (maxPerHost == 0 || jobCount < int(maxPerHost))
}

// ErrLeaseExpired is returned by Commit when the lease is no longer held.
var ErrLeaseExpired = errors.New("hostmgr: lease expired or unknown")

// ErrDoesNotFit is returned by Commit when a task no longer fits its host.
var ErrDoesNotFit = errors.New("hostmgr: task does not fit the host")

// ErrHostNotUp is returned by Commit for a host that went into maintenance
// after it was leased.
var ErrHostNotUp = errors.New("hostmgr: host is not up")

type host struct {
	info HostInfo
	// allocated is what non-revocable runs hold; revocable what revocable
	// runs hold, out of the host's slack (slack.go).
	allocated resources.Resources
	revocable resources.Resources
	tasks     map[string]hold
	// jobs counts the runs of each job the host holds.
	jobs     map[string]int
	lease    string
	leaseEnd time.Time
	// state is the host's maintenance state; only HOST_UP hosts take work.
	state pelotonv1.HostState
	// drainNote says what holds up a drain (set by jobmgr, see SetDrainNote).
	drainNote string
	// maintBy names the backend that started the host's maintenance ("" if
	// an operator did, or none is under way).
	maintBy string
	// gone is set when the backend no longer reports the host but it still
	// holds runs.
	gone bool
	// move is where a move between partitions is (partition.go), target
	// the partition it moves to, and moveNote what holds the move up on
	// hostmgr's side (the backend refused the new partition).
	move     pelotonv1.PartitionMoveState
	target   string
	moveNote string
	// own are the labels the backend reports; info.Labels are they with
	// the labels of the partition profile the host took (profile) laid
	// over them.
	own     map[string]string
	profile *appliedProfile
	// drainBy, while not zero, is the end of the move's drain window
	// (movedrain.go): its runs (those of finish, if any) are left to
	// finish until then.
	drainBy time.Time
	finish  []string
}

// hold is what one run holds on its host.
type hold struct {
	res       resources.Resources
	job       string
	revocable bool
	// since is when the hold began (the stack's start for a recovered run).
	since time.Time
}

type lease struct {
	id    string
	hosts []string
	end   time.Time
}

// Manager is the host manager. It is safe for concurrent use.
//
// It is the host cache, leases and launch core: the hosts the backend
// reports and what each holds, leases to placement engines, and runs
// started, replaced and killed through the backend. Two parts with state
// and locks of their own hang off it: Maintenance (host maintenance,
// partition moves, drain requests, the move history) and Usage (the host
// agents' reports, slack, the advisor's advice). The parts read and change
// the host table under the core's lock, mu; each keeps the rest of its
// state under its own.
type Manager struct {
	backend  Backend
	log      *slog.Logger
	now      func() time.Time
	leaseTTL time.Duration
	// substrate is the backend's, if it reports one (SubstrateReporter).
	substrate SubstrateReporter

	// mu guards the host table, the fields from hosts to hostGauged, and
	// the parts' fields that say they are guarded by it.
	mu    sync.Mutex
	hosts map[string]*host
	order []string
	// next is where the next AcquireHosts starts in order, so that
	// successive leases do not all begin with the same hosts.
	next    int
	classes []HostClass
	// classesStale is set when a host's partition changed since classes
	// were computed.
	classesStale bool
	// profiles are Options.Profiles; read-only after NewManager.
	profiles map[string]Profile
	leases   leaseBook
	// taskHost maps a run's task ID to the host holding its resources.
	taskHost map[string]string
	// hostGauged: what each host's gauges say (host_metrics.go).
	hostGauged hostGauges
	// onCapacity is Options.OnCapacity.
	onCapacity func(resources.ByPartition)

	// draining counts hosts whose runs are to be moved off (HOST_DRAINING,
	// or moving partition), so Launch skips its check while nothing drains.
	draining atomic.Int32

	events chan TaskEvent
	// badNames are the host names cleanHosts left out and said so.
	badNames sync.Map
	// hostsChanged is told when the backend's hosts changed (OnHostsChanged).
	hostsChanged atomic.Pointer[func()]

	// The parts (maintenance.go, usage.go).
	maint *Maintenance
	usage *Usage

	stop context.CancelFunc
	// loops are the maintenance and slack loops, which Close waits for: a
	// store write of a closed Manager must not land after its successor
	// started.
	loops sync.WaitGroup
}

// Options tunes a Manager.
type Options struct {
	Logger *slog.Logger
	// LeaseTTL is how long a placement engine may hold hosts (default 10s).
	LeaseTTL time.Duration
	// EventBuffer is the depth of the event subscription (default 65536).
	EventBuffer int
	// Store persists host maintenance under hosts/<name>/maintenance; nil
	// keeps it in memory only (tests).
	Store store.Store
	// OnCapacity, if set, is told the capacity of the hosts in service, by
	// partition, whenever it may have changed (hosts appear, enter or leave
	// maintenance, or move between partitions). It is called with
	// hostmgr's lock held and must not call back into hostmgr.
	OnCapacity func(resources.ByPartition)
	// SlackMargin is the fraction of each host's CPU and memory kept out
	// of its slack (slack.go; default DefaultSlackMargin, 0.1). A
	// negative value means none.
	SlackMargin float64
	// MemoryOversubscription caps each host's memory slack so that what
	// the host has committed (non-revocable allocations and revocable
	// work) stays within this many times its memory (slack.go; default
	// DefaultMemoryOversubscription, 1.5). 1 offers revocable work only
	// memory nobody holds; values below 1 are taken as 1.
	MemoryOversubscription float64
	// UsageStaleAfter is how old a host's last usage report may be and
	// still count (default DefaultUsageStaleAfter, 15s): past it the host
	// has no slack.
	UsageStaleAfter time.Duration
	// OnSlack, if set, is told the cluster's slack (ClusterSlack) when it
	// changes, checked every second. It is called without hostmgr's lock.
	OnSlack func(resources.Resources)
	// Profiles are the partition profiles (profile.go), by partition:
	// what hosts take when a move settles them in a partition. They must
	// be valid (ValidateProfiles); NewManager keeps none if they are not.
	Profiles map[string]Profile
}

// NewManager wraps a backend. Call Start before use.
func NewManager(b Backend, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.EventBuffer == 0 {
		opts.EventBuffer = 1 << 16
	}
	switch {
	case opts.SlackMargin == 0:
		opts.SlackMargin = DefaultSlackMargin
	case opts.SlackMargin < 0:
		opts.SlackMargin = 0
	}
	if opts.UsageStaleAfter <= 0 {
		opts.UsageStaleAfter = DefaultUsageStaleAfter
	}
	switch {
	case opts.MemoryOversubscription == 0:
		opts.MemoryOversubscription = DefaultMemoryOversubscription
	case opts.MemoryOversubscription < 1:
		opts.MemoryOversubscription = 1
	}
	sub, _ := b.(SubstrateReporter)
	m := &Manager{
		substrate: sub,
		backend:   b, log: opts.Logger.With("component", "hostmgr"), now: time.Now, leaseTTL: opts.LeaseTTL,
		hosts: map[string]*host{}, leases: leaseBook{}, taskHost: map[string]string{}, hostGauged: hostGauges{},
		events:     make(chan TaskEvent, opts.EventBuffer),
		onCapacity: opts.OnCapacity, stop: func() {},
	}
	if err := ValidateProfiles(opts.Profiles); err != nil {
		m.log.Error("partition profiles ignored", "err", err)
	} else {
		m.profiles = opts.Profiles
	}
	m.maint = newMaintenance(m, opts.Store)
	m.usage = &Usage{hm: m, log: m.log, slackMargin: opts.SlackMargin, memOversub: opts.MemoryOversubscription, staleAfter: opts.UsageStaleAfter, onSlack: opts.OnSlack}
	return m
}

// Maintenance is the host manager's maintenance and partition moves.
func (m *Manager) Maintenance() *Maintenance { return m.maint }

// Usage is the host manager's view of what the host agents report, the
// slack it makes, and the advisor's advice.
func (m *Manager) Usage() *Usage { return m.usage }

// Start loads the hosts' maintenance state, starts the backend and loads its
// hosts. Hosts are not marked drained, nor drains asked again, before
// Recovered.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.maint.loadMaintenance(ctx); err != nil {
		return err
	}
	if err := m.maint.loadHistory(ctx); err != nil {
		return err
	}
	if w, ok := m.backend.(HostWatcher); ok {
		w.WatchHosts(func() {
			m.refreshHosts()
			m.maint.wakeIfSourcePending() // a host the source named may have appeared
			if f := m.hostsChanged.Load(); f != nil {
				(*f)()
			}
		})
	}
	if ms, ok := m.backend.(MaintenanceSource); ok {
		ms.WatchMaintenance(m.maint.onSourceMaintenance)
	}
	if err := m.backend.Start(ctx, m.onEvent); err != nil {
		return fmt.Errorf("hostmgr: start %s backend: %w", m.backend.Name(), err)
	}
	m.refreshHosts()
	ctx, m.stop = context.WithCancel(ctx)
	m.loops.Add(1)
	go func() {
		defer m.loops.Done()
		m.maint.maintLoop(ctx)
	}()
	if m.usage.onSlack != nil {
		m.loops.Add(1)
		go func() {
			defer m.loops.Done()
			m.usage.slackLoop(ctx)
		}()
	}
	return nil
}

func (m *Manager) refreshHosts() {
	infos := cleanHosts(m.backend.Hosts(), m.log, m.backend.Name(), &m.badNames)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, hi := range infos {
		seen[hi.Name] = true
		if h, ok := m.hosts[hi.Name]; ok {
			h.info, h.own = hi, hi.Labels
			m.maint.applyPartRecordLocked(h)
			continue
		}
		h := &host{info: hi, own: hi.Labels, tasks: map[string]hold{}, jobs: map[string]int{}, state: m.maint.stateOfLocked(hi.Name), maintBy: m.maint.records[hi.Name].by}
		m.maint.applyPartRecordLocked(h)
		m.hosts[hi.Name] = h
	}
	for name, h := range m.hosts {
		if !seen[name] {
			// A host that went away while it holds runs stays, taking no
			// new ones, until the backend's reports of those runs (LOST,
			// usually) release them; then ReleaseTask forgets it.
			if len(h.tasks) > 0 {
				h.gone, h.info.Unschedulable = true, true
				continue
			}
			delete(m.hosts, name)
		} else {
			h.gone = false
		}
	}
	m.reorderLocked()
	m.usage.forgetUsageLocked()
}

// reorderLocked rebuilds what derives from the set of hosts.
func (m *Manager) reorderLocked() {
	m.order = m.order[:0]
	for name := range m.hosts {
		m.order = append(m.order, name)
	}
	sort.Strings(m.order)
	m.classes = hostClasses(m.order, m.hosts)
	m.classesStale = false
	m.recountLocked()
}

// OnHostsChanged registers f, called (without hostmgr's lock) after the
// backend reported that its hosts changed and hostmgr took the change in:
// jobmgr's DAEMON jobs follow hosts that join or leave.
func (m *Manager) OnHostsChanged(f func()) { m.hostsChanged.Store(&f) }

// hostClasses groups hosts by capacity, partition and labels.
func hostClasses(order []string, hosts map[string]*host) []HostClass {
	idx := map[string]int{}
	var out []HostClass
	var b strings.Builder
	for _, name := range order {
		info := hosts[name].info
		b.Reset()
		fmt.Fprintf(&b, "%v\x00%s", info.Capacity, info.Partition)
		keys := make([]string, 0, len(info.Labels))
		for k := range info.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "\x00%s=%s", k, info.Labels[k])
		}
		if i, ok := idx[b.String()]; ok {
			out[i].Count++
			continue
		}
		idx[b.String()] = len(out)
		out = append(out, HostClass{Capacity: info.Capacity, Labels: info.Labels, Partition: info.Partition, Count: 1})
	}
	return out
}

// HostClasses returns the classes of every host, leased or not, full or not.
// The slice is shared and replaced whole when hosts change: do not modify it.
func (m *Manager) HostClasses() []HostClass {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.classes
}

// cleanHosts makes what a backend says of its hosts safe to keep and to
// show (sanitize): labels and partitions are made valid UTF-8 and bounded.
// A host whose name is not valid UTF-8 is left out, loudly: its name
// cannot be put in a record or an answer, and a cleaned name would be one
// the backend does not know.
// It says so once per name: badNames holds the names said.
func cleanHosts(infos []HostInfo, log *slog.Logger, backend string, badNames *sync.Map) []HostInfo {
	out := infos[:0:0]
	for _, hi := range infos {
		if !utf8.ValidString(hi.Name) || len(hi.Name) > sanitize.MaxName {
			if _, said := badNames.LoadOrStore(hi.Name, true); !said {
				log.Error("the backend reports a host whose name is not valid UTF-8 or too long; it is not used",
					"backend", backend, "name", sanitize.Text(hi.Name, sanitize.MaxName))
			}
			continue
		}
		hi.Labels = sanitize.Labels(hi.Labels)
		hi.Partition = sanitize.Text(hi.Partition, sanitize.MaxName)
		hi.Why = sanitize.Text(hi.Why, sanitize.MaxReason)
		out = append(out, hi)
	}
	return out
}

// CleanEvent makes the substrate's text in an event (its reason, message
// and host) safe to store: valid UTF-8, bounded (sanitize). Every event,
// Status and run listing passes here on its way from a backend to the rest
// of the stack, so no backend's text can make a task record unwritable;
// jobmgr applies it again to the events it makes of a backend's errors.
func CleanEvent(ev TaskEvent) TaskEvent {
	ev.Reason = sanitize.Text(ev.Reason, sanitize.MaxReason)
	ev.Message = sanitize.Text(ev.Message, sanitize.MaxMessage)
	ev.Host = sanitize.Text(ev.Host, sanitize.MaxName)
	return ev
}

// onEvent frees a finished run's resources, then passes the event on.
func (m *Manager) onEvent(ev TaskEvent) {
	ev = CleanEvent(ev)
	switch ev.State {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST,
		pelotonv1.TaskState_PREEMPTED:
		m.ReleaseTask(ev.TaskID)
	}
	m.events <- ev
}

// Events is the stream of task events from the backend. There is one
// consumer (jobmgr); events of one task arrive in order.
func (m *Manager) Events() <-chan TaskEvent { return m.events }

// Capacity is the sum of all hosts' capacity.
// Hosts in maintenance do not count: they take no work.
func (m *Manager) Capacity() resources.Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	return capacityByPartition(m.hosts).Total()
}

// CapacityByPartition is the capacity of the hosts in service, by
// partition: admission of work that targets a partition counts only its
// hosts.
func (m *Manager) CapacityByPartition() resources.ByPartition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return capacityByPartition(m.hosts)
}

// capacityByPartition is the capacity of the hosts in service that take
// new runs, by partition.
func capacityByPartition(hosts map[string]*host) resources.ByPartition {
	c := resources.ByPartition{}
	for _, h := range hosts {
		if h.inService() && !h.info.Unschedulable {
			c[h.info.Partition] = c[h.info.Partition].Add(h.info.Capacity)
		}
	}
	return c
}

// LargestHost is the per-kind maximum host capacity: a task that asks for
// more than this in any kind can never run.
func (m *Manager) LargestHost() resources.Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c resources.Resources
	for _, h := range m.hosts {
		c = c.Max(h.info.Capacity)
	}
	return c
}

func newLeaseID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AcquireHosts leases up to f.Max hosts that pass f and have room to the
// caller (fewer with f.Demand: as many as the demand needs), and before
// them the hosts of f.Hosts that are up and not leased.
// The hosts are offered to nobody else until Commit, ReleaseLease or
// expiry. Each call starts where the previous one stopped, so that engines
// (and successive rounds) are not all handed the same first hosts, unless
// it fills first (HostFilter.FillFirst).
func (m *Manager) AcquireHosts(f HostFilter) (string, []HostOffer) {
	// Hosts of a substrate that is away are as last seen, and a launch on
	// them could not be carried out: the work waits, saying why, for the
	// substrate to answer again rather than be placed and fail.
	if !reachable(m.substrate) {
		return "", nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.leases.expire(now, m.hosts)
	n := len(m.order)
	if n == 0 || (f.Max <= 0 && len(f.Hosts) == 0) {
		return "", nil
	}
	var l *lease
	if f.Lease != "" {
		if l = m.leases[f.Lease]; l == nil {
			return "", nil
		}
	} else {
		l = &lease{id: newLeaseID(), end: now.Add(m.leaseTTL)}
	}
	id := l.id
	offers := make([]HostOffer, 0, min(max(f.Max, 0), n)+len(f.Hosts))
	take := func(name string, h *host, free resources.Resources) {
		h.lease, h.leaseEnd = id, l.end
		l.hosts = append(l.hosts, name)
		offers = append(offers, HostOffer{Name: name, Free: free, Capacity: h.info.Capacity, Labels: h.info.Labels,
			Partition: h.info.Partition, JobCounts: jobCounts(h.jobs, f.Jobs)})
	}
	// What a host has free for the caller's runs: its capacity less what
	// is held, or for revocable runs its slack left.
	freeOf := func(h *host) resources.Resources {
		if f.Revocable {
			return m.usage.slackLocked(h, now)
		}
		return h.info.Capacity.Sub(h.allocated)
	}
	// Hosts asked for by name first: a host leased here is skipped by the
	// scan below, so it is never offered twice.
	for _, name := range f.Hosts {
		if h, ok := m.hosts[name]; ok && h.lease == "" && h.inService() && !h.info.Unschedulable {
			take(name, h, freeOf(h))
		}
	}
	named := len(offers)
	start := m.next % n
	if f.FillFirst {
		start = 0
	}
	// With a demand, the scan stops once the hosts it took are enough for
	// it (demandGoal); took is what counted hosts have free between them.
	withDemand := !f.Demand.IsZero()
	goal := newDemandGoal(f)
	var took resources.Resources
	counted := 0
	i := 0
	for ; i < n && len(offers)-named < f.Max; i++ {
		if withDemand && goal.met(took, counted) {
			break
		}
		name := m.order[(start+i)%n]
		h := m.hosts[name]
		if h.lease != "" || !h.inService() || h.info.Unschedulable || !inPartitions(h.info.Partition, f.Partitions) {
			continue
		}
		free := freeOf(h)
		if free.MilliCPU == 0 || free.MemoryMB == 0 || !f.MinFree.FitsIn(free) {
			continue
		}
		take(name, h, free)
		// Hosts with GPUs do not count towards a demand for none: PACK
		// puts other work on them only when no host without GPUs fits,
		// to keep them for GPU work. Leased, they are that fallback;
		// counted, they would stand in for the hosts the demand needs,
		// and the work would spill onto them.
		if f.Demand.GPU == 0 && h.info.Capacity.GPU > 0 {
			continue
		}
		took = took.Add(free)
		counted++
	}
	if !f.FillFirst {
		m.next = (start + i) % n
	}
	if len(offers) == 0 {
		return "", nil
	}
	m.leases[id] = l
	return id, offers
}

// HostStatuses returns what hostmgr knows of the named hosts; names it does
// not know are absent. Placement asks only about the hosts it asked for by
// name (its tasks' bound and previous hosts) that AcquireHosts did not
// offer, so this costs a lookup per name.
func (m *Manager) HostStatuses(names []string) map[string]HostStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]HostStatus, len(names))
	for _, name := range names {
		if h, ok := m.hosts[name]; ok {
			out[name] = HostStatus{State: h.state, Capacity: h.info.Capacity, Labels: h.info.Labels, Partition: h.info.Partition,
				Unschedulable: h.info.Unschedulable, MovingTo: h.target}
		}
	}
	return out
}

func inPartitions(p string, ps []string) bool {
	if len(ps) == 0 {
		return true
	}
	for _, q := range ps {
		if p == q {
			return true
		}
	}
	return false
}

// jobCounts copies the counts of the wanted jobs, walking the smaller map.
func jobCounts(have map[string]int, want map[string]bool) map[string]int {
	if len(have) == 0 || len(want) == 0 {
		return nil
	}
	var out map[string]int
	put := func(job string, n int) {
		if out == nil {
			out = map[string]int{}
		}
		out[job] = n
	}
	if len(have) <= len(want) {
		for job, n := range have {
			if want[job] {
				put(job, n)
			}
		}
		return out
	}
	for job := range want {
		if n := have[job]; n > 0 {
			put(job, n)
		}
	}
	return out
}

// leaseBook holds the leases of hosts to placement engines, by ID. It is
// part of the host table: guarded by Manager.mu.
type leaseBook map[string]*lease

// expire releases the leases that ended before now.
func (lb leaseBook) expire(now time.Time, hosts map[string]*host) {
	for id, l := range lb {
		if now.After(l.end) {
			lb.release(id, hosts)
		}
	}
}

// release gives lease id's hosts back; an unknown id changes nothing.
func (lb leaseBook) release(id string, hosts map[string]*host) {
	l, ok := lb[id]
	if !ok {
		return
	}
	for _, name := range l.hosts {
		if h, ok := hosts[name]; ok && h.lease == id {
			h.lease = ""
		}
	}
	delete(lb, id)
}

// ReleaseLease gives leased hosts back without using them.
func (m *Manager) ReleaseLease(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leases.release(id, m.hosts)
}

// Commit reserves resources for assignments on the lease's hosts and ends the
// lease. It re-checks every assignment with Fits, in order, against what the
// host holds plus the assignments before it, so a decision made on a stale
// view can neither over-commit a host nor exceed a job's cap per host:
// either every assignment is reserved or none is.
func (m *Manager) Commit(leaseID string, as []Assignment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[leaseID]
	if !ok || m.now().After(l.end) {
		m.leases.release(leaseID, m.hosts)
		return ErrLeaseExpired
	}
	defer m.leases.release(leaseID, m.hosts)
	type hostJob struct{ host, job string }
	pending := map[string]resources.Resources{}
	pendingJob := map[hostJob]int{}
	seen := make(map[string]bool, len(as))
	for _, a := range as {
		h, ok := m.hosts[a.Host]
		if !ok || h.lease != leaseID {
			return fmt.Errorf("%w: host %s is not in lease %s", ErrLeaseExpired, a.Host, leaseID)
		}
		if h.state != hostUp {
			return fmt.Errorf("%w: %s is %s", ErrHostNotUp, a.Host, h.state)
		}
		if h.moving() {
			return fmt.Errorf("%w: %s is moving to partition %s", ErrHostNotUp, a.Host, h.target)
		}
		if h.info.Unschedulable {
			return fmt.Errorf("%w: %s takes no new tasks (unschedulable in the backend)", ErrHostNotUp, a.Host)
		}
		if _, dup := m.taskHost[a.TaskID]; dup || seen[a.TaskID] {
			return fmt.Errorf("hostmgr: task %s already holds resources", a.TaskID)
		}
		seen[a.TaskID] = true
		pk := a.Host
		free := h.info.Capacity.Sub(h.allocated.Add(pending[pk]))
		if a.Revocable {
			pk = "revocable/" + a.Host
			free = m.usage.slackLocked(h, m.now()).Sub(pending[pk])
		}
		hj := hostJob{a.Host, a.JobID}
		n := h.jobs[a.JobID] + pendingJob[hj]
		if !Fits(a.Resources, a.MaxPerHost, free, n) {
			if !a.Resources.FitsIn(free) {
				return fmt.Errorf("%w: %s needs %s for %s, has %s free", ErrDoesNotFit, a.Host, a.Resources, a.TaskID, free)
			}
			return fmt.Errorf("%w: %s already holds %d runs of job %s, the most per host", ErrDoesNotFit, a.Host, n, a.JobID)
		}
		pending[pk] = pending[pk].Add(a.Resources)
		pendingJob[hj]++
	}
	now := m.now()
	for _, a := range as {
		m.hosts[a.Host].hold(a.TaskID, a.JobID, a.Resources, a.Revocable, now)
		m.taskHost[a.TaskID] = a.Host
	}
	return nil
}

// hold reserves r on h for run taskID of job jobID, from since. The
// caller records the run's host in Manager.taskHost.
func (h *host) hold(taskID, jobID string, r resources.Resources, revocable bool, since time.Time) {
	if revocable {
		h.revocable = h.revocable.Add(r)
	} else {
		h.allocated = h.allocated.Add(r)
	}
	h.tasks[taskID] = hold{res: r, job: jobID, revocable: revocable, since: since}
	if jobID != "" {
		h.jobs[jobID]++
	}
}

// jobOfTaskID returns the job of a run's task ID <jobID>-<instance>-<run>.
// Only Recover needs it: its caller predates Assignment.JobID.
func jobOfTaskID(taskID string) string {
	s := taskID
	for range 2 {
		i := strings.LastIndexByte(s, '-')
		if i < 0 {
			return ""
		}
		s = s[:i]
	}
	return s
}

// Recover re-reserves resources for a run that was already placed before a
// restart of the control plane.
func (m *Manager) Recover(taskID, hostName string, r resources.Resources) {
	m.recoverHold(taskID, hostName, r, false)
}

// RecoverRevocable is Recover for a revocable run: it holds the host's
// slack, not its capacity.
func (m *Manager) RecoverRevocable(taskID, hostName string, r resources.Resources) {
	m.recoverHold(taskID, hostName, r, true)
}

func (m *Manager) recoverHold(taskID, hostName string, r resources.Resources, revocable bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hosts[hostName]
	if !ok {
		return
	}
	if _, dup := m.taskHost[taskID]; dup {
		return
	}
	h.hold(taskID, jobOfTaskID(taskID), r, revocable, m.now())
	m.taskHost[taskID] = hostName
}

// ReleaseTask frees a run's resources. Unknown runs are ignored. A draining
// host left empty is then marked drained (asynchronously: that is a store
// write, and ReleaseTask is on the event path).
func (m *Manager) ReleaseTask(taskID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.taskHost[taskID]
	if !ok {
		return
	}
	delete(m.taskHost, taskID)
	if h, ok := m.hosts[name]; ok {
		t := h.tasks[taskID]
		if t.revocable {
			h.revocable = h.revocable.Sub(t.res)
		} else {
			h.allocated = h.allocated.Sub(t.res)
		}
		delete(h.tasks, taskID)
		if t.job != "" {
			if h.jobs[t.job]--; h.jobs[t.job] <= 0 {
				delete(h.jobs, t.job)
			}
		}
		if h.draining() && len(h.tasks) == 0 {
			m.maint.wakeMaint()
		}
		if h.gone && len(h.tasks) == 0 {
			delete(m.hosts, name)
			m.reorderLocked()
			m.usage.forgetUsageLocked()
		}
	}
}

// TransferHold moves the resources a run holds on its host to another run
// of the same instance, so that an in-place restart keeps its room on the
// host between the old run's end and the new run's launch. It returns the
// host, or false if from holds nothing (then nothing changes).
func (m *Manager) TransferHold(from, to string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.taskHost[from]
	if !ok {
		return "", false
	}
	if _, dup := m.taskHost[to]; dup {
		return "", false
	}
	h, ok := m.hosts[name]
	if !ok {
		return "", false // the host left; nothing is held there any more
	}
	t := h.tasks[from]
	delete(h.tasks, from)
	delete(m.taskHost, from)
	h.tasks[to] = t
	m.taskHost[to] = name
	return name, true
}

// HoldsOn reports whether run taskID holds resources on host name: the
// runs this stack placed there.
func (m *Manager) HoldsOn(name, taskID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.taskHost[taskID] == name
}

// HostUp reports whether a host exists, is in service and takes new runs.
func (m *Manager) HostUp(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hosts[name]
	return ok && h.inService() && !h.info.Unschedulable
}

// HoldsExactly reports whether run taskID holds exactly r on its host.
func (m *Manager) HoldsExactly(taskID string, r resources.Resources) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.taskHost[taskID]
	if !ok {
		return false
	}
	return m.hosts[name].tasks[taskID].res == r
}

// Prefetch asks the backend to fetch image to hosts ahead of need. Backends
// that have nothing to fetch (local processes, simulated hosts) do nothing.
func (m *Manager) Prefetch(ctx context.Context, hosts []string, image string) error {
	if p, ok := m.backend.(Prefetcher); ok && image != "" && len(hosts) > 0 {
		return p.Prefetch(ctx, hosts, image)
	}
	return nil
}

// ReleaseVolume deletes a persistent volume on its host, if the backend
// keeps volumes.
func (m *Manager) ReleaseVolume(ctx context.Context, host, volumeID string) error {
	if r, ok := m.backend.(VolumeReleaser); ok {
		return r.ReleaseVolume(ctx, host, volumeID)
	}
	return nil
}

// RemoveJobOutput tells the backend that job jobID has left the live store
// (deleted, or archived and removed by the collector), so that it may drop
// the output and records it keeps of the job's runs, as its retention says
// (OutputPruner). With a backend that keeps nothing of ended runs (sim,
// mesos: it is not an OutputPruner) it does nothing and returns
// nil. Call it after the job's removal from the store succeeded; calling it
// again is harmless.
func (m *Manager) RemoveJobOutput(ctx context.Context, jobID string) error {
	if p, ok := m.backend.(OutputPruner); ok {
		return p.RemoveJobOutput(ctx, jobID)
	}
	return nil
}

// Foreign returns the backend's source of work other clients created for
// Peloton to place, or nil if it has none.
func (m *Manager) Foreign() ForeignSource {
	if f, ok := m.backend.(ForeignSource); ok {
		return f
	}
	return nil
}

// CheckReplace reports whether the backend could make run old into next in
// place (Replacer), changing nothing: nil, or an error wrapping
// ErrNotReplaceable (always, for a backend that is not a Replacer).
func (m *Manager) CheckReplace(old string, next LaunchSpec) error {
	r, ok := m.backend.(Replacer)
	if !ok {
		return fmt.Errorf("%w: the %s backend replaces no run in place", ErrNotReplaceable, m.backend.Name())
	}
	return r.CheckReplace(old, next)
}

// Replace makes the live run old into run next of the same instance, in
// place on its host, through the backend (Replacer). The room old holds
// moves to next first: the backend reports old's end, which frees what old
// holds, before it returns. On an error next keeps that room; the caller
// releases it (ReleaseTask) when it gives next up. A run replaced on a host
// that started draining is handed to Drains, as Launch does.
func (m *Manager) Replace(ctx context.Context, old string, next LaunchSpec) error {
	r, ok := m.backend.(Replacer)
	if !ok {
		return fmt.Errorf("%w: the %s backend replaces no run in place", ErrNotReplaceable, m.backend.Name())
	}
	m.TransferHold(old, next.TaskID)
	if err := r.Replace(ctx, old, next); err != nil {
		return err
	}
	m.publishIfDraining(next)
	return nil
}

// Launch starts a placed run through the backend. A run launched on a host
// that started draining after the run was placed is handed to Drains at
// once; only after the backend accepted it, so that the kill finds it.
func (m *Manager) Launch(ctx context.Context, spec LaunchSpec) error {
	if err := m.backend.Launch(ctx, spec); err != nil {
		return err
	}
	m.publishIfDraining(spec)
	return nil
}

// publishIfDraining hands a run just started on a host that is draining to
// Drains.
func (m *Manager) publishIfDraining(spec LaunchSpec) {
	if m.draining.Load() == 0 {
		return
	}
	m.mu.Lock()
	h := m.hosts[spec.Host]
	drain := h != nil && !h.inService()
	var why string
	if drain {
		why = drainWhy(h)
	}
	m.mu.Unlock()
	if drain {
		m.maint.publishDrains(DrainRequest{Host: spec.Host, TaskIDs: []string{spec.TaskID}, Why: why})
	}
}

// Kill stops a run through the backend.
func (m *Manager) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	return m.backend.Kill(ctx, taskID, grace)
}

// Status asks the backend for a run's last known state.
func (m *Manager) Status(taskID string) (TaskEvent, error) {
	ev, err := m.backend.Status(taskID)
	return CleanEvent(ev), err
}

// Runs lists the runs the backend holds now, or nil when it cannot list
// them (it does not implement RunLister).
func (m *Manager) Runs() []RunInfo {
	if rl, ok := m.backend.(RunLister); ok {
		runs := rl.Runs()
		for i := range runs {
			runs[i].Last = CleanEvent(runs[i].Last)
		}
		return runs
	}
	return nil
}

// Logs opens a run's output.
func (m *Manager) Logs(ctx context.Context, taskID string, opts LogOptions) (io.ReadCloser, error) {
	return m.backend.Logs(ctx, taskID, opts)
}

// ListHosts returns the hosts for the API, with their maintenance state.
func (m *Manager) ListHosts() []*pelotonv1.Host { return m.listHosts(false) }

// ListHostsWithRuns is ListHosts with each host's runs and their usage.
func (m *Manager) ListHostsWithRuns() []*pelotonv1.Host { return m.listHosts(true) }

func (m *Manager) listHosts(withRuns bool) []*pelotonv1.Host {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pelotonv1.Host, 0, len(m.order))
	now := m.now()
	for _, name := range m.order {
		hh := m.hosts[name]
		h := hostProto(hh)
		h.Usage = m.usage.hostUsage(name)
		h.Slack = m.usage.slackLocked(hh, now).ToProto()
		h.Zone, h.OversubscriptionFactor = m.usage.hostAdvice(name, now)
		h.OversubscriptionFactor = hh.capFactor(h.OversubscriptionFactor)
		if withRuns {
			h.Runs = make([]*pelotonv1.HostRun, 0, len(hh.tasks))
			for _, id := range slices.Sorted(maps.Keys(hh.tasks)) {
				t := hh.tasks[id]
				h.Runs = append(h.Runs, &pelotonv1.HostRun{TaskId: id, JobId: t.job, Revocable: t.revocable, Usage: m.usage.runUsage(id),
					Since: timestamppb.New(t.since), Cpu: float64(t.res.MilliCPU) / 1000})
			}
		}
		out = append(out, h)
	}
	return out
}

func hostProto(h *host) *pelotonv1.Host {
	return &pelotonv1.Host{
		Name: h.info.Name, Capacity: h.info.Capacity.ToProto(), Allocated: h.allocated.ToProto(), Revocable: h.revocable.ToProto(),
		Labels: h.info.Labels, Partition: h.info.Partition, State: h.state,
		TaskCount: uint32(len(h.tasks)), MaintenanceMessage: hostMessage(h),
		PartitionState: h.move, TargetPartition: h.target, PartitionMessage: moveMessage(h),
		AgentSettings: h.agentSettings(),
	}
}

// hostMessage is the maintenance message, or says why a host in service
// takes no new work.
func hostMessage(h *host) string {
	switch {
	case h.state != hostUp:
		return maintenanceMessage(h)
	case h.gone:
		return "gone from the backend; waiting for its tasks to end"
	case h.info.Unschedulable && h.info.Why != "":
		return "takes no new tasks: unschedulable in the backend (" + h.info.Why + ")"
	case h.info.Unschedulable:
		return "takes no new tasks: unschedulable in the backend (cordoned or not ready)"
	}
	return ""
}

// What jobmgr reads of the parts, here so that the one value it is given
// has all it uses (jobmgr.Hosts).

// Recovered tells hostmgr that every run placed before a restart of the
// control plane has been re-reserved with Recover, so its view of what each
// host holds is complete. Only then does it mark empty draining hosts
// drained, and it asks again (through Drains) to move the runs of every
// host still draining: the drain that was under way when the process
// stopped goes on. jobmgr calls it once its recovery is done.
func (m *Manager) Recovered() { m.maint.markRecovered() }

// Drains returns the drain requests published since the last call, waiting
// until there is one or ctx ends (then nil). It is a subscription with one
// consumer (jobmgr), which preempts each named run still on the host.
// Requests are made when a host starts draining, when Recovered finds hosts
// still draining, and when a run is launched on a draining host (placed just
// before the drain began).
func (m *Manager) Drains(ctx context.Context) []DrainRequest { return m.maint.nextDrains(ctx) }

// Revoked reports whether run taskID is a revocable run its host agent's
// QoS controller killed (ReasonQoSRevoked).
func (m *Manager) Revoked(taskID string) bool { return m.usage.revoked(taskID) }

// RunUsage is what the last report of its host said of run taskID, or nil.
func (m *Manager) RunUsage(taskID string) *pelotonv1.TaskUsage { return m.usage.runUsage(taskID) }

// Close stops marking hosts drained and stops the backend.
func (m *Manager) Close() error {
	m.stop()
	m.loops.Wait()
	return m.backend.Close()
}
