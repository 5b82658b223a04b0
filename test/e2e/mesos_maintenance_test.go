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

// TestMesosGangAndMaintenance runs `peloton serve cluster --backend mesos`
// (the real binary, on a real etcd) against mesostest, not a real Mesos.
// A gang's members go out as one LAUNCH_GROUP per agent they were placed
// on, and all run to the end. Then the master schedules a maintenance
// window on an agent that holds service runs: with no operator, the host
// drains (the service moves one SLA grant at a time), the inverse offer is
// accepted once it is empty, and when the window ends the host is back in
// service.
func TestMesosGangAndMaintenance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a peloton process")
	}
	bin := buildPeloton(t)
	etcd := etcdtest.Start(t, 1)
	agents := make([]mesostest.AgentSpec, 3)
	for i := range agents {
		agents[i] = mesostest.AgentSpec{CPUs: 4, MemMB: 4096}
	}
	master, err := mesostest.New(mesostest.Config{Agents: agents, Heartbeat: 500 * time.Millisecond, Redeliver: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	listen, httpListen, dataDir := freePort(t), freePort(t), t.TempDir()
	d := startDaemon(t, "mesos-maint", bin, "peloton is ready: grpc ", "serve", "cluster",
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--backend", "mesos", "--mesos-master", master.URL(),
		"--mesos-role", "peloton", "--listen", listen, "--http-listen", httpListen, "--data-dir", dataDir, "--log-level", "warn")
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
	create := func(spec *pelotonv1.JobSpec) string {
		resp, err := api.Jobs.CreateJob(ctx(), &pelotonv1.CreateJobRequest{Spec: spec})
		if err != nil {
			t.Fatalf("CreateJob %s: %v", spec.Name, err)
		}
		return resp.JobId
	}
	res := &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 128}

	// A gang of 4: every member goes in a LAUNCH_GROUP, one per agent.
	gang := create(&pelotonv1.JobSpec{Name: "mesos-gang", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 4,
		Sla:         &pelotonv1.SlaSpec{MinimumRunningInstances: 4},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0.3"}, Resources: res}})
	testutil.Eventually(t, 60*time.Second, "the gang succeeds", func() error {
		j, err := api.Jobs.GetJob(ctx(), &pelotonv1.GetJobRequest{JobId: gang})
		if err != nil {
			return err
		}
		if s := j.Job.Status.State; s != pelotonv1.JobState_JOB_SUCCEEDED {
			return fmt.Errorf("gang is %s (%v)", s, j.Job.Status.TaskCounts)
		}
		return nil
	})
	var members []string
	agentsOf := map[string]bool{}
	for _, g := range master.Groups() {
		if agentsOf[g.Agent] {
			t.Errorf("two LAUNCH_GROUPs on %s: %+v", g.Agent, master.Groups())
		}
		agentsOf[g.Agent] = true
		members = append(members, g.Tasks...)
	}
	sort.Strings(members)
	if len(members) != 4 || !strings.HasPrefix(members[0], gang) || !strings.HasPrefix(members[3], gang) {
		t.Errorf("LAUNCH_GROUPs hold %v, want the gang's 4 runs", members)
	}

	// A service of 3, at most one unavailable at a time.
	service := create(&pelotonv1.JobSpec{Name: "mesos-svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 3,
		Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: res}})
	// runsOn maps each RUNNING instance's run to its agent, once all 3 run.
	runsOn := func() (map[string]string, error) {
		tl, err := api.Tasks.ListTasks(ctx(), &pelotonv1.ListTasksRequest{JobId: service})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, tk := range tl.Tasks {
			s, agent, ok := master.TaskState(tk.TaskId)
			if tk.Status.State != pelotonv1.TaskState_RUNNING || !ok || s != mesosv1.TASK_RUNNING {
				return nil, fmt.Errorf("instance %d is %s (master: %v)", tk.InstanceId, tk.Status.State, s)
			}
			out[tk.TaskId] = agent
		}
		if len(out) != 3 {
			return nil, fmt.Errorf("%d runs, want 3", len(out))
		}
		return out, nil
	}
	var before map[string]string
	testutil.Eventually(t, 60*time.Second, "the service runs", func() (err error) { before, err = runsOn(); return err })
	var agent string
	for _, a := range before {
		agent = a
		break
	}
	host := "host-" + strings.TrimPrefix(agent, "agent-")
	hostState := func() (*pelotonv1.Host, error) {
		hl, err := api.Hosts.ListHosts(ctx(), &pelotonv1.ListHostsRequest{})
		if err != nil {
			return nil, err
		}
		for _, h := range hl.Hosts {
			if h.Name == host {
				return h, nil
			}
		}
		return nil, fmt.Errorf("no host %s", host)
	}

	if err := master.ScheduleMaintenance(agent, time.Now().Add(time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, host+" drained by the maintenance window", func() error {
		h, err := hostState()
		if err != nil {
			return err
		}
		if h.State != pelotonv1.HostState_HOST_DRAINED {
			return fmt.Errorf("%s is %s: %s", host, h.State, h.MaintenanceMessage)
		}
		if !strings.Contains(h.MaintenanceMessage, "mesos backend") {
			return fmt.Errorf("message %q does not say the mesos backend started it", h.MaintenanceMessage)
		}
		return nil
	})
	testutil.Eventually(t, 60*time.Second, "the service runs again, none on "+agent, func() error {
		after, err := runsOn()
		if err != nil {
			return err
		}
		for id, a := range after {
			if a == agent {
				return fmt.Errorf("run %s still on %s", id, agent)
			}
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, "the inverse offer accepted", func() error {
		if n := len(master.AcceptedInverseOffers()); n != 1 {
			return fmt.Errorf("%d inverse offers accepted", n)
		}
		return nil
	})

	if err := master.EndMaintenance(agent); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, host+" back in service", func() error {
		h, err := hostState()
		if err != nil {
			return err
		}
		if h.State != pelotonv1.HostState_HOST_UP {
			return fmt.Errorf("%s is %s: %s", host, h.State, h.MaintenanceMessage)
		}
		return nil
	})
}
