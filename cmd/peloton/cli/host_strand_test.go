package cli

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/cluster"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestDrainAndMoveOfTheOnlyHost: on a one-host stack running a service, a
// drain or a move of that host would strand the service's instances, so
// both are refused naming the job; a forced move starts, and --cancel
// returns the host to its partition, where the service runs again.
func TestDrainAndMoveOfTheOnlyHost(t *testing.T) {
	s := startStack(t, func(c *cluster.Config) { c.Hosts = 1 })
	job := strings.TrimSpace(s.ok("job", "create", "-f", writeSpec(t, "web.yaml", serviceYAML("300", 2))))
	s.waitRunning(job, 2)

	s.fails(exitError, "Error: FailedPrecondition: hosts: local-0 is the only host that fits job web's instances 0-1: "+
		"they would have nowhere to go and the drain would not end; add --force (force: true) to drain anyway", "host", "drain", "local-0")
	s.fails(exitError, "Error: FailedPrecondition: host: local-0 is the only host that fits job web's instances 0-1: "+
		"they would have nowhere to go and the move would not end; add --force (force: true) to move anyway",
		"host", "move", "local-0", "--partition", "batch")
	s.fails(exitError, "Error: FailedPrecondition: host: host local-0 is not moving; there is no move to cancel", "host", "move", "local-0", "--cancel")
	s.fails(exitError, "Error: InvalidArgument: partition: leave it empty to cancel a move...", "host", "move", "local-0", "--cancel", "--partition", "batch")
	var hosts pelotonv1.ListHostsResponse
	s.get(&hosts, "host", "list")
	if h := hosts.GetHosts()[0]; h.GetState() != pelotonv1.HostState_HOST_UP || h.GetPartitionState() != pelotonv1.PartitionMoveState_PARTITION_SETTLED {
		t.Fatalf("a refusal changed the host: %v", h)
	}

	out := s.ok("host", "move", "local-0", "--partition", "batch", "--force", "--no-wait")
	if !strings.Contains(out, "default->batch") {
		t.Fatalf("forced move:\n%s", out)
	}
	if out := s.ok("host", "move", "local-0", "--cancel"); out != "host local-0: move cancelled; it stays in partition default\n" {
		t.Fatalf("cancel: %q", out)
	}
	s.get(&hosts, "host", "list")
	if h := hosts.GetHosts()[0]; h.GetPartition() != "default" || h.GetPartitionState() != pelotonv1.PartitionMoveState_PARTITION_SETTLED {
		t.Fatalf("after the cancel: %v", h)
	}
	// Whatever the move preempted runs on the host again.
	s.waitRunning(job, 2)
	var moves pelotonv1.ListPartitionMovesResponse
	s.get(&moves, "partition", "moves")
	if ms := moves.GetMoves(); len(ms) != 2 || ms[0].GetState() != "CANCELLED" || ms[1].GetState() != "CANCELLED" {
		t.Fatalf("moves: %v", ms)
	}
}
