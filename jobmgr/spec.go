package jobmgr

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// MaxInstances is the most instances one job may have.
const MaxInstances = 100000

// MaxNameLength bounds job names.
const MaxNameLength = 253

// DefaultKillGrace is the time between SIGTERM and SIGKILL when a task
// does not set killGracePeriodSeconds.
const DefaultKillGrace = 10

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	zdec, _ = zstd.NewReader(nil)
)

func encodeSpec(s *pelotonv1.JobSpec) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, err
	}
	return zenc.EncodeAll(b, nil), nil
}

func decodeSpec(b []byte) (*pelotonv1.JobSpec, error) {
	raw, err := zdec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("decompress job spec: %w", err)
	}
	s := &pelotonv1.JobSpec{}
	return s, proto.Unmarshal(raw, s)
}

// mergeTaskSpec returns def with the fields o sets replacing def's. env is
// merged key by key; every other field (placement included) is replaced whole.
func mergeTaskSpec(def, o *pelotonv1.TaskSpec) *pelotonv1.TaskSpec {
	out := proto.Clone(def).(*pelotonv1.TaskSpec)
	if def == nil {
		out = &pelotonv1.TaskSpec{}
	}
	if o == nil {
		return out
	}
	if len(o.Command) > 0 {
		out.Command = append([]string(nil), o.Command...)
	}
	if len(o.Env) > 0 {
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		for k, v := range o.Env {
			out.Env[k] = v
		}
	}
	if o.Image != "" {
		out.Image = o.Image
	}
	if o.Resources != nil {
		out.Resources = proto.Clone(o.Resources).(*pelotonv1.Resources)
	}
	if o.RestartPolicy != nil {
		out.RestartPolicy = proto.Clone(o.RestartPolicy).(*pelotonv1.RestartPolicy)
	}
	if o.KillGracePeriodSeconds != 0 {
		out.KillGracePeriodSeconds = o.KillGracePeriodSeconds
	}
	if o.Placement != nil {
		out.Placement = proto.Clone(o.Placement).(*pelotonv1.PlacementSpec)
	}
	if len(o.Ports) > 0 {
		out.Ports = nil
		for _, p := range o.Ports {
			out.Ports = append(out.Ports, proto.Clone(p).(*pelotonv1.PortSpec))
		}
	}
	if o.HealthCheck != nil {
		out.HealthCheck = proto.Clone(o.HealthCheck).(*pelotonv1.HealthCheck)
	}
	if o.Volume != nil {
		out.Volume = proto.Clone(o.Volume).(*pelotonv1.VolumeSpec)
	}
	if o.Metrics != nil {
		out.Metrics = proto.Clone(o.Metrics).(*pelotonv1.MetricsSpec)
	}
	return out
}

// defaultStrategy is the placement strategy of jobs whose spec does not pick
// one: BATCH work packs, to keep whole hosts free for large tasks; the
// long-running types will spread, so that one host takes few instances down.
func defaultStrategy(t pelotonv1.JobType) pelotonv1.PlacementStrategy {
	if t == pelotonv1.JobType_BATCH {
		return pelotonv1.PlacementStrategy_PACK
	}
	return pelotonv1.PlacementStrategy_SPREAD
}

// placementOf is the placement of instance inst: its override's if that sets
// one (an override replaces placement whole), else the default spec's; nil if
// neither does. It is not copied: every instance without an override shares
// the default's, so resmgr holds one pointer per task. Callers must not
// modify it.
func placementOf(s *pelotonv1.JobSpec, inst uint32) *pelotonv1.PlacementSpec {
	if p := s.InstanceSpecs[inst].GetPlacement(); p != nil {
		return p
	}
	return s.GetDefaultSpec().GetPlacement()
}

// strategyOf is the effective placement strategy of instance inst.
func strategyOf(s *pelotonv1.JobSpec, inst uint32) pelotonv1.PlacementStrategy {
	if st := placementOf(s, inst).GetStrategy(); st != pelotonv1.PlacementStrategy_PLACEMENT_STRATEGY_UNSPECIFIED {
		return st
	}
	return defaultStrategy(s.Type)
}

