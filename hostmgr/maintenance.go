package hostmgr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Host maintenance takes hosts out of service safely. An operator starts it
// (HOST_UP -> HOST_DRAINING): from then on the host is offered to no
// placement engine and Commit refuses it, and jobmgr is asked, through
// Drains, to preempt the runs it holds so they run again elsewhere. Once the
// host holds no runs it becomes HOST_DRAINED by itself; completing
// maintenance returns it to HOST_UP, from HOST_DRAINED or, to stop a drain
// early, from HOST_DRAINING.
//
// A backend that schedules maintenance itself (a MaintenanceSource: Mesos'
// maintenance windows) starts and completes it too (maintsource.go); the
// record then says so, and the backend completes only what it started.
//
// Store layout, relative to the store's prefix:
//
//	hosts/<name>/maintenance  the state's name ("HOST_DRAINING", "HOST_DRAINED"),
//	                          then " by=<backend>" if a backend started it;
//	                          absent means HOST_UP
//
// The record is reloaded at Start, so a drain survives a restart of the
// control plane.

// Maintenance is the host manager's part that takes hosts out of service
// and moves them between partitions (partition.go), acts on a backend's
// maintenance schedule (maintsource.go), queues the drain requests jobmgr
// consumes, and keeps the move history (advice.go). Get it with
// Manager.Maintenance. It is safe for concurrent use.
//
// Its changes are serialized by its own lock, mu, held across the store
// transaction of a change; the host table's lock (Manager.mu) is taken only
// to decide and to apply, never across the store, so placement never waits
// for etcd. The records of hosts out of service or moved (records, parts)
// are guarded by the host table's lock, because a host's state in the table
// is applied from them in the same critical section that changes them:
// placement never sees a host whose record and state disagree.
type Maintenance struct {
	hm    *Manager
	log   *slog.Logger
	store store.Store

	// mu serializes maintenance changes: API calls, marking hosts drained,
	// partition moves and the history. Each reads revisions, runs a store
	// transaction without hm.mu, then applies the result under hm.mu. It
	// is the maintenance writers' turn: readers (the host cache, the API's
	// lists) take only hm.mu, which no store call is made under. A method
	// named ...InTurn needs mt.mu held; one named ...Locked, here as
	// everywhere in hostmgr, needs hm.mu.
	mu sync.Mutex
	// records holds the persisted record of every host not HOST_UP, by
	// name, including hosts the backend does not report (yet): a host that
	// comes back is still in maintenance. Guarded by hm.mu.
	records map[string]maintRecord
	// parts holds the persisted partition record of every host hostmgr
	// has one for (partition.go), like records. Guarded by hm.mu.
	parts map[string]partRecord
	// recovered is set by Recovered. Guarded by hm.mu.
	recovered bool

	// maintWake wakes the maintenance loop.
	maintWake chan struct{}
	drainMu   sync.Mutex
	drainQ    []DrainRequest
	drainWake chan struct{}
	// srcWant is what a MaintenanceSource said last of each host, until
	// hostmgr acted on it (maintsource.go). Guarded by srcMu.
	srcMu   sync.Mutex
	srcWant map[string]bool
	// history is the partition move history, oldest first (advice.go).
	histMu  sync.Mutex
	history []moveRecord
}

func newMaintenance(hm *Manager, st store.Store) *Maintenance {
	return &Maintenance{hm: hm, log: hm.log, store: st,
		records: map[string]maintRecord{}, parts: map[string]partRecord{},
		maintWake: make(chan struct{}, 1), drainWake: make(chan struct{}, 1), srcWant: map[string]bool{}}
}

type hostState = pelotonv1.HostState

const (
	hostUp       = pelotonv1.HostState_HOST_UP
	hostDraining = pelotonv1.HostState_HOST_DRAINING
	hostDrained  = pelotonv1.HostState_HOST_DRAINED
	hostDown     = pelotonv1.HostState_HOST_DOWN
)

