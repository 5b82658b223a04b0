package placement

import (
	"slices"
	"sort"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// reserving is a round's view of the host reservations resmgr keeps for
// gangs that waited too long (resmgr/hostres.go). The engine grows each
// reservation with hosts it sees with room, keeps everything but the gang
// and preemptible work (backfill) off the reserved hosts, measures them,
// and tells resmgr when they hold the whole gang. A nil *reserving (no
// reservation, the common case) places exactly as before.
type reserving struct {
	views []resmgr.HostReservation
	// owner is the reservation of each host, by name.
	owner map[string]*resmgr.HostReservation
}

func newReserving(views []resmgr.HostReservation) *reserving {
	if len(views) == 0 {
		return nil
	}
	rs := &reserving{views: views, owner: map[string]*resmgr.HostReservation{}}
	for i := range rs.views {
		for _, h := range rs.views[i].Hosts {
			rs.owner[h] = &rs.views[i]
		}
	}
	return rs
}

// hosts are the reserved hosts, for the lease to ask for by name: the
// round measures them and places the gangs that own them there.
func (rs *reserving) hosts() []string {
	if rs == nil {
		return nil
	}
	out := make([]string, 0, len(rs.owner))
	for _, v := range rs.views {
		out = append(out, v.Hosts...)
	}
	return out
}

// grow sets aside, for each reservation that does not hold its gang yet,
// hosts of the lease that have room and are nobody's, most free first,
// until the reserved hosts could hold the gang when empty. It returns the
// hosts added, by reservation.
func (rs *reserving) grow(cfg Config, offers []hostmgr.HostOffer) map[*resmgr.HostReservation][]string {
	if rs == nil {
		return nil
	}
	var cands []hostmgr.HostOffer
	for _, o := range offers {
		if rs.owner[o.Name] == nil && o.Free.MilliCPU > 0 && o.Free.MemoryMB > 0 {
			cands = append(cands, o)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i].Free, cands[j].Free
		if a.MilliCPU != b.MilliCPU {
			return a.MilliCPU > b.MilliCPU
		}
		if a.MemoryMB != b.MemoryMB {
			return a.MemoryMB > b.MemoryMB
		}
		return cands[i].Name < cands[j].Name
	})
	added := map[*resmgr.HostReservation][]string{}
	for i := range rs.views {
		v := &rs.views[i]
		if v.Complete {
			continue
		}
		held := rs.asEmpty(offers, v)
		for _, o := range cands {
			if rs.owner[o.Name] != nil || !takesAMember(v.Gang, o) {
				continue
			}
			if fits(cfg, v.Gang, held) {
				break
			}
			rs.owner[o.Name] = v
			added[v] = append(added[v], o.Name)
			o.Free = o.Capacity
			held = append(held, o)
		}
	}
	return added
}

// asEmpty is v's reserved hosts among offers, as if empty: what they could
// hold once the work that ran there before has ended.
func (rs *reserving) asEmpty(offers []hostmgr.HostOffer, v *resmgr.HostReservation) []hostmgr.HostOffer {
	var out []hostmgr.HostOffer
	for _, o := range offers {
		if rs.owner[o.Name] == v {
			o.Free = o.Capacity
			out = append(out, o)
		}
	}
	return out
}

// takesAMember says whether host o, empty, passes the filters of a member
// of g and is big enough for it.
func takesAMember(g *resmgr.Gang, o hostmgr.HostOffer) bool {
	for _, t := range g.Tasks {
		if t.BoundHost == "" && t.Resources.FitsIn(o.Capacity) && hostmgr.Matches(t.Placement, o.Partition, o.Labels) {
			return true
		}
	}
	return false
}

// fits says whether the whole of g fits on hosts.
func fits(cfg Config, g *resmgr.Gang, hosts []hostmgr.HostOffer) bool {
	if len(hosts) == 0 {
		return false
	}
	cfg.Catalog = nil // judged on these hosts alone
	return len(cfg.Place([]*resmgr.Gang{g}, hosts).Unplaced) == 0
}

