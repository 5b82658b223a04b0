package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	mesosv1 "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestMesosStack runs `peloton serve cluster --backend mesos` (the real
// binary, on a real etcd) against mesostest, the in-process test master
// that speaks the Mesos v1 scheduler protocol: not a real Mesos. A batch
// job runs to the end and a service keeps running; then the stack is
// SIGKILLed and started again on the same etcd. It subscribes with the
// framework ID it kept there, reconciles, and finds the service's runs
// and a stateful instance (on its persistent volume) where they were: none
// lost, none launched twice.
func TestMesosStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a peloton process twice")
	}
	bin := buildPeloton(t)
	etcd := etcdtest.Start(t, 1)
	agents := make([]mesostest.AgentSpec, 4)
	for i := range agents {
		agents[i] = mesostest.AgentSpec{CPUs: 4, MemMB: 4096, Attributes: map[string]string{"zone": fmt.Sprintf("z%d", i%2)}}
	}
	master, err := mesostest.New(mesostest.Config{Agents: agents, Heartbeat: 500 * time.Millisecond, Redeliver: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	listen, httpListen, dataDir := freePort(t), freePort(t), t.TempDir()
	start := func() *daemon {
		return startDaemon(t, "mesos-stack", bin, "peloton is ready: grpc ", "serve", "cluster",
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--backend", "mesos", "--mesos-master", master.URL(),
			"--mesos-role", "peloton", "--mesos-failover-timeout", "1h",
			"--listen", listen, "--http-listen", httpListen, "--data-dir", dataDir, "--log-level", "warn")
	}
	d := start()
	api, err := client.New(d.addr, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	hosts, err := api.Hosts.ListHosts(ctx(), &pelotonv1.ListHostsRequest{})
	if err != nil || len(hosts.Hosts) != 4 || hosts.Hosts[0].Labels["zone"] == "" {
		t.Fatalf("hosts %v, %v: want the 4 agents, their attributes as labels", hosts, err)
	}
	frameworkID := master.FrameworkID()
	if frameworkID == "" {
		t.Fatal("the stack did not subscribe")
	}

	create := func(spec *pelotonv1.JobSpec) string {
		resp, err := api.Jobs.CreateJob(ctx(), &pelotonv1.CreateJobRequest{Spec: spec})
		if err != nil {
			t.Fatalf("CreateJob %s: %v", spec.Name, err)
		}
		return resp.JobId
	}
	jobState := func(id string, want pelotonv1.JobState) func() error {
		return func() error {
			j, err := api.Jobs.GetJob(ctx(), &pelotonv1.GetJobRequest{JobId: id})
			if err != nil {
				return err
			}
			if j.Job.Status.State != want {
				return fmt.Errorf("job %s is %s (%v), want %s", id, j.Job.Status.State, j.Job.Status.TaskCounts, want)
			}
			return nil
		}
	}
	// running lists the service's runs once all are RUNNING.
	running := func(id string, n int) (ids []string, err error) {
		tl, err := api.Tasks.ListTasks(ctx(), &pelotonv1.ListTasksRequest{JobId: id})
		if err != nil {
			return nil, err
		}
		for _, tk := range tl.Tasks {
			if tk.Status.State != pelotonv1.TaskState_RUNNING {
				return nil, fmt.Errorf("instance %d is %s", tk.InstanceId, tk.Status.State)
			}
			ids = append(ids, tk.TaskId)
		}
		if len(ids) != n {
			return nil, fmt.Errorf("%d runs, want %d", len(ids), n)
		}
		sort.Strings(ids)
		return ids, nil
	}
	res := &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 128}
	batch := create(&pelotonv1.JobSpec{Name: "mesos-batch", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 20,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0.3"}, Resources: res}})
	service := create(&pelotonv1.JobSpec{Name: "mesos-service", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 3,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: res}})
	// A stateful instance: its volume is reserved and created on its agent.
	if _, err := api.Pools.CreatePool(ctx(), &pelotonv1.CreatePoolRequest{Path: "/db", Spec: &pelotonv1.PoolSpec{
		Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 256, DiskMb: 100}}}); err != nil {
		t.Fatal(err)
	}
	stateful := create(&pelotonv1.JobSpec{Name: "mesos-db", Type: pelotonv1.JobType_STATEFUL, Pool: "/db", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: res, Volume: &pelotonv1.VolumeSpec{SizeMb: 10}}})
	testutil.Eventually(t, 60*time.Second, "the batch job succeeds", jobState(batch, pelotonv1.JobState_JOB_SUCCEEDED))
	var before, dbBefore []string
	testutil.Eventually(t, 60*time.Second, "the service runs", func() (err error) { before, err = running(service, 3); return err })
	testutil.Eventually(t, 60*time.Second, "the stateful instance runs", func() (err error) { dbBefore, err = running(stateful, 1); return err })
	for _, id := range before {
		if s, _, ok := master.TaskState(id); !ok || s != mesosv1.TASK_RUNNING {
			t.Fatalf("the master has %s as %v (known: %v), want TASK_RUNNING", id, s, ok)
		}
	}

	// kill -9 the stack; the tasks run on. Start it again.
	d.kill()
	d = start()
	api2, err := client.New(d.addr, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer api2.Close()
	api = api2
	if got := master.FrameworkID(); got != frameworkID || master.Subscriptions() < 2 {
		t.Fatalf("after the restart: framework %s, %d subscriptions; want %s subscribed again", got, master.Subscriptions(), frameworkID)
	}
	var after []string
	testutil.Eventually(t, 60*time.Second, "the service runs after the restart", func() (err error) { after, err = running(service, 3); return err })
	if strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("service runs %v after the restart, want the same runs %v", after, before)
	}
	if dbAfter, err := running(stateful, 1); err != nil || dbAfter[0] != dbBefore[0] {
		t.Errorf("stateful run %v (%v) after the restart, want %v", dbAfter, err, dbBefore)
	}
	testutil.Eventually(t, 30*time.Second, "the master holds the service's 3 runs, the stateful one, and nothing else running", func() error {
		if n := master.Running(); n != 4 {
			return fmt.Errorf("%d tasks running in the master (%v)", n, master.Tasks())
		}
		return nil
	})
	if err := jobState(batch, pelotonv1.JobState_JOB_SUCCEEDED)(); err != nil {
		t.Errorf("the batch job after the restart: %v", err)
	}
	// The restarted stack launches and kills.
	again := create(&pelotonv1.JobSpec{Name: "mesos-batch-2", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 5,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: res}})
	testutil.Eventually(t, 60*time.Second, "a batch job after the restart succeeds", jobState(again, pelotonv1.JobState_JOB_SUCCEEDED))
	for _, id := range []string{service, stateful} {
		if _, err := api.Jobs.CancelJob(ctx(), &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, "the service's tasks are killed in Mesos", func() error {
		if n := master.Running(); n != 0 {
			return fmt.Errorf("%d tasks still running", n)
		}
		return nil
	})
}
