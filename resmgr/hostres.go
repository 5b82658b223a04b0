package resmgr

import (
	"slices"
	"sort"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Host reservations: no starvation for gangs that cannot fit now.
//
// Admission lets small work pass a gang that does not fit, so a large gang
// behind a steady stream of small work would wait for ever: every host
// that frees a little is filled again at once. A gang that has waited
// longer than Options.ReservationAfter (and still cannot fit) gets a host
// reservation: the placement engine sets hosts aside for it as it sees
// them with room (a lease only offers hosts that have some), and from then
// on places on them only the gang itself and preemptible work (backfill),
// so that the room freed by the work that ran there before stays the
// gang's. Once the free room and the backfill of the reserved hosts hold
// the whole gang, the reservation is complete: the backfill on the hosts
// the gang will use is preempted (reason "reservation"), the hosts not
// needed are let go, nothing else is placed there, and the gang is
// admitted even if the cluster's capacity looks full (the backfill's room
// is on its way back). The reservation ends when the gang is placed,
// killed, shrinks or is found unresolvable. Each leaf pool has at most one
// at a time, for its most important waiting gang (priority, then the
// longest wait).
//
// resmgr keeps the reservation (which gang, which hosts, what backfill
// runs there); the placement engine, which sees hosts, grows it, measures
// it and says when it is complete (placement/hostres.go). It lives in
// memory only: after a restart the re-queued gangs are judged by the same
// rule and the reservation is rebuilt once the gang has waited
// ReservationAfter again.

// DefaultReservationAfter is how long a gang waits before hosts are set
// aside for it, when Options.ReservationAfter is 0.
const DefaultReservationAfter = time.Minute

// ReasonReservation: a preemptible task placed on a host set aside for a
// gang gives the room back once the reservation holds the whole gang.
const ReasonReservation = "reservation"

// hostRes is one gang's host reservation.
type hostRes struct {
	gang     *Gang
	pool     string
	since    time.Time
	complete bool
	hosts    map[string]*heldHost
	// backfill is each preemptible task placed on a reserved host since it
	// was reserved, with the host.
	backfill map[instKey]string
	// idleMilli is the free CPU of the reserved hosts at the last look,
	// measured at measured, for the cost metric.
	idleMilli int64
	measured  time.Time
}

// heldHost is one reserved host: since when, and what it holds for the gang
// (its free room and backfill at the last look).
type heldHost struct {
	since time.Time
	held  resources.Resources
	free  resources.Resources
}

// hostResBook is every pool's host reservation. Guarded by Manager.mu.
type hostResBook struct {
	after  time.Duration // < 0: never reserve
	byPool map[string]*hostRes
	byGang map[*Gang]*hostRes
	byHost map[string]*hostRes
}

func newHostResBook(after time.Duration) hostResBook {
	if after == 0 {
		after = DefaultReservationAfter
	}
	return hostResBook{after: after, byPool: map[string]*hostRes{}, byGang: map[*Gang]*hostRes{}, byHost: map[string]*hostRes{}}
}

// eligible says whether g may get a reservation now: it has waited long
// enough, and it waits for room (waitsForRoom, or placement found no hosts
// for it) rather than for its pool's limits, which hosts set aside would
// not help.
func (b *hostResBook) eligible(g *Gang, now time.Time) bool {
	if b.after < 0 || now.Sub(g.enqueued) < b.after || g.heldUntil.After(now) || len(g.Tasks) == 0 {
		return false
	}
	if g.elem != nil {
		return waitsForRoom(g.block)
	}
	return g.attempts > 0 // admitted, but placement found no room for it
}

// waitsForRoom says whether admission refused a gang for want of room:
// the cluster's capacity, its partition's, or its pool's entitlement (which
// in a full cluster is the pool's part of it), not for a limit or a
// reservation rule that hosts set aside would not change. A complete
// reservation's gang is admitted over all three: its hosts hold it, and
// the backfill's room is on its way back.
func waitsForRoom(b blockKind) bool {
	return b == blockCapacity || b == blockPartition || b == blockEntitlement
}

// better orders candidates: higher priority, then the longer wait, then
// the job and instance, so the choice is the same on every pass.
func better(a, b *Gang) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.enqueued.Equal(b.enqueued) {
		return a.enqueued.Before(b.enqueued)
	}
	if a.Tasks[0].JobID != b.Tasks[0].JobID {
		return a.Tasks[0].JobID < b.Tasks[0].JobID
	}
	return a.Tasks[0].Instance < b.Tasks[0].Instance
}

