// Package placement decides which host each admitted task runs on. The core
// (Place) is a pure function over a snapshot of leased hosts; the Engine loop
// around it dequeues gangs from resmgr, leases hosts from hostmgr, commits
// decisions and hands them back through resmgr to jobmgr.
//
// Placement imports resmgr (for gangs) and hostmgr (for leases); neither of
// those, nor jobmgr, may import placement.
package placement

import (
	"fmt"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/resmgr"
)

// Reason strings for gangs that could not be placed. Fixed words users can grep.
const (
	// ReasonNoCapacity: no leased host has room now; retried later.
	ReasonNoCapacity = "no host has room now"
	// ReasonGangIncomplete: some members fit but not all, so none was placed.
	ReasonGangIncomplete = "waiting for gang: not every member fits now"
	// ReasonCommitConflict: hostmgr refused the commit (a lease expired or a host changed).
	ReasonCommitConflict = "host changed while placing; retrying"
)

// Decision is the outcome of one placement round.
type Decision struct {
	Placed   []resmgr.Placement
	Unplaced []Unplaced
}

// Unplaced is a gang the round could not place, and why.
type Unplaced struct {
	Gang   *resmgr.Gang
	Reason string
}

// Place assigns each gang's tasks to hosts, first fit in host order, gangs in
// the given order. A gang is placed whole or not at all: if any member does
// not fit, what its other members took is given back before the next gang.
// hosts' Free fields are the starting view; Place does not modify them.
func Place(gangs []*resmgr.Gang, hosts []hostmgr.HostOffer) Decision {
	free := make([]resources.Resources, len(hosts))
	for i, h := range hosts {
		free[i] = h.Free
	}
	var d Decision
	d.Placed = make([]resmgr.Placement, 0, len(gangs))
	chosen := make([]int, 0, 8)
	for _, g := range gangs {
		chosen = chosen[:0]
		ok := true
		for _, t := range g.Tasks {
			hi := -1
			for i := range free {
				if t.Resources.FitsIn(free[i]) {
					hi = i
					break
				}
			}
			if hi < 0 {
				ok = false
				break
			}
			free[hi] = free[hi].Sub(t.Resources)
			chosen = append(chosen, hi)
		}
		if !ok {
			for j, hi := range chosen {
				free[hi] = free[hi].Add(g.Tasks[j].Resources)
			}
			reason := ReasonNoCapacity
			if len(g.Tasks) > 1 && len(chosen) > 0 {
				reason = ReasonGangIncomplete
			}
			if len(g.Tasks) == 1 {
				reason = fmt.Sprintf("%s (needs %s)", ReasonNoCapacity, g.Tasks[0].Resources)
			}
			d.Unplaced = append(d.Unplaced, Unplaced{Gang: g, Reason: reason})
			continue
		}
		for j, hi := range chosen {
			d.Placed = append(d.Placed, resmgr.Placement{Task: g.Tasks[j], Host: hosts[hi].Name})
		}
	}
	return d
}
