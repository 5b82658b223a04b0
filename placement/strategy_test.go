package placement

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

const (
	opEq    = pelotonv1.ConstraintOp_EQUALS
	opNe    = pelotonv1.ConstraintOp_NOT_EQUALS
	opExist = pelotonv1.ConstraintOp_EXISTS
	opIn    = pelotonv1.ConstraintOp_IN
	opNotIn = pelotonv1.ConstraintOp_NOT_IN
)

func TestPack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []hostmgr.HostOffer
		tasks []*resmgr.Task
		want  []string // host of each instance, in order; "" = unplaced
	}{
		{"fills the fullest host that fits",
			[]hostmgr.HostOffer{MakeHost("empty").Obj(), MakeHost("half").Used(4, 4096).Obj(), MakeHost("full").Used(7.5, 8000).Obj()},
			[]*resmgr.Task{MakeTask("j", 0).CPU(1).Obj()},
			[]string{"half"}},
		{"a small task takes the nearly full host",
			[]hostmgr.HostOffer{MakeHost("empty").Obj(), MakeHost("half").Used(4, 4096).Obj(), MakeHost("full").Used(7.5, 8000).Obj()},
			[]*resmgr.Task{MakeTask("j", 0).CPU(0.5).Mem(64).Obj()},
			[]string{"full"}},
		{"fills one host before starting the next",
			[]hostmgr.HostOffer{MakeHost("a").CPU(2).Obj(), MakeHost("b").CPU(2).Obj()},
			instances("j", 3, nil),
			[]string{"a", "a", "b"}},
		{"normalizes across kinds: memory-full host counts as full",
			[]hostmgr.HostOffer{MakeHost("cpu-used").Used(6, 0).Obj(), MakeHost("mem-used").Used(0, 7000).Obj()},
			[]*resmgr.Task{MakeTask("j", 0).CPU(1).Mem(100).Obj()},
			[]string{"mem-used"}},
		{"keeps GPU hosts for GPU work",
			[]hostmgr.HostOffer{MakeHost("gpu").GPU(4).Used(6, 0).Obj(), MakeHost("plain").Obj()},
			[]*resmgr.Task{MakeTask("cpu", 0).Obj(), MakeTask("gpu", 0).GPU(1).Obj()},
			[]string{"plain", "gpu"}},
		{"uses a GPU host for CPU work only when nothing else fits",
			[]hostmgr.HostOffer{MakeHost("gpu").GPU(4).Obj(), MakeHost("plain").CPU(1).Obj()},
			instances("cpu", 2, nil),
			[]string{"plain", "gpu"}},
		{"prefers the previous host when it fits",
			[]hostmgr.HostOffer{MakeHost("a").Obj(), MakeHost("b").Used(4, 0).Obj()},
			[]*resmgr.Task{MakeTask("j", 0).Prev("a").Obj()},
			[]string{"a"}},
		{"ignores a previous host that no longer fits",
			[]hostmgr.HostOffer{MakeHost("a").Used(7.5, 0).Obj(), MakeHost("b").Obj()},
			[]*resmgr.Task{MakeTask("j", 0).Prev("a").Obj()},
			[]string{"b"}},
		{"ignores a previous host that fails a constraint",
			[]hostmgr.HostOffer{MakeHost("a").Label("zone", "x").Obj(), MakeHost("b").Label("zone", "y").Obj()},
			[]*resmgr.Task{MakeTask("j", 0).Prev("a").Where("zone", opEq, "y").Obj()},
			[]string{"b"}},
		{"max per host counts runs already on the host",
			[]hostmgr.HostOffer{MakeHost("a").Used(2, 0).Running("j", 1).Obj(), MakeHost("b").Obj()},
			instances("j", 2, func(b *taskBuilder) { b.MaxPerHost(1) }),
			[]string{"b", ""}},
		{"max per host counts this round's placements",
			[]hostmgr.HostOffer{MakeHost("a").Obj(), MakeHost("b").Obj()},
			instances("j", 5, func(b *taskBuilder) { b.MaxPerHost(2) }),
			[]string{"a", "a", "b", "b", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Place(singles(tc.tasks...), tc.hosts)
			checkHosts(t, d, tc.tasks, tc.want)
		})
	}
}

