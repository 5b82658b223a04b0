package federation

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestLargestTask(t *testing.T) {
	spec := &pelotonv1.JobSpec{InstanceCount: 3, DefaultSpec: &pelotonv1.TaskSpec{Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 100}},
		InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{
			2: {Resources: &pelotonv1.Resources{Cpu: 4, MemoryMb: 10}},
			9: {Resources: &pelotonv1.Resources{Cpu: 100}}, // beyond the instance count: ignored
		}}
	a := largestTask(spec, "spec.job")
	if a.res != (resources.Resources{MilliCPU: 4000, MemoryMB: 100}) {
		t.Errorf("largest task %v, want 4 cpu 100 MiB", a.res)
	}
	if a.field[resources.CPU] != "spec.job.instanceSpecs.2.resources.cpu" || a.field[resources.Memory] != "spec.job.defaultSpec.resources.memoryMb" {
		t.Errorf("fields %q", a.field)
	}
}

func TestRefuseUnfit(t *testing.T) {
	ask := func(cpu int64) taskAsk {
		a := taskAsk{res: resources.Resources{MilliCPU: cpu * 1000, MemoryMB: 64}}
		a.field[resources.CPU], a.field[resources.Memory] = "spec.job.defaultSpec.resources.cpu", "spec.job.defaultSpec.resources.memoryMb"
		return a
	}
	host := func(cpu, mem int64) resources.Resources {
		return resources.Resources{MilliCPU: cpu * 1000, MemoryMB: mem}
	}
	small := fitView{name: "a", checked: true, hasPool: true, largest: host(2, 4096), knowsLargest: true}
	big := fitView{name: "b", checked: true, hasPool: true, largest: host(8, 32), knowsLargest: true}
	for _, tc := range []struct {
		name   string
		ask    taskAsk
		global bool
		views  []fitView
		want   string // "" accepted
	}{
		{"fits one", ask(2), false, []fitView{small, big}, ""},
		{"too large for every cluster", ask(64), false, []fitView{small, big},
			"spec.job.defaultSpec.resources.cpu: asks for 64 CPUs but the largest host in any eligible cluster has 8 (a: cpu 2, b: cpu 8)"},
		{"each too small in another way", ask(4), false, []fitView{small, big},
			"spec.job.defaultSpec.resources: asks for cpu=4 memoryMb=64 diskMb=0 gpu=0 per task, which no eligible cluster's largest host holds all of (a: cpu 2, b: memoryMb 32)"},
		{"a cluster not checked yet might take it", ask(64), false, []fitView{small, {name: "c"}}, ""},
		{"a cluster that knows no host might take it", ask(64), false, []fitView{small, {name: "c", checked: true, hasPool: true}}, ""},
		{"no cluster has the pool", ask(1), false, []fitView{{name: "a", checked: true}, {name: "b", checked: true}},
			"spec.job.pool: /p is not a leaf pool in any eligible cluster (a, b)"},
		{"a global pool is made there", ask(1), true, []fitView{{name: "a", checked: true, largest: host(2, 4096), knowsLargest: true}}, ""},
		{"only clusters with the pool count", ask(4), false, []fitView{small, {name: "c", checked: true, largest: host(64, 1<<20), knowsLargest: true}},
			"asks for 4 CPUs but the largest host in any eligible cluster has 2 (a: cpu 2)"},
		{"nothing eligible: the selector check says", ask(64), false, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refuseUnfitBatch(tc.ask, "/p", tc.global, tc.views, "spec.job")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if apierr.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("got %v, want InvalidArgument %q", err, tc.want)
			}
		})
	}

	roomy := fitView{name: "b", checked: true, hasPool: true, largest: host(8, 4096), knowsLargest: true}
	svc := func(a taskAsk) taskAsk {
		a.field[resources.CPU] = "spec.job.defaultSpec.resources.cpu"
		return a
	}
	if err := refuseUnfitService(svc(ask(4)), "/p", false, []fitView{roomy, small}, "spec.job"); apierr.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "spec.job.defaultSpec.resources.cpu: asks for 4 CPUs but the largest host in cluster a has 2") {
		t.Errorf("service too large for one of its clusters: %v", err)
	}
	if err := refuseUnfitService(svc(ask(1)), "/p", false, []fitView{roomy, {name: "c", checked: true}}, "spec.job"); apierr.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "spec.job.pool: /p is not a leaf pool in cluster c") {
		t.Errorf("service in a cluster without its pool: %v", err)
	}
	if err := refuseUnfitService(svc(ask(64)), "/p", false, []fitView{{name: "c"}}, "spec.job"); err != nil {
		t.Errorf("a cluster not checked yet is not judged: %v", err)
	}
}
