package local

import (
	"log/slog"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
	"github.com/peloton-sched/peloton/internal/resources"
)

// TestConformance runs the backend suite on real processes. Every backend
// of a case shares its sandbox folder, as a restarted `peloton up` does.
// Runs do not outlive Close, which kills the processes it started, but do
// outlive a crash of the control plane, and a new backend adopts them.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		Caps:  backendtest.Capabilities{HealthChecks: true, Volumes: true, Partitions: true, AdoptsAfterCrash: true},
		Crash: func(b hostmgr.Backend) { b.(*Backend).detach() },
		Setup: func(t *testing.T) func() hostmgr.Backend {
			dir := t.TempDir()
			return func() hostmgr.Backend {
				b, err := New(Config{Dir: dir, Hosts: 2, HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096},
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
	})
}
