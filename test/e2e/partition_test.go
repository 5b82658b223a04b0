package e2e

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestMoveHostWithinSLAThenAdmitPerPartition moves a host that runs part of
// a service to another partition: the service's instances leave it one SLA
// grant at a time. The host then takes work
// that targets its new partition, and admission counts only that partition's
// hosts: a job that asks for more than the partition has pends, naming the
// partition, though the cluster as a whole has room.
func TestMoveHostWithinSLAThenAdmitPerPartition(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 3, hostCPU: 2})
	// The service stays in the local hosts' partition, so the instances
	// that leave local-0 cannot come back once it is in another.
	spec := service("moved-web", 6, 1, "sleep", "300")
	spec.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Strategy: pelotonv1.PlacementStrategy_SPREAD, MaxInstancesPerHost: 3,
		Partition: "default"}
	id := s.createJob(spec)
	before := s.waitTasks(id, "6 running", 60*time.Second, allRunning(6))
	onHost := runningOn(before)["local-0"]
	if onHost < 2 {
		t.Fatalf("want at least 2 instances on local-0 to move, have %v", runningOn(before))
	}

	_, err := s.hosts.MoveHost(ctxT(t), &pelotonv1.MoveHostRequest{Host: "local-0", Partition: "Bad Name"})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "partition: ") {
		t.Fatalf("bad name: %v", err)
	}
	_, err = s.hosts.MoveHost(ctxT(t), &pelotonv1.MoveHostRequest{Host: "local-9", Partition: "stateless"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown host: %v", err)
	}
	resp, err := s.hosts.MoveHost(ctxT(t), &pelotonv1.MoveHostRequest{Host: "local-0", Partition: "stateless"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Host.PartitionState != pelotonv1.PartitionMoveState_PARTITION_MOVING {
		t.Fatalf("answer: %v", resp.Host)
	}
	_, err = s.hosts.MoveHost(ctxT(t), &pelotonv1.MoveHostRequest{Host: "local-0", Partition: "batch"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second move of a moving host: %v", err)
	}
	s.waitHost("local-0", "settled in stateless", 90*time.Second, func(h *pelotonv1.Host) bool {
		return h.Partition == "stateless" && h.PartitionState == pelotonv1.PartitionMoveState_PARTITION_SETTLED
	})
	after := s.waitTasks(id, "6 running off local-0", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		return allRunning(6)(ts) && runningOn(ts)["local-0"] == 0
	})
	ws := downWindows(after)
	if len(ws) != onHost {
		t.Fatalf("%d instances were on local-0, %d moved: %v", onHost, len(ws), ws)
	}
	if n := maxOverlap(ws); n > 1 {
		t.Errorf("%d instances were down at once during the move; sla.maximumUnavailableInstances is 1: %v", n, ws)
	}
	// local-0 alone is partition stateless: 2 CPU. Three 1-CPU tasks that
	// target it: two run there, the third pends naming the partition.
	job := spreadJob("in-stateless", 3, []string{"sleep", "300"}, 1)
	job.DefaultSpec.Resources.Cpu = 1
	job.DefaultSpec.Placement = &pelotonv1.PlacementSpec{Partition: "stateless"}
	jid := s.createJob(job)
	ts := s.waitTasks(jid, "2 running on local-0, 1 pending on the partition", 60*time.Second, func(ts []*pelotonv1.Task) bool {
		running, pending := 0, 0
		for _, tk := range ts {
			switch {
			case tk.Status.State == pelotonv1.TaskState_RUNNING && tk.Status.Host == "local-0":
				running++
			case tk.Status.State == pelotonv1.TaskState_PENDING && strings.Contains(tk.Status.PendingReason, "partition stateless is full"):
				pending++
			}
		}
		return running == 2 && pending == 1
	})
	if len(ts) != 3 {
		t.Fatalf("tasks %v", ts)
	}
}

// TestMoveHostBlockedByStatefulInstance: a STATEFUL instance's volume is on
// its host, so a move of that host waits for its owner and says so; killing
// the job lets the move finish.
func TestMoveHostBlockedByStatefulInstance(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2})
	if _, err := s.pools.CreatePool(ctxT(t), &pelotonv1.CreatePoolRequest{Path: "/db", Spec: &pelotonv1.PoolSpec{
		Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 256, DiskMb: 100}}}); err != nil {
		t.Fatal(err)
	}
	spec := service("db", 1, 1, "sleep", "300")
	spec.Type, spec.Pool = pelotonv1.JobType_STATEFUL, "/db"
	spec.DefaultSpec.Volume = &pelotonv1.VolumeSpec{SizeMb: 10}
	id := s.createJob(spec)
	ts := s.waitTasks(id, "1 running", 60*time.Second, allRunning(1))
	h, run := ts[0].Status.Host, ts[0].Status.RunId

	// Over REST this time; a bad name first, which names the field.
	if code, raw := s.rest("POST", "/v1/hosts/"+h+":move", `{"partition":"Not OK"}`, nil); code != 400 ||
		!strings.Contains(raw, `partition: \"Not OK\" is not a partition name`) {
		t.Fatalf("bad name over REST: %d %s", code, raw)
	}
	if code, raw := s.rest("POST", "/v1/hosts/"+h+":move", `{"partition":"stateless"}`, nil); code != 200 ||
		!strings.Contains(raw, `"targetPartition":"stateless"`) {
		t.Fatalf("move over REST: %d %s", code, raw)
	}
	s.waitHost(h, "moving, blocked by the stateful instance", 30*time.Second, func(host *pelotonv1.Host) bool {
		return host.PartitionState == pelotonv1.PartitionMoveState_PARTITION_MOVING &&
			strings.Contains(host.PartitionMessage, "STATEFUL instance 0 of job "+id)
	})
	// Maintenance waits for the move.
	_, err := s.hosts.StartMaintenance(ctxT(t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{h}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("maintenance of a moving host: %v", err)
	}
	if tk := s.waitTasks(id, "1 running", 5*time.Second, allRunning(1)); tk[0].Status.RunId != run {
		t.Fatal("a partition move moved a stateful instance")
	}
	if _, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	s.waitHost(h, "settled in stateless once the owner acted", 60*time.Second, func(host *pelotonv1.Host) bool {
		return host.Partition == "stateless" && host.PartitionState == pelotonv1.PartitionMoveState_PARTITION_SETTLED
	})
}

