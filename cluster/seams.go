package cluster

import (
	"github.com/peloton-sched/peloton/cluster/api"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/jobmgr"
	"github.com/peloton-sched/peloton/placement"
	"github.com/peloton-sched/peloton/resmgr"
)

// The components take hostmgr (and jobmgr takes resmgr) through interfaces
// of their own, each of exactly the methods it uses; this is where the
// concrete managers are passed to them, so this is where they are checked
// to fit.
var (
	_ placement.Hosts = (*hostmgr.Manager)(nil)
	_ jobmgr.Hosts    = (*hostmgr.Manager)(nil)

	_ jobmgr.Resources = (*resmgr.Manager)(nil)

	_ api.HostCache       = (*hostmgr.Manager)(nil)
	_ api.HostMaintenance = (*hostmgr.Maintenance)(nil)
	_ api.HostUsage       = (*hostmgr.Usage)(nil)
)
