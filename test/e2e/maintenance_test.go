package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/metrics"
	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// spreadJob is a BATCH job of n long tasks of 0.5 CPU, spread over the hosts.
func spreadJob(name string, n uint32, command []string, grace uint32) *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: command, KillGracePeriodSeconds: grace,
			Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 16},
			Placement: &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD}}}
}

// waitTasks polls a job's tasks until cond holds, or fails with them.
func (s *stack) waitTasks(id, what string, within time.Duration, cond func([]*pelotonv1.Task) bool) []*pelotonv1.Task {
	s.t.Helper()
	var tasks []*pelotonv1.Task
	peltest.Eventually(s.t, within, fmt.Sprintf("job %s: %s", id, what), func() error {
		resp, err := s.tasks.ListTasks(context.Background(), &pelotonv1.ListTasksRequest{JobId: id})
		if err != nil {
			s.t.Fatal(err)
		}
		if tasks = resp.Tasks; cond(tasks) {
			return nil
		}
		var b strings.Builder
		for _, tk := range tasks {
			fmt.Fprintf(&b, "\ninstance %d: %s on %q run %d: %s %s (pending: %s)", tk.InstanceId, tk.Status.State, tk.Status.Host, tk.Status.RunId, tk.Status.Reason, tk.Status.Message, tk.Status.PendingReason)
		}
		return errors.New("tasks:" + b.String())
	})
	return tasks
}

// waitHost polls until cond holds for the named host, or fails with it.
func (s *stack) waitHost(name, what string, within time.Duration, cond func(*pelotonv1.Host) bool) *pelotonv1.Host {
	s.t.Helper()
	var h *pelotonv1.Host
	peltest.Eventually(s.t, within, fmt.Sprintf("host %s: %s", name, what), func() error {
		if h = s.host(name); cond(h) {
			return nil
		}
		return fmt.Errorf("it is %v", h)
	})
	return h
}

