package federation_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// stack is one cluster stack running in this process on the sim backend.
type stack struct {
	name   string
	addr   string
	cli    *client.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (s *stack) stop(t *testing.T) {
	t.Helper()
	s.once.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("cluster %s did not stop within 30s", s.name)
		}
	})
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startStack runs a cluster named name with hosts simulated hosts of 32
// CPUs on the shared etcd.
func startStack(t *testing.T, endpoints []string, name string, hosts int) *stack {
	t.Helper()
	return startStackWith(t, endpoints, name, hosts, nil)
}

// startStackWith is startStack with hosts labelled (sim host labels).
func startStackWith(t *testing.T, endpoints []string, name string, hosts int, hostLabels []string, opts ...func(*cluster.Config)) *stack {
	t.Helper()
	s := &stack{name: name, done: make(chan error, 1)}
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	cfg := cluster.Config{ClusterName: name, DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		EtcdEndpoints: endpoints, Backend: "sim", Hosts: hosts, HostLabels: hostLabels, ShutdownGrace: 2 * time.Second, Logger: logger().With("cluster", name),
		OnReady: func(info cluster.ReadyInfo) { ready <- info.GRPCAddr }}
	for _, o := range opts {
		o(&cfg)
	}
	go func() { s.done <- cluster.Run(ctx, cfg) }()
	select {
	case s.addr = <-ready:
	case err := <-s.done:
		t.Fatalf("cluster %s: %v", name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("cluster %s not serving within 60s", name)
	}
	cli, err := client.New(s.addr, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.cli = cli
	t.Cleanup(func() { cli.Close(); s.stop(t) })
	return s
}

// startFederation runs the federation on the same etcd with fast checks.
func startFederation(t *testing.T, e *store.Embedded) *federation.Federation {
	t.Helper()
	f, _ := runFederation(t, e, 500*time.Millisecond, 1500*time.Millisecond)
	return f
}

// runFederation runs the federation on e, checking every cluster every
// 100 ms with these bounds, and returns it with a stop that may be called
// before the test's end (a restart); the test's cleanup stops it too.
func runFederation(t *testing.T, e *store.Embedded, callTimeout, unreachableAfter time.Duration) (*federation.Federation, func()) {
	t.Helper()
	st, err := store.NewEtcd(context.Background(), store.EtcdConfig{Endpoints: e.Endpoints(), Prefix: federation.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	f := federation.New(st, federation.Options{Logger: logger().With("component", "federation"),
		CheckEvery: 100 * time.Millisecond, CallTimeout: callTimeout, UnreachableAfter: unreachableAfter})
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { f.Close(); st.Close() }) }
	t.Cleanup(stop)
	return f, stop
}

// waitPasses waits until n more passes of a federation loop, counted by
// passes, have finished: a test that claims the loop left something alone
// then knows it has looked.
func waitPasses(t *testing.T, loop string, passes func() uint64, n uint64) {
	t.Helper()
	want := passes() + n
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d passes of the %s", n, loop), func() error {
		if got := passes(); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func register(t *testing.T, f *federation.Federation, s *stack, labels map[string]string) {
	t.Helper()
	c, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: s.name, Endpoint: s.addr, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != pelotonv1.ClusterState_CLUSTER_READY {
		t.Fatalf("cluster %s registered %s (%s), want READY", s.name, c.State, c.Message)
	}
}

// reservedCPU is the cpu reservation of pool path in a cluster (-1: no such pool).
func reservedCPU(s *stack, path string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.cli.Pools.GetPool(ctx, &pelotonv1.GetPoolRequest{Path: path})
	if status.Code(err) == codes.NotFound {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	return resp.Pool.GetSpec().GetReservation().GetCpu(), nil
}

func wantCPU(stacks []*stack, path string, want ...float64) func() error {
	return func() error {
		for i, s := range stacks {
			got, err := reservedCPU(s, path)
			if err != nil {
				return err
			}
			if got != want[i] {
				return fmt.Errorf("cluster %s: %s reserves %g cpu, want %g", s.name, path, got, want[i])
			}
		}
		return nil
	}
}

func TestRegistryPoolsAndDrift(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 2)
	b := startStack(t, e.Endpoints(), "b", 2)
	c := startStack(t, e.Endpoints(), "c", 2)
	f := startFederation(t, e)
	for _, s := range []*stack{a, b, c} {
		register(t, f, s, map[string]string{"region": map[string]string{"a": "east", "b": "east", "c": "west"}[s.name]})
	}

	// Bad registrations name their field and leave nothing.
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "a", Endpoint: "127.0.0.1:1"}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("duplicate name: %v, want AlreadyExists", err)
	}
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "Bad_Name", Endpoint: "127.0.0.1:1"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad name: %v, want InvalidArgument", err)
	}
	// An endpoint that does not answer is registered, UNREACHABLE, and said so.
	dead, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "dead", Endpoint: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if dead.State != pelotonv1.ClusterState_CLUSTER_UNREACHABLE || dead.Message == "" {
		t.Errorf("dead endpoint registered %s %q, want UNREACHABLE with a message", dead.State, dead.Message)
	}
	if err := f.Deregister(ctxT(t), "dead"); err != nil {
		t.Fatal(err)
	}

	// Split by capacity: equal clusters, equal parts.
	if _, err := f.Pools().CreatePool(ctxT(t), "/team", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 30}}, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/team split 10:10:10", wantCPU([]*stack{a, b, c}, "/team", 10, 10, 10))

	// Weights: a 2, b 1, c none.
	if _, err := f.Pools().CreatePool(ctxT(t), "/w", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 9},
		Placement: &pelotonv1.FederatedPoolPlacement{Weights: map[string]float64{"a": 2, "b": 1}}}, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/w split by its weights", wantCPU([]*stack{a, b, c}, "/w", 6, 3, -1))
	// A weight naming an unknown cluster is refused, naming it.
	_, err = f.Pools().CreatePool(ctxT(t), "/x", &pelotonv1.FederatedPoolSpec{Placement: &pelotonv1.FederatedPoolPlacement{Weights: map[string]float64{"nope": 1}}}, "")
	if status.Code(err) != codes.InvalidArgument || !contains(err, "spec.placement.weights.nope") {
		t.Errorf("unknown cluster in weights: %v", err)
	}

	// Drift: edit and delete the pool in a cluster; the federation sets it back.
	if _, err := a.cli.Pools.UpdatePool(ctxT(t), &pelotonv1.UpdatePoolRequest{Path: "/team", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.Pools.DeletePool(ctxT(t), &pelotonv1.DeletePoolRequest{Path: "/w"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/team split 10:10:10 after the restart", wantCPU([]*stack{a, b, c}, "/team", 10, 10, 10))
	testutil.Eventually(t, 10*time.Second, "/w split by its weights after the restart", wantCPU([]*stack{a, b, c}, "/w", 6, 3, -1))
	p, err := f.Pools().GetPool("/team")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Clusters) != 3 || p.Total.GetEntitlement() == nil {
		t.Errorf("global pool view: %v", p)
	}

	// Update and delete reach every cluster.
	if _, err := f.Pools().UpdatePool(ctxT(t), "/team", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 60}}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/team split 20:20:20", wantCPU([]*stack{a, b, c}, "/team", 20, 20, 20))
	if err := f.Pools().DeletePool(ctxT(t), "/w"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/w gone from every cluster", wantCPU([]*stack{a, b, c}, "/w", -1, -1, -1))
	testutil.Eventually(t, 10*time.Second, "the deleted global pool forgotten", func() error {
		if _, err := f.Pools().GetPool("/w"); status.Code(err) != codes.NotFound {
			return fmt.Errorf("deleted global pool still known: %v", err)
		}
		return nil
	})

	// Cordon keeps the pools.
	if cc, err := f.Cordon(ctxT(t), "c", true); err != nil || cc.State != pelotonv1.ClusterState_CLUSTER_CORDONED {
		t.Fatalf("cordon: %v %v", cc, err)
	}

	// A cluster that stops answering becomes UNREACHABLE and its part goes
	// to the others; back, it gets its part again.
	b.stop(t)
	testutil.Eventually(t, 10*time.Second, "b unreachable", func() error {
		got, err := f.Get("b")
		if err != nil {
			return err
		}
		if got.State != pelotonv1.ClusterState_CLUSTER_UNREACHABLE {
			return fmt.Errorf("b is %s", got.State)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "/team split over a and c", wantCPU([]*stack{a, c}, "/team", 30, 30))
}

func TestDispatchBatchJobs(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 1)
	b := startStack(t, e.Endpoints(), "b", 4)
	f := startFederation(t, e)
	register(t, f, a, map[string]string{"region": "east"})
	register(t, f, b, map[string]string{"region": "west"})
	batchPoolInSync(t, f, 10)
	job := func(name string, selector map[string]string) *pelotonv1.FederatedJobSpec {
		return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/batch", InstanceCount: 2,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}},
			Placement: &pelotonv1.FederatedJobPlacement{ClusterSelector: selector}}
	}
	// Most headroom: b has four times a's hosts, so it is entitled to more.
	id, err := f.Jobs().CreateJob(ctxT(t), job("big", nil), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	// The same request id answers the same job.
	if again, err := f.Jobs().CreateJob(ctxT(t), job("big", nil), "req-1"); err != nil || again != id {
		t.Fatalf("retry with the same request id: %s %v, want %s", again, err, id)
	}
	// A selector sends it to a.
	east, err := f.Jobs().CreateJob(ctxT(t), job("east", map[string]string{"region": "east"}), "")
	if err != nil {
		t.Fatal(err)
	}
	// A selector no registered cluster matches is refused, naming it.
	if _, err := f.Jobs().CreateJob(ctxT(t), job("none", map[string]string{"region": "mars"}), ""); status.Code(err) != codes.InvalidArgument ||
		!contains(err, "spec.placement.clusterSelector: {region=mars} matches no registered cluster") {
		t.Errorf("selector matching no cluster: %v", err)
	}
	for jid, want := range map[string]string{id: "b", east: "a"} {
		testutil.Eventually(t, 30*time.Second, "the job dispatched to the matching cluster", func() error {
			j, err := f.Jobs().GetJob(jid)
			if err != nil {
				return err
			}
			if j.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE {
				return fmt.Errorf("job %s is %s in %q: %s", j.Spec.Job.Name, j.DispatchState, j.Cluster, j.Message)
			}
			if j.Cluster != want || j.Status.GetState() != pelotonv1.JobState_JOB_SUCCEEDED || j.ClusterJobId == "" {
				return fmt.Errorf("job %s ended in %q as %v, want SUCCEEDED in %s", j.Spec.Job.Name, j.Cluster, j.Status.GetState(), want)
			}
			return nil
		})
	}
	// A cordoned cluster takes no new job: one only it matches waits and
	// says why.
	if _, err := f.Cordon(ctxT(t), "a", true); err != nil {
		t.Fatal(err)
	}
	none, err := f.Jobs().CreateJob(ctxT(t), job("none", map[string]string{"region": "east"}), "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the job pending with its reason", func() error {
		j, _ := f.Jobs().GetJob(none)
		if j.DispatchState != pelotonv1.DispatchState_DISPATCH_PENDING || !contains(errors.New(j.Message), "a CORDONED") {
			return fmt.Errorf("job for a cordoned cluster: %s %q", j.DispatchState, j.Message)
		}
		return nil
	})
	if err := f.Jobs().KillJob(ctxT(t), none); err != nil {
		t.Fatal(err)
	}
	if j, _ := f.Jobs().GetJob(none); j.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE {
		t.Errorf("killed pending job is %s", j.DispatchState)
	}
	// Bad input names its field.
	bad := job("", nil)
	if _, err := f.Jobs().CreateJob(ctxT(t), bad, ""); status.Code(err) != codes.InvalidArgument || !contains(err, "spec.job.name") {
		t.Errorf("nameless job: %v", err)
	}
	svc := job("svc", nil)
	svc.Job.Type = pelotonv1.JobType_SERVICE
	if _, err := f.Jobs().CreateJob(ctxT(t), svc, ""); status.Code(err) != codes.InvalidArgument || !contains(err, "spec.job.type") {
		t.Errorf("service job: %v", err)
	}
}

// TestJobMovesOffAnUnreachableCluster: a job whose tasks could not start in
// its cluster, which then became unreachable, is dispatched elsewhere only
// after its copy there is confirmed gone (the cluster answered again and
// the job was cancelled there); it then runs once, in the other cluster.
func TestJobMovesOffAnUnreachableCluster(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	small := startStackWith(t, e.Endpoints(), "small", 1, []string{"kind=small"})
	f := startFederation(t, e)
	register(t, f, small, nil)
	if _, err := f.Pools().CreatePool(ctxT(t), "/batch", &pelotonv1.FederatedPoolSpec{}, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "/batch in small", func() error { _, err := reservedCPU(small, "/batch"); return err })
	testutil.Eventually(t, 10*time.Second, "/batch's reservation lowered in small", func() error {
		if got, _ := reservedCPU(small, "/batch"); got < 0 {
			return fmt.Errorf("/batch not in small yet")
		}
		return nil
	})
	// Only a host labelled kind=big will do, and small has none: its task
	// never starts there.
	id, err := f.Jobs().CreateJob(ctxT(t), &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: "big", Pool: "/batch", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64},
			Placement: &pelotonv1.PlacementSpec{Constraints: []*pelotonv1.Constraint{{Label: "kind", Op: pelotonv1.ConstraintOp_EQUALS, Values: []string{"big"}}}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	jobIs := func(st pelotonv1.DispatchState, cluster string) func() error {
		return func() error {
			j, err := f.Jobs().GetJob(id)
			if err != nil {
				return err
			}
			if j.DispatchState != st || j.Cluster != cluster || (st == pelotonv1.DispatchState_DISPATCHED && j.ClusterJobId == "") {
				return fmt.Errorf("job is %s in %q (%s), want %s in %q", j.DispatchState, j.Cluster, j.Message, st, cluster)
			}
			return nil
		}
	}
	testutil.Eventually(t, 10*time.Second, "the job dispatched to small", jobIs(pelotonv1.DispatchState_DISPATCHED, "small"))
	first, _ := f.Jobs().GetJob(id)

	big := startStackWith(t, e.Endpoints(), "big", 1, []string{"kind=big"})
	register(t, f, big, nil)
	small.stop(t)
	testutil.Eventually(t, 10*time.Second, "the job moving off small", jobIs(pelotonv1.DispatchState_DISPATCH_MOVING, "small"))
	// Unreachable is not gone: while small does not answer, the job waits.
	// However many passes of the dispatcher, and of small's worker, which
	// finds small still away, look at it meanwhile.
	waitPasses(t, "dispatcher", f.DispatchPasses, 5)
	waitPasses(t, "worker of small", func() uint64 { return f.WorkerPasses("small") }, 3)
	if err := jobIs(pelotonv1.DispatchState_DISPATCH_MOVING, "small")(); err != nil {
		t.Fatal(err)
	}
	// small answers again (on another port): its copy is cancelled there,
	// then the job goes to big and runs.
	small = startStackWith(t, e.Endpoints(), "small", 1, []string{"kind=small"})
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "small", Endpoint: small.addr, Replace: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the job done in big", jobIs(pelotonv1.DispatchState_DISPATCH_DONE, "big"))
	j, _ := f.Jobs().GetJob(id)
	if j.Status.GetState() != pelotonv1.JobState_JOB_SUCCEEDED || len(j.Attempts) != 2 || j.Attempts[0].EndReason == "" {
		t.Fatalf("job ended %v with attempts %v", j.Status.GetState(), j.Attempts)
	}
	resp, err := small.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: first.ClusterJobId})
	if err != nil || resp.Job.Status.State != pelotonv1.JobState_JOB_KILLED {
		t.Fatalf("the first copy in small: %v %v, want JOB_KILLED", resp.GetJob().GetStatus(), err)
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
