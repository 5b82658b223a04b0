package hostagent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// warmRuns: a revocable run "r" and another "n", 0.3 cores each: 0.6 of
// a 1-core host, below the config's thresholds, above the profile's.
func warmRuns(k int) (map[string]RunInfo, error) {
	return map[string]RunInfo{"r": fakeInfo(k, 0.3, true), "n": fakeInfo(k, 0.3, false)}, nil
}

// The agent takes the QoS thresholds of its host's partition profile
// from the stack's acks: a host that its config calls cool is hot under
// the profile, and the revocable run is killed. With QoS off in the
// config, the profile turns it on. Acks without settings take them back.
func TestAgentTakesProfileSettings(t *testing.T) {
	profile := &pelotonv1.AgentSettings{QosCpuHigh: 0.5, QosCpuLow: 0.3, OversubscriptionCap: 2}
	for _, tc := range []struct {
		name string
		base *QoSPolicy
	}{
		{"config thresholds replaced", &QoSPolicy{CPUHigh: 0.9, CPULow: 0.7, Samples: 2}},
		{"qos off in the config", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			_, addr := serveAgents(t, rec, "127.0.0.1:0")
			f := &fakeQoSRuns{runs: warmRuns}
			cfg := testConfig(dial(t, addr), &fakeMachine{virtual: true})
			cfg.Runs, cfg.QoS, cfg.Capacity = f, tc.base, Resources{CPU: 1, MemoryMB: 1024}
			a, stop := start(t, cfg)
			defer stop()

			// Without settings, several readings acknowledged: nothing hot.
			testutil.Eventually(t, 10*time.Second, "reports acknowledged", func() bool { return a.Stats().LastAcked >= 4 })
			if k := f.killed(); len(k) != 0 {
				t.Fatalf("killed %+v under the config's thresholds", k)
			}
			rec.set(func(r *recorder) { r.settings = profile })
			testutil.Eventually(t, 10*time.Second, "the kill under the profile", func() bool { return len(f.killed()) > 0 })
			if k := f.killed()[0]; k.id != "r" {
				t.Errorf("killed %q, want r", k.id)
			}
			if got := a.Stats().Settings; !proto.Equal(got, profile) {
				t.Errorf("Stats().Settings = %v, want %v", got, profile)
			}
			rec.set(func(r *recorder) { r.settings = nil })
			testutil.Eventually(t, 10*time.Second, "the settings taken back", func() bool { return a.Stats().Settings == nil })
		})
	}
}

func TestWithSettings(t *testing.T) {
	base := &QoSPolicy{CPUHigh: 0.9, CPULow: 0.7, MemHigh: 0.95, MemLow: 0.9, Samples: 3}
	for _, tc := range []struct {
		name string
		base *QoSPolicy
		s    *pelotonv1.AgentSettings
		want QoSPolicy
		on   bool
	}{
		{"none", nil, nil, QoSPolicy{}, false},
		{"config only", base, nil, *base, true},
		{"cap only", base, &pelotonv1.AgentSettings{OversubscriptionCap: 2}, *base, true},
		{"cpu pair", base, &pelotonv1.AgentSettings{QosCpuHigh: 0.6, QosCpuLow: 0.4}, QoSPolicy{CPUHigh: 0.6, CPULow: 0.4, MemHigh: 0.95, MemLow: 0.9, Samples: 3}, true},
		{"mem pair, no config", nil, &pelotonv1.AgentSettings{QosMemHigh: 0.8, QosMemLow: 0.7}, QoSPolicy{MemHigh: 0.8, MemLow: 0.7}, true},
	} {
		got, on := withSettings(tc.base, tc.s)
		if got != tc.want || on != tc.on {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.name, got, on, tc.want, tc.on)
		}
	}
}
