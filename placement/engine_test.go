package placement

import (
	"fmt"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/resmgr"
)

func TestHostFilter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tasks      []*resmgr.Task
		partitions string
		minFree    resources.Resources
		jobs       string
	}{
		{"one partition", []*resmgr.Task{MakeTask("a", 0).Partition("gpu").Obj(), MakeTask("b", 0).Partition("gpu").Obj()},
			"[gpu]", resources.Resources{MilliCPU: 1000, MemoryMB: 128}, "map[]"},
		{"two partitions", []*resmgr.Task{MakeTask("a", 0).Partition("gpu").Obj(), MakeTask("b", 0).Partition("batch").Obj()},
			"[gpu batch]", resources.Resources{MilliCPU: 1000, MemoryMB: 128}, "map[]"},
		{"a task without partition needs every host", []*resmgr.Task{MakeTask("a", 0).Partition("gpu").Obj(), MakeTask("b", 0).Obj()},
			"[]", resources.Resources{MilliCPU: 1000, MemoryMB: 128}, "map[]"},
		{"smallest task per kind", []*resmgr.Task{MakeTask("a", 0).CPU(2).Mem(64).Obj(), MakeTask("b", 0).CPU(0.5).Mem(512).GPU(1).Obj()},
			"[]", resources.Resources{MilliCPU: 500, MemoryMB: 64}, "map[]"},
		{"counts for spread and capped jobs only", []*resmgr.Task{MakeTask("a", 0).Spread().Obj(), MakeTask("b", 0).MaxPerHost(2).Obj(), MakeTask("c", 0).Obj()},
			"[]", resources.Resources{MilliCPU: 1000, MemoryMB: 128}, "map[a:true b:true]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFilter(singles(tc.tasks...), 7)
			if f.Max != 7 || fmt.Sprint(f.Partitions) != tc.partitions || f.MinFree != tc.minFree || fmt.Sprint(f.Jobs) != tc.jobs {
				t.Fatalf("got %+v", f)
			}
		})
	}
}
