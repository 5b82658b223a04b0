package hostmgr

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/peloton-sched/peloton/internal/sanitize"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Partition profiles. A partition may name labels and agent settings that
// its hosts take when a move settles them in it: the labels are laid over
// the host's own (those its backend reports), so placement constraints
// and host listings see them, and the settings reach the host's agent with
// every ack of its reports (UsageAck.settings) and cap the advisor's
// oversubscription factor on the host.
//
// What a host took is written in its partition record (profile, below) in
// the same compare-and-swap as the step that settles the move, and taken
// off in the same write as the next settle (in another partition, with its
// profile or none) or a cancel that leaves the host where it was. The
// labels are an overlay, never merged into the host's own: taking a
// profile off needs no memory of what it overrode, and a restart, which
// reloads the record, neither loses a profile nor applies it twice. The
// profile recorded is a copy of the one configured when the move settled,
// so changing the configuration touches no host until it moves again.

// Profile is what one partition's hosts take when they join it.
type Profile struct {
	// Labels are laid over the host's own labels; a profile label wins
	// over an own label of the same key for as long as the host is in
	// the partition.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels"`
	// Agent are the settings of the host's agent and of hostmgr's view of
	// the host.
	Agent AgentSettings `json:"agent,omitzero" yaml:"agent"`
}

// AgentSettings are a profile's settings of its hosts' agents. A field at
// 0 leaves the agent's own config (thresholds) or the advisor's factor
// (the cap). To add a setting: a field here with its json and yaml names,
// its check in validate, a field in the AgentSettings message
// (proto/peloton/api/v1/peloton.proto) filled in proto, and its use in
// hostagent (settings.go) or hostmgr.
type AgentSettings struct {
	// QoSCPUHigh and QoSCPULow are the agent's QoS CPU thresholds,
	// fractions of the host's cores (hostagent.QoSPolicy.CPUHigh, CPULow).
	QoSCPUHigh float64 `json:"qosCpuHigh,omitempty" yaml:"qosCpuHigh"`
	QoSCPULow  float64 `json:"qosCpuLow,omitempty" yaml:"qosCpuLow"`
	// QoSMemHigh and QoSMemLow are the same for memory.
	QoSMemHigh float64 `json:"qosMemHigh,omitempty" yaml:"qosMemHigh"`
	QoSMemLow  float64 `json:"qosMemLow,omitempty" yaml:"qosMemLow"`
	// OversubscriptionCap is the most the advisor's oversubscription
	// factor may be on the host (1: no oversubscription; at most 10, the
	// advisor's own bound).
	OversubscriptionCap float64 `json:"oversubscriptionCap,omitempty" yaml:"oversubscriptionCap"`
}

// ProfilesFile is the configuration file's shape:
//
//	profiles:
//	  batch:
//	    labels: {tier: batch}
//	    agent: {qosCpuHigh: 0.9, qosCpuLow: 0.75, oversubscriptionCap: 2}
type ProfilesFile struct {
	Profiles map[string]Profile `yaml:"profiles"`
}

// ParseProfiles reads a profiles file (YAML, or JSON which is YAML too)
// and checks it. Errors name the field, e.g.
// profiles.batch.agent.qosCpuLow.
func ParseProfiles(b []byte) (map[string]Profile, error) {
	var f ProfilesFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	if err := ValidateProfiles(f.Profiles); err != nil {
		return nil, err
	}
	return f.Profiles, nil
}

// reservedLabel is the label backends carry the partition in; a profile
// must not set it.
const reservedLabel = "peloton.io/partition"

// ValidateProfiles says what is wrong with profiles, every field named.
func ValidateProfiles(profiles map[string]Profile) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		at := "profiles." + name
		if err := ValidatePartition(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
		errs = append(errs, profiles[name].validate(at)...)
	}
	return errors.Join(errs...)
}

