package hostmgr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// HostOffer is a leased host and what it has free.
type HostOffer struct {
	Name      string
	Free      resources.Resources
	Capacity  resources.Resources
	Labels    map[string]string
	Partition string
}

// Assignment reserves resources for one task on one leased host.
type Assignment struct {
	TaskID    string
	Host      string
	Resources resources.Resources
}

// ErrLeaseExpired is returned by Commit when the lease is no longer held.
var ErrLeaseExpired = errors.New("hostmgr: lease expired or unknown")

// ErrDoesNotFit is returned by Commit when a task no longer fits its host.
var ErrDoesNotFit = errors.New("hostmgr: task does not fit the host")

type host struct {
	info      HostInfo
	allocated resources.Resources
	tasks     map[string]resources.Resources
	lease     string
	leaseEnd  time.Time
}

type lease struct {
	id    string
	hosts []string
	end   time.Time
}

// Manager is the host manager. It is safe for concurrent use.
type Manager struct {
	backend  Backend
	log      *slog.Logger
	now      func() time.Time
	leaseTTL time.Duration

	mu     sync.Mutex
	hosts  map[string]*host
	order  []string
	leases map[string]*lease
	// taskHost maps a run's task ID to the host holding its resources.
	taskHost map[string]string

	events chan TaskEvent
}

// Options tunes a Manager.
type Options struct {
	Logger *slog.Logger
	// LeaseTTL is how long a placement engine may hold hosts (default 10s).
	LeaseTTL time.Duration
	// EventBuffer is the depth of the event subscription (default 65536).
	EventBuffer int
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
	return &Manager{
		backend: b, log: opts.Logger.With("component", "hostmgr"), now: time.Now, leaseTTL: opts.LeaseTTL,
		hosts: map[string]*host{}, leases: map[string]*lease{}, taskHost: map[string]string{},
		events: make(chan TaskEvent, opts.EventBuffer),
	}
}

// Start starts the backend and loads its hosts.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.backend.Start(ctx, m.onEvent); err != nil {
		return fmt.Errorf("hostmgr: start %s backend: %w", m.backend.Name(), err)
	}
	m.refreshHosts()
	return nil
}

func (m *Manager) refreshHosts() {
	infos := m.backend.Hosts()
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, hi := range infos {
		seen[hi.Name] = true
		if h, ok := m.hosts[hi.Name]; ok {
			h.info = hi
			continue
		}
		m.hosts[hi.Name] = &host{info: hi, tasks: map[string]resources.Resources{}}
	}
	for name := range m.hosts {
		if !seen[name] {
			delete(m.hosts, name)
		}
	}
	m.order = m.order[:0]
	for name := range m.hosts {
		m.order = append(m.order, name)
	}
	sort.Strings(m.order)
	metrics.Hosts.WithLabelValues("HOST_UP").Set(float64(len(m.hosts)))
}

// onEvent frees a finished run's resources, then passes the event on.
func (m *Manager) onEvent(ev TaskEvent) {
	switch ev.State {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST:
		m.ReleaseTask(ev.TaskID)
	}
	m.events <- ev
}

// Events is the stream of task events from the backend. There is one
// consumer (jobmgr); events of one task arrive in order.
func (m *Manager) Events() <-chan TaskEvent { return m.events }

