package hostmgr

import "testing"

// TestHostMessageSaysWhy: host list says why the backend takes a host out
// of service (a cordoned or tainted Kubernetes node), whether hostmgr
// drains it for the backend or it only takes no new work.
func TestHostMessageSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    host
		want string
	}{
		{"unschedulable, why known", host{state: hostUp, info: HostInfo{Unschedulable: true, Why: "not ready"}},
			"takes no new tasks: unschedulable in the backend (not ready)"},
		{"unschedulable, why unknown", host{state: hostUp, info: HostInfo{Unschedulable: true}},
			"takes no new tasks: unschedulable in the backend (cordoned or not ready)"},
		{"draining for the backend", host{state: hostDraining, maintBy: "kubernetes", tasks: map[string]hold{"a": {}, "b": {}},
			info: HostInfo{Unschedulable: true, Why: "cordoned"}},
			"draining: 2 tasks left; started by the kubernetes backend's maintenance schedule (cordoned)"},
		{"drained for the backend", host{state: hostDrained, maintBy: "kubernetes", info: HostInfo{Unschedulable: true, Why: "tainted k=v:NoExecute"}},
			"drained: holds no tasks; the kubernetes backend returns it to service when its maintenance window ends (tainted k=v:NoExecute)"},
		{"drained by an operator", host{state: hostDrained, info: HostInfo{Unschedulable: true, Why: "cordoned"}},
			"drained: holds no tasks; complete maintenance to return it to service"},
	} {
		if got := hostMessage(&tc.h); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
