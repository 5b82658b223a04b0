package placement

import pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"

// Matches reports whether a host with this partition and these labels passes
// a placement spec's partition and constraints: the same test placement
// applies, for callers that choose hosts themselves (DAEMON jobs follow
// every matching host).
func Matches(p *pelotonv1.PlacementSpec, partition string, labels map[string]string) bool {
	return matches(p, partition, labels)
}
