// Package mesosharness gives `peloton bench mesos` its master: it adapts
// the protocol-level test master hostmgr/mesos/mesostest to
// bench.MesosHarness and registers it when imported. Only binaries built
// with -tags mesosbench import it (cmd/peloton/mesosbench.go), so the
// release binary links no test code; nothing else may import it.
package mesosharness

import (
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/peloton-sched/peloton/bench"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
)

func init() { bench.RegisterMesosHarness(Harness{}) }

// Harness is mesostest as a bench.MesosHarness.
type Harness struct{}

var _ bench.MesosHarness = Harness{}

// StartMaster starts a mesostest master with identical agents.
func (Harness) StartMaster(agents int, cpus, memMB float64) (bench.MesosMaster, error) {
	specs := make([]mesostest.AgentSpec, agents)
	for i := range specs {
		specs[i] = mesostest.AgentSpec{CPUs: cpus, MemMB: memMB}
	}
	m, err := mesostest.New(mesostest.Config{Agents: specs})
	if err != nil {
		return nil, err
	}
	return master{m}, nil
}

type master struct{ *mesostest.Master }

func (m master) Accepts() int { return m.Calls(scheduler.Call_ACCEPT) }