// maintenanceTransitions is the one table of legal host state changes.
// HOST_DOWN has no edges: maintenance neither enters nor leaves it (it is
// reserved for hosts a backend reports gone).
var maintenanceTransitions = fsm.New("host maintenance",
	fsm.From(hostUp).To(hostDraining),
	fsm.From(hostDraining).To(hostDrained, hostUp),
	fsm.From(hostDrained).To(hostUp),
	fsm.From(hostDown).To(),
)

// canChangeMaintenance reports whether a maintenance request may take a host
// from from to to. The table allows staying (fsm's rule), but here a
// request for the state a host is already in is refused: draining a
// draining host or completing an up one is a mistake worth telling the
// operator about.
func canChangeMaintenance(from, to hostState) bool {
	return from != to && maintenanceTransitions.Allowed(from, to)
}

func maintenanceKey(host string) string { return "hosts/" + host + "/maintenance" }

// maintRecord is a host's persisted maintenance state and its store revision.
type maintRecord struct {
	state hostState
	rev   int64
	// by names the backend that started the maintenance ("" for an
	// operator).
	by string
}

// DrainRequest asks jobmgr to move runs off a host in maintenance. TaskIDs
// are the runs the host held when the request was made; some may have ended
// or not be launched yet by the time jobmgr reads it (a run launched later
// on a draining host gets a request of its own).
type DrainRequest struct {
	Host    string
	TaskIDs []string
	// Why says what the drain is for when it is not maintenance: "to move
	// to partition stateless". Empty for maintenance.
	Why string
}

// maintenanceTxnTimeout bounds one store transaction of a maintenance change,
// so a slow etcd cannot hold maintenance (and the API call) for ever.
const maintenanceTxnTimeout = 10 * time.Second

// StartMaintenance takes hosts out of service: each goes HOST_DRAINING (and
// HOST_DRAINED at once if it holds no runs). The whole request is checked
// before anything changes, and the change is one store transaction: every
// host changes or none does. It returns the hosts after the change.
func (mt *Maintenance) StartMaintenance(ctx context.Context, names []string) ([]*pelotonv1.Host, error) {
	return mt.changeMaintenance(ctx, names, hostDraining, "")
}

// CompleteMaintenance returns hosts to service (HOST_UP) from HOST_DRAINED,
// or from HOST_DRAINING to end a drain early; runs already preempted stay
// where they went. Every host changes or none does.
func (mt *Maintenance) CompleteMaintenance(ctx context.Context, names []string) ([]*pelotonv1.Host, error) {
	return mt.changeMaintenance(ctx, names, hostUp, "")
}

