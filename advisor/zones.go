package advisor

import (
	"fmt"
	"time"
)

// Zone is how hot a host runs.
type Zone int

const (
	// Unknown: no fresh report of the host.
	Unknown Zone = iota
	Green
	Orange
	Red
)

func (z Zone) String() string {
	switch z {
	case Green:
		return "green"
	case Orange:
		return "orange"
	case Red:
		return "red"
	}
	return "unknown"
}

// Zones are the zone names, in order.
var Zones = []Zone{Green, Orange, Red, Unknown}

// Thresholds classify hosts. A host enters orange when its CPU or memory
// use (a fraction of its capacity) or the worst P99 of its
// latency-sensitive instances (a fraction of their SLO) reaches the
// orange entry level, red when one reaches the red one. It leaves a zone
// for a cooler one only when every figure is below that zone's entry
// level less Hysteresis, and only after MinDwell in the zone: a host
// heats at once and cools slowly, so it does not flap.
type Thresholds struct {
	CPUOrange, CPURed         float64
	MemOrange, MemRed         float64
	LatencyOrange, LatencyRed float64
	Hysteresis                float64
	MinDwell                  time.Duration
}

// DefaultThresholds are the thresholds of a partition without its own.
func DefaultThresholds() Thresholds {
	return Thresholds{CPUOrange: 0.7, CPURed: 0.9, MemOrange: 0.8, MemRed: 0.95,
		LatencyOrange: 0.8, LatencyRed: 1.0, Hysteresis: 0.1, MinDwell: 30 * time.Second}
}

// Validate names the first bad threshold.
func (t Thresholds) Validate() error {
	pair := func(name string, orange, red float64) error {
		if !(orange > 0 && orange <= red) {
			return fmt.Errorf("%s: want 0 < orange (%g) <= red (%g)", name, orange, red)
		}
		return nil
	}
	if err := pair("cpu", t.CPUOrange, t.CPURed); err != nil {
		return err
	}
	if err := pair("memory", t.MemOrange, t.MemRed); err != nil {
		return err
	}
	if err := pair("latency", t.LatencyOrange, t.LatencyRed); err != nil {
		return err
	}
	switch {
	case t.Hysteresis < 0 || t.Hysteresis >= t.CPUOrange || t.Hysteresis >= t.MemOrange || t.Hysteresis >= t.LatencyOrange:
		return fmt.Errorf("hysteresis %g: want >= 0 and below every orange level", t.Hysteresis)
	case t.MinDwell < 0:
		return fmt.Errorf("min dwell %s: want >= 0", t.MinDwell)
	}
	return nil
}

// Reading is what a round knows of one host's heat.
type Reading struct {
	// Fresh is false when the host's agent has not reported lately: the
	// host is Unknown, whatever else the reading says.
	Fresh bool
	// CPU and Mem are the host's use as a fraction of its capacity;
	// Latency the worst P99/SLO of its latency-sensitive instances (0
	// without any).
	CPU, Mem, Latency float64
	// OwnCPU is the CPU fraction used by its non-revocable work: what
	// stays when revocable work is moved or killed.
	OwnCPU float64
}

// ZoneState is a host's zone and since when it is in it.
type ZoneState struct {
	Zone  Zone
	Since time.Time
}

// level is the zone a reading reaches, with every entry level lowered by
// drop (0 to enter, Hysteresis to stay).
func (t Thresholds) level(r Reading, drop float64) Zone {
	switch {
	case r.CPU >= t.CPURed-drop || r.Mem >= t.MemRed-drop || r.Latency >= t.LatencyRed-drop:
		return Red
	case r.CPU >= t.CPUOrange-drop || r.Mem >= t.MemOrange-drop || r.Latency >= t.LatencyOrange-drop:
		return Orange
	}
	return Green
}

// Classify is a host's next zone state, from its state and a reading at now.
func (t Thresholds) Classify(st ZoneState, r Reading, now time.Time) ZoneState {
	if !r.Fresh {
		if st.Zone == Unknown && !st.Since.IsZero() {
			return st
		}
		return ZoneState{Zone: Unknown, Since: now}
	}
	enter := t.level(r, 0)
	switch {
	case st.Zone == Unknown || enter > st.Zone:
		// A new reading, or hotter: at once.
		return ZoneState{Zone: enter, Since: now}
	case enter == st.Zone:
		return st
	}
	// Cooler: only once below the zone's levels less the hysteresis, and
	// after the dwell.
	stay := t.level(r, t.Hysteresis)
	if stay >= st.Zone || now.Sub(st.Since) < t.MinDwell {
		return st
	}
	return ZoneState{Zone: stay, Since: now}
}
