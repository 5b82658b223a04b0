package bench

import (
	"errors"
	"sync"
)

// MesosHarness starts the Mesos test master (hostmgr/mesos/mesostest) the
// mesos scenario runs against. That master is test code, which the
// release binary must not link, so bench does not import it: package
// bench/mesosharness adapts and registers it when imported, which
// `peloton` does only when built with -tags mesosbench
// (cmd/peloton/mesosbench.go).
type MesosHarness interface {
	// StartMaster serves agents agents of cpus CPUs and memMB MiB each on
	// loopback.
	StartMaster(agents int, cpus, memMB float64) (MesosMaster, error)
}

// MesosMaster is a running test master.
type MesosMaster interface {
	URL() string
	// Accepts counts the ACCEPT calls it took.
	Accepts() int
	Close()
}

var (
	mesosHarnessMu sync.Mutex
	mesosHarness   MesosHarness
)

// RegisterMesosHarness makes h the harness of the mesos scenario.
func RegisterMesosHarness(h MesosHarness) {
	mesosHarnessMu.Lock()
	defer mesosHarnessMu.Unlock()
	mesosHarness = h
}

// ErrNoMesosHarness is the mesos scenario's answer in a binary built
// without the test master.
var ErrNoMesosHarness = errors.New("bench mesos: this peloton is built without the Mesos test master " +
	"(the release binary links no test code); build one with it: go build -tags mesosbench -o bin/peloton-mesosbench ./cmd/peloton")

func registeredMesosHarness() (MesosHarness, error) {
	mesosHarnessMu.Lock()
	defer mesosHarnessMu.Unlock()
	if mesosHarness == nil {
		return nil, ErrNoMesosHarness
	}
	return mesosHarness, nil
}