// TestHostMoveSurvivesRestart: a move under way when the control plane
// stops goes on after it starts again on the same data, and the host keeps
// its new partition over further restarts, although the local backend, a
// new process each time, reports its default partition.
func TestHostMoveSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := stackOpts{hosts: 2, hostCPU: 2, hostMem: 4096}
	s := startStack(t, dir, opts)
	ctx := ctxT(t)
	// The runs ignore SIGTERM and have a long grace period, so the move
	// stays under way (the run PREEMPTING, the host MOVING) until the stack
	// stops.
	stubborn := []string{"/bin/sh", "-c", "trap '' TERM; sleep 300"}
	// In the local hosts' partition: the run that leaves local-0 cannot
	// come back once local-0 is in another.
	job := spreadJob("stubborn", 2, stubborn, 600)
	job.DefaultSpec.Placement.Partition = "default"
	created, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: job})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobId
	s.waitTasks(id, "one running on each host", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		n := runningOn(ts)
		return n["local-0"] == 1 && n["local-1"] == 1
	})
	out, errOut, err := s.runCLI("host", "move", "local-0", "--partition", "stateless", "--no-wait")
	if err != nil || !strings.Contains(out, "default->stateless") {
		t.Fatalf("host move: %v %s\n%s", err, errOut, out)
	}
	s.waitTasks(id, "the run on local-0 preempting for the move", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		for _, tk := range ts {
			if st := tk.Status; st.Host == "local-0" && st.State == pelotonv1.TaskState_PREEMPTING &&
				st.Reason == "preempted-host-drain" && strings.Contains(st.Message, "host local-0 is draining to move to partition stateless") {
				return true
			}
		}
		return false
	})
	if h := s.host("local-0"); h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_MOVING ||
		h.PartitionMessage != "moving to partition stateless: draining 1 task" {
		t.Fatalf("mid-move: %v", h)
	}

	s.stop()
	s2 := startStack(t, dir, opts)
	// The run's end may already have been seen; then the move is done.
	h := s2.host("local-0")
	moving := h.PartitionState != pelotonv1.PartitionMoveState_PARTITION_SETTLED && h.TargetPartition == "stateless"
	done := h.PartitionState == pelotonv1.PartitionMoveState_PARTITION_SETTLED && h.Partition == "stateless"
	if !moving && !done {
		t.Fatalf("after a restart mid-move local-0 is %v", h)
	}
	s2.waitTasks(id, "both running on local-1", 30*time.Second, func(ts []*pelotonv1.Task) bool {
		return runningOn(ts)["local-1"] == 2
	})
	s2.waitHost("local-0", "settled in stateless", 30*time.Second, func(h *pelotonv1.Host) bool {
		return h.Partition == "stateless" && h.PartitionState == pelotonv1.PartitionMoveState_PARTITION_SETTLED && h.TaskCount == 0
	})

	s2.stop()
	s3 := startStack(t, dir, opts)
	if h := s3.host("local-0"); h.Partition != "stateless" || h.State != pelotonv1.HostState_HOST_UP {
		t.Fatalf("after another restart local-0 is %v, want UP in stateless", h)
	}
	out, _, err = s3.runCLI("host", "list")
	if err != nil || !strings.Contains(out, "stateless") {
		t.Fatalf("host list: %v\n%s", err, out)
	}
}