// validatePlacement checks a placement spec. field is its path.
func validatePlacement(p *pelotonv1.PlacementSpec, field string) error {
	if p == nil {
		return nil
	}
	if _, ok := pelotonv1.PlacementStrategy_name[int32(p.Strategy)]; !ok {
		return apierr.Invalid(field+".strategy", "unknown strategy %d: one of PACK, SPREAD", int32(p.Strategy))
	}
	if err := validateConstraints(p.Constraints, field+".constraints"); err != nil {
		return err
	}
	for i, t := range p.AnyOf {
		tf := fmt.Sprintf("%s.anyOf[%d]", field, i)
		if len(t.GetConstraints()) == 0 {
			return apierr.Invalid(tf+".constraints", "required: a term with no constraints would match every host")
		}
		if err := validateConstraints(t.Constraints, tf+".constraints"); err != nil {
			return err
		}
	}
	for i, t := range p.Tolerations {
		tf := fmt.Sprintf("%s.tolerations[%d]", field, i)
		switch {
		case t == nil:
			return apierr.Invalid(tf, "required")
		case t.Effect != "" && t.Effect != "NoSchedule" && t.Effect != "NoExecute":
			return apierr.Invalid(tf+".effect", "one of NoSchedule, NoExecute or empty (both), got %q", t.Effect)
		case t.Op == pelotonv1.TolerationOp_EQUAL && t.Key == "":
			return apierr.Invalid(tf+".key", "required with EQUAL (only TOLERATE_EXISTS takes an empty key: every taint)")
		case t.Op == pelotonv1.TolerationOp_TOLERATE_EXISTS && t.Value != "":
			return apierr.Invalid(tf+".value", "TOLERATE_EXISTS takes no value, got %q", t.Value)
		case t.Op != pelotonv1.TolerationOp_EQUAL && t.Op != pelotonv1.TolerationOp_TOLERATE_EXISTS:
			return apierr.Invalid(tf+".op", "required: one of EQUAL, TOLERATE_EXISTS")
		}
	}
	return nil
}

// validateConstraints checks a list of constraints; field is its path.
func validateConstraints(cs []*pelotonv1.Constraint, field string) error {
	for i, c := range cs {
		cf := fmt.Sprintf("%s[%d]", field, i)
		if c == nil {
			return apierr.Invalid(cf, "required")
		}
		if c.Label == "" {
			return apierr.Invalid(cf+".label", "required: the host label to compare, e.g. zone")
		}
		n := len(c.Values)
		switch c.Op {
		case pelotonv1.ConstraintOp_EQUALS, pelotonv1.ConstraintOp_NOT_EQUALS:
			if n != 1 {
				return apierr.Invalid(cf+".values", "%s needs exactly one value, got %d", c.Op, n)
			}
		case pelotonv1.ConstraintOp_IN, pelotonv1.ConstraintOp_NOT_IN:
			if n == 0 {
				return apierr.Invalid(cf+".values", "%s needs at least one value", c.Op)
			}
		case pelotonv1.ConstraintOp_EXISTS, pelotonv1.ConstraintOp_DOES_NOT_EXIST:
			if n != 0 {
				return apierr.Invalid(cf+".values", "%s takes no values, got %d", c.Op, n)
			}
		case pelotonv1.ConstraintOp_GREATER_THAN, pelotonv1.ConstraintOp_LESS_THAN:
			if n != 1 {
				return apierr.Invalid(cf+".values", "%s needs exactly one value, got %d", c.Op, n)
			}
			if _, err := strconv.ParseInt(c.Values[0], 10, 64); err != nil {
				return apierr.Invalid(cf+".values[0]", "%s needs an integer, got %q", c.Op, c.Values[0])
			}
		default:
			return apierr.Invalid(cf+".op", "required: one of EQUALS, NOT_EQUALS, EXISTS, DOES_NOT_EXIST, IN, NOT_IN, GREATER_THAN, LESS_THAN")
		}
	}
	return nil
}

// instanceSpec is the effective spec of one instance.
func instanceSpec(s *pelotonv1.JobSpec, inst uint32) *pelotonv1.TaskSpec {
	return mergeTaskSpec(s.DefaultSpec, s.InstanceSpecs[inst])
}