func (p Profile) validate(at string) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		v, field := p.Labels[k], fmt.Sprintf("%s.labels[%q]", at, k)
		switch {
		case k == "" || sanitize.Text(k, sanitize.MaxLabelKey) != k:
			errs = append(errs, fmt.Errorf("%s: a label key must be 1 to %d bytes of printable UTF-8", field, sanitize.MaxLabelKey))
		case k == reservedLabel:
			errs = append(errs, fmt.Errorf("%s: the partition's own label; a profile cannot set it", field))
		case sanitize.Text(v, sanitize.MaxLabelValue) != v:
			errs = append(errs, fmt.Errorf("%s: %q: a label value must be at most %d bytes of printable UTF-8", field, v, sanitize.MaxLabelValue))
		}
	}
	return append(errs, p.Agent.validate(at+".agent")...)
}

func (s AgentSettings) validate(at string) []error {
	var errs []error
	pair := func(kind string, high, low float64) {
		switch {
		case high == 0 && low == 0:
		case !(high > 0 && high <= 1):
			errs = append(errs, fmt.Errorf("%s.qos%sHigh: %v is not a fraction of capacity in (0, 1]", at, kind, high))
		case !(low > 0 && low < high):
			errs = append(errs, fmt.Errorf("%s.qos%sLow: %v must be > 0 and below qos%sHigh %v", at, kind, low, kind, high))
		}
	}
	pair("Cpu", s.QoSCPUHigh, s.QoSCPULow)
	pair("Mem", s.QoSMemHigh, s.QoSMemLow)
	if c := s.OversubscriptionCap; c != 0 && !(c >= 1 && c <= 10) {
		errs = append(errs, fmt.Errorf("%s.oversubscriptionCap: %v: want 1 to 10 (or unset)", at, c))
	}
	return errs
}

// proto is s as the API carries it; nil when s sets nothing.
func (s AgentSettings) proto() *pelotonv1.AgentSettings {
	if s == (AgentSettings{}) {
		return nil
	}
	return &pelotonv1.AgentSettings{QosCpuHigh: s.QoSCPUHigh, QosCpuLow: s.QoSCPULow,
		QosMemHigh: s.QoSMemHigh, QosMemLow: s.QoSMemLow, OversubscriptionCap: s.OversubscriptionCap}
}

// capFactor is the advisor's factor for a host under the cap of the
// profile it took (none: the factor).
func (s AgentSettings) capFactor(factor float64) float64 {
	if s.OversubscriptionCap >= 1 {
		return min(factor, s.OversubscriptionCap)
	}
	return factor
}

// appliedProfile is the profile a host took, as its partition record
// keeps it: the partition whose profile it is, and a copy of it.
type appliedProfile struct {
	Partition string `json:"partition"`
	Profile
}

// profileFor is what a host settling in partition takes: a copy of its
// profile, or nil when it has none (or sets nothing).
func (mt *Maintenance) profileFor(partition string) *appliedProfile {
	p, ok := mt.hm.profiles[partition]
	if !ok || (len(p.Labels) == 0 && p.Agent == (AgentSettings{})) {
		return nil
	}
	return &appliedProfile{Partition: partition, Profile: Profile{Labels: maps.Clone(p.Labels), Agent: p.Agent}}
}

// overlayLabels is own with the labels of profile p laid over it; own
// itself when p adds none. It never writes into own.
func overlayLabels(own map[string]string, p *appliedProfile) map[string]string {
	if p == nil || len(p.Labels) == 0 {
		return own
	}
	out := make(map[string]string, len(own)+len(p.Labels))
	maps.Copy(out, own)
	maps.Copy(out, p.Labels)
	return out
}

// AgentSettings returns the settings of the profile host name took, for
// its agent (UsageAck.settings); nil when it took none or is unknown.
func (us *Usage) AgentSettings(name string) *pelotonv1.AgentSettings {
	us.hm.mu.Lock()
	defer us.hm.mu.Unlock()
	if h := us.hm.hosts[name]; h != nil {
		return h.agentSettings()
	}
	return nil
}

// agentSettings are the settings of the profile h took, for the API.
func (h *host) agentSettings() *pelotonv1.AgentSettings {
	if h.profile == nil {
		return nil
	}
	return h.profile.Agent.proto()
}

// capFactor is the advisor's factor on h under its profile's cap.
func (h *host) capFactor(factor float64) float64 {
	if h.profile == nil {
		return factor
	}
	return h.profile.Agent.capFactor(factor)
}

// sameLabels reports whether a and b hold the same labels.
func sameLabels(a, b map[string]string) bool { return maps.Equal(a, b) }
