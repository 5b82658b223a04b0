package mesos

import (
	"testing"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
)

// TestConformance runs the backend suite against the protocol-level test
// master (mesostest), not a real Mesos: each case gets a master with two
// agents and a store prefix of its own, which every backend of the case
// shares, as a restarted stack would (same framework ID, same records).
//
// Runs outlive the backend: Close leaves the framework's tasks running,
// and the next backend subscribes as the same framework and reconciles
// them. AdoptsAfterCrash is not declared: it pins what a backend that
// cannot observe ends reports (LOST ended-unobserved), while Mesos keeps
// every end and redelivers it, so a run that ended while no stack ran is
// reported as it ended; TestFrameworkFailover checks that crash. Volumes
// are reserved and created on the agent by the backend (the master runs
// RESERVE, CREATE, DESTROY and UNRESERVE), so the framework has a role.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		Caps: backendtest.Capabilities{HealthChecks: true, Volumes: true, RunsOutliveBackend: true, Partitions: true},
		Setup: func(t *testing.T) func() hostmgr.Backend {
			m := newMaster(t, mesostest.Config{Agents: []mesostest.AgentSpec{
				{Ports: []mesosv1.Value_Range{{Begin: 1025, End: 65535}}},
				{Ports: []mesosv1.Value_Range{{Begin: 1025, End: 65535}}},
			}})
			st := newStore(t)
			return func() hostmgr.Backend {
				b, err := New(testConfig(m, st))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
	})
}