// changeMaintenance moves hosts to state to; by names the backend that
// starts or completes it ("" for an operator, see maintRecord).
func (mt *Maintenance) changeMaintenance(ctx context.Context, names []string, to hostState, by string) ([]*pelotonv1.Host, error) {
	if len(names) == 0 {
		return nil, apierr.Invalid("hosts", "name at least one host")
	}
	if mt.store != nil && len(names) > mt.store.MaxTxnOps() {
		return nil, apierr.Invalid("hosts", "at most %d hosts per request, got %d", mt.store.MaxTxnOps(), len(names))
	}
	action := "starting maintenance"
	if to == hostUp {
		action = "completing maintenance"
	}
	// mt.mu keeps every other maintenance change out between reading the
	// revisions here and applying the transaction's result below; mt.hm.mu is
	// not held across the transaction, so placement never waits for etcd.
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.hm.mu.Lock()
	ops := make([]store.Op, 0, len(names))
	seen := make(map[string]int, len(names))
	for i, name := range names {
		field := fmt.Sprintf("hosts[%d]", i)
		if name == "" {
			mt.hm.mu.Unlock()
			return nil, apierr.Invalid(field, "required")
		}
		if j, dup := seen[name]; dup {
			mt.hm.mu.Unlock()
			return nil, apierr.Invalid(field, "host %s is already hosts[%d]", name, j)
		}
		seen[name] = i
		h, ok := mt.hm.hosts[name]
		if !ok {
			mt.hm.mu.Unlock()
			return nil, apierr.NotFound("%s: host %s does not exist", field, name)
		}
		if to == hostDraining && h.moving() {
			mt.hm.mu.Unlock()
			return nil, apierr.FailedPrecondition("%s: host %s is moving to partition %s; %s waits for the move to finish", field, name, h.target, action)
		}
		if !canChangeMaintenance(h.state, to) {
			mt.hm.mu.Unlock()
			return nil, apierr.FailedPrecondition("%s: host %s is %s; %s needs %s", field, name, h.state, action,
				strings.Join(fsm.Names(maintenanceTransitions.Sources(to)), " or "))
		}
		ops = append(ops, mt.maintOpLocked(name, to, by))
	}
	mt.hm.mu.Unlock()

	rev, err := mt.persist(ctx, ops)
	if err != nil {
		mt.resync(names)
		if errors.Is(err, store.ErrConflict) {
			return nil, apierr.Aborted("hosts: maintenance state changed concurrently; retry")
		}
		return nil, apierr.Unavailable("store host maintenance: %v", err)
	}
	mt.hm.mu.Lock()
	var drains []DrainRequest
	for _, name := range names {
		if d, ok := mt.setStateLocked(name, to, rev, by); ok {
			drains = append(drains, d)
		}
	}
	mt.hm.recountLocked()
	mt.hm.mu.Unlock()
	mt.log.Info(action, "hosts", names, "by", cmp.Or(by, "operator"))
	mt.publishDrains(drains...)
	if to == hostDraining {
		// Hosts that hold nothing are drained already; say so in the answer.
		if err := mt.settleDrainedInTurn(ctx); err != nil {
			mt.log.Warn("mark drained hosts; will retry", "err", err)
			mt.retrySettle()
		}
	}
	return mt.hostProtos(names), nil
}

// maintOpLocked is the store write that records host name in state to,
// started by by, compared against the revision memory holds for it.
func (mt *Maintenance) maintOpLocked(name string, to hostState, by string) store.Op {
	rev := mt.records[name].rev // 0 (MustNotExist) when there is no record
	if to == hostUp {
		return store.Delete(maintenanceKey(name), rev)
	}
	v := to.String()
	if by != "" {
		v += " by=" + by
	}
	return store.Put(maintenanceKey(name), []byte(v), rev)
}

// persist writes ops in one transaction with a bounded timeout that a
// cancelled request does not cut short (a transaction abandoned half-way
// would leave memory and store disagreeing). Without a store it does nothing.
func (mt *Maintenance) persist(ctx context.Context, ops []store.Op) (int64, error) {
	if mt.store == nil || len(ops) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maintenanceTxnTimeout)
	defer cancel()
	return mt.store.Txn(ctx, ops...)
}

// resync re-reads the records of hosts after a failed transaction, whose
// outcome may be unknown (a timeout after etcd applied it), so memory
// follows what the store says. Caller holds mt.mu.
func (mt *Maintenance) resync(names []string) {
	if mt.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), maintenanceTxnTimeout)
	defer cancel()
	var drains []DrainRequest
	for _, name := range names {
		kv, err := mt.store.Get(ctx, maintenanceKey(name))
		st, rev, by := hostUp, int64(0), ""
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			mt.log.Warn("re-read host maintenance state", "host", name, "err", err)
			continue
		default:
			if st, by, err = parseMaintenance(kv); err != nil {
				mt.log.Warn("re-read host maintenance state", "host", name, "err", err)
				continue
			}
			rev = kv.Revision
		}
		mt.hm.mu.Lock()
		changed := mt.stateOfLocked(name) != st
		d, ok := mt.setStateLocked(name, st, rev, by)
		mt.hm.recountLocked()
		mt.hm.mu.Unlock()
		if ok && changed {
			drains = append(drains, d)
		}
	}
	mt.publishDrains(drains...)
}

