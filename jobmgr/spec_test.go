package jobmgr

import (
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// jobBuilder builds specs for tests: MakeJob("x").Instances(3).Obj().
type jobBuilder struct{ s *pelotonv1.JobSpec }

func MakeJob(name string) *jobBuilder {
	return &jobBuilder{&pelotonv1.JobSpec{
		Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{
			Command:   []string{"/bin/true"},
			Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 32},
		},
	}}
}
func (b *jobBuilder) Instances(n uint32) *jobBuilder { b.s.InstanceCount = n; return b }
func (b *jobBuilder) Command(c ...string) *jobBuilder {
	b.s.DefaultSpec.Command = c
	return b
}
func (b *jobBuilder) CPU(c float64) *jobBuilder { b.s.DefaultSpec.Resources.Cpu = c; return b }
func (b *jobBuilder) Override(i uint32, t *pelotonv1.TaskSpec) *jobBuilder {
	if b.s.InstanceSpecs == nil {
		b.s.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{}
	}
	b.s.InstanceSpecs[i] = t
	return b
}
func (b *jobBuilder) With(fn func(*pelotonv1.JobSpec)) *jobBuilder { fn(b.s); return b }
func (b *jobBuilder) Type(t pelotonv1.JobType) *jobBuilder         { b.s.Type = t; return b }
func (b *jobBuilder) Volume(mb uint32) *jobBuilder {
	b.s.DefaultSpec.Volume = &pelotonv1.VolumeSpec{SizeMb: mb}
	return b
}
func (b *jobBuilder) Health(h *pelotonv1.HealthCheck) *jobBuilder {
	b.s.DefaultSpec.HealthCheck = h
	return b
}
func (b *jobBuilder) Ports(ps ...*pelotonv1.PortSpec) *jobBuilder {
	b.s.DefaultSpec.Ports = ps
	return b
}
func (b *jobBuilder) Metrics(m *pelotonv1.MetricsSpec) *jobBuilder {
	b.s.DefaultSpec.Metrics = m
	return b
}
func (b *jobBuilder) Placement(p *pelotonv1.PlacementSpec) *jobBuilder {
	b.s.DefaultSpec.Placement = p
	return b
}

// Constraint adds a constraint to the default spec's placement.
func (b *jobBuilder) Constraint(label string, op pelotonv1.ConstraintOp, values ...string) *jobBuilder {
	if b.s.DefaultSpec.Placement == nil {
		b.s.DefaultSpec.Placement = &pelotonv1.PlacementSpec{}
	}
	p := b.s.DefaultSpec.Placement
	p.Constraints = append(p.Constraints, &pelotonv1.Constraint{Label: label, Op: op, Values: values})
	return b
}
func (b *jobBuilder) Obj() *pelotonv1.JobSpec { return b.s }

var bigHost = resources.Resources{MilliCPU: 8000, MemoryMB: 16384, DiskMB: 100000}

