package hostmgr

import (
	"slices"

	"github.com/peloton-sched/peloton/internal/resources"
)

// LeavingRun is a run held by a host that is about to leave service (a
// drain, a partition move): its instance must find another host.
type LeavingRun struct {
	Host, TaskID, JobID string
	Res                 resources.Resources
}

// Leaving returns the runs the named hosts hold, in host then task order,
// and the classes of the hosts that stay in service: up, settled, taking
// new runs, and not among names. A caller judges with them whether the
// runs could go anywhere else before it takes the hosts out (a drain that
// strands its runs never ends). known is false when a name is not a host
// hostmgr knows: the request is to be refused for that first.
func (mt *Maintenance) Leaving(names []string) (runs []LeavingRun, stay []HostClass, known bool) {
	m := mt.hm
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range names {
		h := m.hosts[name]
		if h == nil {
			return nil, nil, false
		}
		for _, id := range taskIDsLocked(h) {
			runs = append(runs, LeavingRun{Host: name, TaskID: id, JobID: h.tasks[id].job, Res: h.tasks[id].res})
		}
	}
	var staying []string
	for _, name := range m.order {
		if h := m.hosts[name]; h.inService() && !h.info.Unschedulable && !slices.Contains(names, name) {
			staying = append(staying, name)
		}
	}
	return runs, hostClasses(staying, m.hosts), true
}