// validateLongRunning checks the parts of a task spec that depend on the
// job type, and those that refer to its ports: ports, health checks,
// metrics and volumes. field is the task's path.
func validateLongRunning(t *pelotonv1.TaskSpec, typ pelotonv1.JobType, field string) error {
	names := map[string]bool{}
	values := map[uint32]bool{}
	for i, p := range t.Ports {
		pf := fmt.Sprintf("%s.ports[%d]", field, i)
		if p == nil || p.Name == "" {
			return apierr.Invalid(pf+".name", "required, e.g. http")
		}
		for _, c := range p.Name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return apierr.Invalid(pf+".name", "%q: only letters, digits, '_' and '-'", p.Name)
			}
		}
		if names[hostmgr.PortEnvName(p.Name)] {
			return apierr.Invalid(pf+".name", "%q is named twice (as %s)", p.Name, hostmgr.PortEnvName(p.Name))
		}
		names[hostmgr.PortEnvName(p.Name)] = true
		if p.Value > 65535 {
			return apierr.Invalid(pf+".value", "at most 65535, got %d", p.Value)
		}
		if p.Value != 0 && values[p.Value] {
			return apierr.Invalid(pf+".value", "port %d is given twice", p.Value)
		}
		values[p.Value] = true
	}
	if hc := t.HealthCheck; hc != nil {
		hf := field + ".healthCheck"
		switch {
		case len(hc.Command) > 0 && hc.Http != nil:
			return apierr.Invalid(hf, "set command or http, not both")
		case len(hc.Command) == 0 && hc.Http == nil:
			return apierr.Invalid(hf, "set command (exit 0 = healthy) or http (a 2xx/3xx answer = healthy)")
		case len(hc.Command) > 0 && hc.Command[0] == "":
			return apierr.Invalid(hf+".command", "the first element is the program to run")
		case hc.Http != nil && !names[hostmgr.PortEnvName(hc.Http.Port)]:
			return apierr.Invalid(hf+".http.port", "%q is not one of the task's ports", hc.Http.Port)
		case hc.Http != nil && hc.Http.Path != "" && !strings.HasPrefix(hc.Http.Path, "/"):
			return apierr.Invalid(hf+".http.path", "must start with /, got %q", hc.Http.Path)
		case hc.TimeoutSeconds > 3600 || hc.IntervalSeconds > 3600 || hc.InitialDelaySeconds > 3600:
			return apierr.Invalid(hf, "delays, intervals and timeouts are at most 3600 seconds")
		}
		if !isLongRunning(typ) {
			return apierr.Invalid(hf, "only SERVICE, STATEFUL and DAEMON jobs have health checks; a %s job runs to completion", typ)
		}
	}
	if err := validateMetrics(t.Metrics, names, field+".metrics"); err != nil {
		return err
	}
	switch {
	case typ == pelotonv1.JobType_STATEFUL && t.Volume == nil:
		return apierr.Invalid(field+".volume", "required for STATEFUL jobs: each instance's persistent volume, e.g. {sizeMb: 1024}")
	case typ == pelotonv1.JobType_STATEFUL && t.Volume.SizeMb == 0:
		return apierr.Invalid(field+".volume.sizeMb", "must be > 0")
	case typ != pelotonv1.JobType_STATEFUL && t.Volume != nil:
		return apierr.Invalid(field+".volume", "only STATEFUL jobs have persistent volumes")
	}
	return nil
}

// DefaultMetricsPath is MetricsSpec.path's default, where Prometheus
// clients serve.
const DefaultMetricsPath = "/metrics"

// maxMetricsFieldBytes bounds a metrics spec's path and histogram name.
// Both go into the run's environment, where the host agent reads a bounded
// head of it (hostagent/runs.go), and no real path or metric name comes
// near it.
const maxMetricsFieldBytes = 1024

// validateMetrics checks a task's metrics spec. ports are the task's port
// variables (hostmgr.PortEnvName of each name), field the spec's path.
func validateMetrics(m *pelotonv1.MetricsSpec, ports map[string]bool, field string) error {
	if m == nil {
		return nil
	}
	switch {
	case m.Port == "":
		return apierr.Invalid(field+".port", "required: the name of the task's port that serves Prometheus text, e.g. http")
	case !ports[hostmgr.PortEnvName(m.Port)]:
		return apierr.Invalid(field+".port", "%q is not one of the task's ports", m.Port)
	case m.Path != "" && !strings.HasPrefix(m.Path, "/"):
		return apierr.Invalid(field+".path", "must start with /, got %q", m.Path)
	case len(m.Path) > maxMetricsFieldBytes:
		return apierr.Invalid(field+".path", "at most %d bytes, got %d", maxMetricsFieldBytes, len(m.Path))
	case m.LatencyHistogram == "":
		return apierr.Invalid(field+".latencyHistogram", "required: the histogram, in seconds, whose P99 is the instance's latency, e.g. http_request_duration_seconds")
	case len(m.LatencyHistogram) > maxMetricsFieldBytes:
		return apierr.Invalid(field+".latencyHistogram", "at most %d bytes, got %d", maxMetricsFieldBytes, len(m.LatencyHistogram))
	case !validMetricName(m.LatencyHistogram):
		return apierr.Invalid(field+".latencyHistogram", "%q is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", m.LatencyHistogram)
	}
	// The path becomes part of a URL the agent requests: visible ASCII
	// only, so that what is requested is what the spec shows (a space or
	// a control character would be escaped, or cut the request line).
	for i := 0; i < len(m.Path); i++ {
		if c := m.Path[i]; c <= ' ' || c >= 0x7f {
			return apierr.Invalid(field+".path", "%q: only visible ASCII (percent-encode the rest), found byte %#x at %d", m.Path, c, i)
		}
	}
	return nil
}