func TestValidateJobSpec(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  *pelotonv1.JobSpec
		field string // "" = valid
	}{
		{"valid", MakeJob("ok").Instances(3).Obj(), ""},
		{"latency SLO of a batch job", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Sla = &pelotonv1.SlaSpec{LatencySloMs: 100} }).Obj(), "spec.sla.latencySloMs"},
		{"latency SLO without metrics", MakeJob("x").Type(pelotonv1.JobType_SERVICE).With(func(s *pelotonv1.JobSpec) {
			s.Sla = &pelotonv1.SlaSpec{LatencySloMs: 100}
		}).Obj(), "spec.sla.latencySloMs"},
		{"latency SLO with metrics", MakeJob("x").Type(pelotonv1.JobType_SERVICE).With(func(s *pelotonv1.JobSpec) {
			s.Sla = &pelotonv1.SlaSpec{LatencySloMs: 100}
			s.DefaultSpec.Ports = []*pelotonv1.PortSpec{{Name: "http"}}
			s.DefaultSpec.Metrics = &pelotonv1.MetricsSpec{Port: "http", Path: "/metrics", LatencyHistogram: "request_seconds"}
		}).Obj(), ""},
		{"nil", nil, "spec"},
		{"no name", MakeJob("").Obj(), "spec.name"},
		{"no type", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Type = 0 }).Obj(), "spec.type"},
		{"unknown type", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Type = 42 }).Obj(), "spec.type"},
		{"daemon with a count", MakeJob("x").Type(pelotonv1.JobType_DAEMON).Instances(3).Obj(), "spec.instanceCount"},
		{"daemon with overrides", MakeJob("x").Type(pelotonv1.JobType_DAEMON).Instances(0).Override(0, &pelotonv1.TaskSpec{}).Obj(), "spec.instanceSpecs"},
		{"stateful without volume", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Obj(), "spec.defaultSpec.volume"},
		{"stateful zero volume", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Volume(0).Obj(), "spec.defaultSpec.volume.sizeMb"},
		{"stateful volume too big", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Volume(1 << 30).Obj(), "spec.defaultSpec.volume.sizeMb"},
		{"stateful preemptible", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Volume(10).With(func(s *pelotonv1.JobSpec) {
			s.Sla = &pelotonv1.SlaSpec{Preemptible: proto.Bool(true)}
		}).Obj(), "spec.sla.preemptible"},
		{"batch with volume", MakeJob("x").Volume(10).Obj(), "spec.defaultSpec.volume"},
		{"batch with health check", MakeJob("x").Health(&pelotonv1.HealthCheck{Command: []string{"true"}}).Obj(), "spec.defaultSpec.healthCheck"},
		{"service gang", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(2).With(func(s *pelotonv1.JobSpec) {
			s.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 2}
		}).Obj(), "spec.sla.minimumRunningInstances"},
		{"empty health check", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Health(&pelotonv1.HealthCheck{}).Obj(), "spec.defaultSpec.healthCheck"},
		{"health check on unknown port", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Health(&pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http"}}).Obj(), "spec.defaultSpec.healthCheck.http.port"},
		{"port without name", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{}).Obj(), "spec.defaultSpec.ports[0].name"},
		{"port twice", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "a"}, &pelotonv1.PortSpec{Name: "A"}).Obj(), "spec.defaultSpec.ports[1].name"},
		{"ports with one variable", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "a-b"}, &pelotonv1.PortSpec{Name: "A_B"}).Obj(), "spec.defaultSpec.ports[1].name"},
		{"port too high", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "a", Value: 70000}).Obj(), "spec.defaultSpec.ports[0].value"},
		{"override breaks volume", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Volume(10).Instances(2).Override(1, &pelotonv1.TaskSpec{Volume: &pelotonv1.VolumeSpec{}}).Obj(), "spec.instanceSpecs.1.volume.sizeMb"},
		{"no pool", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Pool = "" }).Obj(), "spec.pool"},
		{"zero instances", MakeJob("x").Instances(0).Obj(), "spec.instanceCount"},
		{"too many instances", MakeJob("x").Instances(MaxInstances + 1).Obj(), "spec.instanceCount"},
		{"missing command", MakeJob("x").Command().Obj(), "spec.defaultSpec.command"},
		{"negative cpu", MakeJob("x").CPU(-1).Obj(), "spec.defaultSpec.resources.cpu"},
		{"zero cpu", MakeJob("x").CPU(0).Obj(), "spec.defaultSpec.resources.cpu"},
		{"bigger than any host", MakeJob("x").CPU(64).Obj(), "spec.defaultSpec.resources.cpu"},
		{"override out of range", MakeJob("x").Instances(2).Override(5, &pelotonv1.TaskSpec{Command: []string{"x"}}).Obj(), "spec.instanceSpecs.5"},
		{"override bad memory", MakeJob("x").Instances(2).Override(1, &pelotonv1.TaskSpec{Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: -5}}).Obj(), "spec.instanceSpecs.1.resources.memoryMb"},
		{"every instance overridden, no default command", MakeJob("x").Instances(1).Command().Override(0, &pelotonv1.TaskSpec{Command: []string{"echo"}}).Obj(), ""},
		{"gang larger than the running limit", MakeJob("x").Instances(4).With(func(s *pelotonv1.JobSpec) {
			s.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 3, MaximumRunningInstances: 2}
		}).Obj(), "spec.sla.minimumRunningInstances"},
		{"gang larger than job", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 3} }).Obj(), "spec.sla.minimumRunningInstances"},
		{"gangs: valid", MakeJob("x").Instances(6).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 3, SameLabel: "rack"} }).Obj(), ""},
		{"gangs: partial last allowed", MakeJob("x").Instances(7).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 3, AllowPartialLast: true} }).Obj(), ""},
		{"gangs: partial last not allowed", MakeJob("x").Instances(7).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 3} }).Obj(), "spec.gang.size"},
		{"gangs: size 1", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 1} }).Obj(), "spec.gang.size"},
		{"gangs: larger than job", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 3} }).Obj(), "spec.gang.size"},
		{"gangs: with minimumRunningInstances", MakeJob("x").Instances(4).With(func(s *pelotonv1.JobSpec) {
			s.Gang = &pelotonv1.GangSpec{Size: 2}
			s.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 2}
		}).Obj(), "spec.gang"},
		{"gangs: larger than the running limit", MakeJob("x").Instances(4).With(func(s *pelotonv1.JobSpec) {
			s.Gang = &pelotonv1.GangSpec{Size: 4}
			s.Sla = &pelotonv1.SlaSpec{MaximumRunningInstances: 2}
		}).Obj(), "spec.gang.size"},
		{"gangs: bad label", MakeJob("x").Instances(4).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 2, SameLabel: "no spaces"} }).Obj(), "spec.gang.sameLabel"},
		{"gangs: bad policy", MakeJob("x").Instances(4).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 2, OnMemberFailure: 9} }).Obj(), "spec.gang.onMemberFailure"},
		{"gangs: service", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(4).With(func(s *pelotonv1.JobSpec) { s.Gang = &pelotonv1.GangSpec{Size: 2} }).Obj(), "spec.gang"},
		{"self-scale: valid", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Min: 1, Max: 10} }).Obj(), ""},
		{"self-scale: min 0", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Max: 10} }).Obj(), "spec.selfScale.min"},
		{"self-scale: max below min", MakeJob("x").Instances(2).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Min: 2, Max: 1} }).Obj(), "spec.selfScale.max"},
		{"self-scale: count outside", MakeJob("x").Instances(20).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Min: 1, Max: 10} }).Obj(), "spec.instanceCount"},
		{"self-scale: service", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(2).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Min: 1, Max: 10} }).Obj(), "spec.selfScale"},
		{"placement: valid", MakeJob("x").Placement(&pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 1, Partition: "gpu",
			Constraints: []*pelotonv1.Constraint{
				{Label: "zone", Op: pelotonv1.ConstraintOp_IN, Values: []string{"a", "b"}},
				{Label: "disk", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"ssd"}},
				{Label: "gpu", Op: pelotonv1.ConstraintOp_EXISTS},
				{Label: "rack", Op: pelotonv1.ConstraintOp_NOT_IN, Values: []string{"r1"}},
				{Label: "os", Op: pelotonv1.ConstraintOp_NOT_EQUALS, Values: []string{"old"}},
			}}).Obj(), ""},
		{"service: valid", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(3).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Health(&pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http", Path: "/health"}}).Obj(), ""},
		{"stateful: valid", MakeJob("x").Type(pelotonv1.JobType_STATEFUL).Volume(100).Obj(), ""},
		{"daemon: valid", MakeJob("x").Type(pelotonv1.JobType_DAEMON).Instances(0).Obj(), ""},
		{"placement: unknown strategy", MakeJob("x").Placement(&pelotonv1.PlacementSpec{Strategy: 9}).Obj(), "spec.defaultSpec.placement.strategy"},
		{"placement: no label", MakeJob("x").Constraint("", pelotonv1.ConstraintOp_EXISTS).Obj(), "spec.defaultSpec.placement.constraints[0].label"},
		{"placement: no op", MakeJob("x").Constraint("zone", 0, "a").Obj(), "spec.defaultSpec.placement.constraints[0].op"},
		{"placement: unknown op", MakeJob("x").Constraint("zone", 42, "a").Obj(), "spec.defaultSpec.placement.constraints[0].op"},
		{"placement: EQUALS two values", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_EQUALS, "a", "b").Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: NOT_EQUALS no value", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_NOT_EQUALS).Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: IN no value", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_IN).Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: NOT_IN no value", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_NOT_IN).Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: EXISTS with a value", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_EXISTS, "a").Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: second constraint", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_EXISTS).Constraint("rack", pelotonv1.ConstraintOp_IN).Obj(),
			"spec.defaultSpec.placement.constraints[1].values"},
		{"placement: DOES_NOT_EXIST with a value", MakeJob("x").Constraint("zone", pelotonv1.ConstraintOp_DOES_NOT_EXIST, "a").Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: GREATER_THAN two values", MakeJob("x").Constraint("cores", pelotonv1.ConstraintOp_GREATER_THAN, "1", "2").Obj(), "spec.defaultSpec.placement.constraints[0].values"},
		{"placement: LESS_THAN not an integer", MakeJob("x").Constraint("cores", pelotonv1.ConstraintOp_LESS_THAN, "many").Obj(), "spec.defaultSpec.placement.constraints[0].values[0]"},
		{"placement: any-of, tolerations valid", MakeJob("x").Placement(&pelotonv1.PlacementSpec{
			AnyOf: []*pelotonv1.ConstraintTerm{
				{Constraints: []*pelotonv1.Constraint{{Label: "cores", Op: pelotonv1.ConstraintOp_GREATER_THAN, Values: []string{"8"}}}},
				{Constraints: []*pelotonv1.Constraint{{Label: "gpu", Op: pelotonv1.ConstraintOp_DOES_NOT_EXIST}}},
			},
			Tolerations: []*pelotonv1.Toleration{{Key: "gpu", Op: pelotonv1.TolerationOp_EQUAL, Value: "yes", Effect: "NoSchedule"},
				{Op: pelotonv1.TolerationOp_TOLERATE_EXISTS}}}).Obj(), ""},
		{"placement: empty any-of term", MakeJob("x").Placement(&pelotonv1.PlacementSpec{AnyOf: []*pelotonv1.ConstraintTerm{{}}}).Obj(),
			"spec.defaultSpec.placement.anyOf[0].constraints"},
		{"placement: bad constraint in any-of", MakeJob("x").Placement(&pelotonv1.PlacementSpec{AnyOf: []*pelotonv1.ConstraintTerm{
			{Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_IN}}}}}).Obj(),
			"spec.defaultSpec.placement.anyOf[0].constraints[0].values"},
		{"placement: toleration without op", MakeJob("x").Placement(&pelotonv1.PlacementSpec{Tolerations: []*pelotonv1.Toleration{{Key: "a"}}}).Obj(),
			"spec.defaultSpec.placement.tolerations[0].op"},
		{"placement: toleration EQUAL without key", MakeJob("x").Placement(&pelotonv1.PlacementSpec{Tolerations: []*pelotonv1.Toleration{
			{Op: pelotonv1.TolerationOp_EQUAL, Value: "v"}}}).Obj(), "spec.defaultSpec.placement.tolerations[0].key"},
		{"placement: toleration bad effect", MakeJob("x").Placement(&pelotonv1.PlacementSpec{Tolerations: []*pelotonv1.Toleration{
			{Key: "a", Op: pelotonv1.TolerationOp_TOLERATE_EXISTS, Effect: "PreferNoSchedule"}}}).Obj(), "spec.defaultSpec.placement.tolerations[0].effect"},
		{"control character in name", MakeJob("a\x1b[31mb").Obj(), "spec.name"},
		{"newline in name", MakeJob("a\nb").Obj(), "spec.name"},
		{"invalid UTF-8 in name", MakeJob("a\xffb").Obj(), "spec.name"},
		{"name with spaces and accents", MakeJob("nightly étl run").Obj(), ""},
		{"description at the limit", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Description = strings.Repeat("d", MaxDescriptionBytes) }).Obj(), ""},
		{"description over the limit", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Description = strings.Repeat("d", MaxDescriptionBytes+1) }).Obj(), "spec.description"},
		{"label key with a tab", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Labels = map[string]string{"a\tb": "v"} }).Obj(), `spec.labels["a\tb"]`},
		{"label value too long", MakeJob("x").With(func(s *pelotonv1.JobSpec) {
			s.Labels = map[string]string{"k": strings.Repeat("v", MaxLabelValueBytes+1)}
		}).Obj(), `spec.labels["k"]`},
		{"command too long", MakeJob("x").Command("sh", "-c", strings.Repeat("x", MaxCommandBytes)).Obj(), "spec.defaultSpec.command"},
		{"env too large", MakeJob("x").With(func(s *pelotonv1.JobSpec) {
			s.DefaultSpec.Env = map[string]string{"BIG": strings.Repeat("x", MaxEnvBytes)}
		}).Obj(), "spec.defaultSpec.env"},
		{"image too long", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Image = strings.Repeat("i", MaxImageBytes+1) }).Obj(), "spec.defaultSpec.image"},
		{"spec too large", MakeJob("x").Instances(3000).With(func(s *pelotonv1.JobSpec) {
			s.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{}
			for i := uint32(0); i < 3000; i++ {
				s.InstanceSpecs[i] = &pelotonv1.TaskSpec{Env: map[string]string{"E": strings.Repeat("e", 1000)}}
			}
		}).Obj(), "spec"},
		{"metrics: valid", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "http_request_duration_seconds"}).Obj(), ""},
		{"metrics: valid with a path and a colon", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "admin-port"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "admin-port", Path: "/stats/prometheus", LatencyHistogram: "job:request_seconds"}).Obj(), ""},
		{"metrics: port by its variable's spelling", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "admin-port"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "ADMIN_PORT", LatencyHistogram: "l"}).Obj(), ""},
		{"metrics: no port", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.port"},
		{"metrics: unknown port", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "admin", LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.port"},
		{"metrics: no ports at all", MakeJob("x").Type(pelotonv1.JobType_SERVICE).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.port"},
		{"metrics: relative path", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", Path: "metrics", LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.path"},
		{"metrics: space in path", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", Path: "/a b", LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.path"},
		{"metrics: newline in path", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", Path: "/a\nb", LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.path"},
		{"metrics: path too long", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", Path: "/" + strings.Repeat("p", maxMetricsFieldBytes), LatencyHistogram: "l"}).Obj(), "spec.defaultSpec.metrics.path"},
		{"metrics: no histogram", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http"}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: histogram starts with a digit", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "9lives"}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: histogram with a dash", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "request-seconds"}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: histogram with a selector", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: `l{code="200"}`}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: UTF-8 histogram", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "latenz_ä"}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: histogram too long", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: strings.Repeat("l", maxMetricsFieldBytes+1)}).Obj(), "spec.defaultSpec.metrics.latencyHistogram"},
		{"metrics: an override's port unknown", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(3).Ports(&pelotonv1.PortSpec{Name: "http"}).
			Override(2, &pelotonv1.TaskSpec{Metrics: &pelotonv1.MetricsSpec{Port: "admin", LatencyHistogram: "l"}}).Obj(), "spec.instanceSpecs.2.metrics.port"},
		{"metrics: an override's ports drop the default's metrics port", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(2).
			Ports(&pelotonv1.PortSpec{Name: "http"}).Metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "l"}).
			Override(1, &pelotonv1.TaskSpec{Ports: []*pelotonv1.PortSpec{{Name: "grpc"}}}).Obj(), "spec.instanceSpecs.1.metrics.port"},
		{"metrics: an override with its own", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Instances(2).Ports(&pelotonv1.PortSpec{Name: "http"}, &pelotonv1.PortSpec{Name: "admin"}).
			Override(1, &pelotonv1.TaskSpec{Metrics: &pelotonv1.MetricsSpec{Port: "admin", LatencyHistogram: "l"}}).Obj(), ""},
		{"placement: in an override", MakeJob("x").Instances(2).Override(1, &pelotonv1.TaskSpec{Placement: &pelotonv1.PlacementSpec{
			Constraints: []*pelotonv1.Constraint{{Label: "zone"}}}}).Obj(), "spec.instanceSpecs.1.placement.constraints[0].op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateJobSpec(tc.spec, bigHost)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("want InvalidArgument, got %v", err)
			}
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tc.field+":") {
				t.Fatalf("error %q does not start with field %q", msg, tc.field)
			}
		})
	}
}

