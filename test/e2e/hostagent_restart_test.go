package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestHostAgentAndStackRestarts: `peloton serve hostagent` processes and
// the stack they report to restart independently, and the reports go on:
// a killed agent's successor reports under a new agent id, and a stack
// restarted on the same address hears the same agent again, its sequence
// going on from where it was.
func TestHostAgentAndStackRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes and restarts a stack")
	}
	bin := buildPeloton(t)
	dataDir, listen := t.TempDir(), freePort(t)
	opts := stackOpts{hosts: 1, configure: func(c *cluster.Config) { c.Listen, c.NoHostAgents = listen, true }}
	s := startStack(t, dataDir, opts)
	// The first agent is the peloton binary's serve hostagent, its
	// successor the slim peloton-hostagent: the same command.
	slim := buildHostAgent(t)
	agent := func(bin string, cmd ...string) *daemon {
		args := append(cmd, "--server", listen, "--host", "local-0", "--virtual", "--qos=false", "--interval", "200ms", "--log-level", "warn")
		return startDaemon(t, "hostagent", bin, "peloton hostagent is reporting: ", args...)
	}
	// usage waits for a report of local-0 from an agent other than not
	// (and, if after is set, past its sequence).
	usage := func(s *stack, what, not string, after uint64) *pelotonv1.HostUsage {
		t.Helper()
		var u *pelotonv1.HostUsage
		testutil.Eventually(t, 30*time.Second, what, func() error {
			h, err := s.hostNamed("local-0")
			if err != nil {
				return err
			}
			u = h.Usage
			if u == nil || u.AgentId == not || u.Sequence <= after {
				return fmt.Errorf("usage %v", u)
			}
			return nil
		})
		return u
	}
	a := agent(bin, "serve", "hostagent")
	first := usage(s, "the agent's reports", "", 0)

	// The agent killed and started again: a new agent, reporting anew.
	a.kill()
	agent(slim) // stopped by the test's cleanup
	second := usage(s, "the new agent's reports", first.AgentId, 0)

	// The stack stopped and started again on the same address and data:
	// the same agent reconnects, its sequence going on.
	s.stop()
	s = startStack(t, dataDir, opts)
	again := usage(s, "the same agent's reports after the stack's restart", "", 0)
	if again.AgentId != second.AgentId || again.Sequence <= second.Sequence {
		t.Errorf("after the stack's restart, report %d from agent %s; want the running agent %s past %d",
			again.Sequence, again.AgentId, second.AgentId, second.Sequence)
	}
}
