package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// daemon is one `peloton serve ...` process of a test.
type daemon struct {
	name string
	cmd  *exec.Cmd
	addr string // its gRPC address, from its ready line
	http string // its HTTP base URL, if the ready line gives one
}

// startDaemon runs bin with args and waits for the line starting with
// ready, whose next field is the gRPC address.
func startDaemon(t testing.TB, name, bin, ready string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{name: name, cmd: cmd}
	t.Cleanup(d.kill)
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, ready) {
				addrs <- strings.Fields(strings.TrimPrefix(line, ready)) // grpc ADDR, http URL
			}
		}
	}()
	select {
	case f := <-addrs:
		d.addr = strings.TrimSuffix(f[0], ",")
		if len(f) >= 3 && f[1] == "http" {
			d.http = f[2]
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not become ready within 90s", name)
	}
	return d
}

// kill SIGKILLs the process and reaps it.
func (d *daemon) kill() {
	if d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
		_ = d.cmd.Wait()
	}
}

func (d *daemon) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// fedAPI is the federation's gRPC services.
type fedAPI struct {
	clusters pelotonv1.ClusterServiceClient
	pools    pelotonv1.FederatedPoolServiceClient
	jobs     pelotonv1.FederatedJobServiceClient
	services pelotonv1.FederatedServiceServiceClient
}

func dialFederation(t testing.TB, addr string) fedAPI {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fedAPI{pelotonv1.NewClusterServiceClient(conn), pelotonv1.NewFederatedPoolServiceClient(conn), pelotonv1.NewFederatedJobServiceClient(conn),
		pelotonv1.NewFederatedServiceServiceClient(conn)}
}

// freePort returns a loopback address nothing listens on now, for a
// process that must come back on the same address after a kill.
func freePort(t *testing.T) string { return testutil.FreeAddr(t) }