func (s *stack) host(name string) *pelotonv1.Host {
	s.t.Helper()
	resp, err := s.hosts.ListHosts(context.Background(), &pelotonv1.ListHostsRequest{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, h := range resp.Hosts {
		if h.Name == name {
			return h
		}
	}
	s.t.Fatalf("no host %s in %v", name, resp.Hosts)
	return nil
}

// runningOn counts running tasks per host.
func runningOn(ts []*pelotonv1.Task) map[string]int {
	n := map[string]int{}
	for _, tk := range ts {
		if tk.Status.State == pelotonv1.TaskState_RUNNING {
			n[tk.Status.Host]++
		}
	}
	return n
}

// preemptedByDrain says whether an instance's history shows a drain
// preemption followed by a new run waiting again.
func preemptedByDrain(tk *pelotonv1.Task) bool {
	preempted := false
	for _, h := range tk.Status.History {
		if h.State == pelotonv1.TaskState_PREEMPTING && h.Reason == "preempted-host-drain" {
			preempted = true
		}
		if preempted && h.State == pelotonv1.TaskState_PENDING {
			return true
		}
	}
	return false
}

// TestHostMaintenanceEndToEnd: on two hosts of real processes, draining
// local-0 preempts every run on it and runs each again on local-1, with no
// failure counted; local-0 ends HOST_DRAINED and takes no new task until
// maintenance is completed, after which it takes work again.
func TestHostMaintenanceEndToEnd(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 2, hostMem: 4096})
	ctx := ctxT(t)
	drainsBefore := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("host-drain"))
	created, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spreadJob("drain-me", 4, []string{"sleep", "300"}, 1)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobId
	before := s.waitTasks(id, "2 running on each host", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		n := runningOn(ts)
		return n["local-0"] == 2 && n["local-1"] == 2
	})
	var moved []uint32
	for _, tk := range before {
		if tk.Status.Host == "local-0" {
			moved = append(moved, tk.InstanceId)
		}
	}

	// Start maintenance over REST.
	var raw map[string][]map[string]any
	code, body := s.rest("POST", "/v1/hosts:startMaintenance", `{"hosts":["local-0"]}`, &raw)
	if code != 200 {
		t.Fatalf("POST /v1/hosts:startMaintenance: %d %s", code, body)
	}
	if len(raw["hosts"]) != 1 || raw["hosts"][0]["name"] != "local-0" ||
		(raw["hosts"][0]["state"] != "HOST_DRAINING" && raw["hosts"][0]["state"] != "HOST_DRAINED") {
		t.Fatalf("startMaintenance answered %s", body)
	}

	// Every run that was on local-0 was preempted and runs again on local-1.
	after := s.waitTasks(id, "all 4 running on local-1", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return runningOn(ts)["local-1"] == 4
	})
	for _, tk := range after {
		wasOn0 := false
		for _, inst := range moved {
			wasOn0 = wasOn0 || inst == tk.InstanceId
		}
		st := tk.Status
		switch {
		case wasOn0 && (!preemptedByDrain(tk) || st.RunId != 2 || st.FailureCount != 0 || st.PreviousHost != "local-0"):
			t.Errorf("instance %d was on local-0: run %d, failures %d, previous host %q, history %v",
				tk.InstanceId, st.RunId, st.FailureCount, st.PreviousHost, st.History)
		case !wasOn0 && st.RunId != 1:
			t.Errorf("instance %d was on local-1 and must not move: run %d, history %v", tk.InstanceId, st.RunId, st.History)
		}
	}
	s.waitHost("local-0", "HOST_DRAINED with no tasks", 30*time.Second, func(h *pelotonv1.Host) bool {
		return h.State == pelotonv1.HostState_HOST_DRAINED && h.TaskCount == 0 && strings.HasPrefix(h.MaintenanceMessage, "drained")
	})
	if d := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("host-drain")) - drainsBefore; d != float64(len(moved)) {
		t.Errorf("peloton_preemptions_total{reason=\"host-drain\"} grew by %v, want %d", d, len(moved))
	}
	code, metricsText := s.rest("GET", "/metrics", nil, nil)
	if code != 200 {
		t.Fatal(code)
	}
	mustContain(t, metricsText, `peloton_hosts{state="HOST_DRAINED"} 1`, "host gauge")
	mustContain(t, metricsText, `peloton_hosts{state="HOST_UP"} 1`, "host gauge")

	// No new task lands on the drained host: local-1 is full, so a new task
	// waits although local-0 is empty. A drained host's capacity no longer
	// counts, so admission already holds it back (the pool is at its
	// entitlement, which is now local-1 alone).
	waiting, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spreadJob("waits", 1, []string{"sleep", "300"}, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s.waitTasks(waiting.JobId, "pending with a reason", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return len(ts) == 1 && ts[0].Status.State != pelotonv1.TaskState_RUNNING && ts[0].Status.Host == "" &&
			strings.Contains(ts[0].Status.PendingReason, "waiting for admission")
	})
	if h := s.host("local-0"); h.TaskCount != 0 || h.State != pelotonv1.HostState_HOST_DRAINED {
		t.Fatalf("a drained host took work: %v", h)
	}

	// Illegal requests change nothing and say why.
	_, errOut, err := s.runCLI("host", "drain", "local-1", "nope")
	if err == nil || errOut != "Error: NotFound: hosts[1]: host nope does not exist\n" {
		t.Fatalf("drain an unknown host: %v %q", err, errOut)
	}
	if h := s.host("local-1"); h.State != pelotonv1.HostState_HOST_UP {
		t.Fatalf("a refused request changed local-1: %v", h)
	}
	_, err = s.hosts.StartMaintenance(ctx, &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "host local-0 is HOST_DRAINED") {
		t.Fatalf("drain a drained host: %v", err)
	}

	// Completing maintenance (CLI) returns local-0 to service: the waiting task runs there.
	out, errOut, err := s.runCLI("host", "maintenance", "complete", "local-0")
	if err != nil || !strings.Contains(out, "HOST_UP") {
		t.Fatalf("maintenance complete: %v %s\n%s", err, errOut, out)
	}
	s.waitTasks(waiting.JobId, "running on local-0", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return runningOn(ts)["local-0"] == 1
	})
	out, _, err = s.runCLI("host", "list")
	if err != nil || strings.Contains(out, "DRAIN") || strings.Count(out, "HOST_UP") != 2 {
		t.Fatalf("host list after maintenance: %v\n%s", err, out)
	}
	_, errOut, err = s.runCLI("host", "maintenance", "complete", "local-0")
	if err == nil || errOut != "Error: FailedPrecondition: hosts[0]: host local-0 is HOST_UP; "+
		"completing maintenance needs HOST_DRAINING or HOST_DRAINED\n" {
		t.Fatalf("complete an up host: %v %q", err, errOut)
	}
}

