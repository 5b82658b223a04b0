package placement

import "github.com/peloton-sched/peloton/hostmgr"

// Hosts is what the engine uses of hostmgr: lease hosts, read the catalog
// of every host and what it knows of the hosts tasks are bound to, commit a
// round's decision, and release a run the gang it belonged to could not keep.
// *hostmgr.Manager satisfies it; the wiring passes it, and a test may pass
// a fake.
type Hosts interface {
	AcquireHosts(f hostmgr.HostFilter) (string, []hostmgr.HostOffer)
	HostClasses() []hostmgr.HostClass
	HostStatuses(names []string) map[string]hostmgr.HostStatus
	Commit(leaseID string, as []hostmgr.Assignment) error
	ReleaseTask(taskID string)
}