// setStateLocked moves host name to st (already persisted at rev, started
// by by) in memory and, when it starts draining with runs on it, returns
// the drain request to publish once hm.mu is released. Call recountLocked
// after the last change.
func (mt *Maintenance) setStateLocked(name string, st hostState, rev int64, by string) (DrainRequest, bool) {
	if st == hostUp {
		delete(mt.records, name)
		by = ""
	} else {
		mt.records[name] = maintRecord{state: st, rev: rev, by: by}
	}
	h := mt.hm.hosts[name]
	if h == nil {
		return DrainRequest{}, false
	}
	h.state, h.maintBy = st, by
	if st != hostDraining {
		h.drainNote = ""
	}
	if st != hostDraining || len(h.tasks) == 0 {
		return DrainRequest{}, false
	}
	return DrainRequest{Host: name, TaskIDs: taskIDsLocked(h)}, true
}

func taskIDsLocked(h *host) []string {
	ids := make([]string, 0, len(h.tasks))
	for id := range h.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// settleDrained marks every draining host that holds no runs HOST_DRAINED.
// It also carries partition moves of hosts that became empty on.
func (mt *Maintenance) settleDrained(ctx context.Context) error {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	return errors.Join(mt.settleDrainedInTurn(ctx), mt.settleMovesInTurn(ctx))
}

// settleDrainedInTurn is settleDrained for a caller holding mt.mu. It does
// nothing before Recovered: until then a host whose runs are not re-reserved
// yet looks empty when it is not.
func (mt *Maintenance) settleDrainedInTurn(ctx context.Context) error {
	mt.hm.mu.Lock()
	if !mt.recovered || mt.hm.draining.Load() == 0 {
		mt.hm.mu.Unlock()
		return nil
	}
	var names []string
	var ops []store.Op
	for _, name := range mt.hm.order {
		if h := mt.hm.hosts[name]; h.state == hostDraining && len(h.tasks) == 0 {
			names = append(names, name)
			ops = append(ops, mt.maintOpLocked(name, hostDrained, mt.records[name].by))
		}
	}
	mt.hm.mu.Unlock()
	// Hosts are independent here: write them in transactions as large as
	// the store takes, so one drain of many hosts is not one huge request.
	step := len(ops)
	if mt.store != nil {
		step = mt.store.MaxTxnOps()
	}
	for i := 0; i < len(ops); i += step {
		j := min(i+step, len(ops))
		rev, err := mt.persist(ctx, ops[i:j])
		if err != nil {
			mt.resync(names[i:j])
			return fmt.Errorf("hostmgr: mark %d hosts drained: %w", j-i, err)
		}
		mt.hm.mu.Lock()
		for _, name := range names[i:j] {
			// Nothing can land on a draining host (not offered, Commit
			// refuses it), so it is still empty.
			if canChangeMaintenance(mt.hm.hosts[name].state, hostDrained) {
				mt.setStateLocked(name, hostDrained, rev, mt.records[name].by)
			}
		}
		mt.hm.recountLocked()
		mt.hm.mu.Unlock()
		mt.log.Info("hosts drained", "hosts", names[i:j])
	}
	return nil
}

// maintLoop marks hosts drained when ReleaseTask or Recovered says one may
// have become empty. It runs until ctx ends (Close ends it too).
func (mt *Maintenance) maintLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-mt.maintWake:
		}
		if err := mt.settleDrained(ctx); err != nil && ctx.Err() == nil {
			mt.log.Warn("mark drained hosts; will retry", "err", err)
			mt.retrySettle()
		}
		if !mt.applySourceMaintenance(ctx) && ctx.Err() == nil {
			mt.retrySettle()
		}
	}
}

