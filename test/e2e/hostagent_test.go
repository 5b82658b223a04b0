package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostagent"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// hostNamed is host name as the stack lists it.
func (s *stack) hostNamed(name string) (*pelotonv1.Host, error) {
	resp, err := s.hosts.ListHosts(ctxT(s.t), &pelotonv1.ListHostsRequest{})
	if err != nil {
		return nil, err
	}
	for _, h := range resp.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return nil, fmt.Errorf("no host %s", name)
}

// TestHostAgentReportsUsage: the local backend's in-process host agents
// see what real processes use: a run that burns CPU is seen near a core,
// a run that holds memory is seen holding it, each on its run and on its
// host, with the report's age.
func TestHostAgentReportsUsage(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, hostCPU: 4, hostMem: 4096, agentInterval: 500 * time.Millisecond})
	// Bounded: each run ends by itself within 40 s.
	burn := s.createJob(&pelotonv1.JobSpec{Name: "burn", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"timeout", "40", "sh", "-c", "while :; do :; done"},
			Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}})
	// The shell holds 64 MiB in a variable while it sleeps.
	hold := s.createJob(&pelotonv1.JobSpec{Name: "hold", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", `x=$(head -c 64m /dev/zero | tr "\0" a); sleep 40`},
			Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 256}}})
	usageOf := func(job string) *pelotonv1.TaskUsage {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: job, InstanceId: 0})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Task.Status.Usage
	}
	// Loose bounds: the two cores are shared with the rest of the suite.
	testutil.Eventually(t, 30*time.Second, "the burning run seen using CPU, the holding run memory", func() error {
		b, h := usageOf(burn), usageOf(hold)
		if b.GetCpu() < 0.3 || h.GetMemoryUsedMb() < 50 {
			return fmt.Errorf("burn uses %.2f cores (want > 0.3), hold %d MiB (want > 50)", b.GetCpu(), h.GetMemoryUsedMb())
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "the host's usage is its runs'", func() error {
		h, err := s.hostNamed("local-0")
		if err != nil {
			return err
		}
		u := h.Usage
		if u.GetSource() != "runs" || u.GetCpu() < 0.3 || u.GetMemoryUsedMb() < 50 || u.GetReceiveTime() == nil || u.GetSequence() == 0 {
			return fmt.Errorf("host usage %v", u)
		}
		if age := time.Since(u.ReceiveTime.AsTime()); age > 10*time.Second {
			return fmt.Errorf("the last report is %s old", age)
		}
		return nil
	})
}

// TestQoSRevokesOnlyRevocableWork: a revocable job runs on the slack a
// sleeping service leaves; once the service burns its CPU too, its host
// runs hot and the host agent's QoS controller kills the revocable run only:
// it ends KILLED qos-revoked and waits for slack again, with no failure
// counted, while the service runs on untouched.
func TestQoSRevokesOnlyRevocableWork(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "burn")
	s := startStack(t, t.TempDir(), stackOpts{hosts: 1, hostCPU: 1, hostMem: 1024, agentInterval: 300 * time.Millisecond,
		configure: func(c *cluster.Config) {
			// Hot at 0.3 of the host's one core: the service's burn
			// gets that much even on a busy machine.
			c.HostAgentQoS = &hostagent.QoSPolicy{CPUHigh: 0.3, CPULow: 0.1, MemHigh: 0.95, MemLow: 0.9, Samples: 2}
		}})
	svc := s.createJob(&pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c",
			fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.1; done; exec timeout 60 sh -c 'while :; do :; done'`, gate)},
			Resources: &pelotonv1.Resources{Cpu: 0.8, MemoryMb: 256}}})
	s.waitTasks(svc, "the service running", 30*time.Second, allRunning(1))
	// It burns too (killing a run that uses nothing would not cool the
	// host), held to 0.2 of a core by its cgroup: not hot on its own.
	rev := s.createJob(&pelotonv1.JobSpec{Name: "rev", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		Sla: &pelotonv1.SlaSpec{Revocable: true},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"timeout", "120", "sh", "-c", "while :; do :; done"},
			Resources: &pelotonv1.Resources{Cpu: 0.2, MemoryMb: 32}}})
	ts := s.waitTasks(rev, "the revocable run on the service's slack", 30*time.Second, allRunning(1))
	if !ts[0].Status.Revocable {
		t.Errorf("the revocable job's task does not say it is revocable: %v", ts[0].Status)
	}
	h, err := s.hostNamed("local-0")
	if err != nil || h.Revocable.GetCpu() != 0.2 || h.Allocated.GetCpu() != 0.8 {
		t.Fatalf("host %v, %v: want 0.8 cpu allocated and 0.2 held by revocable work", h, err)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the revocable run revoked", func() error {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: rev, InstanceId: 0})
		if err != nil {
			return err
		}
		st := resp.Task.Status
		for _, tr := range st.History {
			if tr.State == pelotonv1.TaskState_KILLED && tr.RunId == 1 && tr.Reason == hostmgr.ReasonQoSRevoked {
				if st.FailureCount != 0 || st.RunId < 2 {
					return fmt.Errorf("revoked, but run %d with %d failures", st.RunId, st.FailureCount)
				}
				return nil
			}
		}
		return fmt.Errorf("run %d %s (%s): history %v", st.RunId, st.State, st.Reason, st.History)
	})
	resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: svc, InstanceId: 0})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Task.Status; st.State != pelotonv1.TaskState_RUNNING || st.RunId != 1 || st.FailureCount != 0 {
		t.Errorf("the service: run %d %s with %d failures; want its first run untouched", st.RunId, st.State, st.FailureCount)
	}
}
