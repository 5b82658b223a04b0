package cluster

import (
	"github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/jobmgr"
	"github.com/peloton-sched/peloton/placement"
)

// The components take hostmgr through interfaces of their own, each of
// exactly the methods it uses; this is where the concrete host manager is
// passed to them, so this is where it is checked to fit.
var (
	_ placement.Hosts = (*hostmgr.Manager)(nil)
	_ jobmgr.Hosts    = (*hostmgr.Manager)(nil)

	_ api.HostCache       = (*hostmgr.Manager)(nil)
	_ api.HostMaintenance = (*hostmgr.Maintenance)(nil)
	_ api.HostUsage       = (*hostmgr.Usage)(nil)
)
