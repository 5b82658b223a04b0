package hostmgr

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/sanitize"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Partitions are hostmgr state. A host's partition (batch, stateless, or any
// name an operator chooses) is what hostmgr's record says; a host hostmgr has
// no record of is in the partition its backend reports. An operator moves a
// host (MoveHost): the host goes PARTITION_MOVING, is offered to no
// placement engine, and its runs are drained through the same requests as
// maintenance (Drains), so jobmgr moves services one SLA grant at a time and
// leaves stateful instances where they are, saying so. Once the host is
// empty it goes PARTITION_MOVE_DRAINED, the backend is told its new partition
// (PartitionApplier), and it settles in the new partition, back in service.
//
// Store layout, relative to the store's prefix:
//
//	hosts/<name>/partition  JSON {"partition", "state", "target"}: the host's
//	                        partition and, while it moves, where to
//
// Every step is written (compare-and-swap on the record's revision) before
// memory changes, and the records are reloaded at Start, so a move cut short
// by a restart goes on from where it was.

type moveState = pelotonv1.PartitionMoveState

const (
	partSettled = pelotonv1.PartitionMoveState_PARTITION_SETTLED
	partMoving  = pelotonv1.PartitionMoveState_PARTITION_MOVING
	partDrained = pelotonv1.PartitionMoveState_PARTITION_MOVE_DRAINED
)

// partitionTransitions is the one table of a move's steps.
var partitionTransitions = fsm.New("partition move",
	fsm.From(partSettled).To(partMoving),
	fsm.From(partMoving).To(partDrained, partSettled), // settled: cancelled
	fsm.From(partDrained).To(partSettled),
)

// PartitionApplier is implemented by backends that keep a host's partition
// in their own terms (a Kubernetes node label, an attribute of a simulated
// or local host), so that what they report after a move agrees with
// hostmgr. ApplyPartition must be idempotent: a move resumed after a
// restart may apply the same partition again.
type PartitionApplier interface {
	ApplyPartition(ctx context.Context, host, partition string) error
}

