package federation

import (
	"reflect"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestPlanFailover(t *testing.T) {
	svc := func(moveBack bool, parts ...*pelotonv1.ServiceCluster) *pelotonv1.FederatedService {
		return &pelotonv1.FederatedService{Spec: &pelotonv1.FederatedServiceSpec{Placement: &pelotonv1.ServicePlacement{
			Failover: &pelotonv1.FailoverPolicy{TolerationSeconds: 10, MoveBack: moveBack}}}, Clusters: parts}
	}
	part := func(name string, desired, running uint32) *pelotonv1.ServiceCluster {
		return &pelotonv1.ServiceCluster{Cluster: name, Desired: desired, Running: running, ClusterJobId: "j-" + name}
	}
	ready := clusterView{ready: true, room: 100}
	away := func(d time.Duration) clusterView { return clusterView{away: d} }
	failed := func(p *pelotonv1.ServiceCluster) *pelotonv1.ServiceCluster { p.FailedOver = true; return p }

	cases := []struct {
		name  string
		rec   *pelotonv1.FederatedService
		views map[string]clusterView
		want  failoverChange
		ok    bool
	}{
		{"within the toleration: nothing", svc(true, part("a", 10, 10), part("b", 10, 10), part("c", 10, 0)),
			map[string]clusterView{"a": ready, "b": ready, "c": away(5 * time.Second)}, failoverChange{}, false},
		{"past it: to the others by their parts", svc(true, part("a", 20, 20), part("b", 10, 10), part("c", 9, 0)),
			map[string]clusterView{"a": ready, "b": ready, "c": away(11 * time.Second)},
			failoverChange{lost: "c", cover: map[string]uint32{"a": 6, "b": 3}}, true},
		{"within the room; the rest to whoever has room, then said", svc(true, part("a", 10, 10), part("b", 10, 10), part("c", 10, 0)),
			map[string]clusterView{"a": {ready: true, room: 2}, "b": {ready: true, room: 5}, "c": away(time.Minute)},
			failoverChange{lost: "c", cover: map[string]uint32{"a": 2, "b": 5}, short: 3}, true},
		{"a second loss goes only to parts not failed over", svc(true, part("a", 15, 15), failed(part("b", 10, 0)), part("c", 5, 0)),
			map[string]clusterView{"a": ready, "b": away(time.Hour), "c": away(time.Minute)},
			failoverChange{lost: "c", cover: map[string]uint32{"a": 5}}, true},
		{"nowhere to go: it waits", svc(true, part("a", 10, 0), part("b", 10, 0)),
			map[string]clusterView{"a": away(time.Hour), "b": away(time.Hour)}, failoverChange{}, false},
		{"back but not running in full: wait", svc(true, part("a", 20, 20), failed(part("c", 10, 4))),
			map[string]clusterView{"a": ready, "c": ready}, failoverChange{}, false},
		{"back and running: move back", svc(true, part("a", 20, 20), failed(part("c", 10, 10))),
			map[string]clusterView{"a": ready, "c": ready}, failoverChange{back: "c"}, true},
		{"back without moveBack: retire", svc(false, part("a", 20, 20), failed(part("c", 10, 0))),
			map[string]clusterView{"a": ready, "c": ready}, failoverChange{retire: "c"}, true},
		{"no policy: nothing", &pelotonv1.FederatedService{Spec: &pelotonv1.FederatedServiceSpec{}, Clusters: []*pelotonv1.ServiceCluster{part("a", 1, 0)}},
			map[string]clusterView{"a": away(time.Hour)}, failoverChange{}, false},
	}
	for _, tc := range cases {
		got, ok := planFailover(tc.rec, tc.views)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