// TestFederationOfProcesses runs a federation and three cluster stacks as
// separate `peloton serve` processes on one external etcd, and puts them
// through what operators see: registration, the global pool split, a
// cluster stopped (SIGSTOP) while the others keep taking work, a cluster
// killed (SIGKILL) and restarted on another port, and the federation
// itself killed and restarted with nothing lost.
func TestFederationOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	bin := buildPeloton(t)
	etcd := etcdtest.Start(t, 1)
	endpoints := strings.Join(etcd.Endpoints(), ",")
	fedListen := freePort(t)
	fedArgs := []string{"serve", "federation", "--etcd-endpoints", endpoints, "--listen", fedListen, "--http-listen", "127.0.0.1:0",
		"--check-every", "200ms", "--call-timeout", "500ms", "--slow-after", "400ms", "--unreachable-after", "2s", "--log-level", "warn"}
	fed := startDaemon(t, "federation", bin, "peloton federation is ready: grpc ", fedArgs...)
	api := dialFederation(t, fed.addr)

	startCluster := func(name, region string) *daemon {
		return startDaemon(t, name, bin, "peloton is ready: grpc ", "serve", "cluster", "--cluster-name", name,
			"--etcd-endpoints", endpoints, "--federation", fed.addr, "--cluster-labels", "region="+region,
			"--backend", "sim", "--hosts", "2", "--data-dir", t.TempDir(),
			"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn")
	}
	clusters := map[string]*daemon{"a": startCluster("a", "east"), "b": startCluster("b", "east"), "c": startCluster("c", "west")}
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	states := func(want map[string]pelotonv1.ClusterState) func() error {
		return func() error {
			resp, err := api.clusters.ListClusters(ctx(), &pelotonv1.ListClustersRequest{})
			if err != nil {
				return err
			}
			got := map[string]pelotonv1.ClusterState{}
			for _, c := range resp.Clusters {
				got[c.Name] = c.State
			}
			for name, st := range want {
				if got[name] != st {
					return fmt.Errorf("clusters %v, want %v", got, want)
				}
			}
			return nil
		}
	}
	ready := pelotonv1.ClusterState_CLUSTER_READY
	testutil.Eventually(t, 30*time.Second, "every cluster registered and READY", states(map[string]pelotonv1.ClusterState{"a": ready, "b": ready, "c": ready}))

	// cpu reports the cpu reservation of pool /team in each cluster.
	cpu := func(want map[string]float64) func() error {
		return func() error {
			for name, w := range want {
				cli, err := client.New(clusters[name].addr, client.Options{Timeout: 5 * time.Second})
				if err != nil {
					return err
				}
				resp, err := cli.Pools.GetPool(ctx(), &pelotonv1.GetPoolRequest{Path: "/team"})
				cli.Close()
				if err != nil {
					return fmt.Errorf("cluster %s: %v", name, err)
				}
				if got := resp.Pool.Spec.GetReservation().GetCpu(); got != w {
					return fmt.Errorf("cluster %s reserves %g cpu for /team, want %g", name, got, w)
				}
			}
			return nil
		}
	}
	if _, err := api.pools.CreateFederatedPool(ctx(), &pelotonv1.CreateFederatedPoolRequest{Path: "/team",
		Spec: &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 30}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the global pool split by capacity", cpu(map[string]float64{"a": 10, "b": 10, "c": 10}))

	// A stopped cluster holds up nobody: it turns UNREACHABLE, its part
	// goes to the others, and jobs go to the others while it stays stopped.
	clusters["c"].signal(t, syscall.SIGSTOP)
	testutil.Eventually(t, 20*time.Second, "c unreachable", states(map[string]pelotonv1.ClusterState{"a": ready, "b": ready, "c": pelotonv1.ClusterState_CLUSTER_UNREACHABLE}))
	testutil.Eventually(t, 20*time.Second, "c's part moved to a and b", cpu(map[string]float64{"a": 15, "b": 15}))
	var ids []string
	for i := range 10 {
		resp, err := api.jobs.CreateFederatedJob(ctx(), &pelotonv1.CreateFederatedJobRequest{Spec: &pelotonv1.FederatedJobSpec{
			Job: &pelotonv1.JobSpec{Name: fmt.Sprintf("while-c-stopped-%d", i), Type: pelotonv1.JobType_BATCH, Pool: "/team", InstanceCount: 1,
				DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.JobId)
	}
	testutil.Eventually(t, 60*time.Second, "every job done in a or b while c is stopped", func() error {
		for _, id := range ids {
			resp, err := api.jobs.GetFederatedJob(ctx(), &pelotonv1.GetFederatedJobRequest{JobId: id})
			if err != nil {
				return err
			}
			j := resp.Job
			if j.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE || j.Status.GetState() != pelotonv1.JobState_JOB_SUCCEEDED {
				return fmt.Errorf("job %s: %s in %q (%s)", id, j.DispatchState, j.Cluster, j.Message)
			}
			if j.Cluster == "c" {
				t.Errorf("job %s went to the stopped cluster", id)
			}
		}
		return nil
	})
	clusters["c"].signal(t, syscall.SIGCONT)
	testutil.Eventually(t, 20*time.Second, "c back", states(map[string]pelotonv1.ClusterState{"c": ready}))
	testutil.Eventually(t, 20*time.Second, "c's part back", cpu(map[string]float64{"a": 10, "b": 10, "c": 10}))

	// A federated service with failover, 30 instances over the three
	// clusters: while b (killed below) is away past the toleration, its 10
	// run in a and c; once b is back, the split returns to 10/10/10.
	failoverSvc, err := api.services.CreateFederatedService(ctx(), &pelotonv1.CreateFederatedServiceRequest{Spec: &pelotonv1.FederatedServiceSpec{
		Job: &pelotonv1.JobSpec{Name: "fail-over", Type: pelotonv1.JobType_SERVICE, Pool: "/team", InstanceCount: 30,
			Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}},
		Placement: &pelotonv1.ServicePlacement{Failover: &pelotonv1.FailoverPolicy{TolerationSeconds: 2, MoveBack: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	split := func(want map[string]uint32) func() error {
		return func() error {
			g, err := api.services.GetFederatedService(ctx(), &pelotonv1.GetFederatedServiceRequest{ServiceId: failoverSvc.ServiceId})
			if err != nil {
				return err
			}
			got, running := map[string]uint32{}, uint32(0)
			for _, p := range g.Service.Clusters {
				if !p.FailedOver {
					got[p.Cluster] = p.Desired
					running += p.Running
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || running != 30 {
				return fmt.Errorf("parts %v with %d running, want %v with 30: %v", got, running, want, g.Service.Clusters)
			}
			return nil
		}
	}
	testutil.Eventually(t, 60*time.Second, "the service running 10/10/10", split(map[string]uint32{"a": 10, "b": 10, "c": 10}))

	// A killed cluster is UNREACHABLE; the global pool changes meanwhile;
	// restarted on another port it registers its new endpoint and gets its
	// part of the changed pool.
	clusters["b"].kill()
	testutil.Eventually(t, 20*time.Second, "b unreachable", states(map[string]pelotonv1.ClusterState{"b": pelotonv1.ClusterState_CLUSTER_UNREACHABLE}))
	if _, err := api.pools.UpdateFederatedPool(ctx(), &pelotonv1.UpdateFederatedPoolRequest{Path: "/team",
		Spec: &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 60}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "a and c share the pool", cpu(map[string]float64{"a": 30, "c": 30}))
	testutil.Eventually(t, 60*time.Second, "b's part of the service running in a and c", split(map[string]uint32{"a": 15, "c": 15}))
	clusters["b"] = startCluster("b", "east")
	testutil.Eventually(t, 30*time.Second, "b back", states(map[string]pelotonv1.ClusterState{"b": ready}))
	testutil.Eventually(t, 20*time.Second, "b repaired", cpu(map[string]float64{"a": 20, "b": 20, "c": 20}))
	testutil.Eventually(t, 90*time.Second, "the service back at 10/10/10", split(map[string]uint32{"a": 10, "b": 10, "c": 10}))
	got, err := api.clusters.GetCluster(ctx(), &pelotonv1.GetClusterRequest{Name: "b"})
	if err != nil || got.Cluster.Endpoint != clusters["b"].addr {
		t.Fatalf("b's registration after its restart: %v %v, want endpoint %s", got, err, clusters["b"].addr)
	}

	// The federation killed with a job on its way and restarted on the
	// same address: the registry, the pool and the job are all there, and
	// the job finishes.
	resp, err := api.jobs.CreateFederatedJob(ctx(), &pelotonv1.CreateFederatedJobRequest{Spec: &pelotonv1.FederatedJobSpec{
		Job: &pelotonv1.JobSpec{Name: "across-a-crash", Type: pelotonv1.JobType_BATCH, Pool: "/team", InstanceCount: 3,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "2"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}}})
	if err != nil {
		t.Fatal(err)
	}
	fed.kill()
	fed = startDaemon(t, "federation", bin, "peloton federation is ready: grpc ", fedArgs...)
	testutil.Eventually(t, 30*time.Second, "every cluster READY after the federation's restart", states(map[string]pelotonv1.ClusterState{"a": ready, "b": ready, "c": ready}))
	testutil.Eventually(t, 60*time.Second, "the job created before the crash done", func() error {
		g, err := api.jobs.GetFederatedJob(ctx(), &pelotonv1.GetFederatedJobRequest{JobId: resp.JobId})
		if err != nil {
			return err
		}
		if g.Job.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE || g.Job.Status.GetState() != pelotonv1.JobState_JOB_SUCCEEDED {
			return fmt.Errorf("%s in %q: %s", g.Job.DispatchState, g.Job.Cluster, g.Job.Message)
		}
		if len(g.Job.Attempts) != 1 {
			return fmt.Errorf("attempts %v, want one", g.Job.Attempts)
		}
		return nil
	})
	p, err := api.pools.GetFederatedPool(ctx(), &pelotonv1.GetFederatedPoolRequest{Path: "/team"})
	if err != nil || p.Pool.Spec.GetReservation().GetCpu() != 60 {
		t.Fatalf("global pool after the federation's restart: %v %v", p, err)
	}

	// A federated service over REST: created split 2/2/2 over the three
	// clusters, running there, then deleted from all of them.
	body := `{"job": {"name": "fed-web", "type": "SERVICE", "pool": "/team", "instanceCount": 6,
		"sla": {"maximumUnavailableInstances": 3},
		"defaultSpec": {"command": ["sleep", "3600"], "resources": {"cpu": 0.5, "memoryMb": 64}}},
		"placement": {"clusters": [{"selector": {"region": "east"}, "weight": 1}, {"name": "c", "weight": 1}]}}`
	var created struct {
		ServiceID string            `json:"serviceId"`
		Split     map[string]uint32 `json:"split"`
	}
	restJSON(t, http.MethodPost, fed.http+"/v1/federation/services", body, http.StatusOK, &created)
	if created.ServiceID == "" || created.Split["a"] != 2 || created.Split["b"] != 2 || created.Split["c"] != 2 {
		t.Fatalf("create over REST answered %+v, want a 2/2/2 split", created)
	}
	restJSON(t, http.MethodPost, fed.http+"/v1/federation/services", `{"job": {"name": "x", "type": "BATCH", "instanceCount": 1}}`,
		http.StatusBadRequest, nil)
	testutil.Eventually(t, 60*time.Second, "the service's 6 instances running in three clusters", func() error {
		g, err := api.services.GetFederatedService(ctx(), &pelotonv1.GetFederatedServiceRequest{ServiceId: created.ServiceID})
		if err != nil {
			return err
		}
		if g.Service.Running != 6 {
			return fmt.Errorf("%d of 6 running: %v", g.Service.Running, g.Service.Clusters)
		}
		return nil
	})
	// A new command rolled out over REST, the three clusters at once
	// after the canary, with a budget of 1 for the whole service: each
	// cluster's own share is 1 too, so it is the federation's global SLA
	// evaluator that each cluster's update asks for every instance it
	// replaces (TestGlobalSLA shows it refusing across clusters).
	update := `{"job": {"name": "fed-web", "type": "SERVICE", "pool": "/team", "instanceCount": 6,
		"sla": {"maximumUnavailableInstances": 1},
		"defaultSpec": {"command": ["sleep", "3601"], "resources": {"cpu": 0.5, "memoryMb": 64}}},
		"rollout": {"parallelClusters": 3, "update": {"batchSize": 1, "minReadySeconds": 1}}}`
	restJSON(t, http.MethodPut, fed.http+"/v1/federation/services/"+created.ServiceID, update, http.StatusOK, nil)
	testutil.Eventually(t, 120*time.Second, "the rollout succeeded in every cluster", func() error {
		g, err := api.services.GetFederatedService(ctx(), &pelotonv1.GetFederatedServiceRequest{ServiceId: created.ServiceID})
		if err != nil {
			return err
		}
		if r := g.Service.Rollout; r.GetState() != pelotonv1.RolloutState_ROLLOUT_SUCCEEDED {
			return fmt.Errorf("rollout %v", r)
		}
		return nil
	})
	// Every instance the clusters replaced was granted by the federation:
	// six grants at least, and refusals, since the clusters asked at once.
	granted, refusedN := fedMetric(t, fed.http, `peloton_federation_sla_requests_total{answer="granted"}`),
		fedMetric(t, fed.http, `peloton_federation_sla_requests_total{answer="refused"}`)
	if granted < 6 {
		t.Errorf("the federation granted %g disruptions for a rollout of 6 instances (%g refused): the clusters did not ask it", granted, refusedN)
	}
	restJSON(t, http.MethodPost, fed.http+"/v1/federation/services/"+created.ServiceID+":pause", "{}", http.StatusBadRequest, nil)
	restJSON(t, http.MethodDelete, fed.http+"/v1/federation/services/"+created.ServiceID, "", http.StatusOK, nil)
	testutil.Eventually(t, 60*time.Second, "the service gone", func() error {
		_, err := api.services.GetFederatedService(ctx(), &pelotonv1.GetFederatedServiceRequest{ServiceId: created.ServiceID})
		if status.Code(err) != codes.NotFound {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

// restJSON sends body (JSON, or nothing) to url and checks the status code;
// out, if set, receives the decoded answer.
func restJSON(t *testing.T, method, url, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, data)
		}
	}
}

// fedMetric reads one sample of the federation's /metrics (0 if absent).
func fedMetric(t *testing.T, base, sample string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscanf(rest, "%g", &v); err == nil {
				return v
			}
		}
	}
	return 0
}
