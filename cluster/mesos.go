package cluster

import (
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/mesos"
	"github.com/peloton-sched/peloton/internal/store"
)

// MesosConfig configures the mesos backend (see hostmgr/mesos).
type MesosConfig struct {
	// Master is the master's URL, http://HOST:5050 (--mesos-master).
	Master string
	// ContentType is "protobuf" (default) or "json" (--mesos-content-type).
	ContentType string
	// Role and Principal go into the FrameworkInfo (--mesos-role,
	// --mesos-principal); FrameworkName defaults to "peloton".
	Role, Principal, FrameworkName string
	// FailoverTimeout is how long the master keeps the framework's tasks
	// while no stack is subscribed (--mesos-failover-timeout; 0: a week).
	FailoverTimeout time.Duration
}

// newMesosBackend builds the mesos backend over the stack's store, where
// it keeps its framework ID and run records.
func newMesosBackend(cfg Config, st store.Store) (hostmgr.Backend, error) {
	m := cfg.Mesos
	return mesos.New(mesos.Config{Master: m.Master, ContentType: m.ContentType, Role: m.Role, Principal: m.Principal,
		FrameworkName: m.FrameworkName, FailoverTimeout: m.FailoverTimeout, Store: st, Logger: cfg.Logger})
}
