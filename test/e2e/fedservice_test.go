package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// globalBudgetWatch polls every cluster's part of a federated service, as a
// user with the three cluster APIs would, and keeps the most instances it
// saw unavailable at once, in all clusters together and in each. An
// instance is available when it runs and its health check passes (every
// version of the service in the test has a check). The clusters are read
// one after another, not at one instant; the budget's own margin (a
// replaced instance holds its grant for minReadySeconds after it serves
// again) is far wider than one round of reads.
type globalBudgetWatch struct {
	t      *testing.T
	budget int
	stop   chan struct{}
	done   chan struct{}

	mu         sync.Mutex
	maxTotal   int
	maxPer     map[string]int
	violations []string
	rounds     int
	// failures notes each failure an instance had while watched (its
	// failure count went up): why, in the cluster's words, for the log of
	// a test that fails.
	failures  []string
	failCount map[string]uint32
}

// watchBudget starts polling the parts' jobs (cluster name → job id)
// every 100 ms, for at most 10 minutes.
func watchGlobalBudget(t *testing.T, clis map[string]*client.Client, jobs map[string]string, budget int) *globalBudgetWatch {
	w := &globalBudgetWatch{t: t, budget: budget, stop: make(chan struct{}), done: make(chan struct{}), maxPer: map[string]int{}, failCount: map[string]uint32{}}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			total, per, ok := 0, map[string]int{}, true
			for name, id := range jobs {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := clis[name].Tasks.ListTasks(ctx, &pelotonv1.ListTasksRequest{JobId: id})
				cancel()
				if err != nil {
					ok = false // a round that misses a cluster says nothing
					break
				}
				for _, tk := range resp.Tasks {
					if tk.Status.State != pelotonv1.TaskState_RUNNING || tk.Status.Health != pelotonv1.HealthState_HEALTHY {
						per[name]++
					}
					w.noteFailures(name, tk)
				}
				total += per[name]
			}
			if !ok {
				continue
			}
			w.mu.Lock()
			w.rounds++
			w.maxTotal = max(w.maxTotal, total)
			for name, n := range per {
				w.maxPer[name] = max(w.maxPer[name], n)
			}
			if total > w.budget {
				w.violations = append(w.violations, fmt.Sprintf("%d unavailable across clusters %v, budget %d", total, per, w.budget))
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.end()
		if t.Failed() {
			w.logFailures()
		}
	})
	return w
}

// logFailures logs the failures the watch saw, if any.
func (w *globalBudgetWatch) logFailures() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.failures {
		w.t.Logf("instance failure seen by the watch: %s", f)
	}
}

// noteFailures notes a failure of tk's instance the watch had not seen.
func (w *globalBudgetWatch) noteFailures(cluster string, tk *pelotonv1.Task) {
	key := fmt.Sprintf("%s/%s/%d", cluster, tk.JobId, tk.InstanceId)
	w.mu.Lock()
	defer w.mu.Unlock()
	seen, known := w.failCount[key]
	w.failCount[key] = tk.Status.FailureCount
	if known && tk.Status.FailureCount > seen && len(w.failures) < 50 {
		w.failures = append(w.failures, fmt.Sprintf("%s %s: failure %d (%s, %s: %s)", time.Now().Format("15:04:05.000"),
			key, tk.Status.FailureCount, tk.Status.State, tk.Status.Reason, tk.Status.Message))
	}
}

