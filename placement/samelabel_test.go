package placement

import (
	"fmt"
	"maps"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/resmgr"
)

// sameLabelGang is a gang of n tasks of job j, each of cores CPUs, whose
// members must share one value of label.
func sameLabelGang(j string, n int, cores float64, label string, spread bool) *resmgr.Gang {
	var ts []*resmgr.Task
	for i := range n {
		b := MakeTask(j, uint32(i)).CPU(cores)
		if spread {
			b = b.Spread()
		}
		ts = append(ts, b.Obj())
	}
	g := resmgr.NewGang(ts...)
	g.SameLabel = label
	return g
}

// racks is hosts of 4 CPUs, named <rack><i>, labelled rack=<rack>: perRack
// gives each rack's size; hosts named in none have no rack label.
func racks(perRack map[string]int, unlabelled int) []hostmgr.HostOffer {
	var out []hostmgr.HostOffer
	for _, r := range []string{"r1", "r2", "r3"} {
		for i := range perRack[r] {
			out = append(out, MakeHost(fmt.Sprintf("%s-%d", r, i)).CPU(4).Label("rack", r).Obj())
		}
	}
	for i := range unlabelled {
		out = append(out, MakeHost(fmt.Sprintf("bare-%d", i)).CPU(4).Obj())
	}
	return out
}

// TestPlaceSameLabel: a gang with a same label lands on hosts of one value
// of it, the first in order with room for every member, whatever the
// strategy would choose across values; when no value has room the gang
// waits (unschedulable) saying how many members each value could take;
// each placement of the gang carries where every member goes.
func TestPlaceSameLabel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gang   *resmgr.Gang
		hosts  []hostmgr.HostOffer
		rack   string // where all members go; "" if refused
		reason string
	}{
		{"first rack with room", sameLabelGang("j", 4, 3, "rack", false), racks(map[string]int{"r1": 2, "r2": 4}, 2), "r2", ""},
		{"spread stays within the rack", sameLabelGang("j", 3, 1, "rack", true), racks(map[string]int{"r1": 3, "r2": 3}, 0), "r1", ""},
		{"no rack has room", sameLabelGang("j", 4, 3, "rack", false), racks(map[string]int{"r1": 2, "r2": 3}, 4), "",
			"no rack value has room for the gang of 4 (rack=r1: 2 fit, rack=r2: 3 fit)"},
		{"no host has the label", sameLabelGang("j", 2, 1, "rack", false), racks(nil, 3), "",
			"no rack value has room for the gang of 2 (no offered host has label rack)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Place([]*resmgr.Gang{tc.gang}, tc.hosts)
			labels := map[string]string{}
			for _, h := range tc.hosts {
				labels[h.Name] = h.Labels["rack"]
			}
			if tc.rack == "" {
				if len(d.Placed) != 0 || len(d.Unplaced) != 1 {
					t.Fatalf("placed %v, unplaced %v; want the gang refused", d.Placed, d.Unplaced)
				}
				if u := d.Unplaced[0]; u.Code != Unschedulable || u.Reason != tc.reason {
					t.Errorf("refused as %s %q, want unschedulable %q", u.Code, u.Reason, tc.reason)
				}
				return
			}
			if len(d.Placed) != len(tc.gang.Tasks) {
				t.Fatalf("placed %d of %d (unplaced %v)", len(d.Placed), len(tc.gang.Tasks), d.Unplaced)
			}
			peers := map[uint32]string{}
			for _, p := range d.Placed {
				if labels[p.Host] != tc.rack {
					t.Errorf("instance %d on %s (rack %q), want rack %s", p.Task.Instance, p.Host, labels[p.Host], tc.rack)
				}
				peers[p.Task.Instance] = p.Host
			}
			for _, p := range d.Placed {
				if !maps.Equal(p.Peers, peers) {
					t.Errorf("instance %d placed with peers %v, want %v", p.Task.Instance, p.Peers, peers)
				}
			}
		})
	}
}

// TestPlaceSameLabelKeepsTaskPlacement: a member's own constraints still
// hold within the chosen value, and its task keeps its placement spec.
func TestPlaceSameLabelKeepsTaskPlacement(t *testing.T) {
	hs := racks(map[string]int{"r1": 2, "r2": 2}, 0)
	hs[2].Labels["gpu"] = "yes" // r2-0
	g := resmgr.NewGang(MakeTask("j", 0).Where("gpu", opEq, "yes").Obj(), MakeTask("j", 1).Obj())
	g.SameLabel = "rack"
	before := g.Tasks[0].Placement
	d := Place([]*resmgr.Gang{g}, hs)
	if len(d.Placed) != 2 {
		t.Fatalf("placed %v, unplaced %v", d.Placed, d.Unplaced)
	}
	for _, p := range d.Placed {
		if p.Host[:2] != "r2" || (p.Task.Instance == 0 && p.Host != "r2-0") {
			t.Errorf("instance %d on %s, want r2 with instance 0 on r2-0", p.Task.Instance, p.Host)
		}
	}
	if g.Tasks[0].Placement != before || len(before.Constraints) != 1 {
		t.Errorf("the task's placement spec changed: %v", g.Tasks[0].Placement)
	}
	if d.Placed[0].Task != g.Tasks[0] && d.Placed[1].Task != g.Tasks[0] {
		t.Errorf("placements name copies of the gang's tasks, not the tasks")
	}
}