func TestSpread(t *testing.T) {
	zoned := func(spec ...string) []hostmgr.HostOffer {
		var hs []hostmgr.HostOffer
		for _, s := range spec { // "a1:zone" entries
			name, zone, _ := strings.Cut(s, ":")
			hs = append(hs, MakeHost(name).Label("zone", zone).Obj())
		}
		return hs
	}
	spreadJob := func(n int) []*resmgr.Task { return instances("s", n, func(b *taskBuilder) { b.Spread() }) }
	for _, tc := range []struct {
		name  string
		hosts []hostmgr.HostOffer
		tasks []*resmgr.Task
		// per host, how many instances it must end up with (this round only)
		want map[string]int
	}{
		{"distinct hosts", zoned("a:z", "b:z", "c:z"), spreadJob(3), map[string]int{"a": 1, "b": 1, "c": 1}},
		{"wraps around evenly", zoned("a:z", "b:z"), spreadJob(4), map[string]int{"a": 2, "b": 2}},
		{"balances zones", zoned("a1:x", "a2:x", "a3:x", "b1:y", "b2:y", "b3:y"), spreadJob(4),
			map[string]int{"a1": 1, "a2": 1, "b1": 1, "b2": 1}},
		{"avoids hosts already running the job",
			[]hostmgr.HostOffer{MakeHost("a").Running("s", 1).Obj(), MakeHost("b").Obj(), MakeHost("c").Obj()},
			spreadJob(2), map[string]int{"b": 1, "c": 1}},
		{"counts running instances per zone",
			[]hostmgr.HostOffer{MakeHost("a1").Label("zone", "x").Running("s", 1).Obj(), MakeHost("a2").Label("zone", "x").Obj(),
				MakeHost("b1").Label("zone", "y").Obj(), MakeHost("b2").Label("zone", "y").Obj()},
			spreadJob(1), map[string]int{"b1": 1}},
		{"prefers the previous host",
			zoned("a:z", "b:z", "c:z"),
			[]*resmgr.Task{MakeTask("s", 0).Spread().Prev("c").Obj()}, map[string]int{"c": 1}},
		{"skips hosts without room",
			[]hostmgr.HostOffer{MakeHost("a").Used(8, 0).Obj(), MakeHost("b").Obj()},
			spreadJob(2), map[string]int{"b": 2}},
		{"max per host", zoned("a:z", "b:z"),
			instances("s", 3, func(b *taskBuilder) { b.Spread().MaxPerHost(1) }), map[string]int{"a": 1, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Place(singles(tc.tasks...), tc.hosts)
			got := map[string]int{}
			for _, p := range d.Placed {
				got[p.Host]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("instances per host: got %v, want %v (unplaced %v)", got, tc.want, reasons(d))
			}
		})
	}
}

func TestConstraints(t *testing.T) {
	hosts := []hostmgr.HostOffer{
		MakeHost("ssd-a").Label("disk", "ssd").Label("zone", "a").Obj(),
		MakeHost("hdd-b").Label("disk", "hdd").Label("zone", "b").Obj(),
		MakeHost("bare-c").Label("zone", "c").Obj(),
	}
	for _, tc := range []struct {
		op     pelotonv1.ConstraintOp
		label  string
		values []string
		want   []string // hosts a task may land on
	}{
		{opEq, "disk", []string{"ssd"}, []string{"ssd-a"}},
		{opNe, "disk", []string{"ssd"}, []string{"bare-c", "hdd-b"}},
		{opExist, "disk", nil, []string{"hdd-b", "ssd-a"}},
		{opIn, "zone", []string{"a", "c"}, []string{"bare-c", "ssd-a"}},
		{opNotIn, "zone", []string{"a", "c"}, []string{"hdd-b"}},
		{opNotIn, "rack", []string{"r1"}, []string{"bare-c", "hdd-b", "ssd-a"}},
		{opIn, "zone", []string{"z"}, nil},
	} {
		t.Run(fmt.Sprintf("%s %s %v", tc.label, tc.op, tc.values), func(t *testing.T) {
			// As many tiny tasks as hosts, spread: they land on every host they may.
			tasks := instances("j", 3, func(b *taskBuilder) { b.Spread().CPU(0.1).Where(tc.label, tc.op, tc.values...) })
			d := Place(singles(tasks...), hosts)
			var got []string
			seen := map[string]bool{}
			for _, p := range d.Placed {
				if !seen[p.Host] {
					seen[p.Host] = true
					got = append(got, p.Host)
				}
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("hosts used: got %v, want %v", got, tc.want)
			}
			if len(tc.want) == 0 {
				if len(d.Unplaced) != 3 || d.Unplaced[0].Code != Unresolvable ||
					d.Unplaced[0].Reason != "no host matches constraint zone IN [z]" {
					t.Fatalf("want unresolvable, got %v", reasons(d))
				}
			}
		})
	}
}

