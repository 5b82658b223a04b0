package e2e

import (
	"sort"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// downWindows returns, for each time an instance's history shows it being
// stopped (PREEMPTING or KILLING), the interval until its next RUNNING.
func downWindows(ts []*pelotonv1.Task) [][2]time.Time {
	var out [][2]time.Time
	for _, tk := range ts {
		var from time.Time
		for _, h := range tk.Status.History {
			switch {
			case h.State == pelotonv1.TaskState_PREEMPTING || h.State == pelotonv1.TaskState_KILLING:
				from = h.Time.AsTime()
			case h.State == pelotonv1.TaskState_RUNNING && !from.IsZero():
				out = append(out, [2]time.Time{from, h.Time.AsTime()})
				from = time.Time{}
			}
		}
	}
	return out
}

// maxOverlap is the largest number of intervals that cover one instant.
func maxOverlap(ws [][2]time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var es []edge
	for _, w := range ws {
		es = append(es, edge{w[0], 1}, edge{w[1], -1})
	}
	sort.Slice(es, func(a, b int) bool {
		if !es[a].at.Equal(es[b].at) {
			return es[a].at.Before(es[b].at)
		}
		return es[a].delta < es[b].delta // an end before a start at the same instant
	})
	n, worst := 0, 0
	for _, e := range es {
		n += e.delta
		worst = max(worst, n)
	}
	return worst
}

func TestDrainMovesServiceWithinSLA(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 3, hostCPU: 2})
	spec := service("drained-web", 6, 1, "sleep", "300")
	spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 3}
	id := s.createJob(spec)
	before := s.waitTasks(id, "6 running", 60*time.Second, allRunning(6))
	onHost := runningOn(before)["local-0"]
	if onHost < 2 {
		t.Fatalf("want at least 2 instances on local-0 to drain, have %v", runningOn(before))
	}
	if _, err := s.hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}
	s.waitHost("local-0", "HOST_DRAINED", 60*time.Second, func(h *pelotonv1.Host) bool {
		return h.State == pelotonv1.HostState_HOST_DRAINED
	})
	after := s.waitTasks(id, "6 running off local-0", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return allRunning(6)(ts) && runningOn(ts)["local-0"] == 0
	})
	ws := downWindows(after)
	if len(ws) != onHost {
		t.Fatalf("%d instances were on local-0, %d moved: %v", onHost, len(ws), ws)
	}
	if n := maxOverlap(ws); n > 1 {
		t.Errorf("%d instances were down at once during the drain; sla.maximumUnavailableInstances is 1: %v", n, ws)
	}
}