// choose starts a reservation in each pool that has none, for its best
// eligible gang among cands (pending gangs admission refused in this pass)
// and the ready gangs placement returned.
func (b *hostResBook) choose(cands, ready []*Gang, now time.Time) {
	if b.after < 0 {
		return
	}
	best := map[string]*Gang{}
	for _, list := range [][]*Gang{cands, ready} {
		for _, g := range list {
			// A gang reserved already (under its pool's old path, after a
			// pool move) is not reserved twice.
			if b.byPool[g.Pool] != nil || b.byGang[g] != nil || !b.eligible(g, now) {
				continue
			}
			if cur := best[g.Pool]; cur == nil || better(g, cur) {
				best[g.Pool] = g
			}
		}
	}
	for pool, g := range best {
		r := &hostRes{gang: g, pool: pool, since: now, measured: now, hosts: map[string]*heldHost{}, backfill: map[instKey]string{}}
		b.byPool[pool], b.byGang[g] = r, r
	}
}

// end forgets r and lets its hosts go, counting its last idle stretch.
func (b *hostResBook) end(r *hostRes, now time.Time) {
	if b.byGang[r.gang] != r {
		return
	}
	r.countIdle(now)
	delete(b.byPool, r.pool)
	delete(b.byGang, r.gang)
	for h := range r.hosts {
		if b.byHost[h] == r {
			delete(b.byHost, h)
		}
	}
}

// countIdle adds the reserved-but-idle CPU since the last look to the cost
// metric.
func (r *hostRes) countIdle(now time.Time) {
	if d := now.Sub(r.measured); d > 0 && r.idleMilli > 0 {
		metrics.ReservationIdle.WithLabelValues(r.pool).Add(float64(r.idleMilli) / 1000 * d.Seconds())
	}
	r.measured = now
}

// completeFor says whether g's reservation holds it whole: it is then
// admitted even when the cluster's capacity looks full.
func (b *hostResBook) completeFor(g *Gang) bool {
	r := b.byGang[g]
	return r != nil && r.complete
}

// HostReservation is a placement engine's copy of one gang's reservation.
type HostReservation struct {
	// Gang is a copy of the reserved gang (its tasks as they are now).
	Gang *Gang
	Pool string
	// Hosts are the hosts set aside, sorted.
	Hosts []string
	// Backfill is, per reserved host, what preemptible tasks placed there
	// since it was reserved hold: room the gang gets back by preemption.
	Backfill map[string]resources.Resources
	// Complete: the hosts hold the whole gang; nothing but the gang may be
	// placed on them any more.
	Complete bool
	owner    instKey
}

// Owns says whether g (a gang a placement engine dequeued) is the reserved
// gang.
func (h *HostReservation) Owns(g *Gang) bool {
	return len(g.Tasks) > 0 && g.Tasks[0].key() == h.owner
}