func TestReasons(t *testing.T) {
	plain := []hostmgr.HostOffer{MakeHost("a").Label("zone", "x").Obj(), MakeHost("b").Label("zone", "y").Obj()}
	full := []hostmgr.HostOffer{MakeHost("a").Used(7, 0).Label("zone", "x").Obj(), MakeHost("b").Used(7, 0).Label("zone", "y").Obj()}
	for _, tc := range []struct {
		name    string
		catalog []hostmgr.HostClass
		hosts   []hostmgr.HostOffer
		gangs   []*resmgr.Gang
		code    Code
		reason  string
	}{
		{"no room now", nil, full, singles(MakeTask("j", 0).CPU(4).Mem(1024).Obj()),
			Unschedulable, "no host has room now (needs cpu=4 memoryMb=1024)"},
		{"names gpus and disk only when asked", nil, []hostmgr.HostOffer{MakeHost("g").GPU(2).Used(0, 0).Obj()},
			singles(MakeTask("j", 0).GPU(1).Obj(), MakeTask("j", 1).GPU(2).Obj()),
			Unschedulable, "no host has room now (needs cpu=1 memoryMb=128 gpu=2)"},
		{"max per host reached", nil, []hostmgr.HostOffer{MakeHost("a").Running("j", 1).Obj(), MakeHost("b").Running("j", 1).Obj()},
			singles(MakeTask("j", 0).MaxPerHost(1).Obj()),
			Unschedulable, "max 1 instance per host of this job reached on every host"},
		{"max per host and no room: no room wins", nil, []hostmgr.HostOffer{MakeHost("a").Used(8, 0).Running("j", 2).Obj()},
			singles(MakeTask("j", 0).MaxPerHost(2).Obj()),
			Unschedulable, "no host has room now (needs cpu=1 memoryMb=128)"},
		{"no such partition", nil, plain, singles(MakeTask("j", 0).Partition("gpu").Obj()),
			Unresolvable, `no host in partition "gpu"`},
		{"no host matches", nil, plain, singles(MakeTask("j", 0).Where("zone", opIn, "a", "b").Obj()),
			Unresolvable, "no host matches constraint zone IN [a b]"},
		{"names the constraint that leaves nothing", nil, plain,
			singles(MakeTask("j", 0).Where("zone", opExist).Where("zone", opEq, "x").Where("rack", opExist).Obj()),
			Unresolvable, "no host matches constraint rack EXISTS"},
		{"never large enough", nil, plain, singles(MakeTask("j", 0).CPU(16).Obj()),
			Unresolvable, "no host is large enough (needs cpu=16 memoryMb=128; largest matching host has cpu=8 memoryMb=8192)"},
		{"too large for the matching hosts only", nil,
			[]hostmgr.HostOffer{MakeHost("small").CPU(2).Label("zone", "x").Obj(), MakeHost("big").CPU(64).Obj()},
			singles(MakeTask("j", 0).CPU(4).Where("zone", opEq, "x").Obj()),
			Unresolvable, "no host is large enough (needs cpu=4 memoryMb=128; largest matching host has cpu=2 memoryMb=8192)"},
		{"a host outside the lease could take it: wait, do not give up",
			[]hostmgr.HostClass{{Capacity: MakeHost("").Obj().Capacity, Partition: "gpu", Count: 3}},
			plain, singles(MakeTask("j", 0).Partition("gpu").Obj()),
			Unschedulable, "no host has room now (needs cpu=1 memoryMb=128)"},
		{"the catalog, not the lease, decides what can never fit",
			[]hostmgr.HostClass{{Capacity: MakeHost("").Obj().Capacity, Count: 3}},
			plain, singles(MakeTask("j", 0).Partition("p").Obj()),
			Unresolvable, `no host in partition "p"`},
		{"gang: every member fits alone, not all at once", nil, plain,
			[]*resmgr.Gang{resmgr.NewGang(instances("g", 3, func(b *taskBuilder) { b.CPU(6) })...)},
			Unschedulable, "waiting for gang: not every member fits now; instance 2: no host has room now (needs cpu=6 memoryMb=128)"},
		{"gang with an impossible member is unresolvable", nil, plain,
			[]*resmgr.Gang{resmgr.NewGang(MakeTask("g", 0).Obj(), MakeTask("g", 1).Where("zone", opEq, "q").Obj())},
			Unresolvable, "no host matches constraint zone EQUALS [q] (instance 1)"},
		{"gang wider than the matching hosts at max per host", nil, plain,
			[]*resmgr.Gang{resmgr.NewGang(instances("g", 3, func(b *taskBuilder) { b.MaxPerHost(1) })...)},
			Unresolvable, "gang needs more hosts than match: 3 instances at max 1 per host need 3 hosts, 2 match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Config{Catalog: tc.catalog}.Place(tc.gangs, tc.hosts)
			u := d.Unplaced[len(d.Unplaced)-1]
			if u.Code != tc.code || u.Reason != tc.reason {
				t.Fatalf("got %s %q\nwant %s %q", u.Code, u.Reason, tc.code, tc.reason)
			}
		})
	}
}