// TestHostDrainSurvivesRestart: a drain under way when the control plane
// stops goes on after it starts again on the same data: the host stays in
// maintenance, its run goes to the other host, and the host ends drained.
func TestHostDrainSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := stackOpts{hosts: 2, hostCPU: 2, hostMem: 4096}
	s := startStack(t, dir, opts)
	ctx := ctxT(t)
	// The runs ignore SIGTERM and have a long grace period, so a drain
	// stays under way (the run PREEMPTING, the host DRAINING) until the
	// stack stops.
	stubborn := []string{"/bin/sh", "-c", "trap '' TERM; sleep 300"}
	created, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spreadJob("stubborn", 2, stubborn, 600)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobId
	s.waitTasks(id, "one running on each host", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		n := runningOn(ts)
		return n["local-0"] == 1 && n["local-1"] == 1
	})
	if _, err := s.hosts.StartMaintenance(ctx, &pelotonv1.StartMaintenanceRequest{Hosts: []string{"local-0"}}); err != nil {
		t.Fatal(err)
	}
	var onHost0 uint32
	s.waitTasks(id, "the run on local-0 preempting for the drain", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if st := tk.Status; st.Host == "local-0" && st.State == pelotonv1.TaskState_PREEMPTING &&
				st.Reason == "preempted-host-drain" && strings.Contains(st.Message, "host local-0 is draining") {
				onHost0 = tk.InstanceId
				return true
			}
		}
		return false
	})
	if h := s.host("local-0"); h.State != pelotonv1.HostState_HOST_DRAINING || h.MaintenanceMessage != "draining: 1 task left" {
		t.Fatalf("mid-drain: %v", h)
	}

	s.stop()
	s2 := startStack(t, dir, opts)
	if h := s2.host("local-0"); h.State != pelotonv1.HostState_HOST_DRAINING && h.State != pelotonv1.HostState_HOST_DRAINED {
		t.Fatalf("after a restart mid-drain local-0 is %s", h.State)
	}
	ts := s2.waitTasks(id, "both running on local-1", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return runningOn(ts)["local-1"] == 2
	})
	if st := ts[onHost0].Status; st.FailureCount != 0 || st.RunId != 2 || !preemptedByDrain(ts[onHost0]) {
		t.Fatalf("instance %d after the restart: run %d, failures %d, history %v", onHost0, st.RunId, st.FailureCount, st.History)
	}
	s2.waitHost("local-0", "HOST_DRAINED", 30*time.Second, func(h *pelotonv1.Host) bool {
		return h.State == pelotonv1.HostState_HOST_DRAINED && h.TaskCount == 0
	})

	// Drained survives a restart too.
	s2.stop()
	s3 := startStack(t, dir, opts)
	if h := s3.host("local-0"); h.State != pelotonv1.HostState_HOST_DRAINED {
		t.Fatalf("after a restart local-0 is %s, want HOST_DRAINED", h.State)
	}
	resp, err := s3.hosts.CompleteMaintenance(ctxT(t), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{"local-0"}})
	if err != nil || len(resp.Hosts) != 1 || resp.Hosts[0].State != pelotonv1.HostState_HOST_UP || resp.Hosts[0].MaintenanceMessage != "" {
		t.Fatalf("complete after restarts: %v %v", resp, err)
	}
}
