package advisor

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func TestClassify(t *testing.T) {
	th := DefaultThresholds() // cpu 0.7/0.9, mem 0.8/0.95, latency 0.8/1.0, hysteresis 0.1, dwell 30s
	fresh := func(cpu, mem, lat float64) Reading { return Reading{Fresh: true, CPU: cpu, Mem: mem, Latency: lat} }
	tests := []struct {
		name string
		st   ZoneState
		r    Reading
		now  time.Time
		want ZoneState
	}{
		{"first reading, cool", ZoneState{}, fresh(0.2, 0.3, 0), at(0), ZoneState{Green, at(0)}},
		{"first reading, cpu orange", ZoneState{}, fresh(0.7, 0.3, 0), at(0), ZoneState{Orange, at(0)}},
		{"memory red", ZoneState{}, fresh(0.1, 0.95, 0), at(0), ZoneState{Red, at(0)}},
		{"latency at its SLO is red", ZoneState{}, fresh(0.1, 0.1, 1.0), at(0), ZoneState{Red, at(0)}},
		{"latency near its SLO is orange", ZoneState{}, fresh(0.1, 0.1, 0.85), at(0), ZoneState{Orange, at(0)}},
		{"hotter at once, within the dwell", ZoneState{Green, at(0)}, fresh(0.95, 0, 0), at(1), ZoneState{Red, at(1)}},
		{"same zone keeps its since", ZoneState{Orange, at(0)}, fresh(0.75, 0, 0), at(100), ZoneState{Orange, at(0)}},
		{"cooler within the dwell: stays", ZoneState{Orange, at(0)}, fresh(0.1, 0, 0), at(29), ZoneState{Orange, at(0)}},
		{"cooler after the dwell: leaves", ZoneState{Orange, at(0)}, fresh(0.1, 0, 0), at(30), ZoneState{Green, at(30)}},
		{"below the entry level but within the hysteresis: stays", ZoneState{Orange, at(0)}, fresh(0.65, 0, 0), at(100), ZoneState{Orange, at(0)}},
		{"just below the hysteresis: leaves", ZoneState{Orange, at(0)}, fresh(0.59, 0, 0), at(100), ZoneState{Green, at(100)}},
		{"red cools to orange, not green, in the band", ZoneState{Red, at(0)}, fresh(0.75, 0, 0), at(100), ZoneState{Orange, at(100)}},
		{"red stays red within its hysteresis", ZoneState{Red, at(0)}, fresh(0.85, 0, 0), at(100), ZoneState{Red, at(0)}},
		{"red straight to green", ZoneState{Red, at(0)}, fresh(0.2, 0.2, 0.2), at(100), ZoneState{Green, at(100)}},
		{"stale: unknown at once", ZoneState{Red, at(0)}, Reading{}, at(5), ZoneState{Unknown, at(5)}},
		{"stale again keeps its since", ZoneState{Unknown, at(5)}, Reading{}, at(50), ZoneState{Unknown, at(5)}},
		{"fresh after unknown: at once, even cooler", ZoneState{Unknown, at(5)}, fresh(0.1, 0, 0), at(6), ZoneState{Green, at(6)}},
	}
	for _, tt := range tests {
		if got := th.Classify(tt.st, tt.r, tt.now); got != tt.want {
			t.Errorf("%s: Classify(%v, %+v) = %v, want %v", tt.name, tt.st, tt.r, got, tt.want)
		}
	}
}

// A host whose CPU swings around the orange level every reading changes
// zone at most once per dwell.
func TestClassifyDoesNotFlap(t *testing.T) {
	th := DefaultThresholds()
	st := ZoneState{}
	changes := 0
	for i := range 120 { // two minutes of one-second readings
		cpu := 0.55
		if i%2 == 0 {
			cpu = 0.75
		}
		next := th.Classify(st, Reading{Fresh: true, CPU: cpu}, at(i))
		if next.Zone != st.Zone {
			changes++
		}
		st = next
	}
	// Orange at the first reading, and it never cools below 0.6 for long:
	// 0.55 is below the hysteresis band, so after each dwell it may go green,
	// and the next reading (0.75) makes it orange again: two changes a dwell.
	if changes > 1+2*120/30 {
		t.Errorf("%d zone changes in 120 readings; want at most %d", changes, 1+2*120/30)
	}
}

func TestThresholdsValidate(t *testing.T) {
	if err := DefaultThresholds().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultThresholds()
	bad.CPURed = 0.5
	if err := bad.Validate(); err == nil {
		t.Error("cpu red below orange: no error")
	}
	bad = DefaultThresholds()
	bad.Hysteresis = 0.75
	if err := bad.Validate(); err == nil {
		t.Error("hysteresis above an orange level: no error")
	}
}
