package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

func TestStatefulKeepsVolumeAndHost(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{hosts: 2})
	// STATEFUL instances are never preempted, so they run only inside a
	// pool's reservation.
	if _, err := s.pools.CreatePool(ctxT(t), &pelotonv1.CreatePoolRequest{Path: "/db", Spec: &pelotonv1.PoolSpec{
		Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 256, DiskMb: 100}}}); err != nil {
		t.Fatal(err)
	}
	spec := service("db", 2, 1, "sh", "-c", `echo run >> "$PELOTON_VOLUME/log"; cat "$PELOTON_VOLUME/log"; exec sleep 300`)
	spec.Type, spec.Pool = pelotonv1.JobType_STATEFUL, "/db"
	spec.DefaultSpec.Volume = &pelotonv1.VolumeSpec{SizeMb: 10}
	id := s.createJob(spec)
	first := s.waitTasks(id, "2 running", 60*time.Second, allRunning(2))
	hosts := map[uint32]string{}
	for _, tk := range first {
		if tk.Status.BoundHost == "" || tk.Status.BoundHost != tk.Status.Host {
			t.Fatalf("instance %d: bound to %q, runs on %q", tk.InstanceId, tk.Status.BoundHost, tk.Status.Host)
		}
		hosts[tk.InstanceId] = tk.Status.Host
	}

	// A restart and an update each start a new run on the same host, with
	// the volume's contents.
	if _, err := s.jobs.RestartJob(ctxT(t), &pelotonv1.RestartJobRequest{JobId: id, Instances: []uint32{0}}); err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "instance 0 on run 2", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return ts[0].Status.RunId == 2 && ts[0].Status.State == pelotonv1.TaskState_RUNNING
	})
	// The restart is done once the new run has stayed up for the default
	// stability window; only then may an update start.
	s.waitNoActiveUpdate(id, 60*time.Second)
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Env = map[string]string{"V": "2"}
	u := s.startUpdate(id, next, &pelotonv1.UpdateSpec{})
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 60*time.Second, nil)
	ts := s.waitTasks(id, "2 running", 30*time.Second, allRunning(2))
	for _, tk := range ts {
		if tk.Status.Host != hosts[tk.InstanceId] {
			t.Errorf("instance %d moved from %s to %s", tk.InstanceId, hosts[tk.InstanceId], tk.Status.Host)
		}
	}
	waitLog := func(inst, run uint32, want string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("instance %d run %d prints %q", inst, run, want), func() error {
			if got := s.logs(id, inst, run, pelotonv1.LogStream_STDOUT); got != want {
				return fmt.Errorf("printed %q", got)
			}
			return nil
		})
	}
	waitLog(0, ts[0].Status.RunId, "run\nrun\nrun\n")
	waitLog(1, ts[1].Status.RunId, "run\nrun\n")

	// A drain of instance 0's host waits for its owner, and says so.
	h := hosts[0]
	if _, err := s.hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{h}}); err != nil {
		t.Fatal(err)
	}
	s.waitHost(h, "draining, blocked by the stateful instance", 30*time.Second, func(host *pelotonv1.Host) bool {
		return host.State == pelotonv1.HostState_HOST_DRAINING && strings.Contains(host.MaintenanceMessage, "STATEFUL instance 0 of job "+id)
	})
	if tk := s.waitTasks(id, "2 running", 5*time.Second, allRunning(2)); tk[0].Status.RunId != ts[0].Status.RunId {
		t.Fatal("a drain moved a stateful instance")
	}
	if _, err := s.hosts.CompleteMaintenance(ctxT(t), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{h}}); err != nil {
		t.Fatal(err)
	}

	// Deleting the job releases the volumes.
	volumes, _ := filepath.Glob(filepath.Join(dir, "tasks", "volumes", "*", id+"-*"))
	if len(volumes) != 2 {
		t.Fatalf("volumes on disk: %v", volumes)
	}
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	s.waitJob(id, pelotonv1.JobState_JOB_KILLED, 30*time.Second)
	if _, err := s.jobs.DeleteJob(ctxT(t), &pelotonv1.DeleteJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	for _, v := range volumes {
		if _, err := os.Stat(v); !os.IsNotExist(err) {
			t.Errorf("volume %s still there after the job was deleted (%v)", v, err)
		}
	}
}

func TestDaemonFollowsMatchingHosts(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 6, labels: []string{"zone=a", "zone=b"}})
	spec := &pelotonv1.JobSpec{Name: "agent", Type: pelotonv1.JobType_DAEMON, Pool: "/default",
		Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16},
			Placement: &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "zone", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"a"}}}}}}
	id := s.createJob(spec)
	zoneHosts := func(zone string) []string {
		hl, err := s.hosts.ListHosts(ctxT(t), &pelotonv1.ListHostsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hl.Hosts {
			if h.Labels["zone"] == zone {
				out = append(out, h.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	onHosts := func(want []string) func([]*pelotonv1.Task) bool {
		return func(ts []*pelotonv1.Task) bool {
			var got []string
			for _, tk := range ts {
				if tk.Status.State == pelotonv1.TaskState_RUNNING {
					if tk.Status.Host != tk.Status.BoundHost {
						return false
					}
					got = append(got, tk.Status.Host)
				}
			}
			sort.Strings(got)
			return strings.Join(got, ",") == strings.Join(want, ",")
		}
	}
	s.waitTasks(id, "one instance on each zone-a host", 60*time.Second, onHosts(zoneHosts("a")))

	// Moving the daemon to zone b stops the zone-a instances and starts one on each zone-b host.
	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.DefaultSpec.Placement.Constraints[0].Values = []string{"b"}
	s.startUpdate(id, next, &pelotonv1.UpdateSpec{BatchSize: 3})
	// Wait until the zone-a instances have finished stopping too: the
	// zone-b ones can be running while a zone-a kill is still on its way.
	bHosts := onHosts(zoneHosts("b"))
	ts := s.waitTasks(id, "one instance on each zone-b host, the rest stopped", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if st := tk.Status.State; st != pelotonv1.TaskState_RUNNING && st != pelotonv1.TaskState_KILLED {
				return false
			}
		}
		return bHosts(ts)
	})
	// The zone-a instances were stopped and their slots freed; new ones
	// may be taken by later hosts.
	free := 0
	for _, tk := range ts {
		if tk.Status.State == pelotonv1.TaskState_KILLED {
			if tk.Status.BoundHost != "" || tk.Status.Reason != "host-removed" {
				t.Errorf("instance %d: stopped but %v", tk.InstanceId, tk.Status)
			}
			free++
		}
	}
	if len(ts) > 6 || len(ts)-free != 3 {
		t.Errorf("%d instances, %d free, for 3 hosts", len(ts), free)
	}
}
