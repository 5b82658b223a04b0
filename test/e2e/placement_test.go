package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
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
		var tasks []*pelotonv1.Task
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("job %s: %d running", id, n), func() error {
			ts, err := s.tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id, States: []pelotonv1.TaskState{pelotonv1.TaskState_RUNNING}})
			if err != nil {
				t.Fatal(err)
			}
			if tasks = ts.Tasks; len(tasks) != n {
				return fmt.Errorf("%d running", len(tasks))
			}
			return nil
		})
		return tasks
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
	// The task no host can take is held once placement has tried it,
	// and says why.
	var tk *pelotonv1.GetTaskResponse
	testutil.Eventually(t, 30*time.Second, "a task no host can take held as unplaceable", func() error {
		var err error
		if tk, err = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: never, InstanceId: 0}); err != nil {
			t.Fatal(err)
		}
		if st := tk.Task.Status; st.State != pelotonv1.TaskState_PENDING || !strings.Contains(st.PendingReason, "cannot be placed") ||
			!strings.Contains(st.PendingReason, "mars") {
			return fmt.Errorf("%s %q", st.State, st.PendingReason)
		}
		return nil
	})
	// Not retried hot: it stays held, however many admission rounds pass
	// it over, rather than cycling through placement.
	placedBefore := tk.Task.Status.PendingReason
	waitAdmissionRounds(t, 4)
	tk, _ = s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: never, InstanceId: 0})
	if tk.Task.Status.PendingReason != placedBefore || tk.Task.Status.State != pelotonv1.TaskState_PENDING {
		t.Fatalf("unresolvable task changed: %s %q", tk.Task.Status.State, tk.Task.Status.PendingReason)
	}
	// Bad constraints are refused at submission, naming the field.
	_, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
		Name: "bad", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64},
			Placement: &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_EQUALS}}}}}})
	expectStatus(t, err, codes.InvalidArgument, "spec.defaultSpec.placement.constraints[0]")
}

// TestGangSameLabel: every gang of a job with gang.sameLabel runs on hosts
// that share one value of the label (each gang on its own value, as hosts
// of one zone have room for one gang), and a gang no value has room for
// waits with a reason naming the label.
func TestGangSameLabel(t *testing.T) {
	// Four hosts of 4 CPUs, two in each zone: a zone holds 8 CPUs.
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 4, hostCPU: 4, hostMem: 8192, labels: []string{"zone=a", "zone=b"}})
	ctx := ctxT(t)
	job := func(name string, n, size uint32, cpu float64) string {
		resp, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{
			Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: n,
			Gang:        &pelotonv1.GangSpec{Size: size, SameLabel: "zone"},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: cpu, MemoryMb: 64}}}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return resp.JobId
	}
	hostZone := map[string]string{}
	hl, _ := s.hosts.ListHosts(ctx, &pelotonv1.ListHostsRequest{})
	for _, h := range hl.Hosts {
		hostZone[h.Name] = h.Labels["zone"]
	}
	// Two gangs of 2 members of 3 CPUs: a gang fills two hosts of a zone.
	pair := job("pairs", 4, 2, 3)
	ts := s.waitTasks(pair, "both gangs running", 30*time.Second, allRunning(4))
	zoneOf := map[uint32]string{}
	for _, tk := range ts {
		zoneOf[tk.InstanceId] = hostZone[tk.Status.Host]
	}
	if zoneOf[0] != zoneOf[1] || zoneOf[2] != zoneOf[3] || zoneOf[0] == zoneOf[2] {
		t.Errorf("members' zones %v: want each gang in one zone, the two in different ones", zoneOf)
	}
	// With them gone, a gang of 3 members of 3 CPUs fits the cluster but
	// no zone (two hosts each).
	if _, err := s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: pair}); err != nil {
		t.Fatal(err)
	}
	wide := job("wide", 3, 3, 3)
	testutil.Eventually(t, 30*time.Second, "the gang that fits no zone saying why", func() error {
		resp, err := s.tasks.GetTask(ctxT(t), &pelotonv1.GetTaskRequest{JobId: wide, InstanceId: 0})
		if err != nil {
			return err
		}
		// Admitted (READY), not placed.
		if st := resp.Task.Status; st.State != pelotonv1.TaskState_READY || !strings.Contains(st.PendingReason, "no zone value has room for the gang of 3") {
			return fmt.Errorf("%s: %q", st.State, st.PendingReason)
		}
		return nil
	})
}
