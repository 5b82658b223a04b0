package placement

import (
	"fmt"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// status is what hostmgr would say of a host that was not offered.
func status(state pelotonv1.HostState, cores float64) hostmgr.HostStatus {
	return hostmgr.HostStatus{State: state, Capacity: resources.Resources{MilliCPU: int64(cores * 1000), MemoryMB: 8192},
		Labels: map[string]string{}}
}

const (
	hostUp       = pelotonv1.HostState_HOST_UP
	hostDraining = pelotonv1.HostState_HOST_DRAINING
	hostDrained  = pelotonv1.HostState_HOST_DRAINED
)

// TestBound: a task bound to a host goes there whatever its strategy and
// previous host, or gets a status that names the host and why.
func TestBound(t *testing.T) {
	// Two hosts in zone a and b; b is half used, so PACK would pick it.
	two := func() []hostmgr.HostOffer {
		return []hostmgr.HostOffer{MakeHost("a").Label("zone", "a").Obj(), MakeHost("b").Label("zone", "b").Used(4, 0).Obj()}
	}
	for _, tc := range []struct {
		name  string
		hosts []hostmgr.HostOffer
		bound map[string]hostmgr.HostStatus // Config.Bound
		gangs [][]*resmgr.Task
		want  []string // host of each task, in order; "" = unplaced
		// unplaced lists the status of each unplaced gang, in order.
		unplaced []string
	}{
		{"PACK task goes to its bound host, not the fullest", two(), nil,
			[][]*resmgr.Task{{MakeTask("j", 0).Bound("a").Obj()}}, []string{"a"}, nil},
		{"SPREAD task goes to its bound host even where the job already runs",
			[]hostmgr.HostOffer{MakeHost("a").Running("j", 3).Obj(), MakeHost("b").Obj()}, nil,
			[][]*resmgr.Task{{MakeTask("j", 0).Spread().Bound("a").Obj()}}, []string{"a"}, nil},
		{"the bound host wins over the previous host", two(), nil,
			[][]*resmgr.Task{{MakeTask("j", 0).Prev("b").Bound("a").Obj()}}, []string{"a"}, nil},
		{"constraints that hold on the bound host", two(), nil,
			[][]*resmgr.Task{{MakeTask("d", 0).Where("zone", opEq, "b").Bound("b").Obj()}}, []string{"b"}, nil},
		{"bound tasks share their host while it has room", two(), nil,
			[][]*resmgr.Task{{MakeTask("j", 0).CPU(3).Bound("b").Obj()}, {MakeTask("j", 1).CPU(3).Bound("b").Obj()}, {MakeTask("k", 0).CPU(3).Obj()}},
			[]string{"b", "", "a"},
			[]string{"unschedulable: waiting for room on bound host: b (needs cpu=3 memoryMb=128; has cpu=1 memoryMb=8064 free)"}},
		{"max per host holds on the bound host",
			[]hostmgr.HostOffer{MakeHost("a").Running("j", 1).Obj()}, nil,
			[][]*resmgr.Task{{MakeTask("j", 0).MaxPerHost(1).Bound("a").Obj()}}, []string{""},
			[]string{"unschedulable: waiting for room on bound host: a (it holds max 1 instance of this job)"}},
		{"draining bound host", two(), map[string]hostmgr.HostStatus{"c": status(hostDraining, 8)},
			[][]*resmgr.Task{{MakeTask("j", 0).Bound("c").Obj()}}, []string{""},
			[]string{"unschedulable: bound host in maintenance: c (HOST_DRAINING)"}},
		{"drained bound host", two(), map[string]hostmgr.HostStatus{"c": status(hostDrained, 8)},
			[][]*resmgr.Task{{MakeTask("j", 0).Bound("c").Obj()}}, []string{""},
			[]string{"unschedulable: bound host in maintenance: c (HOST_DRAINED)"}},
		{"bound host leased by another engine", two(), map[string]hostmgr.HostStatus{"c": status(hostUp, 8)},
			[][]*resmgr.Task{{MakeTask("j", 0).Bound("c").Obj()}}, []string{""},
			[]string{"unschedulable: waiting for room on bound host: c (another placement engine holds it)"}},
		{"gone bound host", two(), nil,
			[][]*resmgr.Task{{MakeTask("j", 0).Bound("c").Obj()}}, []string{""},
			[]string{"unresolvable: bound host is gone: c"}},
		{"bound host too small, offered", two(), nil,
			[][]*resmgr.Task{{MakeTask("j", 0).CPU(16).Bound("a").Obj()}}, []string{""},
			[]string{"unresolvable: bound host is too small: a (needs cpu=16 memoryMb=128; host has cpu=8 memoryMb=8192)"}},
		{"bound host too small, in maintenance: never fits comes first", two(), map[string]hostmgr.HostStatus{"c": status(hostDraining, 2)},
			[][]*resmgr.Task{{MakeTask("j", 0).CPU(4).Bound("c").Obj()}}, []string{""},
			[]string{"unresolvable: bound host is too small: c (needs cpu=4 memoryMb=128; host has cpu=2 memoryMb=8192)"}},
		{"a constraint fails on the bound host", two(), nil,
			[][]*resmgr.Task{{MakeTask("d", 0).Where("zone", opEq, "b").Bound("a").Obj()}}, []string{""},
			[]string{"unresolvable: bound host does not match the task's placement: a fails zone EQUALS [b]"}},
		{"the bound host is in another partition", two(), nil,
			[][]*resmgr.Task{{MakeTask("d", 0).Partition("gpu").Bound("a").Obj()}}, []string{""},
			[]string{`unresolvable: bound host does not match the task's placement: a is not in partition "gpu"`}},
		{"a gang with a member waiting for its bound host places none", two(), nil,
			[][]*resmgr.Task{{MakeTask("g", 0).CPU(2).Bound("a").Obj(), MakeTask("g", 1).CPU(5).Bound("b").Obj()}, {MakeTask("k", 0).CPU(8).Obj()}},
			[]string{"", "", "a"},
			[]string{"unschedulable: waiting for gang: not every member fits now; instance 1: waiting for room on bound host: b (needs cpu=5 memoryMb=128; has cpu=4 memoryMb=8192 free)"}},
		{"a gang of bound and free members places whole", two(), nil,
			[][]*resmgr.Task{{MakeTask("g", 0).Bound("b").Obj(), MakeTask("g", 1).CPU(6).Obj()}},
			[]string{"b", "a"}, nil},
		{"gang members bound to one host that cannot hold them together", two(), nil,
			[][]*resmgr.Task{{MakeTask("g", 0).CPU(5).Bound("a").Obj(), MakeTask("g", 1).CPU(5).Bound("a").Obj()}}, []string{"", ""},
			[]string{"unresolvable: bound host is too small: a (the gang's members bound to it need cpu=10 memoryMb=256; host has cpu=8 memoryMb=8192)"}},
		{"gang members bound to one host beyond the job's max per host", two(), nil,
			[][]*resmgr.Task{{MakeTask("g", 0).MaxPerHost(1).Bound("a").Obj(), MakeTask("g", 1).MaxPerHost(1).Bound("a").Obj()}}, []string{"", ""},
			[]string{"unresolvable: gang needs more hosts than match: more than 1 instance of job g bound to a"}},
		{"a gone host in a gang names the instance", two(), nil,
			[][]*resmgr.Task{{MakeTask("g", 0).Bound("a").Obj(), MakeTask("g", 1).Bound("z").Obj()}}, []string{"", ""},
			[]string{"unresolvable: bound host is gone: z (instance 1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gangs []*resmgr.Gang
			var tasks []*resmgr.Task
			for _, g := range tc.gangs {
				gangs = append(gangs, resmgr.NewGang(g...))
				tasks = append(tasks, g...)
			}
			d := Config{Bound: tc.bound}.Place(gangs, tc.hosts)
			checkHosts(t, d, tasks, tc.want)
			if got := reasons(d); fmt.Sprint(got) != fmt.Sprint(tc.unplaced) {
				t.Fatalf("unplaced:\n got %q\nwant %q", got, tc.unplaced)
			}
		})
	}
}