// HostReservations returns a copy of every live host reservation, by pool
// path; nil when there is none (the common case, which costs nothing).
func (m *Manager) HostReservations() []HostReservation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.hostRes.byPool) == 0 {
		return nil
	}
	out := make([]HostReservation, 0, len(m.hostRes.byPool))
	for _, r := range m.hostRes.byPool {
		g := NewGang(slices.Clone(r.gang.Tasks)...)
		g.SameLabel = r.gang.SameLabel
		v := HostReservation{Gang: g, Pool: r.pool, Complete: r.complete, owner: r.gang.Tasks[0].key(), Backfill: map[string]resources.Resources{}}
		for h := range r.hosts {
			v.Hosts = append(v.Hosts, h)
		}
		sort.Strings(v.Hosts)
		for k, h := range r.backfill {
			if ts, ok := m.tasks[k]; ok {
				v.Backfill[h] = v.Backfill[h].Add(ts.task.Resources)
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}

// HostRoom is what a placement round saw of a reserved host: its free
// room, and what it holds for the gang (free room and backfill).
type HostRoom struct {
	Free, Held resources.Resources
}

// HostReservationUpdate is what a placement round learnt of a reservation.
type HostReservationUpdate struct {
	// Pool names the reservation; Owner is the reserved gang as the round
	// saw it (an update for a gang no longer reserved is ignored).
	Pool  string
	Owner *Gang
	// Add are hosts to set aside now (hosts another reservation holds are
	// skipped); Drop hosts to let go (gone, or taking no new runs).
	Add, Drop []string
	// Seen is what the round saw of the reservation's hosts, Add included.
	Seen map[string]HostRoom
	// Complete, when set, are the hosts that hold the whole gang: the
	// reservation keeps those only and preempts their backfill.
	Complete []string
}

// UpdateHostReservation applies what a placement round learnt of a
// reservation.
func (m *Manager) UpdateHostReservation(u HostReservationUpdate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.hostRes.byPool[u.Pool]
	if r == nil || u.Owner == nil || len(u.Owner.Tasks) == 0 || r.gang.Tasks[0].key() != u.Owner.Tasks[0].key() {
		return
	}
	now := m.now()
	r.countIdle(now)
	if !r.complete {
		for _, h := range u.Add {
			if m.hostRes.byHost[h] == nil {
				m.hostRes.byHost[h] = r
				r.hosts[h] = &heldHost{since: now}
			}
		}
	}
	for _, h := range u.Drop {
		if m.hostRes.byHost[h] == r {
			delete(m.hostRes.byHost, h)
			delete(r.hosts, h)
		}
	}
	for h, room := range u.Seen {
		if hh := r.hosts[h]; hh != nil {
			hh.held, hh.free = room.Held, room.Free
		}
	}
	if u.Complete != nil && !r.complete {
		m.completeHostRes(r, u.Complete)
	}
	r.idleMilli = 0
	for _, hh := range r.hosts {
		r.idleMilli += hh.free.MilliCPU
	}
}

// completeHostRes keeps the hosts that hold the gang, lets the others go,
// preempts the backfill on those kept and lets admission take the gang.
func (m *Manager) completeHostRes(r *hostRes, keep []string) {
	r.complete = true
	for h := range r.hosts {
		if !slices.Contains(keep, h) {
			delete(r.hosts, h)
			delete(m.hostRes.byHost, h)
		}
	}
	var vs []Victim
	for k, h := range r.backfill {
		ts, ok := m.tasks[k]
		if !ok || r.hosts[h] == nil {
			continue
		}
		vs = append(vs, Victim{Task: ts.task, Reason: ReasonReservation,
			Detail: "host " + h + " is reserved for gang " + r.gang.Tasks[0].Key() + ", which now has room"})
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Task.Key() < vs[j].Task.Key() })
	m.markVictims(vs)
	m.log.Info("host reservation complete", "pool", r.pool, "gang", r.gang.Tasks[0].Key(), "hosts", len(r.hosts), "backfill preempted", len(vs))
	m.kick()
}

// placedLocked notes a placement: the reserved gang placed ends its
// reservation; a preemptible task placed on a reserved host is backfill.
func (b *hostResBook) placedLocked(ts *taskState, host string, now time.Time) {
	if r := b.byGang[ts.gang]; r != nil {
		b.end(r, now)
		return
	}
	if r := b.byHost[host]; r != nil && ts.task.Preemptible && !ts.task.Revocable {
		r.backfill[ts.task.key()] = host
	}
}

// releasedLocked notes that ts is gone: a member of the reserved gang
// gone (killed, or run again) ends the reservation, for the gang no longer
// needs those hosts as it was; backfill gone is no longer backfill.
func (b *hostResBook) releasedLocked(ts *taskState, now time.Time) {
	if r := b.byGang[ts.gang]; r != nil {
		b.end(r, now)
		return
	}
	for _, r := range b.byPool {
		delete(r.backfill, ts.task.key())
	}
}

// JobHostReservation returns the host reservation of one of the job's
// gangs, for job get; nil when it has none.
func (m *Manager) JobHostReservation(jobID string) *pelotonv1.GangReservation {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.hostRes.byPool {
		if r.gang.Tasks[0].JobID != jobID {
			continue
		}
		out := &pelotonv1.GangReservation{
			Gang: r.gang.Tasks[0].Gang, FirstInstance: r.gang.Tasks[0].Instance, Members: uint32(len(r.gang.Tasks)),
			Pool: r.pool, Since: timestamppb.New(r.since), Complete: r.complete,
		}
		for name, hh := range r.hosts {
			out.Hosts = append(out.Hosts, &pelotonv1.ReservedHost{Name: name, Since: timestamppb.New(hh.since), Held: hh.held.ToProto(), Free: hh.free.ToProto()})
		}
		sort.Slice(out.Hosts, func(i, j int) bool { return out.Hosts[i].Name < out.Hosts[j].Name })
		return out
	}
	return nil
}
