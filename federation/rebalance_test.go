package federation

import (
	"reflect"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/federation/split"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestPlanRebalance(t *testing.T) {
	part := func(name string, desired, running uint32) *pelotonv1.ServiceCluster {
		return &pelotonv1.ServiceCluster{Cluster: name, Desired: desired, Running: running, ClusterJobId: "j-" + name}
	}
	to := map[string]uint32{"a": 3, "b": 3, "c": 3, "d": 3}
	rb := func(growing uint32) *pelotonv1.ServiceRebalance {
		return &pelotonv1.ServiceRebalance{To: to, Growing: growing}
	}
	all := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	cases := []struct {
		name              string
		rb                *pelotonv1.ServiceRebalance
		parts             []*pelotonv1.ServiceCluster
		registered        map[string]bool
		unavailable, budg int
		want              rebalanceMove
	}{
		{"a new cluster: grow it by the budget's room first", rb(0),
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 4), part("c", 4, 4)}, all, 0, 2,
			rebalanceMove{grow: map[string]uint32{"d": 2}}},
		{"the room is what is left of the budget", rb(0),
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 4), part("c", 4, 3)}, all, 1, 2,
			rebalanceMove{grow: map[string]uint32{"d": 1}}},
		{"no room: it waits, saying so", rb(0),
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 2), part("c", 4, 4)}, all, 2, 2,
			rebalanceMove{waiting: "budget: 2 of its budget of 2 instances are unavailable"}},
		{"grown but not running: the old stay", rb(2),
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 4), part("c", 4, 4), part("d", 2, 1)}, all, 1, 2,
			rebalanceMove{waiting: "cluster d to run its 2 instances (1 running)"}},
		{"grown and running: shrink the largest excess first", rb(2),
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 4), part("c", 4, 4), part("d", 2, 2)}, all, 0, 2,
			rebalanceMove{shrink: map[string]uint32{"a": 1, "b": 1}}},
		{"at the split: done", rb(0),
			[]*pelotonv1.ServiceCluster{part("a", 3, 3), part("b", 3, 3), part("c", 3, 3), part("d", 3, 3)}, all, 0, 2,
			rebalanceMove{done: true}},
		{"a deregistered cluster's part is dropped, its instances grown elsewhere",
			&pelotonv1.ServiceRebalance{To: map[string]uint32{"a": 6, "b": 6}},
			[]*pelotonv1.ServiceCluster{part("a", 4, 4), part("b", 4, 4), part("c", 4, 4)}, map[string]bool{"a": true, "b": true}, 0, 3,
			rebalanceMove{drop: []string{"c"}, grow: map[string]uint32{"a": 2, "b": 1}}},
		{"a retiring part counts nothing", &pelotonv1.ServiceRebalance{To: map[string]uint32{"a": 6}},
			[]*pelotonv1.ServiceCluster{part("a", 6, 6), {Cluster: "b", Retiring: true}}, all, 0, 1,
			rebalanceMove{done: true}},
	}
	for _, tc := range cases {
		got := planRebalance(tc.rb, tc.parts, tc.registered, tc.unavailable, tc.budg)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestRebalanceModel runs a rebalance to its end with the parts' counts
// as the only state (every instance runs once its part has it), and checks
// at every step what the brief asks: never more instances unavailable than
// the budget, never fewer than the service's count running.
func TestRebalanceModel(t *testing.T) {
	now := time.Unix(1000, 0)
	rec := &pelotonv1.FederatedService{Id: "s", SpecVersion: 1,
		Spec: &pelotonv1.FederatedServiceSpec{Job: &pelotonv1.JobSpec{InstanceCount: 100, Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 7}},
			Placement: &pelotonv1.ServicePlacement{}}, PlacedOn: []string{"a", "b", "c"}}
	for _, n := range []string{"a", "b", "c"} {
		rec.Clusters = append(rec.Clusters, &pelotonv1.ServiceCluster{Cluster: n, Desired: 34, Running: 34, ClusterJobId: "j"})
	}
	rec.Clusters[2].Desired, rec.Clusters[2].Running = 32, 32
	clusters := []split.ServiceCluster{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
	registered := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	if !noticeRebalance(rec, clusters, now) || rec.Rebalance.GetState() != pelotonv1.RebalanceState_REBALANCE_MOVING ||
		rec.Rebalance.Reason != "cluster d joins" {
		t.Fatalf("a fourth cluster: %v", rec.Rebalance)
	}
	steps := 0
	for ; rec.Rebalance.State == pelotonv1.RebalanceState_REBALANCE_MOVING && steps < 200; steps++ {
		unavailable := 0
		running := uint32(0)
		for _, p := range rec.Clusters {
			if p.Desired > p.Running {
				unavailable += int(p.Desired - p.Running)
			}
			running += p.Running
		}
		if unavailable > 7 {
			t.Fatalf("step %d: %d unavailable, budget 7", steps, unavailable)
		}
		if running < 100 {
			t.Fatalf("step %d: %d running of 100", steps, running)
		}
		advanceRebalance(rec, registered, unavailable, now)
		// The clusters act: every part runs its count; a retiring one
		// is removed.
		kept := rec.Clusters[:0]
		for _, p := range rec.Clusters {
			if p.Retiring {
				continue
			}
			p.Running, p.ClusterJobId = p.Desired, "j"
			kept = append(kept, p)
		}
		rec.Clusters = kept
	}
	got := map[string]uint32{}
	for _, p := range rec.Clusters {
		got[p.Cluster] = p.Desired
	}
	if want := map[string]uint32{"a": 25, "b": 25, "c": 25, "d": 25}; !reflect.DeepEqual(got, want) || rec.Rebalance.State != pelotonv1.RebalanceState_REBALANCE_DONE {
		t.Fatalf("after %d steps: %v (%s), want %v", steps, got, rec.Rebalance.State, want)
	}
	if rec.Rebalance.Moved != 25 {
		t.Errorf("moved %d, want 25", rec.Rebalance.Moved)
	}
	// 25 instances at up to 7 a step: 4 grow steps and 4 shrink steps, and
	// the pass that sees it done.
	if steps != 9 {
		t.Errorf("%d steps, want 9", steps)
	}
	// The budget split again over the four parts (7 over 25 each).
	for _, p := range rec.Clusters {
		if want := map[string]uint32{"a": 2, "b": 2, "c": 2, "d": 1}[p.Cluster]; p.MaxUnavailable != want {
			t.Errorf("part %s budget %d, want %d", p.Cluster, p.MaxUnavailable, want)
		}
	}
}

func TestNoticeRebalance(t *testing.T) {
	now := time.Unix(1000, 0)
	mk := func(mode pelotonv1.RebalanceMode, placedOn ...string) *pelotonv1.FederatedService {
		rec := &pelotonv1.FederatedService{Id: "s", SpecVersion: 1, PlacedOn: placedOn,
			Spec: &pelotonv1.FederatedServiceSpec{Job: &pelotonv1.JobSpec{InstanceCount: 6},
				Placement: &pelotonv1.ServicePlacement{Rebalance: mode, Clusters: []*pelotonv1.ClusterShare{{Selector: map[string]string{"tier": "web"}, Weight: 1}}}}}
		for _, n := range placedOn {
			rec.Clusters = append(rec.Clusters, &pelotonv1.ServiceCluster{Cluster: n, Desired: 6 / uint32(len(placedOn))})
		}
		return rec
	}
	web := map[string]string{"tier": "web"}
	three := []split.ServiceCluster{{Name: "a", Labels: web}, {Name: "b", Labels: web}, {Name: "c", Labels: web}}

	// Nothing changed: nothing to do.
	if rec := mk(pelotonv1.RebalanceMode_AUTO, "a", "b", "c"); noticeRebalance(rec, three, now) || rec.Rebalance != nil {
		t.Errorf("same clusters: %v", rec.Rebalance)
	}
	// c's labels no longer match, b is cordoned: the split is made again
	// over a alone.
	changed := []split.ServiceCluster{{Name: "a", Labels: web}, {Name: "b", Labels: web, Cordoned: true}, {Name: "c", Labels: map[string]string{"tier": "db"}}}
	rec := mk(pelotonv1.RebalanceMode_AUTO, "a", "b", "c")
	if !noticeRebalance(rec, changed, now) {
		t.Fatal("no rebalance for a label change and a cordon")
	}
	if rb := rec.Rebalance; rb.State != pelotonv1.RebalanceState_REBALANCE_MOVING || rb.Reason != "cluster b, c leaves" ||
		!reflect.DeepEqual(rb.To, map[string]uint32{"a": 6}) || !reflect.DeepEqual(rec.PlacedOn, []string{"a"}) || rb.Id != 1 {
		t.Errorf("rebalance %v, placed on %v", rb, rec.PlacedOn)
	}
	// MANUAL: pending, its clusters kept until the command.
	rec = mk(pelotonv1.RebalanceMode_MANUAL, "a", "b")
	if !noticeRebalance(rec, three, now) || rec.Rebalance.State != pelotonv1.RebalanceState_REBALANCE_PENDING ||
		rec.Rebalance.Waiting != "`peloton fed service rebalance s` (placement.rebalance is MANUAL)" || len(rec.PlacedOn) != 2 {
		t.Fatalf("manual: %v placed on %v", rec.Rebalance, rec.PlacedOn)
	}
	if noticeRebalance(rec, three, now.Add(time.Minute)) {
		t.Error("a pending rebalance made again with nothing changed")
	}
	// The new cluster leaves again before the command: cancelled.
	if !noticeRebalance(rec, three[:2], now) || rec.Rebalance.State != pelotonv1.RebalanceState_REBALANCE_CANCELLED {
		t.Errorf("pending, clusters back: %v", rec.Rebalance)
	}
	// A record from before rebalancing learns its clusters and moves nothing.
	rec = mk(pelotonv1.RebalanceMode_AUTO)
	rec.Clusters = []*pelotonv1.ServiceCluster{{Cluster: "a", Desired: 6}}
	if !noticeRebalance(rec, three, now) || rec.Rebalance != nil || len(rec.PlacedOn) != 3 {
		t.Errorf("old record: %v placed on %v", rec.Rebalance, rec.PlacedOn)
	}
}

// A cluster that joins through a selector share with an override gets the
// override at the service's version, as the clusters it covered at create.
func TestRebalanceOverridesJoining(t *testing.T) {
	web := map[string]string{"tier": "web"}
	o := &pelotonv1.ClusterOverride{Image: "web:canary"}
	rec := &pelotonv1.FederatedService{Id: "s", SpecVersion: 2, PlacedOn: []string{"a"},
		Spec: &pelotonv1.FederatedServiceSpec{Job: &pelotonv1.JobSpec{InstanceCount: 4},
			Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Selector: web, Weight: 1, Override: o}}}},
		Versions: []*pelotonv1.ServiceVersion{{Version: 1}, {Version: 2, Overrides: map[string]*pelotonv1.ClusterOverride{"a": o}}},
		Clusters: []*pelotonv1.ServiceCluster{{Cluster: "a", Desired: 4}}}
	if !noticeRebalance(rec, []split.ServiceCluster{{Name: "a", Labels: web}, {Name: "b", Labels: web}}, time.Unix(1, 0)) {
		t.Fatal("no rebalance")
	}
	if got := versionOverride(rec, 2, "b"); got != o {
		t.Errorf("b's override at version 2: %v", got)
	}
	if got := versionOverride(rec, 1, "b"); got != nil {
		t.Errorf("b's override at version 1: %v", got)
	}
}
