package placement

import (
	"fmt"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
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

func TestHostFilterBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tasks      []*resmgr.Task
		max        int
		hosts      string
		partitions string
		minFree    resources.Resources
		jobs       string
	}{
		{"bound hosts by name, once each, in order",
			[]*resmgr.Task{MakeTask("s", 0).Bound("h2").Obj(), MakeTask("s", 1).Bound("h1").Obj(), MakeTask("d", 0).Bound("h2").Obj(), MakeTask("b", 0).CPU(2).Obj()},
			7, "[h2 h1]", "[]", resources.Resources{MilliCPU: 2000, MemoryMB: 128}, "map[]"},
		{"bound tasks leave partitions and MinFree to the others",
			[]*resmgr.Task{MakeTask("s", 0).CPU(0.1).Bound("h1").Obj(), MakeTask("b", 0).Partition("gpu").Obj()},
			7, "[h1]", "[gpu]", resources.Resources{MilliCPU: 1000, MemoryMB: 128}, "map[]"},
		{"only bound tasks: no other host is leased",
			[]*resmgr.Task{MakeTask("s", 0).Bound("h1").Obj(), MakeTask("d", 0).MaxPerHost(1).Bound("h3").Obj()},
			0, "[h1 h3]", "[]", resources.Resources{}, "map[d:true]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFilter(singles(tc.tasks...), 7)
			if f.Max != tc.max || fmt.Sprint(f.Hosts) != tc.hosts || fmt.Sprint(f.Partitions) != tc.partitions ||
				f.MinFree != tc.minFree || fmt.Sprint(f.Jobs) != tc.jobs {
				t.Fatalf("got %+v", f)
			}
		})
	}
}

func TestNotOffered(t *testing.T) {
	// Named hosts come first, in the order asked, then the scan's.
	offers := []hostmgr.HostOffer{{Name: "h1"}, {Name: "h3"}, {Name: "x"}}
	if got := fmt.Sprint(notOffered([]string{"h1", "h2", "h3"}, offers)); got != "[h2]" {
		t.Fatalf("got %s", got)
	}
	if got := fmt.Sprint(notOffered([]string{"h1", "h3"}, nil)); got != "[h1 h3]" {
		t.Fatalf("no offers: got %s", got)
	}
}
