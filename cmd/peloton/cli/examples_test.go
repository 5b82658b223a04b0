package cli

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestExamplesRun creates the long-running examples as the README says and
// checks what `task get` and `task list -o wide` then show: the service's
// port and health, the stateful and daemon instances' bound hosts.
func TestExamplesRun(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("examples/service.yaml serves HTTP with python3, which is not installed")
	}
	s := startStack(t)
	web := strings.TrimSpace(s.ok("job", "create", "-f", "../../../examples/service.yaml"))
	s.ok("pool", "create", "/team", "-f", "../../../examples/pool.yaml")
	ledger := strings.TrimSpace(s.ok("job", "create", "-f", "../../../examples/stateful.yaml"))
	agent := strings.TrimSpace(s.ok("job", "create", "-f", "../../../examples/daemon.yaml"))

	healthy := func(job string, n int) []*pelotonv1.Task {
		var ts []*pelotonv1.Task
		s.waitFor(60*time.Second, fmt.Sprintf("%d healthy instances of %s", n, job), func() (bool, string) {
			ts = s.tasks(job)
			ok := len(ts) == n
			for _, tk := range ts {
				ok = ok && tk.GetStatus().GetHealth() == pelotonv1.HealthState_HEALTHY
			}
			return ok, fmt.Sprint(ts)
		})
		return ts
	}
	for _, tk := range healthy(web, 3) {
		if tk.GetStatus().GetPorts()["http"] == 0 {
			t.Errorf("web instance %d has no http port: %v", tk.GetInstanceId(), tk.GetStatus())
		}
	}
	rs := rows(s.ok("task", "get", web, "1"))
	// The instance's row, then its history.
	if len(rs) < 5 || rs[1][7] != "HEALTHY" || !strings.HasPrefix(rs[1][9], "http=") || len(rs[3]) != 1 || rs[3][0] != "HISTORY" {
		t.Errorf("task get of the service:\n%v", rs)
	}
	for _, tk := range healthy(ledger, 2) {
		if st := tk.GetStatus(); st.GetBoundHost() == "" || st.GetBoundHost() != st.GetHost() {
			t.Errorf("ledger instance %d: bound to %q, runs on %q", tk.GetInstanceId(), st.GetBoundHost(), st.GetHost())
		}
	}
	if out := s.ok("task", "list", ledger, "-o", "wide"); strings.Count(out, "HEALTHY") != 2 || !strings.Contains(out, "BOUND HOST") {
		t.Errorf("task list -o wide of the stateful job:\n%s", out)
	}
	// The daemon: one instance bound to each of the two hosts.
	bound := map[string]bool{}
	for _, tk := range s.waitRunning(agent, 2) {
		bound[tk.GetStatus().GetBoundHost()] = true
	}
	if len(bound) != 2 || bound[""] {
		t.Errorf("daemon instances are bound to %v, want one per host", bound)
	}
}
