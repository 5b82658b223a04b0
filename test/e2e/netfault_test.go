//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	"github.com/peloton-sched/peloton/internal/testing/netns"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// netFederation is a federation and three clusters, each a process in a
// network namespace of its own with its own etcd (in a namespace too for
// the federation's), on one bridge the test also reaches.
type netFederation struct {
	net      *netns.Net
	fed      *daemon
	fedNode  *netns.Node
	etcdNode *netns.Node
	nodes    map[string]*netns.Node
	api      fedAPI
	clis     map[string]*client.Client
}

// startNetFederation starts it; fedArgs are added to serve federation's.
func startNetFederation(t testing.TB, fedArgs ...string) *netFederation {
	t.Helper()
	n := netns.New(t)
	bin := buildPeloton(t)
	f := &netFederation{net: n, fedNode: n.Node("fed"), etcdNode: n.Node("fetcd"), nodes: map[string]*netns.Node{}, clis: map[string]*client.Client{}}
	fedEtcd := etcdtest.StartWrapped(t, f.etcdNode.IP, "ip", "netns", "exec", f.etcdNode.NS)
	args := append([]string{"netns", "exec", f.fedNode.NS, bin, "serve", "federation",
		"--etcd-endpoints", strings.Join(fedEtcd.Endpoints(), ","),
		"--listen", f.fedNode.Addr(7100), "--http-listen", f.fedNode.Addr(7101),
		"--check-every", "200ms", "--call-timeout", "1s", "--slow-after", "800ms", "--log-level", "warn", "--insecure"}, fedArgs...)
	f.fed = startDaemon(t, "federation", "ip", "peloton federation is ready: grpc ", args...)
	f.api = dialFederation(t, f.fed.addr)
	for _, name := range []string{"a", "b", "c"} {
		node := n.Node(name)
		f.nodes[name] = node
		etcd := etcdtest.StartWrapped(t, node.IP, "ip", "netns", "exec", node.NS)
		dataDir := t.TempDir()
		t.Cleanup(func() { killRunsUnder(t, dataDir) })
		d := startDaemon(t, name, "ip", "peloton is ready: grpc ", "netns", "exec", node.NS, bin, "serve", "cluster",
			"--cluster-name", name, "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--federation", f.fed.addr,
			"--backend", "local", "--hosts", "1", "--host-cpu", "8", "--host-memory-mb", "8192", "--data-dir", dataDir,
			"--listen", node.Addr(7000), "--http-listen", node.Addr(7001), "--log-level", "warn", "--insecure")
		cli, err := client.New(d.addr, client.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		f.clis[name] = cli
	}
	testutil.Eventually(t, 60*time.Second, "three clusters READY", func() error {
		resp, err := f.api.clusters.ListClusters(tctx(t), &pelotonv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		ready := 0
		for _, c := range resp.Clusters {
			if c.State == pelotonv1.ClusterState_CLUSTER_READY {
				ready++
			}
		}
		if ready != 3 {
			return fmt.Errorf("%d of 3 READY: %v", ready, resp.Clusters)
		}
		return nil
	})
	return f
}

// netService is a service of 30 instances (budget 3) whose runs are ready
// a second after they start and say so to a health check.
func netService(v int, placement *pelotonv1.ServicePlacement) *pelotonv1.FederatedServiceSpec {
	return &pelotonv1.FederatedServiceSpec{Placement: placement, Job: &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE,
		Pool: "/default", InstanceCount: 30, Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", fmt.Sprintf("sleep 1; touch ready; exec sleep %d", 3600+v)},
			Resources:   &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16},
			HealthCheck: &pelotonv1.HealthCheck{Command: []string{"test", "-f", "ready"}, InitialDelaySeconds: 2, IntervalSeconds: 1, FailureThreshold: 3}}}}
}

