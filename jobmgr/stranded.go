package jobmgr

import (
	"fmt"
	"slices"
	"strings"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// StrandedJob is a job whose instances would have to leave hosts about to
// go out of service and that no host staying in service fits: a drain or
// move that preempts them leaves them waiting (a service, for its SLA,
// holds the drain up for ever).
type StrandedJob struct {
	JobID, Name string
	Instances   []uint32
}

// Stranded says which of runs, held by hosts about to leave service, fit
// none of stay (the classes of the hosts that remain, hostmgr.Leaving) by
// capacity, partition and constraints. Only instances that must move are
// judged: batch and service ones. A STATEFUL instance never moves (its
// volume is on the host) and a DAEMON instance stops and returns with its
// host, so neither needs another host. Jobs come out in the order of runs.
func (m *Manager) Stranded(runs []hostmgr.LeavingRun, stay []hostmgr.HostClass) []StrandedJob {
	var out []StrandedJob
	idx := map[string]int{}
	for _, r := range runs {
		_, inst, _, ok := parseTaskID(r.TaskID)
		if !ok {
			continue
		}
		m.mu.RLock()
		j := m.jobs[r.JobID]
		m.mu.RUnlock()
		if j == nil || j.typ == pelotonv1.JobType_STATEFUL || j.typ == pelotonv1.JobType_DAEMON {
			continue
		}
		spec := j.spec()
		if fitsAnyClass(r, placementOf(spec, inst), stay) {
			continue
		}
		i, seen := idx[j.id]
		if !seen {
			i = len(out)
			idx[j.id] = i
			out = append(out, StrandedJob{JobID: j.id, Name: spec.GetName()})
		}
		out[i].Instances = append(out[i].Instances, inst)
	}
	for i := range out {
		slices.Sort(out[i].Instances)
		out[i].Instances = slices.Compact(out[i].Instances)
	}
	return out
}

// fitsAnyClass reports whether some class of hosts could ever hold r.
func fitsAnyClass(r hostmgr.LeavingRun, p *pelotonv1.PlacementSpec, stay []hostmgr.HostClass) bool {
	for _, c := range stay {
		if r.Res.FitsIn(c.Capacity) && hostmgr.Matches(p, c.Partition, c.Labels) {
			return true
		}
	}
	return false
}

// InstanceRanges writes instances (sorted) as ranges: "0-1, 4".
func InstanceRanges(insts []uint32) string {
	var b strings.Builder
	for i := 0; i < len(insts); {
		j := i
		for j+1 < len(insts) && insts[j+1] == insts[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", insts[i], insts[j])
		} else {
			fmt.Fprintf(&b, "%d", insts[i])
		}
		i = j + 1
	}
	return b.String()
}