// validMetricName reports whether name is a classic Prometheus metric name,
// [a-zA-Z_:][a-zA-Z0-9_:]*. UTF-8 names are refused: the histogram's
// series are named name_bucket and so on, and only a classic name is the
// same in every exposition format and client.
func validMetricName(name string) bool {
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

// amountWithUnit is a quantity as a spec writes it, with its unit: "64
// CPUs" (cores, never milli-CPU), "8192 MiB", "1 GPU".
func amountWithUnit(k resources.Kind, v int64) string { return resources.AmountWithUnit(k, v) }

// validateTaskSpec checks one effective task spec. field is its path.
func validateTaskSpec(t *pelotonv1.TaskSpec, field string, largest resources.Resources) (resources.Resources, error) {
	if len(t.Command) == 0 || t.Command[0] == "" {
		return resources.Resources{}, apierr.Invalid(field+".command", "required: the argv of the process to run")
	}
	for k := range t.Env {
		if k == "" {
			return resources.Resources{}, apierr.Invalid(field+".env", "variable names must not be empty")
		}
	}
	if err := checkTaskSizes(t, field); err != nil {
		return resources.Resources{}, err
	}
	r, err := resources.FromProto(t.Resources, field+".resources")
	if err != nil {
		return r, apierr.Invalid(err.(*resources.FieldError).Field, "%s", err.(*resources.FieldError).Reason)
	}
	if r.MilliCPU == 0 {
		return r, apierr.Invalid(field+".resources.cpu", "must be > 0")
	}
	if r.MemoryMB == 0 {
		return r, apierr.Invalid(field+".resources.memoryMb", "must be > 0")
	}
	for k := resources.Kind(0); k < resources.NumKinds; k++ {
		if r.Get(k) > largest.Get(k) {
			return r, apierr.Invalid(field+".resources."+k.String(),
				"asks for %s but the largest host has %s (%s); the task could never run",
				amountWithUnit(k, r.Get(k)), resources.FormatAmount(k, largest.Get(k)), largest)
		}
	}
	if v := t.GetVolume().GetSizeMb(); v > 0 && r.DiskMB+int64(v) > largest.DiskMB {
		return r, apierr.Invalid(field+".volume.sizeMb",
			"the volume (%d MiB) and resources.diskMb (%d) need %d MiB of disk but the largest host has %d; the instance could never run", v, r.DiskMB, r.DiskMB+int64(v), largest.DiskMB)
	}
	if t.KillGracePeriodSeconds > 3600 {
		return r, apierr.Invalid(field+".killGracePeriodSeconds", "at most 3600, got %d", t.KillGracePeriodSeconds)
	}
	if err := validatePlacement(t.Placement, field+".placement"); err != nil {
		return r, err
	}
	return r, nil
}

// validateJobSpec checks everything about a spec that does not need the pool
// tree. largest is the per-kind maximum host capacity.
func validateJobSpec(s *pelotonv1.JobSpec, largest resources.Resources) error {
	if s == nil {
		return apierr.Invalid("spec", "required")
	}
	if s.Name == "" {
		return apierr.Invalid("spec.name", "required")
	}
	if len(s.Name) > MaxNameLength {
		return apierr.Invalid("spec.name", "at most %d characters, got %d", MaxNameLength, len(s.Name))
	}
	if err := checkJobSizes(s); err != nil {
		return err
	}
	switch s.Type {
	case pelotonv1.JobType_BATCH, pelotonv1.JobType_SERVICE, pelotonv1.JobType_STATEFUL, pelotonv1.JobType_DAEMON:
	case pelotonv1.JobType_JOB_TYPE_UNSPECIFIED:
		return apierr.Invalid("spec.type", "required: one of BATCH, SERVICE, STATEFUL, DAEMON")
	default:
		return apierr.Invalid("spec.type", "unknown type %d: one of BATCH, SERVICE, STATEFUL, DAEMON", int32(s.Type))
	}
	if s.Pool == "" {
		return apierr.Invalid("spec.pool", "required: the path of a leaf resource pool, e.g. /default")
	}
	if s.Type == pelotonv1.JobType_DAEMON {
		if s.InstanceCount != 0 {
			return apierr.Invalid("spec.instanceCount", "must be 0 or unset for DAEMON jobs: they run one instance on every matching host, got %d", s.InstanceCount)
		}
		if len(s.InstanceSpecs) > 0 {
			return apierr.Invalid("spec.instanceSpecs", "DAEMON jobs have no per-instance overrides: their instances are their hosts")
		}
		if s.GetSla().GetMinimumRunningInstances() > 0 || s.GetSla().GetMaximumRunningInstances() > 0 {
			return apierr.Invalid("spec.sla", "DAEMON jobs have no gang (minimumRunningInstances) and no maximumRunningInstances")
		}
	} else if s.InstanceCount == 0 {
		return apierr.Invalid("spec.instanceCount", "must be > 0")
	}
	if s.Type == pelotonv1.JobType_STATEFUL && s.GetSla().GetPreemptible() {
		return apierr.Invalid("spec.sla.preemptible", "STATEFUL jobs are never preempted: their instances are tied to the volumes on their hosts")
	}
	if isLongRunning(s.Type) && s.GetSla().GetMinimumRunningInstances() > 1 {
		return apierr.Invalid("spec.sla.minimumRunningInstances", "gangs are for BATCH jobs; a %s job's instances are kept running one by one", s.Type)
	}
	if s.InstanceCount > MaxInstances {
		return apierr.Invalid("spec.instanceCount", "at most %d, got %d", MaxInstances, s.InstanceCount)
	}
	if s.Sla != nil && s.Sla.MaximumRunningInstances > 0 && s.Sla.MinimumRunningInstances > s.Sla.MaximumRunningInstances {
		return apierr.Invalid("spec.sla.minimumRunningInstances", "a gang of %d could never start with sla.maximumRunningInstances %d", s.Sla.MinimumRunningInstances, s.Sla.MaximumRunningInstances)
	}
	if s.Sla != nil && s.Sla.MinimumRunningInstances > s.InstanceCount {
		return apierr.Invalid("spec.sla.minimumRunningInstances", "must be <= instanceCount %d, got %d", s.InstanceCount, s.Sla.MinimumRunningInstances)
	}
	if err := validateGang(s); err != nil {
		return err
	}
	if err := validateSelfScale(s); err != nil {
		return err
	}
	if slo := s.GetSla().GetLatencySloMs(); slo > 0 {
		switch {
		case s.Type != pelotonv1.JobType_SERVICE:
			return apierr.Invalid("spec.sla.latencySloMs", "latency SLOs are for SERVICE jobs, not %s", s.Type)
		case s.GetDefaultSpec().GetMetrics() == nil:
			return apierr.Invalid("spec.sla.latencySloMs", "needs defaultSpec.metrics: the host agents measure the P99 from the histogram it names")
		case slo > 3_600_000:
			return apierr.Invalid("spec.sla.latencySloMs", "at most 3600000 (an hour), got %d", slo)
		}
	}
	if s.DefaultSpec == nil {
		s.DefaultSpec = &pelotonv1.TaskSpec{}
	}
	keys := make([]uint32, 0, len(s.InstanceSpecs))
	for k := range s.InstanceSpecs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		if k >= extentOf(s.InstanceCount, s.RemovedInstances) {
			return apierr.Invalid(fmt.Sprintf("spec.instanceSpecs.%d", k), "instance %d does not exist: instanceCount is %d", k, s.InstanceCount)
		}
		if slices.Contains(s.RemovedInstances, k) {
			return apierr.Invalid(fmt.Sprintf("spec.instanceSpecs.%d", k), "instance %d does not exist: a scale removed it", k)
		}
	}
	// The default applies to every instance without an override that sets the
	// field, so check it whenever some instance uses it.
	needDefault := len(keys) < int(s.InstanceCount) || s.Type == pelotonv1.JobType_DAEMON
	if needDefault {
		if _, err := validateTaskSpec(s.DefaultSpec, "spec.defaultSpec", largest); err != nil {
			return err
		}
		if err := validateLongRunning(s.DefaultSpec, s.Type, "spec.defaultSpec"); err != nil {
			return err
		}
	}
	for _, k := range keys {
		field := fmt.Sprintf("spec.instanceSpecs.%d", k)
		eff := mergeTaskSpec(s.DefaultSpec, s.InstanceSpecs[k])
		if _, err := validateTaskSpec(eff, field, largest); err != nil {
			return err
		}
		if err := validateLongRunning(eff, s.Type, field); err != nil {
			return err
		}
	}
	return nil
}
