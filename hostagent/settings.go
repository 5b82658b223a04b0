package hostagent

import (
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Settings from the stack. A host that a partition move settled in a
// partition with a profile takes the profile's agent settings; the stack
// sends them with every ack of the agent's reports (UsageAck.settings),
// and an ack without them means none: the agent's config stands again.
// The ack reader only notes them (noteSettings); the reading loop, which
// owns the QoS controller, applies a change before its next decision
// (takeSettings), so a decision never sees half of one.
//
// The profile's QoS thresholds replace the config's, each kind (CPU,
// memory) as a pair; what the profile leaves at 0 is the config's. A
// profile may turn QoS on for an agent whose config left it off, when the
// agent can run it (its Runs can kill, and it knows its capacity);
// settings the agent cannot use are logged and ignored. A change of
// thresholds starts the count of hot readings over.

// noteSettings notes the settings an ack carried.
func (a *Agent) noteSettings(s *pelotonv1.AgentSettings) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if proto.Equal(s, a.stats.Settings) {
		return
	}
	if s != nil {
		s = proto.Clone(s).(*pelotonv1.AgentSettings)
	}
	a.stats.Settings = s
	a.settingsGen++
}

// takeSettings applies the settings noted last, when they changed since
// the reading loop last took them.
func (a *Agent) takeSettings() {
	a.mu.Lock()
	s, gen := a.stats.Settings, a.settingsGen
	a.mu.Unlock()
	if gen == a.settingsSeen {
		return
	}
	a.settingsSeen = gen
	a.qosState = QoSState{}
	p, on := withSettings(a.baseQoS, s)
	if !on {
		a.qosRuns = nil
		a.log.Info("QoS controller off: the host's partition profile sets no thresholds and the config none")
		return
	}
	if err := a.qosConfig(p); err != nil {
		a.log.Warn("the host's partition profile settings are not applied", "err", err)
		return
	}
	a.log.Info("QoS thresholds from the host's partition profile", "cpuHigh", a.qos.CPUHigh, "cpuLow", a.qos.CPULow,
		"memHigh", a.qos.MemHigh, "memLow", a.qos.MemLow)
}

// withSettings is policy base (nil: none) with the thresholds s sets, and
// whether it watches anything.
func withSettings(base *QoSPolicy, s *pelotonv1.AgentSettings) (QoSPolicy, bool) {
	var p QoSPolicy
	if base != nil {
		p = *base
	}
	if s.GetQosCpuHigh() > 0 {
		p.CPUHigh, p.CPULow = s.GetQosCpuHigh(), s.GetQosCpuLow()
	}
	if s.GetQosMemHigh() > 0 {
		p.MemHigh, p.MemLow = s.GetQosMemHigh(), s.GetQosMemLow()
	}
	return p, p.CPUHigh > 0 || p.MemHigh > 0
}