func (w *globalBudgetWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check ends the watch and fails the test if the budget was ever
// exceeded; it returns the most seen unavailable in one cluster.
func (w *globalBudgetWatch) check(what string) map[string]int {
	w.t.Helper()
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rounds == 0 {
		w.t.Fatalf("%s: the watch never read every cluster", what)
	}
	for _, v := range w.violations {
		w.t.Errorf("%s: %s", what, v)
	}
	w.t.Logf("%s: %d rounds, at most %d unavailable at once (per cluster %v), %d instance failures seen", what, w.rounds, w.maxTotal, w.maxPer, len(w.failures))
	return w.maxPer
}

// TestFederatedServiceOfProcesses deploys one service over three cluster
// processes on the local backend (real processes, real health checks) and
// rolls it out while a watch reads every cluster: the sum of unavailable
// instances across clusters never passes the service's budget of 3, yet a
// cluster alone uses more than its share of 1 (the federation's global
// evaluator lends it the whole budget). It pauses and resumes a rollout,
// rolls back one whose second cluster fails its health checks, aborts
// one, and rolls one out while the federation is stopped (SIGSTOP): the
// clusters carry on within their shares and say that they fall back.
func TestFederatedServiceOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes and 30 tasks")
	}
	// One of the few long tests that mostly wait (on real processes, health
	// checks, outages): they run beside each other, after the rest (suite time).
	t.Parallel()
	bin := buildPeloton(t)
	etcd := etcdtest.Start(t, 1)
	endpoints := strings.Join(etcd.Endpoints(), ",")
	fed := startDaemon(t, "federation", bin, "peloton federation is ready: grpc ", "serve", "federation", "--etcd-endpoints", endpoints,
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--check-every", "200ms", "--call-timeout", "1s",
		"--slow-after", "800ms", "--unreachable-after", "30s", "--log-level", "warn")
	api := dialFederation(t, fed.addr)
	clis := map[string]*client.Client{}
	for _, name := range []string{"a", "b", "c"} {
		// Runs outlive a killed stack (it adopts them when it restarts):
		// once the stack is killed (the cleanup registered after this one
		// runs first), its runs are.
		dataDir := t.TempDir()
		t.Cleanup(func() { killRunsUnder(t, dataDir) })
		d := startDaemon(t, name, bin, "peloton is ready: grpc ", "serve", "cluster", "--cluster-name", name,
			"--etcd-endpoints", endpoints, "--federation", fed.addr, "--backend", "local", "--hosts", "1",
			"--host-cpu", "8", "--host-memory-mb", "8192", "--data-dir", dataDir,
			"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn")
		cli, err := client.New(d.addr, client.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		clis[name] = cli
	}
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	testutil.Eventually(t, 30*time.Second, "three clusters READY", func() error {
		resp, err := api.clusters.ListClusters(ctx(), &pelotonv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		n := 0
		for _, c := range resp.Clusters {
			if c.State == pelotonv1.ClusterState_CLUSTER_READY {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of 3 READY: %v", n, resp.Clusters)
		}
		return nil
	})

	// Every version has a health check, first run two seconds after the
	// run starts, which passes once the run is ready (a second after it
	// starts): a replaced instance is down for two seconds at least, which
	// the watch cannot miss; three failures in a row (two seconds more)
	// make a run unhealthy, so a run that a loaded machine started late
	// is not taken for a bad one. Version 3's check also fails in any
	// cluster whose job id has a file in failDir, so that one cluster
	// alone fails its part.
	failDir := t.TempDir()
	version := func(v int) *pelotonv1.JobSpec {
		check := []string{"test", "-f", "ready"}
		if v == 3 {
			check = []string{"sh", "-c", fmt.Sprintf(`test -f ready && test ! -e %s/"$PELOTON_JOB_ID"`, failDir)}
		}
		return &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 30,
			Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 3},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sh", "-c", fmt.Sprintf("sleep 1; touch ready; exec sleep %d", 3600+v)},
				Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16},
				HealthCheck: &pelotonv1.HealthCheck{Command: check, InitialDelaySeconds: 2, IntervalSeconds: 1,
					FailureThreshold: 3}}}
	}
	created, err := api.services.CreateFederatedService(ctx(), &pelotonv1.CreateFederatedServiceRequest{
		Spec: &pelotonv1.FederatedServiceSpec{Job: version(1)}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ServiceId
	if fmt.Sprint(created.Split) != "map[a:10 b:10 c:10]" {
		t.Fatalf("split %v, want 10/10/10", created.Split)
	}
	get := func() *pelotonv1.FederatedService {
		resp, err := api.services.GetFederatedService(ctx(), &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Service
	}
	settled := func(specVersion uint64) func() error {
		return func() error {
			s := get()
			if s.Healthy != 30 || s.Updated != 30 || s.SpecVersion != specVersion {
				return fmt.Errorf("%d healthy, %d updated at spec version %d, want 30 and 30 at %d: %v", s.Healthy, s.Updated, s.SpecVersion, specVersion, s.Clusters)
			}
			return nil
		}
	}
	testutil.Eventually(t, 90*time.Second, "30 instances healthy, 10 in each cluster", settled(1))
	jobs := map[string]string{}
	for _, p := range get().Clusters {
		jobs[p.Cluster] = p.ClusterJobId
	}
	rollout := func(v int, rs *pelotonv1.RolloutSpec) *pelotonv1.FederatedService {
		t.Helper()
		resp, err := api.services.UpdateFederatedService(ctx(), &pelotonv1.UpdateFederatedServiceRequest{ServiceId: id, Job: version(v), Rollout: rs})
		if err != nil {
			t.Fatalf("update to version %d: %v", v, err)
		}
		return resp.Service
	}
	waitRollout := func(want pelotonv1.RolloutState, d time.Duration) *pelotonv1.FederatedService {
		t.Helper()
		var s *pelotonv1.FederatedService
		testutil.Eventually(t, d, "rollout "+want.String(), func() error {
			s = get()
			if st := s.Rollout.GetState(); st != want {
				return fmt.Errorf("rollout %s (%s): %v", st, s.Rollout.GetMessage(), s.Rollout.GetSteps())
			}
			return nil
		})
		return s
	}
	stepsOf := func(s *pelotonv1.FederatedService) map[string]*pelotonv1.RolloutStep {
		out := map[string]*pelotonv1.RolloutStep{}
		for _, st := range s.Rollout.GetSteps() {
			out[st.Cluster] = st
		}
		return out
	}
	commands := func() map[string]string {
		out := map[string]string{}
		for name, jid := range jobs {
			resp, err := clis[name].Jobs.GetJob(ctx(), &pelotonv1.GetJobRequest{JobId: jid})
			if err != nil {
				t.Fatal(err)
			}
			cmd := strings.Fields(resp.Job.Spec.DefaultSpec.Command[2])
			out[name] = cmd[len(cmd)-1]
		}
		return out
	}
	updateSpec := &pelotonv1.UpdateSpec{BatchSize: 3, MinReadySeconds: 1}

	// Version 2: the canary (a, first by name among equal parts) alone,
	// then b and c at once, all under one budget of 3; paused and
	// resumed on the way.
	watch := watchGlobalBudget(t, clis, jobs, 3)
	v2 := rollout(2, &pelotonv1.RolloutSpec{ParallelClusters: 2, Update: updateSpec}).SpecVersion
	testutil.Eventually(t, 30*time.Second, "the canary's update made", func() error {
		if s := stepsOf(get())["a"]; s.GetUpdateId() == "" {
			return fmt.Errorf("step a: %v", s)
		}
		return nil
	})
	if _, err := api.services.PauseFederatedService(ctx(), &pelotonv1.PauseFederatedServiceRequest{ServiceId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the canary's update paused in its cluster", func() error {
		st := stepsOf(get())["a"]
		if st.GetUpdateId() == "" {
			return fmt.Errorf("step a: %v", st)
		}
		u, err := clis["a"].Updates.GetUpdate(ctx(), &pelotonv1.GetUpdateRequest{UpdateId: st.UpdateId})
		if err != nil {
			return err
		}
		if u.Update.Status.State != pelotonv1.UpdateState_UPDATE_PAUSED {
			return fmt.Errorf("update %s in a is %s", st.UpdateId, u.Update.Status.State)
		}
		return nil
	})
	if st := stepsOf(get()); st["b"].State != pelotonv1.RolloutStepState_STEP_PENDING || st["c"].State != pelotonv1.RolloutStepState_STEP_PENDING {
		t.Fatalf("b or c started before the canary finished: %v", st)
	}
	if _, err := api.services.ResumeFederatedService(ctx(), &pelotonv1.ResumeFederatedServiceRequest{ServiceId: id}); err != nil {
		t.Fatal(err)
	}
	done := waitRollout(pelotonv1.RolloutState_ROLLOUT_SUCCEEDED, 4*time.Minute)
	per := watch.check("rollout of version 2")
	if per["a"] <= 1 {
		t.Errorf("the canary had at most %d instance down at once: with the global budget of 3 (its share is 1) it replaces 3 at a time", per["a"])
	}
	st := stepsOf(done)
	if canaryEnd := st["a"].EndTime.AsTime(); st["b"].StartTime.AsTime().Before(canaryEnd) || st["c"].StartTime.AsTime().Before(canaryEnd) {
		t.Errorf("b or c started before the canary a ended: %v", done.Rollout.Steps)
	}
	testutil.Eventually(t, 30*time.Second, "every instance healthy at version 2", settled(v2))

	// Version 3 fails its health checks in b: the order c, b, a is the
	// user's; c goes first and succeeds, b fails, and both go back to
	// version 2, b first; a is never touched.
	if err := os.WriteFile(filepath.Join(failDir, jobs["b"]), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	watch = watchGlobalBudget(t, clis, jobs, 3)
	bad := proto.Clone(updateSpec).(*pelotonv1.UpdateSpec)
	rollout(3, &pelotonv1.RolloutSpec{Order: []string{"c", "b", "a"}, ParallelClusters: 1, RollbackOnFailure: true, Update: bad})
	back := waitRollout(pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK, 4*time.Minute)
	watch.check("rollout of version 3, rolled back")
	st = stepsOf(back)
	if st["a"].State != pelotonv1.RolloutStepState_STEP_PENDING && st["a"].State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK || st["a"].UpdateId != "" {
		t.Errorf("a was touched by the failed rollout: %v", st["a"])
	}
	if st["b"].State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK || st["c"].State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK {
		t.Errorf("b and c not rolled back: %v", back.Rollout.Steps)
	}
	if !st["c"].EndTime.AsTime().After(st["b"].EndTime.AsTime()) {
		t.Errorf("c (updated first) was rolled back before b: %v", back.Rollout.Steps)
	}
	if got := commands(); fmt.Sprint(got) != "map[a:3602 b:3602 c:3602]" {
		t.Errorf("commands after the rollback %v, want version 2's everywhere", got)
	}
	testutil.Eventually(t, 60*time.Second, "every instance healthy at version 2 again", settled(v2))
	if err := os.Remove(filepath.Join(failDir, jobs["b"])); err != nil {
		t.Fatal(err)
	}
	if _, err := api.services.RollbackFederatedService(ctx(), &pelotonv1.RollbackFederatedServiceRequest{ServiceId: id}); err == nil ||
		!strings.Contains(err.Error(), "rolled back already") {
		t.Errorf("a rollback of a rolled back rollout: %v", err)
	}

	// Version 4 aborted while its canary updates: the rollout stops, the
	// update in the canary's cluster stops, the others are not touched.
	rollout(4, &pelotonv1.RolloutSpec{Update: &pelotonv1.UpdateSpec{BatchSize: 1, MinReadySeconds: 2}})
	testutil.Eventually(t, 30*time.Second, "the canary updating", func() error {
		if s := stepsOf(get())["a"]; s.GetUpdateId() == "" {
			return fmt.Errorf("step a: %v", s)
		}
		return nil
	})
	if _, err := api.services.AbortFederatedService(ctx(), &pelotonv1.AbortFederatedServiceRequest{ServiceId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the canary's update aborted in its cluster", func() error {
		s := get()
		st := stepsOf(s)
		if s.Rollout.State != pelotonv1.RolloutState_ROLLOUT_ABORTED || st["a"].State != pelotonv1.RolloutStepState_STEP_ABORTED {
			return fmt.Errorf("rollout %s, steps %v", s.Rollout.State, s.Rollout.Steps)
		}
		u, err := clis["a"].Updates.GetUpdate(ctx(), &pelotonv1.GetUpdateRequest{UpdateId: st["a"].UpdateId})
		if err != nil {
			return err
		}
		if u.Update.Status.State != pelotonv1.UpdateState_UPDATE_ABORTED {
			return fmt.Errorf("update in a is %s", u.Update.Status.State)
		}
		return nil
	})
	if got := commands(); got["b"] != "3602" || got["c"] != "3602" {
		t.Errorf("b or c changed by an aborted rollout: %v", got)
	}

	// Version 5 while the federation is stopped: each cluster decides on
	// its share of the budget (1 each), says that it falls back, and its
	// update goes on; the watch still sees no more than 3 down in all.
	watch = watchGlobalBudget(t, clis, jobs, 3)
	v5 := rollout(5, &pelotonv1.RolloutSpec{ParallelClusters: 2, Update: &pelotonv1.UpdateSpec{BatchSize: 3, MinReadySeconds: 1}}).SpecVersion
	testutil.Eventually(t, 60*time.Second, "every cluster's update under way", func() error {
		for name, s := range stepsOf(get()) {
			if s.UpdateId == "" {
				return fmt.Errorf("step %s: %v", name, s)
			}
		}
		return nil
	})
	fed.signal(t, syscall.SIGSTOP) // its daemon's cleanup continues it before the kill
	waitFallbackGoesOn(t, clis, jobs)
	fed.signal(t, syscall.SIGCONT)
	waitRollout(pelotonv1.RolloutState_ROLLOUT_SUCCEEDED, 4*time.Minute)
	watch.check("rollout of version 5 across a stopped federation")
	testutil.Eventually(t, 60*time.Second, "every instance healthy at version 5", settled(v5))
	testutil.Eventually(t, 30*time.Second, "no cluster falling back", func() error {
		if _, fb := partsUpdated(t, clis, jobs); fb != 0 {
			return fmt.Errorf("%d clusters still fall back", fb)
		}
		return nil
	})
}

// partsUpdated sums the updated instances of a federated service's jobs
// (cluster name → job id) and counts the clusters that say they decide
// its disruptions on their share of the budget (they fall back).
func partsUpdated(t testing.TB, clis map[string]*client.Client, jobs map[string]string) (updated uint32, fallback int) {
	t.Helper()
	for name, jid := range jobs {
		resp, err := clis[name].Jobs.GetJob(tctx(t), &pelotonv1.GetJobRequest{JobId: jid})
		if err != nil {
			t.Fatal(err)
		}
		updated += resp.Job.Status.Updated
		if resp.Job.Status.SlaFallback {
			fallback++
		}
	}
	return updated, fallback
}

// waitFallbackGoesOn waits for a cluster to say it falls back, then for
// the clusters' updates to go on by three more instances (or all 30) on
// their shares of the budget.
func waitFallbackGoesOn(t testing.TB, clis map[string]*client.Client, jobs map[string]string) {
	t.Helper()
	var atFallback uint32
	testutil.Eventually(t, 60*time.Second, "the clusters falling back", func() error {
		n, fb := partsUpdated(t, clis, jobs)
		atFallback = n
		if fb == 0 {
			return fmt.Errorf("no cluster says it falls back (%d updated)", n)
		}
		return nil
	})
	testutil.Eventually(t, 120*time.Second, "the updates going on within the clusters' shares", func() error {
		if n, _ := partsUpdated(t, clis, jobs); n < min(atFallback+3, 30) {
			return fmt.Errorf("%d instances updated, %d when the clusters fell back", n, atFallback)
		}
		return nil
	})
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// killRunsUnder SIGKILLs the processes of the local backend's runs whose
// sandbox is under dir (their PELOTON_SANDBOX says so).
func killRunsUnder(t testing.TB, dir string) {
	t.Helper()
	pids, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil {
		t.Error(err)
		return
	}
	want := []byte("PELOTON_SANDBOX=" + dir + "/")
	for _, p := range pids {
		env, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/environ", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