func (mt *Maintenance) wakeMaint() {
	select {
	case mt.maintWake <- struct{}{}:
	default:
	}
}

// retrySettle tries again later after a store failure.
func (mt *Maintenance) retrySettle() { time.AfterFunc(time.Second, mt.wakeMaint) }

// markRecovered is Manager.Recovered: from now on empty draining hosts are
// marked drained, and the runs of every host still draining are asked
// again to move.
func (mt *Maintenance) markRecovered() {
	mt.hm.mu.Lock()
	mt.recovered = true
	var drains []DrainRequest
	for _, name := range mt.hm.order {
		if h := mt.hm.hosts[name]; h.draining() && len(h.tasks) > 0 {
			if ids := mt.drainNowLocked(h); len(ids) > 0 {
				drains = append(drains, DrainRequest{Host: name, TaskIDs: ids, Why: drainWhy(h)})
			}
		}
	}
	mt.hm.mu.Unlock()
	mt.publishDrains(drains...)
	mt.wakeMaint()
}

// publishDrains queues drain requests for Drains. It never blocks.
func (mt *Maintenance) publishDrains(ds ...DrainRequest) {
	if len(ds) == 0 {
		return
	}
	mt.drainMu.Lock()
	mt.drainQ = append(mt.drainQ, ds...)
	mt.drainMu.Unlock()
	select {
	case mt.drainWake <- struct{}{}:
	default:
	}
}

// nextDrains is Manager.Drains.
func (mt *Maintenance) nextDrains(ctx context.Context) []DrainRequest {
	for {
		mt.drainMu.Lock()
		out := mt.drainQ
		mt.drainQ = nil
		mt.drainMu.Unlock()
		if len(out) > 0 {
			return out
		}
		select {
		case <-ctx.Done():
			return nil
		case <-mt.drainWake:
		}
	}
}

// loadMaintenance reads every host's persisted maintenance state.
func (mt *Maintenance) loadMaintenance(ctx context.Context) error {
	if mt.store == nil {
		return nil
	}
	kvs, err := mt.store.List(ctx, "hosts/")
	if err != nil {
		return fmt.Errorf("hostmgr: load host maintenance: %w", err)
	}
	maint := map[string]maintRecord{}
	parts := map[string]partRecord{}
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(kv.Key, "hosts/")
		if !ok {
			continue
		}
		if name, ok := strings.CutSuffix(rest, "/partition"); ok {
			r, err := parsePartition(kv)
			if err != nil {
				// Without its record the host is in the partition its
				// backend reports, settled: a move it was in is over.
				if _, err := quarantine.Move(ctx, mt.store, mt.log, kv, err); err != nil {
					return fmt.Errorf("hostmgr: %w", err)
				}
				continue
			}
			parts[name] = r
			continue
		}
		name, ok := strings.CutSuffix(rest, "/maintenance")
		if !ok {
			continue // another per-host record
		}
		st, by, err := parseMaintenance(kv)
		if err != nil {
			// Only a host out of service has a record, so it stays out:
			// draining (drained once empty), as an operator's, until an
			// operator completes its maintenance.
			_, rev, err := quarantine.Replace(ctx, mt.store, mt.log, kv, err, []byte(hostDraining.String()))
			if err != nil {
				return fmt.Errorf("hostmgr: %w", err)
			}
			st, by, kv.Revision = hostDraining, "", rev
		}
		maint[name] = maintRecord{state: st, rev: kv.Revision, by: by}
	}
	mt.hm.mu.Lock()
	defer mt.hm.mu.Unlock()
	maps.Copy(mt.records, maint)
	maps.Copy(mt.parts, parts)
	if len(mt.records) > 0 {
		mt.log.Info("hosts in maintenance", "count", len(mt.records))
	}
	return nil
}

