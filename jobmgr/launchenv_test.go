package jobmgr

import (
	"maps"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestLaunchEnv: a run's environment is the spec's, with what the host
// agent reads of it set by the stack alone: the revocable variables for
// revocable work, the metrics variables (path defaulted) for a task with
// metrics, and none of them, whatever the user set, otherwise.
func TestLaunchEnv(t *testing.T) {
	userSet := map[string]string{"A": "1", EnvRevocable: "true", EnvMetricsPort: "evil", EnvMetricsPath: "/x",
		EnvMetricsHistogram: "h", EnvMetricsHost: "10.0.0.1"}
	metrics := func(m *pelotonv1.MetricsSpec) func(*pelotonv1.JobSpec) {
		return func(s *pelotonv1.JobSpec) { s.DefaultSpec.Metrics = m }
	}
	for _, tc := range []struct {
		name string
		spec *pelotonv1.JobSpec
		want map[string]string
	}{
		{"plain", MakeJob("x").Obj(), map[string]string{}},
		{"user's own variables dropped", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Env = userSet }).Obj(),
			map[string]string{"A": "1"}},
		{"metrics, default path", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			With(metrics(&pelotonv1.MetricsSpec{Port: "http", LatencyHistogram: "request_seconds"})).Obj(),
			map[string]string{EnvMetricsPort: "http", EnvMetricsPath: DefaultMetricsPath, EnvMetricsHistogram: "request_seconds"}},
		{"metrics over the user's", MakeJob("x").Type(pelotonv1.JobType_SERVICE).Ports(&pelotonv1.PortSpec{Name: "http"}).
			With(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Env = userSet }).
			With(metrics(&pelotonv1.MetricsSpec{Port: "http", Path: "/stats", LatencyHistogram: "request_seconds"})).Obj(),
			map[string]string{"A": "1", EnvMetricsPort: "http", EnvMetricsPath: "/stats", EnvMetricsHistogram: "request_seconds"}},
		{"revocable", MakeJob("x").With(func(s *pelotonv1.JobSpec) { s.Sla = &pelotonv1.SlaSpec{Revocable: true, Priority: 7} }).Obj(),
			map[string]string{EnvRevocable: "true", EnvPriority: "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateJobSpec(tc.spec, bigHost); err != nil {
				t.Fatal(err)
			}
			v, err := newJobVersion(1, tc.spec, time.Unix(0, 0), "test")
			if err != nil {
				t.Fatal(err)
			}
			j := &job{id: "j", typ: tc.spec.Type, pool: tc.spec.Pool}
			ls := launchSpec(j, 0, 1, "h", v, resources.Resources{MilliCPU: 100, MemoryMB: 32})
			if !maps.Equal(ls.Env, tc.want) {
				t.Errorf("env %v, want %v", ls.Env, tc.want)
			}
		})
	}
}

// TestSelfScaleLaunchEnv: a self-scaling job's runs get what
// Options.SelfScaleEnv gives for their job, over the user's own; other
// jobs' runs get none of those variables, whatever the user set.
func TestSelfScaleLaunchEnv(t *testing.T) {
	m := attachParts(&Manager{selfScaleEnv: func(id string) map[string]string {
		return map[string]string{EnvJobToken: "tok-" + id, EnvServer: "127.0.0.1:1", EnvAPI: "http://127.0.0.1:2"}
	}})
	userSet := func(s *pelotonv1.JobSpec) {
		s.DefaultSpec.Env = map[string]string{"A": "1", EnvJobToken: "forged", EnvServer: "x", EnvAPI: "y"}
	}
	for _, tc := range []struct {
		name string
		spec *pelotonv1.JobSpec
		want map[string]string
	}{
		{"self-scaling", MakeJob("x").Instances(2).With(userSet).With(func(s *pelotonv1.JobSpec) { s.SelfScale = &pelotonv1.SelfScaleSpec{Min: 1, Max: 4} }).Obj(),
			map[string]string{"A": "1", EnvJobToken: "tok-j", EnvServer: "127.0.0.1:1", EnvAPI: "http://127.0.0.1:2"}},
		{"not self-scaling", MakeJob("x").With(userSet).Obj(), map[string]string{"A": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateJobSpec(tc.spec, bigHost); err != nil {
				t.Fatal(err)
			}
			v, err := newJobVersion(1, tc.spec, time.Unix(0, 0), "test")
			if err != nil {
				t.Fatal(err)
			}
			ls := m.eng.launchSpec(&job{id: "j", typ: tc.spec.Type, pool: tc.spec.Pool}, 0, 1, "h", v, resources.Resources{MilliCPU: 100, MemoryMB: 32})
			if !maps.Equal(ls.Env, tc.want) {
				t.Errorf("env %v, want %v", ls.Env, tc.want)
			}
		})
	}
}