func TestGangsAllOrNothingWithConstraints(t *testing.T) {
	hosts := []hostmgr.HostOffer{
		MakeHost("a1").CPU(1).Label("zone", "a").Obj(),
		MakeHost("a2").CPU(1).Label("zone", "a").Obj(),
		MakeHost("b1").CPU(4).Label("zone", "b").Obj(),
	}
	inA := func(b *taskBuilder) { b.Where("zone", opEq, "a") }
	// Three members need zone a, which has room for two: none is placed, and
	// what the first two took is free again for the gang after them.
	big := resmgr.NewGang(instances("big", 3, inA)...)
	small := resmgr.NewGang(instances("small", 2, inA)...)
	other := resmgr.NewGang(instances("other", 4, nil)...)
	d := Place([]*resmgr.Gang{big, small, other}, hosts)
	if len(d.Unplaced) != 1 || d.Unplaced[0].Gang != big || d.Unplaced[0].Code != Unschedulable {
		t.Fatalf("unplaced: %v", reasons(d))
	}
	got := map[string][]string{}
	for _, p := range d.Placed {
		got[p.Task.JobID] = append(got[p.Task.JobID], p.Host)
	}
	if fmt.Sprint(got["small"]) != "[a1 a2]" || fmt.Sprint(got["other"]) != "[b1 b1 b1 b1]" {
		t.Fatalf("placed: %v", got)
	}
}

func TestPlaceDoesNotModifyItsInput(t *testing.T) {
	hosts := []hostmgr.HostOffer{MakeHost("a").Running("j", 1).Obj(), MakeHost("b").Obj()}
	before := fmt.Sprint(hosts)
	Place(singles(instances("j", 5, func(b *taskBuilder) { b.Spread() })...), hosts)
	if fmt.Sprint(hosts) != before {
		t.Fatalf("Place modified its input:\n%s\n%s", before, fmt.Sprint(hosts))
	}
}

func checkHosts(t *testing.T, d Decision, tasks []*resmgr.Task, want []string) {
	t.Helper()
	placed := map[*resmgr.Task]string{}
	for _, p := range d.Placed {
		placed[p.Task] = p.Host
	}
	got := make([]string, len(tasks))
	for i, task := range tasks {
		got[i] = placed[task]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hosts: got %q, want %q (unplaced: %v)", got, want, reasons(d))
	}
}

func reasons(d Decision) []string {
	var out []string
	for _, u := range d.Unplaced {
		out = append(out, u.Code.String()+": "+u.Reason)
	}
	return out
}