// parseMaintenance reads a maintenance record: the state, and the backend
// that started it ("" for an operator).
func parseMaintenance(kv store.KV) (hostState, string, error) {
	name, rest, _ := strings.Cut(string(kv.Value), " ")
	by, hasBy := strings.CutPrefix(rest, "by=")
	v, ok := pelotonv1.HostState_value[name]
	if st := hostState(v); ok && (st == hostDraining || st == hostDrained) && (rest == "" || hasBy && by != "") {
		return st, by, nil
	}
	return 0, "", fmt.Errorf("hostmgr: %s: unknown maintenance state %q", kv.Key, kv.Value)
}

// stateOfLocked is a host's maintenance state by name.
func (mt *Maintenance) stateOfLocked(name string) hostState {
	if r, ok := mt.records[name]; ok {
		return r.state
	}
	return hostUp
}

// recountLocked counts hosts by state after a change: the draining count
// that lets Launch skip its check while nothing drains, and the
// peloton_hosts{state}, peloton_hosts_moving and the per-host gauges.
func (m *Manager) recountLocked() {
	var n [5]int
	moving := 0
	for _, h := range m.hosts {
		if int(h.state) < len(n) {
			n[h.state]++
		}
		if h.moving() {
			moving++
		}
	}
	m.draining.Store(int32(n[hostDraining] + moving))
	metrics.HostsMoving.Set(float64(moving))
	m.hostGauged.update(m.hosts)
	for _, st := range []hostState{hostUp, hostDraining, hostDrained, hostDown} {
		metrics.Hosts.WithLabelValues(st.String()).Set(float64(n[st]))
	}
	// Hosts out of service are out of the capacity admission divides, so
	// pools are not promised room that no host will give them. resmgr never
	// calls into hostmgr, so calling it under m.mu cannot deadlock.
	if m.onCapacity != nil {
		m.onCapacity(capacityByPartition(m.hosts))
	}
}

// maintenanceMessage says what maintenance is doing on a host.
func maintenanceMessage(h *host) string {
	switch h.state {
	case hostDraining:
		msg := "draining: 1 task left"
		if n := len(h.tasks); n != 1 {
			msg = fmt.Sprintf("draining: %d tasks left", n)
		}
		if h.drainNote != "" {
			msg += "; " + h.drainNote
		}
		if h.maintBy != "" {
			msg += "; started by the " + h.maintBy + " backend's maintenance schedule" + whyNote(h)
		}
		return msg
	case hostDrained:
		if h.maintBy != "" {
			return "drained: holds no tasks; the " + h.maintBy + " backend returns it to service when its maintenance window ends" + whyNote(h)
		}
		return "drained: holds no tasks; complete maintenance to return it to service"
	}
	return ""
}

// whyNote is " (<why>)" when the backend says why the host takes no new
// work, or "".
func whyNote(h *host) string {
	if h.info.Why == "" {
		return ""
	}
	return " (" + h.info.Why + ")"
}

// SetDrainNote records what holds up the drain of a host (a stateful
// instance waiting for its owner, a service waiting for its SLA), shown in
// its maintenance message while it drains; "" clears it.
func (m *Manager) SetDrainNote(host, note string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.hosts[host]; ok {
		h.drainNote = note
	}
}

// hostProtos renders the named hosts, in the given order.
func (mt *Maintenance) hostProtos(names []string) []*pelotonv1.Host {
	mt.hm.mu.Lock()
	defer mt.hm.mu.Unlock()
	out := make([]*pelotonv1.Host, 0, len(names))
	for _, name := range names {
		if h, ok := mt.hm.hosts[name]; ok {
			out = append(out, hostProto(h))
		}
	}
	return out
}

// Draining reports whether host is HOST_DRAINING or moving to another
// partition with runs still to move: a drain request read after its host
// returned to service is stale and must move nothing.
func (m *Manager) Draining(host string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.hosts[host]
	return h != nil && h.draining()
}