func (f *netFederation) service(t *testing.T, id string) *pelotonv1.FederatedService {
	t.Helper()
	resp, err := f.api.services.GetFederatedService(tctx(t), &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Service
}

// servingWatch reads, every 100 ms, every job the federation made for a
// service in every cluster (straight from the clusters, which the test
// reaches whatever the federation does) and keeps the fewest and the most
// instances serving at once across clusters.
type servingWatch struct {
	stop, done chan struct{}

	mu          sync.Mutex
	jobs        map[string]map[string]bool // cluster -> job ids
	least, most int
	rounds      int
}

func watchServing(t *testing.T, f *netFederation, id string) *servingWatch {
	w := &servingWatch{stop: make(chan struct{}), done: make(chan struct{}), jobs: map[string]map[string]bool{}, least: 1 << 30}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			w.learnJobs(f, id)
			if serving, ok := w.count(f); ok {
				w.mu.Lock()
				w.rounds++
				w.least, w.most = min(w.least, serving), max(w.most, serving)
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

// learnJobs adds the jobs the federation names for the service; a job once
// named is read until the end (a retired copy is still counted while it
// serves).
func (w *servingWatch) learnJobs(f *netFederation, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := f.api.services.GetFederatedService(ctx, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range resp.Service.Clusters {
		if p.ClusterJobId == "" {
			continue
		}
		if w.jobs[p.Cluster] == nil {
			w.jobs[p.Cluster] = map[string]bool{}
		}
		w.jobs[p.Cluster][p.ClusterJobId] = true
	}
}

func (w *servingWatch) count(f *netFederation) (int, bool) {
	w.mu.Lock()
	jobs := map[string][]string{}
	for c, ids := range w.jobs {
		for id := range ids {
			jobs[c] = append(jobs[c], id)
		}
	}
	w.mu.Unlock()
	serving := 0
	for c, ids := range jobs {
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := f.clis[c].Tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
			cancel()
			if err != nil {
				if strings.Contains(err.Error(), "NotFound") || strings.Contains(err.Error(), "not found") {
					continue // a retired copy, removed
				}
				return 0, false // a round that misses a cluster says nothing
			}
			for _, tk := range resp.Tasks {
				if tk.Status.State == pelotonv1.TaskState_RUNNING && tk.Status.Health == pelotonv1.HealthState_HEALTHY {
					serving++
				}
			}
		}
	}
	return serving, true
}

func (w *servingWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// result ends the watch and returns the fewest and most serving seen.
func (w *servingWatch) result(t *testing.T) (least, most int) {
	t.Helper()
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rounds == 0 {
		t.Fatal("the watch never read every cluster")
	}
	t.Logf("serving watch: %d rounds, %d..%d serving", w.rounds, w.least, w.most)
	return w.least, w.most
}

// TestFederationPartitionedCluster cuts cluster a off from the federation
// while a keeps running (its instances still serve, and the test still
// reads them): past the toleration the other clusters cover a's part; the
// service never serves more than desired plus a's part, nor fewer than
// desired minus its budget; when the cut heals, a's part moves back and the
// copies are retired, with no instance counted twice by the federation.
func TestFederationPartitionedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("eight processes in network namespaces")
	}
	t.Parallel()
	f := startNetFederation(t, "--unreachable-after", "3s")
	created, err := f.api.services.CreateFederatedService(tctx(t), &pelotonv1.CreateFederatedServiceRequest{
		Spec: netService(1, &pelotonv1.ServicePlacement{Failover: &pelotonv1.FailoverPolicy{TolerationSeconds: 2, MoveBack: true}})})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ServiceId
	settled := func() error {
		s := f.service(t, id)
		got := map[string]uint32{}
		for _, p := range s.Clusters {
			if p.FailedOver || p.Retiring || len(p.Covering) > 0 {
				return fmt.Errorf("part %s failed over %v, retiring %v, covering %v", p.Cluster, p.FailedOver, p.Retiring, p.Covering)
			}
			got[p.Cluster] = p.Healthy
		}
		if s.Healthy != 30 || fmt.Sprint(got) != "map[a:10 b:10 c:10]" {
			return fmt.Errorf("%d healthy, by cluster %v; want 30 as 10/10/10", s.Healthy, got)
		}
		return nil
	}
	testutil.Eventually(t, 120*time.Second, "30 healthy, 10 in each cluster", settled)
	watch := watchServing(t, f, id)

	f.net.Cut(f.fedNode, f.nodes["a"])
	testutil.Eventually(t, 60*time.Second, "a's part covered by b and c", func() error {
		s := f.service(t, id)
		covered := uint32(0)
		for _, p := range s.Clusters {
			if p.Cluster == "a" && !p.FailedOver {
				return fmt.Errorf("a not failed over: %s", p.Message)
			}
			if p.Cluster != "a" {
				covered += p.Covering["a"]
				if p.Healthy < p.Desired {
					return fmt.Errorf("%s serves %d of %d", p.Cluster, p.Healthy, p.Desired)
				}
			}
		}
		if covered != 10 {
			return fmt.Errorf("b and c cover %d of a's 10", covered)
		}
		return nil
	})
	// a's own copy never stopped: the test reads it across the cut.
	aJob := ""
	for _, p := range f.service(t, id).Clusters {
		if p.Cluster == "a" {
			aJob = p.ClusterJobId
		}
	}
	resp, err := f.clis["a"].Jobs.GetJob(tctx(t), &pelotonv1.GetJobRequest{JobId: aJob})
	if err != nil {
		t.Fatalf("a's job during the cut: %v", err)
	}
	if resp.Job.Status.Healthy != 10 {
		t.Errorf("a's copy serves %d of 10 while cut off", resp.Job.Status.Healthy)
	}

	f.net.Heal(f.fedNode, f.nodes["a"])
	testutil.Eventually(t, 180*time.Second, "a's part back, the copies retired", settled)
	least, most := watch.result(t)
	if most > 40 {
		t.Errorf("%d instances served at once, more than desired (30) plus a's part (10)", most)
	}
	if least < 27 {
		t.Errorf("only %d instances served at once, fewer than desired (30) minus the budget (3)", least)
	}
	// Nothing left over in any cluster: exactly 30 serve, as the
	// federation counts them.
	total := 0
	for name, cli := range f.clis {
		jobs, err := cli.Jobs.ListJobs(tctx(t), &pelotonv1.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Jobs { // a listing's status is a summary: GetJob counts
			got, err := cli.Jobs.GetJob(tctx(t), &pelotonv1.GetJobRequest{JobId: j.Id})
			if err != nil {
				t.Fatal(err)
			}
			total += int(got.Job.Status.Healthy)
			t.Logf("cluster %s job %s (%s) serves %d", name, j.Id, got.Job.Status.State, got.Job.Status.Healthy)
		}
	}
	if total != 30 {
		t.Errorf("%d instances run across the clusters after the heal, want 30", total)
	}
}

// TestFederationCutFromItsEtcd cuts the federation off from its etcd in
// the middle of a rollout: it can record no grant, so it grants none
// (fail-safe), the clusters fall back to their shares of the budget and
// their updates go on within them; healed, the rollout finishes under the
// global budget.
func TestFederationCutFromItsEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("eight processes in network namespaces")
	}
	t.Parallel()
	f := startNetFederation(t, "--unreachable-after", "30s")
	created, err := f.api.services.CreateFederatedService(tctx(t), &pelotonv1.CreateFederatedServiceRequest{Spec: netService(1, nil)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ServiceId
	testutil.Eventually(t, 120*time.Second, "30 healthy", func() error {
		if s := f.service(t, id); s.Healthy != 30 {
			return fmt.Errorf("%d healthy", s.Healthy)
		}
		return nil
	})
	jobs := map[string]string{}
	for _, p := range f.service(t, id).Clusters {
		jobs[p.Cluster] = p.ClusterJobId
	}
	watch := watchGlobalBudget(t, f.clis, jobs, 3)
	upd, err := f.api.services.UpdateFederatedService(tctx(t), &pelotonv1.UpdateFederatedServiceRequest{ServiceId: id, Job: netService(2, nil).Job,
		Rollout: &pelotonv1.RolloutSpec{ParallelClusters: 3, Update: &pelotonv1.UpdateSpec{BatchSize: 3, MinReadySeconds: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "every cluster's update under way", func() error {
		for _, st := range f.service(t, id).Rollout.GetSteps() {
			if st.UpdateId == "" {
				return fmt.Errorf("step %s not started", st.Cluster)
			}
		}
		return nil
	})
	f.net.Cut(f.fedNode, f.etcdNode)
	waitFallbackGoesOn(t, f.clis, jobs)
	f.net.Heal(f.fedNode, f.etcdNode)
	testutil.Eventually(t, 240*time.Second, "the rollout done", func() error {
		s := f.service(t, id)
		if st := s.Rollout.GetState(); st != pelotonv1.RolloutState_ROLLOUT_SUCCEEDED || s.Healthy != 30 || s.SpecVersion != upd.Service.SpecVersion {
			return fmt.Errorf("rollout %s (%s), %d healthy", st, s.Rollout.GetMessage(), s.Healthy)
		}
		return nil
	})
	watch.check("rollout across a federation cut from its etcd")
	testutil.Eventually(t, 60*time.Second, "no cluster falling back", func() error {
		if _, fb := partsUpdated(t, f.clis, jobs); fb != 0 {
			return fmt.Errorf("%d clusters fall back", fb)
		}
		return nil
	})
}

// BenchmarkFederationRTT measures, on the network of the fault tests, a
// federated service's rollout and the dispatch of federated batch jobs,
// first with the bridge's own latency and then with 25 ms added to every
// packet every node sends (50 ms round trip between any two of the
// federation, its etcd and the clusters), in one run so that the two
// compare. Run it alone:
//
//	go test -run '^$' -bench BenchmarkFederationRTT -benchtime 1x ./test/e2e/
func BenchmarkFederationRTT(b *testing.B) {
	for range b.N {
		benchFederationRTT(b)
	}
}

func benchFederationRTT(b *testing.B) {
	f := startNetFederation(b, "--unreachable-after", "30s", "--call-timeout", "5s", "--slow-after", "4s")
	created, err := f.api.services.CreateFederatedService(tctx(b), &pelotonv1.CreateFederatedServiceRequest{Spec: netService(1, nil)})
	if err != nil {
		b.Fatal(err)
	}
	id := created.ServiceId
	healthyAt := func(version uint64) func() error {
		return func() error {
			resp, err := f.api.services.GetFederatedService(tctx(b), &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
			if err != nil {
				return err
			}
			s := resp.Service
			if s.Healthy != 30 || s.SpecVersion != version || (s.Rollout != nil && s.Rollout.State != pelotonv1.RolloutState_ROLLOUT_SUCCEEDED) {
				return fmt.Errorf("%d healthy at %d, rollout %s", s.Healthy, s.SpecVersion, s.Rollout.GetState())
			}
			return nil
		}
	}
	testutil.Eventually(b, 120*time.Second, "30 healthy", healthyAt(1))
	version := 1
	for _, delay := range []time.Duration{0, 25 * time.Millisecond} {
		name := fmt.Sprintf("%dms", 2*delay.Milliseconds())
		if delay > 0 {
			for _, node := range append([]*netns.Node{f.fedNode, f.etcdNode}, f.nodes["a"], f.nodes["b"], f.nodes["c"]) {
				node.Delay(delay, 0)
			}
		}
		version++
		start := time.Now()
		resp, err := f.api.services.UpdateFederatedService(tctx(b), &pelotonv1.UpdateFederatedServiceRequest{ServiceId: id, Job: netService(version, nil).Job,
			Rollout: &pelotonv1.RolloutSpec{ParallelClusters: 3, Update: &pelotonv1.UpdateSpec{BatchSize: 3, MinReadySeconds: 1}}})
		if err != nil {
			b.Fatal(err)
		}
		testutil.Eventually(b, 5*time.Minute, "the rollout done", healthyAt(resp.Service.SpecVersion))
		b.ReportMetric(time.Since(start).Seconds(), "rolloutSeconds@rtt"+name)
		b.ReportMetric(dispatchRate(b, f, 300, 16), "dispatchJobsPerSec@rtt"+name)
	}
}

// dispatchRate creates n one-instance batch jobs with callers at once and
// returns n over the time until every one is in a cluster.
func dispatchRate(b *testing.B, f *netFederation, n, callers int) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += callers {
				_, err := f.api.jobs.CreateFederatedJob(tctx(b), &pelotonv1.CreateFederatedJobRequest{Spec: &pelotonv1.FederatedJobSpec{
					Job: &pelotonv1.JobSpec{Name: fmt.Sprintf("d%d", i), Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
						DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 0.01, MemoryMb: 1}}}}})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	testutil.Eventually(b, 5*time.Minute, "every job in a cluster", func() error {
		pending, token := 0, ""
		for range 100 {
			resp, err := f.api.jobs.ListFederatedJobs(tctx(b), &pelotonv1.ListFederatedJobsRequest{PageSize: 5000, PageToken: token})
			if err != nil {
				return err
			}
			for _, j := range resp.Jobs {
				if j.ClusterJobId == "" && j.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE {
					pending++
				}
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		if pending > 0 {
			return fmt.Errorf("%d jobs not in a cluster", pending)
		}
		return nil
	})
	return float64(n) / time.Since(start).Seconds()
}