// partitionName is what a partition may be called: a Kubernetes label value
// in lower case, so every backend can carry it unchanged.
var partitionName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$`)

// ValidatePartition says why name cannot be a partition's name, or nil.
func ValidatePartition(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case !partitionName.MatchString(name):
		return fmt.Errorf("%q is not a partition name: use at most 63 lower-case letters, digits, '-', '_' and '.', starting and ending with a letter or digit", name)
	}
	return nil
}

func partitionKey(host string) string { return "hosts/" + host + "/partition" }

// partRecord is a host's persisted partition and its store revision.
type partRecord struct {
	Partition string `json:"partition"`
	State     string `json:"state"`
	Target    string `json:"target,omitempty"`
	// Profile is the partition profile the host took when it last
	// settled (profile.go); nil: none. A move under way keeps it until
	// the host settles again.
	Profile *appliedProfile `json:"profile,omitempty"`
	// DrainBy ends a move's drain window (Unix milliseconds; 0: none):
	// until then the moving host's runs may finish where they are.
	DrainBy int64 `json:"drain_by_ms,omitempty"`
	// Finish, with DrainBy, are the runs left to finish in the window;
	// the others are drained at once (empty: all are left).
	Finish []string `json:"finish,omitempty"`
	state  moveState
	rev    int64
}

func parsePartition(kv store.KV) (partRecord, error) {
	var r partRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return r, fmt.Errorf("hostmgr: %s: %w", kv.Key, err)
	}
	v, ok := pelotonv1.PartitionMoveState_value[r.State]
	r.state, r.rev = moveState(v), kv.Revision
	switch {
	case !ok || !partitionTransitions.Has(r.state):
		return r, fmt.Errorf("hostmgr: %s: unknown partition move state %q", kv.Key, r.State)
	case ValidatePartition(r.Partition) != nil:
		return r, fmt.Errorf("hostmgr: %s: bad partition %q", kv.Key, r.Partition)
	case (r.state == partSettled) != (r.Target == ""):
		return r, fmt.Errorf("hostmgr: %s: state %s with target %q", kv.Key, r.State, r.Target)
	case r.Profile != nil && len(r.Profile.Profile.validate("profile")) > 0:
		return r, fmt.Errorf("hostmgr: %s: %w", kv.Key, errors.Join(r.Profile.Profile.validate("profile")...))
	}
	return r, nil
}

// partOpLocked is the store write that records r for host name, compared
// against the revision memory holds.
func (mt *Maintenance) partOpLocked(name string, r partRecord) store.Op {
	r.State = r.state.String()
	b, _ := json.Marshal(r) // a struct of strings always marshals
	return store.Put(partitionKey(name), b, mt.parts[name].rev)
}

// setMoveLocked records r (persisted at rev) for host name and applies it to
// the host, if hostmgr sees it. When the host starts moving with runs on it,
// it returns the drain request to publish once hm.mu is released. Call
// recountLocked after the last change.
func (mt *Maintenance) setMoveLocked(name string, r partRecord, rev int64) (DrainRequest, bool) {
	r.rev = rev
	mt.parts[name] = r
	h := mt.hm.hosts[name]
	if h == nil {
		return DrainRequest{}, false
	}
	mt.applyPartRecordLocked(h)
	if r.state != partMoving || len(h.tasks) == 0 {
		return DrainRequest{}, false
	}
	ids := mt.drainNowLocked(h)
	if len(ids) == 0 {
		return DrainRequest{}, false
	}
	return DrainRequest{Host: name, TaskIDs: ids, Why: drainWhy(h)}, true
}

// drainWhy is DrainRequest.Why for a host that drains.
func drainWhy(h *host) string {
	if h.move == partMoving {
		return "to move to partition " + h.target
	}
	return ""
}

// applyPartRecordLocked makes h's partition and move state what hostmgr's
// record says; without a record the backend's report stands.
func (mt *Maintenance) applyPartRecordLocked(h *host) {
	r, ok := mt.parts[h.info.Name]
	if labels := overlayLabels(h.own, r.Profile); !sameLabels(h.info.Labels, labels) {
		h.info.Labels = labels
		mt.hm.classesStale = true
	}
	h.profile = r.Profile
	if !ok {
		h.move, h.target = partSettled, ""
		return
	}
	if h.info.Partition != r.Partition {
		h.info.Partition = r.Partition
		mt.hm.classesStale = true
	}
	h.move, h.target = r.state, r.Target
	mt.armDrainWindowLocked(h, r)
	if r.state == partSettled {
		// What held the move up is history; a later drain says its own.
		h.moveNote = ""
		if h.state != hostDraining {
			h.drainNote = ""
		}
	}
}

// MoveHost starts moving host name to partition: it goes PARTITION_MOVING
// (and on to the new partition at once if it holds no runs). The host must
// be in service and not moving already. It returns the host after the
// change.
func (mt *Maintenance) MoveHost(ctx context.Context, name, partition, reason string) (*pelotonv1.Host, error) {
	return mt.MoveHostDrain(ctx, name, partition, reason, 0, nil)
}

// MoveHostDrain is MoveHost with a drain window (movedrain.go): the host
// takes no new work at once, but its runs are drained only when window
// has passed; those that end before then lose nothing. finish, if not
// empty, names the runs left to the window: the others are drained at once.
func (mt *Maintenance) MoveHostDrain(ctx context.Context, name, partition, reason string, window time.Duration, finish []string) (*pelotonv1.Host, error) {
	if name == "" {
		return nil, apierr.Invalid("host", "required")
	}
	if err := ValidatePartition(partition); err != nil {
		return nil, apierr.Invalid("partition", "%v", err)
	}
	if len(reason) > moveReasonMax {
		return nil, apierr.Invalid("reason", "longer than %d bytes", moveReasonMax)
	}
	if err := checkDrainWindow(window, finish); err != nil {
		return nil, err
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.hm.mu.Lock()
	h, ok := mt.hm.hosts[name]
	switch {
	case !ok:
		mt.hm.mu.Unlock()
		return nil, apierr.NotFound("host: host %s does not exist", name)
	case h.state != hostUp:
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("host: host %s is %s; complete its maintenance before moving it", name, h.state)
	case h.move != partSettled:
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("host: host %s is already moving to partition %s", name, h.target)
	case h.info.Partition == partition:
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("partition: host %s is already in partition %s", name, partition)
	}
	if err := partitionTransitions.Check(h.move, partMoving); err != nil {
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("host: %v", err)
	}
	now := mt.hm.now()
	r := partRecord{Partition: h.info.Partition, Target: partition, state: partMoving, Profile: h.profile}
	if window > 0 && len(h.tasks) > 0 {
		r.DrainBy, r.Finish = now.Add(window).UnixMilli(), finishing(h, finish)
	}
	op := mt.partOpLocked(name, r)
	mt.hm.mu.Unlock()

	hist, commit := mt.historyOps(moveRecord{Host: name, From: r.Partition, To: partition, Reason: reason, State: recordStarted, Time: now})
	rev, err := mt.persist(ctx, append([]store.Op{op}, hist...))
	if err == nil {
		commit()
	}
	if err != nil {
		mt.resyncPartition(name)
		if errors.Is(err, store.ErrConflict) {
			return nil, apierr.Aborted("host: partition of %s changed concurrently; retry", name)
		}
		return nil, apierr.Unavailable("store host partition: %v", err)
	}
	mt.hm.mu.Lock()
	d, drain := mt.setMoveLocked(name, r, rev)
	mt.hm.recountLocked()
	mt.hm.mu.Unlock()
	mt.log.Info("host partition move started", "host", name, "from", r.Partition, "to", partition)
	metrics.HostMoves.WithLabelValues("started").Inc()
	if drain {
		mt.publishDrains(d)
	}
	// A host that holds nothing moves at once; say so in the answer.
	if err := mt.settleMovesInTurn(ctx); err != nil {
		mt.log.Warn("finish partition moves; will retry", "err", err)
		mt.retrySettle()
	}
	if hs := mt.hostProtos([]string{name}); len(hs) == 1 {
		return hs[0], nil
	}
	return nil, apierr.NotFound("host: host %s does not exist", name)
}

// settleMovesInTurn takes every moving host that holds no runs through the
// rest of its move: PARTITION_MOVE_DRAINED, the backend told, then settled
// in its new partition. A backend that fails leaves the host drained (not
// in service) with a note, and the move is retried. Caller holds mt.mu.
// Like marking hosts drained, it waits for Recovered.
func (mt *Maintenance) settleMovesInTurn(ctx context.Context) error {
	mt.hm.mu.Lock()
	if !mt.recovered {
		mt.hm.mu.Unlock()
		return nil
	}
	var names []string
	for _, name := range mt.hm.order {
		if h := mt.hm.hosts[name]; (h.move == partMoving && len(h.tasks) == 0) || h.move == partDrained {
			names = append(names, name)
		}
	}
	mt.hm.mu.Unlock()
	var errs []error
	for _, name := range names {
		if err := mt.finishMoveInTurn(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// finishMoveInTurn takes one host from PARTITION_MOVING (empty) or
// PARTITION_MOVE_DRAINED to settled in its new partition.
func (mt *Maintenance) finishMoveInTurn(ctx context.Context, name string) error {
	mt.hm.mu.Lock()
	r, ok := mt.parts[name]
	if ok && r.state == partMoving {
		// Nothing can land on a moving host (not offered, Commit refuses
		// it), so once empty it stays empty.
		next := partRecord{Partition: r.Partition, Target: r.Target, state: partDrained, Profile: r.Profile}
		op := mt.partOpLocked(name, next)
		mt.hm.mu.Unlock()
		rev, err := mt.persist(ctx, []store.Op{op})
		if err != nil {
			mt.resyncPartition(name)
			return fmt.Errorf("hostmgr: mark %s drained for its move: %w", name, err)
		}
		mt.hm.mu.Lock()
		mt.setMoveLocked(name, next, rev)
		mt.hm.recountLocked()
		r = mt.parts[name]
		mt.log.Info("host drained for its partition move", "host", name, "to", r.Target)
		metrics.HostMoves.WithLabelValues("drained").Inc()
	}
	mt.hm.mu.Unlock()
	if !ok || r.state != partDrained {
		return nil
	}
	if a, ok := mt.hm.backend.(PartitionApplier); ok {
		if err := a.ApplyPartition(ctx, name, r.Target); err != nil {
			mt.hm.mu.Lock()
			if h := mt.hm.hosts[name]; h != nil {
				h.moveNote = sanitize.Text(fmt.Sprintf("the %s backend did not take the partition: %v; retrying", mt.hm.backend.Name(), err), sanitize.MaxMessage)
			}
			mt.hm.mu.Unlock()
			metrics.HostMoves.WithLabelValues("apply-failed").Inc()
			return fmt.Errorf("hostmgr: apply partition %s to %s: %w", r.Target, name, err)
		}
	}
	mt.hm.mu.Lock()
	if err := partitionTransitions.Check(r.state, partSettled); err != nil {
		mt.hm.mu.Unlock()
		return err
	}
	// The host takes the new partition's profile, and leaves the old
	// one's, in the write that settles it.
	done := partRecord{Partition: r.Target, state: partSettled, Profile: mt.profileFor(r.Target)}
	op := mt.partOpLocked(name, done)
	mt.hm.mu.Unlock()
	rev, err := mt.persist(ctx, []store.Op{op})
	if err != nil {
		mt.resyncPartition(name)
		return fmt.Errorf("hostmgr: settle %s in partition %s: %w", name, r.Target, err)
	}
	mt.hm.mu.Lock()
	mt.setMoveLocked(name, done, rev)
	mt.hm.rebuildClassesLocked()
	mt.hm.recountLocked()
	mt.hm.mu.Unlock()
	mt.log.Info("host partition move done", "host", name, "from", r.Partition, "to", r.Target)
	metrics.HostMoves.WithLabelValues("moved").Inc()
	return nil
}

// CancelMove cancels the move of host name under way: it settles back in
// the partition it was leaving and takes work again; runs it moved so far
// stay where they went. A host already drained for the move is given its
// old partition back through the backend first (PartitionApplier). The
// cancel is recorded in the move history. It returns the host after it.
func (mt *Maintenance) CancelMove(ctx context.Context, name, reason string) (*pelotonv1.Host, error) {
	if name == "" {
		return nil, apierr.Invalid("host", "required")
	}
	if len(reason) > moveReasonMax {
		return nil, apierr.Invalid("reason", "longer than %d bytes", moveReasonMax)
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.hm.mu.Lock()
	h, ok := mt.hm.hosts[name]
	r, moving := mt.parts[name]
	switch {
	case !ok:
		mt.hm.mu.Unlock()
		return nil, apierr.NotFound("host: host %s does not exist", name)
	case !moving || !h.moving():
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("host: host %s is not moving; there is no move to cancel", name)
	}
	if err := partitionTransitions.Check(r.state, partSettled); err != nil {
		mt.hm.mu.Unlock()
		return nil, apierr.FailedPrecondition("host: %v", err)
	}
	mt.hm.mu.Unlock()
	if a, ok := mt.hm.backend.(PartitionApplier); ok && r.state == partDrained {
		// The backend may have been told the new partition already.
		if err := a.ApplyPartition(ctx, name, r.Partition); err != nil {
			return nil, apierr.Unavailable("host: the %s backend did not take partition %s back: %v", mt.hm.backend.Name(), r.Partition, err)
		}
	}
	mt.hm.mu.Lock()
	back := partRecord{Partition: r.Partition, state: partSettled, Profile: r.Profile}
	op := mt.partOpLocked(name, back)
	now := mt.hm.now()
	mt.hm.mu.Unlock()
	hist, commit := mt.historyOps(moveRecord{Host: name, From: r.Partition, To: r.Target,
		Reason: cmp.Or(reason, "cancelled"), State: recordCancelled, Time: now})
	rev, err := mt.persist(ctx, append([]store.Op{op}, hist...))
	if err != nil {
		mt.resyncPartition(name)
		if errors.Is(err, store.ErrConflict) {
			return nil, apierr.Aborted("host: partition of %s changed concurrently; retry", name)
		}
		return nil, apierr.Unavailable("store host partition: %v", err)
	}
	commit()
	mt.hm.mu.Lock()
	mt.setMoveLocked(name, back, rev)
	mt.hm.rebuildClassesLocked()
	mt.hm.recountLocked()
	mt.hm.mu.Unlock()
	mt.log.Info("host partition move cancelled", "host", name, "stays in", r.Partition, "was moving to", r.Target)
	metrics.HostMoves.WithLabelValues(metrics.MoveCancelled).Inc()
	if hs := mt.hostProtos([]string{name}); len(hs) == 1 {
		return hs[0], nil
	}
	return nil, apierr.NotFound("host: host %s does not exist", name)
}

// rebuildClassesLocked recomputes the host classes after a host changed
// partition.
func (m *Manager) rebuildClassesLocked() {
	if m.classesStale {
		m.classes = hostClasses(m.order, m.hosts)
		m.classesStale = false
	}
}

// resyncPartition re-reads the record of host name after a failed
// transaction, whose outcome may be unknown, so memory follows the store.
// Caller holds mt.mu.
func (mt *Maintenance) resyncPartition(name string) {
	if mt.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), maintenanceTxnTimeout)
	defer cancel()
	kv, err := mt.store.Get(ctx, partitionKey(name))
	mt.hm.mu.Lock()
	defer mt.hm.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		delete(mt.parts, name)
		if h := mt.hm.hosts[name]; h != nil {
			mt.applyPartRecordLocked(h)
		}
	case err != nil:
		mt.log.Warn("re-read host partition", "host", name, "err", err)
		return
	default:
		r, err := parsePartition(kv)
		if err != nil {
			mt.log.Warn("re-read host partition", "host", name, "err", err)
			return
		}
		mt.setMoveLocked(name, r, kv.Revision)
	}
	mt.hm.rebuildClassesLocked()
	mt.hm.recountLocked()
}

// moveMessage says what a move is doing on a host.
func moveMessage(h *host) string {
	var msg string
	switch h.move {
	case partMoving:
		msg = fmt.Sprintf("moving to partition %s: draining 1 task", h.target)
		if n := len(h.tasks); n != 1 {
			msg = fmt.Sprintf("moving to partition %s: draining %d tasks", h.target, n)
		}
		if !h.drainBy.IsZero() {
			msg = drainWindowNote(h)
		}
		if h.drainNote != "" {
			msg += "; " + h.drainNote
		}
	case partDrained:
		msg = fmt.Sprintf("moving to partition %s: drained; applying the partition", h.target)
	default:
		return ""
	}
	if h.moveNote != "" {
		msg += "; " + h.moveNote
	}
	return msg
}

// moving reports whether a host is between partitions.
func (h *host) moving() bool { return h.move == partMoving || h.move == partDrained }

// inService reports whether a host may be offered new work as far as
// hostmgr's own state goes: up, and not moving between partitions.
func (h *host) inService() bool { return h.state == hostUp && !h.moving() }

// draining reports whether a host's runs are to be moved off it: by
// maintenance or by a partition move.
func (h *host) draining() bool { return h.state == hostDraining || h.move == partMoving }