func TestMergeTaskSpec(t *testing.T) {
	def := &pelotonv1.TaskSpec{Command: []string{"a"}, Env: map[string]string{"A": "1", "B": "2"}, Image: "img:1",
		Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 10}, RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 2}}
	got := mergeTaskSpec(def, &pelotonv1.TaskSpec{Command: []string{"b"}, Env: map[string]string{"B": "3", "C": "4"}})
	want := &pelotonv1.TaskSpec{Command: []string{"b"}, Env: map[string]string{"A": "1", "B": "3", "C": "4"}, Image: "img:1",
		Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 10}, RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 2}}
	if !proto.Equal(got, want) {
		t.Fatalf("merge:\n got %v\nwant %v", got, want)
	}
	if def.Env["B"] != "2" || def.Command[0] != "a" {
		t.Fatal("merge modified the default spec")
	}
}

// TestMergeReplacesMetricsWhole: an override's metrics spec is the
// instance's, not a field-by-field blend with the default's.
func TestMergeReplacesMetricsWhole(t *testing.T) {
	def := &pelotonv1.TaskSpec{Metrics: &pelotonv1.MetricsSpec{Port: "http", Path: "/m", LatencyHistogram: "a"}}
	got := mergeTaskSpec(def, &pelotonv1.TaskSpec{Metrics: &pelotonv1.MetricsSpec{Port: "admin", LatencyHistogram: "b"}})
	if want := (&pelotonv1.MetricsSpec{Port: "admin", LatencyHistogram: "b"}); !proto.Equal(got.Metrics, want) {
		t.Fatalf("merged metrics %v, want %v", got.Metrics, want)
	}
	if got := mergeTaskSpec(def, &pelotonv1.TaskSpec{Command: []string{"x"}}); !proto.Equal(got.Metrics, def.Metrics) {
		t.Fatalf("an override without metrics: %v, want the default's %v", got.Metrics, def.Metrics)
	}
	got.Metrics.Port = "changed"
	if def.Metrics.Port != "http" {
		t.Fatal("merge shares the default's metrics spec")
	}
}