// Capacity is the sum of all hosts' capacity.
func (m *Manager) Capacity() resources.Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c resources.Resources
	for _, h := range m.hosts {
		c = c.Add(h.info.Capacity)
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

// AcquireHosts leases up to max hosts with free resources to the caller. The
// hosts are offered to nobody else until Commit, ReleaseLease or expiry.
func (m *Manager) AcquireHosts(max int) (string, []HostOffer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.expireLeasesLocked(now)
	id := newLeaseID()
	l := &lease{id: id, end: now.Add(m.leaseTTL)}
	var offers []HostOffer
	for _, name := range m.order {
		if len(offers) >= max {
			break
		}
		h := m.hosts[name]
		if h.lease != "" {
			continue
		}
		free := h.info.Capacity.Sub(h.allocated)
		if free.MilliCPU == 0 && free.MemoryMB == 0 {
			continue
		}
		h.lease, h.leaseEnd = id, l.end
		l.hosts = append(l.hosts, name)
		offers = append(offers, HostOffer{Name: name, Free: free, Capacity: h.info.Capacity, Labels: h.info.Labels, Partition: h.info.Partition})
	}
	if len(offers) == 0 {
		return "", nil
	}
	m.leases[id] = l
	return id, offers
}

func (m *Manager) expireLeasesLocked(now time.Time) {
	for id, l := range m.leases {
		if now.After(l.end) {
			m.releaseLeaseLocked(id)
		}
	}
}

func (m *Manager) releaseLeaseLocked(id string) {
	l, ok := m.leases[id]
	if !ok {
		return
	}
	for _, name := range l.hosts {
		if h, ok := m.hosts[name]; ok && h.lease == id {
			h.lease = ""
		}
	}
	delete(m.leases, id)
}

// ReleaseLease gives leased hosts back without using them.
func (m *Manager) ReleaseLease(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLeaseLocked(id)
}

// Commit reserves resources for assignments on the lease's hosts and ends the
// lease. It re-checks every fit, so a decision made on a stale view cannot
// over-commit a host: either every assignment is reserved or none is.
func (m *Manager) Commit(leaseID string, as []Assignment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[leaseID]
	if !ok || m.now().After(l.end) {
		m.releaseLeaseLocked(leaseID)
		return ErrLeaseExpired
	}
	defer m.releaseLeaseLocked(leaseID)
	want := map[string]resources.Resources{}
	for _, a := range as {
		h, ok := m.hosts[a.Host]
		if !ok || h.lease != leaseID {
			return fmt.Errorf("%w: host %s is not in lease %s", ErrLeaseExpired, a.Host, leaseID)
		}
		if _, dup := m.taskHost[a.TaskID]; dup {
			return fmt.Errorf("hostmgr: task %s already holds resources", a.TaskID)
		}
		want[a.Host] = want[a.Host].Add(a.Resources)
	}
	for name, r := range want {
		h := m.hosts[name]
		if !h.allocated.Add(r).FitsIn(h.info.Capacity) {
			return fmt.Errorf("%w: %s needs %s, has %s free", ErrDoesNotFit, name, r, h.info.Capacity.Sub(h.allocated))
		}
	}
	for _, a := range as {
		h := m.hosts[a.Host]
		h.allocated = h.allocated.Add(a.Resources)
		h.tasks[a.TaskID] = a.Resources
		m.taskHost[a.TaskID] = a.Host
	}
	return nil
}

// Recover re-reserves resources for a run that was already placed before a
// restart of the control plane.
func (m *Manager) Recover(taskID, hostName string, r resources.Resources) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hosts[hostName]
	if !ok {
		return
	}
	if _, dup := m.taskHost[taskID]; dup {
		return
	}
	h.allocated = h.allocated.Add(r)
	h.tasks[taskID] = r
	m.taskHost[taskID] = hostName
}

// ReleaseTask frees a run's resources. Unknown runs are ignored.
func (m *Manager) ReleaseTask(taskID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.taskHost[taskID]
	if !ok {
		return
	}
	delete(m.taskHost, taskID)
	if h, ok := m.hosts[name]; ok {
		h.allocated = h.allocated.Sub(h.tasks[taskID])
		delete(h.tasks, taskID)
	}
}

// Launch starts a placed run through the backend.
func (m *Manager) Launch(ctx context.Context, spec LaunchSpec) error {
	return m.backend.Launch(ctx, spec)
}

// Kill stops a run through the backend.
func (m *Manager) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	return m.backend.Kill(ctx, taskID, grace)
}

// Status asks the backend for a run's last known state.
func (m *Manager) Status(taskID string) (TaskEvent, error) { return m.backend.Status(taskID) }

// Logs opens a run's output.
func (m *Manager) Logs(ctx context.Context, taskID string, stream pelotonv1.LogStream, follow bool) (io.ReadCloser, error) {
	return m.backend.Logs(ctx, taskID, stream, follow)
}

// ListHosts returns the hosts for the API.
func (m *Manager) ListHosts() []*pelotonv1.Host {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pelotonv1.Host, 0, len(m.order))
	for _, name := range m.order {
		h := m.hosts[name]
		out = append(out, &pelotonv1.Host{
			Name: name, Capacity: h.info.Capacity.ToProto(), Allocated: h.allocated.ToProto(),
			Labels: h.info.Labels, Partition: h.info.Partition, State: pelotonv1.HostState_HOST_UP,
			TaskCount: uint32(len(h.tasks)),
		})
	}
	return out
}

// Close stops the backend.
func (m *Manager) Close() error { return m.backend.Close() }
