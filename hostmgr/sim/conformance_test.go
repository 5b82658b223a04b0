package sim

import (
	"log/slog"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
)

// TestConformance runs the backend suite on simulated hosts (real clock).
// The simulator keeps its runs in memory only, so they do not outlive it:
// a new instance knows nothing of the old one's runs.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		Caps: backendtest.Capabilities{HealthChecks: true, Volumes: true, Partitions: true},
		Setup: func(t *testing.T) func() hostmgr.Backend {
			return func() hostmgr.Backend {
				b, err := New(Config{Hosts: 2, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
	})
}
