package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostagent"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// requireCgroups skips the test unless the local backend can give each run
// a cgroup of its own here; with PELOTON_REQUIRE_CGROUPS=1 it fails
// instead, so that a machine meant to run it cannot skip it unseen.
func requireCgroups(t *testing.T) {
	t.Helper()
	if err := local.CgroupsUsable(); err != nil {
		if os.Getenv("PELOTON_REQUIRE_CGROUPS") == "1" {
			t.Fatalf("PELOTON_REQUIRE_CGROUPS=1, but the local backend cannot make cgroups here: %v", err)
		}
		t.Skipf("the local backend cannot make cgroups here (set PELOTON_REQUIRE_CGROUPS=1 to fail instead): %v", err)
	}
}

// holdMiB is a shell command that writes its cgroups to cgroupFile, waits
// for gate (none: ""), then holds mib MiB: dd reads them from /dev/zero
// into one buffer, every page written so resident, and blocks writing it
// to a reader that never reads.
func holdMiB(mib int, gate, cgroupFile string) string {
	wait := ""
	if gate != "" {
		wait = fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.1; done; `, gate)
	}
	return fmt.Sprintf(`cat /proc/self/cgroup > %s; %sdd if=/dev/zero bs=%dM count=1 2>/dev/null | sleep 180`, cgroupFile, wait, mib)
}

// TestQoSMemoryRevokesOnlyRevocableWork runs the memory QoS path on real
// processes in real cgroups: a revocable run holds memory out of the slack
// a service reserves but does not use; once the service uses its memory
// too, the host's memory is above the agent's high mark, and the agent
// kills the revocable run only (KILLED qos-revoked, no failure counted,
// not an OOM kill), which brings the host below its low mark, while the
// service runs on in its first run.
//
// The host has 512 MiB: hot at 256 (0.5), cool below 230 (0.45). The
// service reserves 400 and holds 200 once gated; the revocable run takes
// 200 of its slack (at most 1.5 x 512 − 400 = 368 may be committed beyond
// the allocations) and holds 120: 125 before the gate, 325 after, 205
// without the revocable run.
func TestQoSMemoryRevokesOnlyRevocableWork(t *testing.T) {
	requireCgroups(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "hold")
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, hostCPU: 2, hostMem: 512, agentInterval: 300 * time.Millisecond,
		configure: func(c *cluster.Config) {
			c.HostAgentQoS = &hostagent.QoSPolicy{MemHigh: 0.5, MemLow: 0.45, Samples: 2}
		}})
	svc := s.createJob(&pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", holdMiB(200, gate, filepath.Join(dir, "svc.cgroup"))},
			Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 400}}})
	s.waitTasks(svc, "the service running", 30*time.Second, allRunning(1))

	testutil.Eventually(t, 30*time.Second, "memory slack from the service's idle reservation", func() error {
		h, err := s.hostNamed("local-0")
		if err != nil {
			return err
		}
		if m := h.GetSlack().GetMemoryMb(); m < 300 || m > 368 {
			return fmt.Errorf("host memory slack %v MiB, want 300 to 368 (reserved 400, capped at 1.5 x 512 − 400)", m)
		}
		return nil
	})
	rev := s.createJob(&pelotonv1.JobSpec{Name: "rev", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		Sla: &pelotonv1.SlaSpec{Revocable: true},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", holdMiB(120, "", filepath.Join(dir, "rev.cgroup"))},
			Resources: &pelotonv1.Resources{Cpu: 0.2, MemoryMb: 200}}})
	s.waitTasks(rev, "the revocable run on the service's memory slack", 30*time.Second, allRunning(1))
	taskOf := func(job string) *pelotonv1.Task {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: job, InstanceId: 0})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Task
	}
	testutil.Eventually(t, 60*time.Second, "the revocable run holding its memory", func() error {
		if m := taskOf(rev).GetStatus().GetUsage().GetMemoryUsedMb(); m < 110 {
			return fmt.Errorf("the revocable run holds %d MiB, want 120", m)
		}
		return nil
	})
	h, err := s.hostNamed("local-0")
	if err != nil || h.GetRevocable().GetMemoryMb() != 200 || h.GetAllocated().GetMemoryMb() != 400 {
		t.Fatalf("host %v, %v: want 400 MiB allocated and 200 held by revocable work", h, err)
	}
	// Both runs are in cgroups of their own, named after their task run.
	for run, file := range map[string]string{taskOf(svc).GetTaskId(): "svc.cgroup", taskOf(rev).GetTaskId(): "rev.cgroup"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || !strings.Contains(string(b), "/"+run+"\n") {
			t.Fatalf("run %s's cgroups %q (%v): want one named after it", run, b, err)
		}
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the revocable run revoked", func() error {
		st := taskOf(rev).Status
		for _, tr := range st.History {
			if tr.RunId == 1 && tr.State == pelotonv1.TaskState_KILLED && tr.Reason == hostmgr.ReasonQoSRevoked {
				if st.FailureCount != 0 || st.RunId < 2 {
					return fmt.Errorf("revoked, but run %d with %d failures", st.RunId, st.FailureCount)
				}
				return nil
			}
			if tr.RunId == 1 && (tr.State == pelotonv1.TaskState_FAILED || tr.State == pelotonv1.TaskState_KILLED) {
				t.Fatalf("the revocable run ended %s (%s), not revoked", tr.State, tr.Reason)
			}
		}
		h, _ := s.hostNamed("local-0")
		return fmt.Errorf("run %d %s (%s), host memory used %d MiB, service %d MiB: history %v", st.RunId, st.State, st.Reason,
			h.GetUsage().GetMemoryUsedMb(), taskOf(svc).GetStatus().GetUsage().GetMemoryUsedMb(), st.History)
	})
	st := taskOf(svc).Status
	if st.State != pelotonv1.TaskState_RUNNING || st.RunId != 1 || st.FailureCount != 0 {
		t.Errorf("the service: run %d %s with %d failures; want its first run untouched", st.RunId, st.State, st.FailureCount)
	}
	if m := st.GetUsage().GetMemoryUsedMb(); m < 190 {
		t.Errorf("the service holds %d MiB, want its 200: it must have been running hot all along", m)
	}
}