// place is cfg.Place with the reservations kept: a reserved gang first,
// on any host but those reserved for others; then gangs with work that is
// not preemptible, on hosts nobody reserves; then gangs of preemptible work
// only, which may backfill reservations not yet complete. The unplaced come
// back in the order of gangs.
func (rs *reserving) place(cfg Config, gangs []*resmgr.Gang, offers []hostmgr.HostOffer) Decision {
	if rs == nil {
		return cfg.Place(gangs, offers)
	}
	var firm, backfill []*resmgr.Gang
	var d Decision
	avail := offers
	merge := func(x Decision) {
		d.Placed = append(d.Placed, x.Placed...)
		d.Unplaced = append(d.Unplaced, x.Unplaced...)
		avail = leftover(avail, x.Placed)
	}
	for _, g := range gangs {
		if v := rs.ownerOf(g); v != nil {
			merge(cfg.Place([]*resmgr.Gang{g}, rs.without(avail, func(o *resmgr.HostReservation) bool { return o != v })))
			continue
		}
		if slices.ContainsFunc(g.Tasks, func(t *resmgr.Task) bool { return !t.Preemptible || t.Revocable }) {
			firm = append(firm, g)
		} else {
			backfill = append(backfill, g)
		}
	}
	if len(firm) > 0 {
		merge(cfg.Place(firm, rs.without(avail, func(*resmgr.HostReservation) bool { return true })))
	}
	if len(backfill) > 0 {
		merge(cfg.Place(backfill, rs.without(avail, func(o *resmgr.HostReservation) bool { return o.Complete })))
	}
	at := make(map[*resmgr.Gang]int, len(gangs))
	for i, g := range gangs {
		at[g] = i
	}
	sort.SliceStable(d.Unplaced, func(i, j int) bool { return at[d.Unplaced[i].Gang] < at[d.Unplaced[j].Gang] })
	return d
}

// ownerOf returns the reservation g owns, or nil.
func (rs *reserving) ownerOf(g *resmgr.Gang) *resmgr.HostReservation {
	for i := range rs.views {
		if rs.views[i].Owns(g) {
			return &rs.views[i]
		}
	}
	return nil
}

// without is offers less the hosts of the reservations hide says to hide.
func (rs *reserving) without(offers []hostmgr.HostOffer, hide func(*resmgr.HostReservation) bool) []hostmgr.HostOffer {
	out := make([]hostmgr.HostOffer, 0, len(offers))
	for _, o := range offers {
		if v := rs.owner[o.Name]; v == nil || !hide(v) {
			out = append(out, o)
		}
	}
	return out
}

// report tells resmgr, for each reservation, the hosts this round added,
// what it saw of its hosts, and, once the hosts' free room and backfill
// hold the whole gang, the hosts that do. offers are the round's view
// before it placed anything (free room then, plus the backfill resmgr
// knew of, is what the hosts hold: the backfill placed in the round took
// free room but is backfill too), placed what it placed.
func (rs *reserving) report(rm *resmgr.Manager, cfg Config, offers []hostmgr.HostOffer, placed []resmgr.Placement, added map[*resmgr.HostReservation][]string) {
	if rs == nil {
		return
	}
	freeNow := map[string]hostmgr.HostOffer{}
	for _, o := range leftover(offers, placed) {
		freeNow[o.Name] = o
	}
	for i := range rs.views {
		v := &rs.views[i]
		u := resmgr.HostReservationUpdate{Pool: v.Pool, Owner: v.Gang, Add: added[v], Seen: map[string]resmgr.HostRoom{}}
		var room []hostmgr.HostOffer
		for _, o := range offers {
			if rs.owner[o.Name] != v {
				continue
			}
			held := o.Free.Add(v.Backfill[o.Name]).Min(o.Capacity)
			u.Seen[o.Name] = resmgr.HostRoom{Free: freeNow[o.Name].Free, Held: held}
			o.Free = held
			room = append(room, o)
		}
		for _, name := range v.Hosts {
			if _, seen := u.Seen[name]; !seen && lost(cfg.Bound, name) {
				u.Drop = append(u.Drop, name)
			}
		}
		if !v.Complete && len(room) > 0 {
			c := cfg
			c.Catalog = nil
			if d := c.Place([]*resmgr.Gang{v.Gang}, room); len(d.Unplaced) == 0 {
				u.Complete = make([]string, 0, len(d.Placed))
				for _, p := range d.Placed {
					if !slices.Contains(u.Complete, p.Host) {
						u.Complete = append(u.Complete, p.Host)
					}
				}
			}
		}
		if len(u.Add) > 0 || len(u.Seen) > 0 || len(u.Drop) > 0 || u.Complete != nil {
			rm.UpdateHostReservation(u)
		}
	}
}

// lost says whether a reserved host the lease did not offer is gone or
// takes no new runs (maintenance, cordoned, moving partition), by what
// hostmgr said of it (Config.Bound, looked up for every host asked for by
// name and not offered); one another engine's lease holds is kept.
func lost(status map[string]hostmgr.HostStatus, name string) bool {
	st, ok := status[name]
	return !ok || st.State != pelotonv1.HostState_HOST_UP || st.Unschedulable || st.MovingTo != ""
}