func TestSpecCompressionRoundTrip(t *testing.T) {
	s := MakeJob("big").Instances(1000).Obj()
	for i := uint32(0); i < 1000; i += 10 {
		s = MakeJob("big").Instances(1000).Override(i, &pelotonv1.TaskSpec{Command: []string{"echo", "override"}}).Obj()
	}
	b, err := encodeSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSpec(b)
	if err != nil || !proto.Equal(got, s) {
		t.Fatalf("round trip failed: %v", err)
	}
}

func TestMergeReplacesPlacementWhole(t *testing.T) {
	def := &pelotonv1.TaskSpec{Command: []string{"a"}, Placement: &pelotonv1.PlacementSpec{
		Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 2,
		Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_EXISTS}}}}
	o := &pelotonv1.TaskSpec{Placement: &pelotonv1.PlacementSpec{Partition: "gpu"}}
	if got := mergeTaskSpec(def, o).Placement; !proto.Equal(got, o.Placement) {
		t.Fatalf("override's placement must replace the default's whole, got %v", got)
	}
	if got := mergeTaskSpec(def, &pelotonv1.TaskSpec{Image: "x"}).Placement; !proto.Equal(got, def.Placement) {
		t.Fatalf("an override without placement keeps the default's, got %v", got)
	}
}

func TestPlacementOfInstances(t *testing.T) {
	own := &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD}
	s := MakeJob("x").Instances(3).Placement(&pelotonv1.PlacementSpec{MaxInstancesPerHost: 1}).
		Override(1, &pelotonv1.TaskSpec{Image: "y"}).Override(2, &pelotonv1.TaskSpec{Placement: own}).Obj()
	// Instances without their own placement share the default's: one pointer per task in resmgr.
	if placementOf(s, 0) != s.DefaultSpec.Placement || placementOf(s, 1) != s.DefaultSpec.Placement || placementOf(s, 2) != own {
		t.Fatal("placementOf must return the spec's own messages, not copies")
	}
	if got := strategyOf(s, 0); got != pelotonv1.PlacementStrategy_PACK {
		t.Fatalf("batch default strategy: %v", got)
	}
	if got := strategyOf(s, 2); got != pelotonv1.PlacementStrategy_SPREAD {
		t.Fatalf("an instance's own strategy: %v", got)
	}
	if got := strategyOf(MakeJob("x").Obj(), 0); got != pelotonv1.PlacementStrategy_PACK {
		t.Fatalf("no placement at all: %v", got)
	}
	if placementOf(MakeJob("x").Obj(), 0) != nil {
		t.Fatal("no placement: nil")
	}
	for typ, want := range map[pelotonv1.JobType]pelotonv1.PlacementStrategy{
		pelotonv1.JobType_BATCH:   pelotonv1.PlacementStrategy_PACK,
		pelotonv1.JobType_SERVICE: pelotonv1.PlacementStrategy_SPREAD,
	} {
		if got := defaultStrategy(typ); got != want {
			t.Errorf("default strategy of %s: %s, want %s", typ, got, want)
		}
	}
}

