package placement

import (
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/resmgr"
)

func res(cpu, mem int64) resources.Resources {
	return resources.Resources{MilliCPU: cpu, MemoryMB: mem}
}

func gang(n int, r resources.Resources) *resmgr.Gang {
	var ts []*resmgr.Task
	for i := 0; i < n; i++ {
		ts = append(ts, &resmgr.Task{JobID: "j", Instance: uint32(i), RunID: 1, Pool: "/default", Resources: r})
	}
	return resmgr.NewGang(ts...)
}

func hosts(n int, r resources.Resources) []hostmgr.HostOffer {
	var hs []hostmgr.HostOffer
	for i := 0; i < n; i++ {
		hs = append(hs, hostmgr.HostOffer{Name: string(rune('a' + i)), Free: r, Capacity: r})
	}
	return hs
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name             string
		gangs            []*resmgr.Gang
		hosts            []hostmgr.HostOffer
		placed, unplaced int
		code             Code // of the unplaced gang, if any
	}{
		{"fits on one host", []*resmgr.Gang{gang(1, res(1000, 100))}, hosts(1, res(2000, 200)), 1, 0, 0},
		{"too big", []*resmgr.Gang{gang(1, res(3000, 100))}, hosts(2, res(2000, 200)), 0, 1, Unresolvable},
		{"spills to second host", []*resmgr.Gang{gang(1, res(1500, 10)), gang(1, res(1500, 10))}, hosts(2, res(2000, 200)), 2, 0, 0},
		{"gang of 3 needs 3 slots, has 2: none placed", []*resmgr.Gang{gang(3, res(1000, 10))}, hosts(2, res(1000, 200)), 0, 1, Unschedulable},
		{"failed gang gives back its slots to the next gang", []*resmgr.Gang{gang(3, res(1000, 10)), gang(2, res(1000, 10))}, hosts(2, res(1000, 200)), 2, 1, Unschedulable},
		{"memory bound", []*resmgr.Gang{gang(1, res(100, 300))}, hosts(1, res(2000, 200)), 0, 1, Unresolvable},
		{"no room left", []*resmgr.Gang{gang(1, res(1500, 10)), gang(1, res(1500, 10))}, hosts(1, res(2000, 200)), 1, 1, Unschedulable},
		{"no hosts", []*resmgr.Gang{gang(1, res(1, 1))}, nil, 0, 1, Unresolvable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]resources.Resources, len(tc.hosts))
			for i, h := range tc.hosts {
				before[i] = h.Free
			}
			d := Place(tc.gangs, tc.hosts)
			if len(d.Placed) != tc.placed || len(d.Unplaced) != tc.unplaced {
				t.Fatalf("placed %d unplaced %d, want %d and %d", len(d.Placed), len(d.Unplaced), tc.placed, tc.unplaced)
			}
			for _, u := range d.Unplaced {
				if u.Code != tc.code || u.Reason == "" {
					t.Errorf("unplaced gang: %s %q, want code %s", u.Code, u.Reason, tc.code)
				}
			}
			// Never over-commit a host.
			used := map[string]resources.Resources{}
			for _, p := range d.Placed {
				used[p.Host] = used[p.Host].Add(p.Task.Resources)
			}
			for i, h := range tc.hosts {
				if !used[h.Name].FitsIn(before[i]) {
					t.Errorf("host %s over-committed: %s of %s", h.Name, used[h.Name], before[i])
				}
				if h.Free != before[i] {
					t.Errorf("Place modified its input")
				}
			}
		})
	}
}
