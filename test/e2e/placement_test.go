package e2e

import (
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
)

// TestPlacementConstraintsEndToEnd: on 6 simulated hosts in zones a, b, c,
// a SPREAD job lands on distinct hosts across every zone, a job capped at
// one instance per host never doubles up, and a job whose constraint no host
// matches waits with a reason the user can read instead of being retried hot.
func TestPlacementConstraintsEndToEnd(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 6, hostCPU: 8, hostMem: 8192, labels: []string{"zone=a", "zone=b", "zone=c"}})
	ctx := ctxT(t)
	job := func(name string, n uint32, pl *pelotonv1.PlacementSpec) string {
		resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
			Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"},
				Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}, Placement: pl}}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return resp.JobId
	}
	spread := job("spread", 3, &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD})
	capped := job("capped", 6, &pelotonv1.PlacementSpec{MaxInstancesPerHost: 1, Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_IN, Values: []string{"a", "b"}}}})
	never := job("never", 1, &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"mars"}}}})

	hostZone := map[string]string{}
	hl, _ := s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	for _, h := range hl.Hosts {
		hostZone[h.Name] = h.Labels["zone"]
	}
	running := func(id string, n int) []*pelotonv1.Task {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ts, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, States: []pelotonv1.TaskState{pelotonv1.TaskState_RUNNING}})
			if err != nil {
				t.Fatal(err)
			}
			if len(ts.Tasks) == n {
				return ts.Tasks
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s: %d running, want %d", id, len(ts.Tasks), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	zones := map[string]bool{}
	hosts := map[string]bool{}
	for _, tk := range running(spread, 3) {
		hosts[tk.Status.Host] = true
		zones[hostZone[tk.Status.Host]] = true
	}
	if len(hosts) != 3 || len(zones) != 3 {
		t.Fatalf("SPREAD put 3 instances on hosts %v in zones %v", hosts, zones)
	}
	// 4 hosts are in zones a and b: 4 instances run, one per host; 2 wait.
	hosts = map[string]bool{}
	for _, tk := range running(capped, 4) {
		if z := hostZone[tk.Status.Host]; z != "a" && z != "b" || hosts[tk.Status.Host] {
			t.Fatalf("capped instance on %s (zone %s), hosts so far %v", tk.Status.Host, hostZone[tk.Status.Host], hosts)
		}
		hosts[tk.Status.Host] = true
	}
	time.Sleep(500 * time.Millisecond)
	tk, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: never, InstanceId: 0})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Task.Status.State != pelotonv1.TaskState_PENDING || !strings.Contains(tk.Task.Status.PendingReason, "cannot be placed") ||
		!strings.Contains(tk.Task.Status.PendingReason, "mars") {
		t.Fatalf("a task no host can take: %s %q", tk.Task.Status.State, tk.Task.Status.PendingReason)
	}
	// Not retried hot: it stays held rather than cycling through placement.
	placedBefore := tk.Task.Status.PendingReason
	time.Sleep(500 * time.Millisecond)
	tk, _ = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: never, InstanceId: 0})
	if tk.Task.Status.PendingReason != placedBefore || tk.Task.Status.State != pelotonv1.TaskState_PENDING {
		t.Fatalf("unresolvable task changed: %s %q", tk.Task.Status.State, tk.Task.Status.PendingReason)
	}
	// Bad constraints are refused at submission, naming the field.
	_, err = s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "bad", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64},
			Placement: &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_EQUALS}}}}}})
	expectStatus(t, err, codes.InvalidArgument, "spec.defaultSpec.placement.constraints[0]")
}