func TestSameTaskMemoAgreesWithSameTask(t *testing.T) {
	a, _ := newJobVersion(1, MakeJob("x").Instances(3).Override(1, &pelotonv1.TaskSpec{Env: map[string]string{"A": "1"}}).Obj(), time.Time{}, "")
	b, _ := newJobVersion(2, MakeJob("x").Instances(3).Command("/bin/false").Obj(), time.Time{}, "")
	c, _ := newJobVersion(3, MakeJob("x").Instances(3).Obj(), time.Time{}, "")
	memo := sameTaskMemo{}
	for _, pair := range [][2]*jobVersion{{a, b}, {a, c}, {b, c}, {c, a}, {a, a}} {
		for inst := uint32(0); inst < 3; inst++ {
			if got, want := memo.same(pair[0], pair[1], inst), sameTask(pair[0], pair[1], inst); got != want {
				t.Errorf("v%d vs v%d instance %d: memo %v, sameTask %v", pair[0].version, pair[1].version, inst, got, want)
			}
		}
	}
	if memo.same(a, c, 1) || !memo.same(a, c, 0) {
		t.Error("an override changes only its own instance")
	}
}

// TestTooLargeForEveryHostSaysItInTheSpecsUnits: a request no host could
// hold is refused in the units the spec is written in (cores, MiB, GPUs),
// never in milli-CPU.
func TestTooLargeForEveryHostSaysItInTheSpecsUnits(t *testing.T) {
	small := resources.Resources{MilliCPU: 2000, MemoryMB: 4096, DiskMB: 100000}
	for _, tc := range []struct {
		spec *pelotonv1.JobSpec
		want string
	}{
		{MakeJob("x").CPU(64).Obj(), "spec.defaultSpec.resources.cpu: asks for 64 CPUs but the largest host has 2 (cpu=2 memoryMb=4096 diskMb=100000 gpu=0); the task could never run"},
		{MakeJob("x").CPU(0.5).With(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Resources.MemoryMb = 8192 }).Obj(),
			"spec.defaultSpec.resources.memoryMb: asks for 8192 MiB but the largest host has 4096 (cpu=2"},
		{MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Resources.Gpu = 1 }).Obj(),
			"spec.defaultSpec.resources.gpu: asks for 1 GPU but the largest host has 0 (cpu=2"},
	} {
		err := validateJobSpec(tc.spec, small)
		if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tc.want) {
			t.Errorf("got  %q\nwant %q...", msg, tc.want)
		}
	}
}
