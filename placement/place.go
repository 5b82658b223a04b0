// Package placement decides which host each admitted task runs on. The core
// (Place) is a pure function over a snapshot of leased hosts: no clock, no
// goroutine, no I/O. The Engine loop around it dequeues gangs from resmgr,
// leases hosts from hostmgr, commits decisions and hands them back through
// resmgr to jobmgr.
//
// Placement imports resmgr (for gangs) and hostmgr (for leases and the one
// fit test, hostmgr.Fits); neither of those, nor jobmgr, may import placement.
package placement

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// Code says what kind of answer an unplaced gang got.
type Code int

const (
	// Unschedulable: no host has room for the gang now. Retry later.
	Unschedulable Code = iota + 1
	// Unresolvable: no host of the cluster could take the gang even if it
	// were empty (partition, constraints, size). Retrying does not help until
	// the hosts or the spec change: tell the user, do not retry hot.
	Unresolvable
)

func (c Code) String() string {
	switch c {
	case Unschedulable:
		return "unschedulable"
	case Unresolvable:
		return "unresolvable"
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Reasons for gangs that could not be placed: fixed phrases users can grep.
// Reasons that carry detail start or end with one of these.
const (
	// ReasonNoCapacity (unschedulable): no host passing the task's filters has
	// room now. Shown as "no host has room now (needs cpu=4 memoryMb=1024)".
	ReasonNoCapacity = "no host has room now"
	// ReasonMaxPerHost (unschedulable): hosts have room, but each already
	// holds the most instances of the job allowed. Shown as "max 1 instance
	// per host of this job reached on every host".
	ReasonMaxPerHost = "per host of this job reached on every host"
	// ReasonGangIncomplete (unschedulable): some members fit but not all, so
	// none was placed. The first member that did not fit follows after "; ".
	ReasonGangIncomplete = "waiting for gang: not every member fits now"
	// ReasonCommitConflict (unschedulable): hostmgr refused the commit (a
	// lease expired or a host changed).
	ReasonCommitConflict = "host changed while placing; retrying"
	// ReasonNoPartition (unresolvable): no host is in the partition. Shown as
	// `no host in partition "gpu"`.
	ReasonNoPartition = "no host in partition"
	// ReasonNoMatch (unresolvable): no host of the partition satisfies a
	// constraint. Shown as "no host matches constraint zone IN [a b]", naming
	// the first constraint after which no host is left.
	ReasonNoMatch = "no host matches constraint"
	// ReasonUntolerated (unresolvable): hosts match, but each has a taint
	// (hostmgr.LabelTaints) the task does not tolerate. Shown as "no host
	// without an untolerated taint (every matching host has a taint it does
	// not tolerate, e.g. gpu=yes:NoSchedule)".
	ReasonUntolerated = "no host without an untolerated taint"
	// ReasonTooLarge (unresolvable): hosts match, but none is large enough
	// even when empty. Shown as "no host is large enough (needs gpu=8; ...)".
	ReasonTooLarge = "no host is large enough"
	// ReasonGangTooWide (unresolvable): a gang holds more instances of a job
	// than the matching hosts can take at the job's maximum per host.
	ReasonGangTooWide = "gang needs more hosts than match"
	// ReasonSameLabel (unschedulable): a gang whose members must share one
	// value of a host label (resmgr.Gang.SameLabel) fits under no offered
	// value now. Shown as "no rack value has room for the gang of 4
	// (rack=r1: 2 fit, rack=r2: 3 fit)", each value with how many members
	// fitted before one did not; or, when no offered host has the label,
	// "no rack value has room for the gang of 4 (no offered host has label
	// rack)".
	ReasonSameLabel = "value has room for the gang"

	// Reasons for tasks bound to one host (resmgr.Task.BoundHost: a STATEFUL
	// instance's volume, the host a DAEMON instance serves). The host's name
	// follows after ": ".

	// ReasonBoundGone (unresolvable): the host is not in the cluster (any
	// more). Shown as "bound host is gone: h7".
	ReasonBoundGone = "bound host is gone"
	// ReasonBoundMismatch (unresolvable): the host fails the task's partition
	// or one of its constraints. Shown as "bound host does not match the
	// task's placement: h7 fails zone IN [a b]".
	ReasonBoundMismatch = "bound host does not match the task's placement"
	// ReasonBoundTooSmall (unresolvable): the host could not hold the task
	// (or the gang's members bound to it) even when empty. Shown as "bound
	// host is too small: h7 (needs cpu=16 memoryMb=128; host has cpu=8
	// memoryMb=8192)".
	ReasonBoundTooSmall = "bound host is too small"
	// ReasonBoundMaintenance (unschedulable): the host is draining or
	// drained, or moving to another partition. Shown as "bound host in
	// maintenance: h7 (HOST_DRAINING)" or "... h7 (moving to partition b)".
	ReasonBoundMaintenance = "bound host in maintenance"
	// ReasonBoundNoRoom (unschedulable): the host is up but cannot take the
	// task now: too little free, the job's maximum per host reached, or
	// another engine holds its lease. Shown as "waiting for room on bound
	// host: h7 (needs cpu=2 memoryMb=128; has cpu=1 memoryMb=4096 free)".
	ReasonBoundNoRoom = "waiting for room on bound host"
)

// Decision is the outcome of one placement round.
type Decision struct {
	Placed   []resmgr.Placement
	Unplaced []Unplaced
}

// Unplaced is a gang the round could not place, and why.
type Unplaced struct {
	Gang   *resmgr.Gang
	Code   Code
	Reason string
}

// Config tunes placement. The zero value is ready to use.
type Config struct {
	// DomainLabel is the host label whose values are the failure domains
	// SPREAD balances a job's instances across (default "zone"). Hosts
	// without the label form one domain together.
	DomainLabel string
	// Catalog is every host class of the cluster, leased or not, full or
	// not (hostmgr.Manager.HostClasses). Place judges whether a task could
	// ever run against it. Nil means the offered hosts are the whole cluster.
	Catalog []hostmgr.HostClass
	// Bound is what hostmgr knows of the hosts tasks are bound to that were
	// not offered (hostmgr.Manager.HostStatuses), so that Place can tell a
	// host in maintenance or busy from one that is gone. A bound host
	// neither offered nor here is gone.
	Bound map[string]hostmgr.HostStatus
}

// DefaultDomainLabel is the failure-domain label SPREAD uses by default.
const DefaultDomainLabel = "zone"

// Place is Config{}.Place: the offered hosts are the whole cluster and
// failure domains are the hosts' "zone" label.
func Place(gangs []*resmgr.Gang, hosts []hostmgr.HostOffer) Decision {
	return Config{}.Place(gangs, hosts)
}

// Place assigns each gang's tasks to hosts, gangs in the given order, each
// task to its previous host if that passes its filters and fits, else by its
// strategy (PACK or SPREAD) among the hosts that pass its filters. A task
// bound to a host (resmgr.Task.BoundHost) goes there or nowhere, whatever
// its strategy; its filters must still pass on that host. A gang is placed
// whole or not at all: if a member does not fit, what the other members
// took is given back before the next gang. Every unplaced gang gets a Code
// and a Reason. hosts are the starting view; Place does not modify them.
//
// Filters run cheapest first and are compiled once per round and placement
// spec: partition, then label constraints (both fixed per host, so each
// spec's matching hosts are computed once), then the job's maximum per host
// (counting runs already on the host and those placed in this round), then
// resources with hostmgr.Fits, the test Commit repeats.
func (c Config) Place(gangs []*resmgr.Gang, hosts []hostmgr.HostOffer) Decision {
	r := newRound(c, gangs, hosts)
	n := 0
	for _, g := range gangs {
		n += len(g.Tasks)
	}
	d := Decision{Placed: make([]resmgr.Placement, 0, n)}
	var reqs []request
	var chosen []int32
	for _, g := range gangs {
		reqs = reqs[:0]
		for _, t := range g.Tasks {
			reqs = append(reqs, r.request(t))
		}
		if reason := r.gangUnresolvable(reqs); reason != "" {
			d.Unplaced = append(d.Unplaced, Unplaced{Gang: g, Code: Unresolvable, Reason: reason})
			continue
		}
		var failed string
		if g.SameLabel != "" && len(g.Tasks) > 1 {
			chosen, failed = r.placeSameLabel(g, reqs, chosen[:0])
		} else {
			chosen, _, failed = r.placeAll(g, reqs, chosen[:0])
		}
		if failed != "" {
			d.Unplaced = append(d.Unplaced, Unplaced{Gang: g, Code: Unschedulable, Reason: failed})
			continue
		}
		var peers map[uint32]string
		if len(chosen) > 1 {
			peers = make(map[uint32]string, len(chosen))
			for i, h := range chosen {
				peers[g.Tasks[i].Instance] = hosts[h].Name
			}
		}
		for i, h := range chosen {
			d.Placed = append(d.Placed, resmgr.Placement{Task: g.Tasks[i], Host: hosts[h].Name, Peers: peers})
		}
	}
	return d
}

// needs renders the resources a task asks for, leaving out kinds it does not
// ask for (cpu and memory are always there).
func needs(r resources.Resources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu=%s memoryMb=%d", resources.FormatCPU(r.MilliCPU), r.MemoryMB)
	if r.DiskMB > 0 {
		fmt.Fprintf(&b, " diskMb=%d", r.DiskMB)
	}
	if r.GPU > 0 {
		fmt.Fprintf(&b, " gpu=%d", r.GPU)
	}
	return b.String()
}

// describe renders a constraint as users wrote it: "zone IN [a b]".
func describe(c *pelotonv1.Constraint) string {
	if c.Op == pelotonv1.ConstraintOp_EXISTS || c.Op == pelotonv1.ConstraintOp_DOES_NOT_EXIST {
		return c.Label + " " + c.Op.String()
	}
	return fmt.Sprintf("%s %s [%s]", c.Label, c.Op, strings.Join(c.Values, " "))
}

// placeAll places every member of g (reqs, in order) or none: it returns
// the chosen hosts, appended to chosen, or how many members fitted before
// one did not and why that one did not, with what it assumed rolled back.
func (r *Round) placeAll(g *resmgr.Gang, reqs []request, chosen []int32) ([]int32, int, string) {
	for i := range reqs {
		q := &reqs[i]
		h, reason := r.choose(q)
		if h < 0 {
			if len(g.Tasks) > 1 && len(chosen) > 0 {
				reason = fmt.Sprintf("%s; instance %d: %s", ReasonGangIncomplete, q.task.Instance, reason)
			}
			for k, at := range chosen {
				r.forget(&reqs[k], at)
			}
			return chosen[:0], i, reason
		}
		r.assume(q, h)
		chosen = append(chosen, h)
	}
	return chosen, len(chosen), ""
}

// placeSameLabel places every member of g on hosts that share one value of
// the host label g.SameLabel, trying the offered values in order until one
// has room for them all; reqs is scratch space. The members are judged as
// if their placement had the constraint SameLabel IN [value] too, so every
// other filter and the strategy apply within the value as usual.
func (r *Round) placeSameLabel(g *resmgr.Gang, reqs []request, chosen []int32) ([]int32, string) {
	key := g.SameLabel
	values := r.labelValues(key)
	if len(values) == 0 {
		return chosen, fmt.Sprintf("no %s %s of %d (no offered host has label %s)", key, ReasonSameLabel, len(g.Tasks), key)
	}
	tried := make([]string, 0, len(values))
	for _, v := range values {
		reqs = reqs[:0]
		within := map[*pelotonv1.PlacementSpec]*pelotonv1.PlacementSpec{}
		for _, t := range g.Tasks {
			p, ok := within[t.Placement]
			if !ok {
				p = withLabel(t.Placement, key, v)
				within[t.Placement] = p
			}
			tc := *t
			tc.Placement = p
			reqs = append(reqs, r.request(&tc))
		}
		var fit int
		var failed string
		if chosen, fit, failed = r.placeAll(g, reqs, chosen[:0]); failed == "" {
			return chosen, ""
		}
		tried = append(tried, fmt.Sprintf("%s=%s: %d fit", key, v, fit))
	}
	return chosen[:0], fmt.Sprintf("no %s %s of %d (%s)", key, ReasonSameLabel, len(g.Tasks), strings.Join(tried, ", "))
}

// labelValues lists the values of host label key among the offered hosts,
// sorted.
func (r *Round) labelValues(key string) []string {
	seen := map[string]bool{}
	var out []string
	for i := range r.offers {
		if v, ok := r.offers[i].Labels[key]; ok && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// withLabel is p with the constraint key IN [value] added; p is not
// changed.
func withLabel(p *pelotonv1.PlacementSpec, key, value string) *pelotonv1.PlacementSpec {
	out := &pelotonv1.PlacementSpec{}
	if p != nil {
		out = proto.Clone(p).(*pelotonv1.PlacementSpec)
	}
	out.Constraints = append(out.Constraints, &pelotonv1.Constraint{Label: key, Op: pelotonv1.ConstraintOp_IN, Values: []string{value}})
	return out
}

// describeAnyOf renders terms: "any of (zone IN [a] AND disk EXISTS) OR (...)".
func describeAnyOf(terms []*pelotonv1.ConstraintTerm) string {
	var b strings.Builder
	b.WriteString("any of ")
	for i, t := range terms {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(")
		for j, c := range t.GetConstraints() {
			if j > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(describe(c))
		}
		b.WriteString(")")
	}
	return b.String()
}
