package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeFederation answers the federation's API from canned clusters and
// records what it was asked, so routing, errors and spec files can be
// tested without a federation.
type fakeFederation struct {
	pelotonv1.UnimplementedClusterServiceServer
	pelotonv1.UnimplementedFederatedJobServiceServer

	mu       sync.Mutex
	clusters map[string]*pelotonv1.Cluster
	lookups  int
	// failCreates is how many CreateFederatedJob calls answer Unavailable,
	// as if the answer were lost.
	failCreates int
	creates     []*pelotonv1.CreateFederatedJobRequest
	lists       []*pelotonv1.ListFederatedJobsRequest
}

func (f *fakeFederation) GetCluster(_ context.Context, req *pelotonv1.GetClusterRequest) (*pelotonv1.GetClusterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	c := f.clusters[req.GetName()]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "cluster %s is not registered", req.GetName())
	}
	return &pelotonv1.GetClusterResponse{Cluster: c}, nil
}

func (f *fakeFederation) ListClusters(context.Context, *pelotonv1.ListClustersRequest) (*pelotonv1.ListClustersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pelotonv1.ListClustersResponse{}
	for _, name := range []string{"a", "dead"} {
		if c := f.clusters[name]; c != nil {
			resp.Clusters = append(resp.Clusters, c)
		}
	}
	return resp, nil
}

func (f *fakeFederation) CreateFederatedJob(_ context.Context, req *pelotonv1.CreateFederatedJobRequest) (*pelotonv1.CreateFederatedJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	if f.failCreates > 0 {
		f.failCreates--
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	return &pelotonv1.CreateFederatedJobResponse{JobId: "fed-1"}, nil
}

func (f *fakeFederation) lastCreate() (*pelotonv1.CreateFederatedJobRequest, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.creates) == 0 {
		return nil, 0
	}
	return f.creates[len(f.creates)-1], len(f.creates)
}

func startFakeFederation(t *testing.T, f *fakeFederation) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pelotonv1.RegisterClusterServiceServer(g, f)
	pelotonv1.RegisterFederatedJobServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// wantError checks a run failed with code and an error line that is want,
// or starts with want when it ends in "...".
func wantError(t *testing.T, r result, code int, want string, args ...string) {
	t.Helper()
	line, _, _ := strings.Cut(r.stderr, "\n")
	match := line == want
	if p, ok := strings.CutSuffix(want, "..."); ok {
		match = strings.HasPrefix(line, p)
	}
	if r.code != code || !match {
		t.Errorf("peloton %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), r.code, r.stderr, code, want)
	}
}

// TestClusterFlagRouting: --cluster sends a cluster command to the
// endpoint the federation has for that cluster, asking once; every way it
// can go wrong says so in its own words.
func TestClusterFlagRouting(t *testing.T) {
	clusterAddr := startFake(t, &fakeServer{})
	deadAddr, noServer := closedAddr(t), closedAddr(t)
	ff := &fakeFederation{clusters: map[string]*pelotonv1.Cluster{
		"a":    {Name: "a", Endpoint: clusterAddr, State: pelotonv1.ClusterState_CLUSTER_READY},
		"dead": {Name: "dead", Endpoint: deadAddr, State: pelotonv1.ClusterState_CLUSTER_UNREACHABLE, Message: "no answer for 5s"},
	}}
	fed := startFakeFederation(t, ff)
	run := func(args ...string) result {
		t.Helper()
		return runCLI(t, "", append([]string{"--federation", fed}, args...)...)
	}

	r := run("--cluster", "a", "host", "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "host-0") {
		t.Fatalf("--cluster a host list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if ff.lookups != 1 {
		t.Errorf("the federation was asked %d times for one invocation, want once", ff.lookups)
	}
	// $PELOTON_SERVER is a default, not a choice: --cluster wins over it.
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.getenv = func(k string) string {
		return map[string]string{serverEnv: noServer, federationEnv: fed}[k]
	}
	if code := execute(a, []string{"--cluster", "a", "host", "list"}, nil); code != exitOK || !strings.Contains(out.String(), "host-0") {
		t.Errorf("--cluster with $%s and $%s set: exit %d, stdout %q, stderr %q", serverEnv, federationEnv, code, out.String(), errb.String())
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cluster", "nope", "job", "list"}, exitError, "Error: cluster nope is not registered"},
		{[]string{"--cluster", "a", "--server", clusterAddr, "job", "list"}, exitUsage,
			"Error: --cluster and --server both name where to send the command; give one"},
		{[]string{"--cluster", "Bad_Name", "job", "list"}, exitUsage,
			`Error: invalid --cluster "Bad_Name": must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit`},
		{[]string{"--cluster", "dead", "job", "list"}, exitError, "Error: cannot reach cluster dead at " + deadAddr + " (Unavailable: ..."},
		{[]string{"--cluster", "a", "fed", "job", "list"}, exitUsage, "Error: --cluster sends job, task, pool, host and update commands to one cluster; ..."},
		{[]string{"--cluster", "a", "cluster", "list"}, exitUsage, "Error: --cluster sends job, task, pool, host and update commands to one cluster; ..."},
	} {
		r := run(tc.args...)
		wantError(t, r, tc.code, tc.want, tc.args...)
		if tc.code == exitUsage && !strings.Contains(r.stderr, "--help' for usage") {
			t.Errorf("peloton %s: a usage error without the usage hint: %q", strings.Join(tc.args, " "), r.stderr)
		}
	}
	r = run("--cluster", "dead", "job", "list")
	if !strings.Contains(r.stderr, "the federation sees it CLUSTER_UNREACHABLE (no answer for 5s)") || strings.Contains(r.stderr, "--server") {
		t.Errorf("unreachable cluster: stderr %q; want what the federation saw, and no word of --server", r.stderr)
	}

	// The federation itself cannot be reached: say so, and name --federation.
	gone := closedAddr(t)
	for _, args := range [][]string{{"--cluster", "a", "job", "list"}, {"cluster", "list"}, {"fed", "pool", "list"}} {
		r := runCLI(t, "", append([]string{"--federation", gone}, args...)...)
		want := "Error: cannot reach the federation at " + gone + " "
		if r.code != exitError || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "--federation or $"+federationEnv) {
			t.Errorf("peloton %s with no federation: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		if args[0] == "--cluster" && !strings.Contains(r.stderr, "to look up --cluster a (Unavailable: ") {
			t.Errorf("--cluster with no federation: stderr %q does not say what it was looking up", r.stderr)
		}
	}

	// $PELOTON_FEDERATION sets the default of --federation.
	out.Reset()
	errb.Reset()
	a = newApp(&out, &errb)
	a.getenv = func(k string) string { return map[string]string{federationEnv: fed}[k] }
	if code := execute(a, []string{"cluster", "list"}, nil); code != exitOK || !strings.Contains(out.String(), "CLUSTER_UNREACHABLE") {
		t.Errorf("cluster list via $%s: exit %d, stdout %q, stderr %q", federationEnv, code, out.String(), errb.String())
	}
}

// TestFedJobCreateSpecFile: a JobSpec file is sent as the job of a
// FederatedJobSpec, a FederatedJobSpec file as it is; --cluster-selector
// replaces the file's selector; a lost answer is retried with the same
// request id; bad files fail before any call, naming line and field.
func TestFedJobCreateSpecFile(t *testing.T) {
	ff := &fakeFederation{failCreates: 1}
	fed := startFakeFederation(t, ff)
	run := func(stdin string, args ...string) result {
		t.Helper()
		return runCLI(t, stdin, append([]string{"--federation", fed, "fed", "job", "create", "-f", "-"}, args...)...)
	}
	plain := "name: j\ntype: BATCH\npool: /p\ninstanceCount: 1\ndefaultSpec: {command: [sleep, \"1\"]}\n"
	r := run(plain)
	if r.code != exitOK || r.stdout != "fed-1\n" {
		t.Fatalf("fed job create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	req, n := ff.lastCreate()
	job, err := loadJobSpec("-", strings.NewReader(plain))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || ff.creates[0].GetRequestId() != req.GetRequestId() || len(req.GetRequestId()) != 32 {
		t.Errorf("%d creates with request ids %q, %q; want one fresh id sent twice", n, ff.creates[0].GetRequestId(), req.GetRequestId())
	}
	if !proto.Equal(req.GetSpec(), &pelotonv1.FederatedJobSpec{Job: job}) {
		t.Errorf("plain JobSpec sent as %v", req.GetSpec())
	}

	wrapped := "job:\n  name: j\n  instanceCount: 1\nplacement:\n  clusterSelector: {region: east, zone: b}\n"
	if r := run(wrapped, "--request-id", "deploy-7"); r.code != exitOK {
		t.Fatalf("fed job create of a FederatedJobSpec: %+v", r)
	}
	req, _ = ff.lastCreate()
	if req.GetRequestId() != "deploy-7" || req.GetSpec().GetJob().GetName() != "j" ||
		req.GetSpec().GetPlacement().GetClusterSelector()["zone"] != "b" {
		t.Errorf("FederatedJobSpec sent as %v", req)
	}
	if r := run(wrapped, "--cluster-selector", "region=west"); r.code != exitOK {
		t.Fatalf("fed job create --cluster-selector: %+v", r)
	}
	req, _ = ff.lastCreate()
	if sel := req.GetSpec().GetPlacement().GetClusterSelector(); len(sel) != 1 || sel["region"] != "west" {
		t.Errorf("--cluster-selector region=west sent selector %v, want it to replace the file's", sel)
	}
	if r := run(plain, "--cluster-selector", "region=west,tier=gold"); r.code != exitOK {
		t.Fatalf("fed job create --cluster-selector of a JobSpec: %+v", r)
	}
	req, _ = ff.lastCreate()
	if sel := req.GetSpec().GetPlacement().GetClusterSelector(); len(sel) != 2 || sel["tier"] != "gold" {
		t.Errorf("--cluster-selector of a JobSpec sent selector %v", sel)
	}

	_, before := ff.lastCreate()
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"job: {name: j}\nplacement: {clusterSelector: {a: b}}\nplacement: {}\n", nil, exitError,
			"Error: stdin: line 3: placement: given twice (first at line 2)"},
		{"job: {name: j, instanceCont: 1}\n", nil, exitError,
			`Error: stdin: job: unknown field "instanceCont" (did you mean "instanceCount"?)`},
		{"name: j\n---\nname: k\n", nil, exitError, "Error: stdin: line 2: a second YAML document; a spec file holds one spec"},
		{plain, []string{"--cluster-selector", "region"}, exitUsage, `Error: invalid --cluster-selector entry "region": want key=value`},
		{plain, []string{"--request-id", "a/b"}, exitUsage, `Error: invalid --request-id "a/b": ...`},
	} {
		wantError(t, run(tc.stdin, tc.args...), tc.code, tc.want, tc.args...)
	}
	if _, after := ff.lastCreate(); after != before {
		t.Errorf("bad input reached the federation: %d creates, want %d", after, before)
	}
}

// TestFedPoolSpecFile: a global pool file is read with the strict rules of
// every spec file, naming line and field.
func TestFedPoolSpecFile(t *testing.T) {
	for _, tc := range []struct{ stdin, want string }{
		{"reservation: {cpu: 1}\nreservation: {cpu: 2}\n", "Error: stdin: line 2: reservation: given twice (first at line 1)"},
		{"placement:\n  weights: {a: .nan}\n", "Error: stdin: line 2: placement.weights.a: .nan is not a number a spec can hold"},
		{"placement: {weight: {a: 1}}\n", `Error: stdin: placement: unknown field "weight" (did you mean "weights"?)`},
		{"reservation: {cpu: 1}\n---\n{}\n", "Error: stdin: line 2: a second YAML document; a spec file holds one spec"},
	} {
		// No federation listens: the file fails before any call.
		args := []string{"--federation", closedAddr(t), "fed", "pool", "create", "/p", "-f", "-"}
		wantError(t, runCLI(t, tc.stdin, args...), exitError, tc.want, args...)
	}
	wantError(t, runCLI(t, "", "fed", "pool", "create", "/p"), exitUsage, "Error: missing --file (-f): the global pool spec")
}

// TestFedTables renders a global pool, clusters and federated jobs as
// the table formats show them.
func TestFedTables(t *testing.T) {
	res := func(cpu, mem float64) *pelotonv1.Resources { return &pelotonv1.Resources{Cpu: cpu, MemoryMb: mem} }
	pool := &pelotonv1.FederatedPool{
		Path: "/w", Version: 7,
		Spec: &pelotonv1.FederatedPoolSpec{Reservation: res(9, 900), Limit: &pelotonv1.Resources{Cpu: 18},
			Placement: &pelotonv1.FederatedPoolPlacement{Weights: map[string]float64{"b": 1, "a": 2}}},
		Clusters: []*pelotonv1.FederatedPoolCluster{
			{Cluster: "a", Desired: &pelotonv1.PoolSpec{Reservation: res(6, 600), Limit: &pelotonv1.Resources{Cpu: 12}},
				Status: &pelotonv1.PoolStatus{Entitlement: res(6, 600), Allocation: res(2, 128), Demand: res(2, 128), RunningTasks: 2}, InSync: true},
			{Cluster: "b", Desired: &pelotonv1.PoolSpec{Reservation: res(3, 300), Limit: &pelotonv1.Resources{Cpu: 6}},
				Message: "cluster unreachable: its part waits for it"},
		},
		Total: &pelotonv1.PoolStatus{Entitlement: res(6, 600), Allocation: res(2, 128), Demand: res(2, 128), RunningTasks: 2},
		Global: &pelotonv1.FederatedPoolShare{Entitlement: res(32, 1024), Allocation: res(16, 512), Queued: res(48, 1536), DispatchedJobs: 1, QueuedJobs: 3,
			Capacity: res(64, 4096)},
	}
	var b bytes.Buffer
	tw := newTabWriter(&b)
	writeFedPool(tw, pool, false)
	tw.Flush()
	want := `path:         /w
version:      7
placement:    a=2,b=1
share:        -
children:     -
fair share:   entitled to 32/1024 of the clusters' 64/4096; 16/512 held by 1 dispatched jobs; 48/1536 asked by 3 jobs waiting at the federation

CLUSTER   RESERVATION   LIMIT          ENTITLEMENT   ALLOCATION   DEMAND   IN SYNC   MESSAGE
a         6/600         12/unlimited   6/600         2/128        2/128    yes       -
b         3/300         6/unlimited    -             -            -        no        cluster unreachable: its part waits for it
TOTAL     9/900         18/unlimited   6/600         2/128        2/128    1/2       -
`
	if b.String() != want {
		t.Errorf("fed pool get:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	tw = newTabWriter(&b)
	pool.Clusters[0].Actual = &pelotonv1.PoolSpec{Reservation: res(1, 600)}
	writeFedPool(tw, pool, true)
	tw.Flush()
	if ra, rb := rowOf(b.String(), "a"), rowOf(b.String(), "b"); len(ra) < 5 || ra[3] != "1/600/0/0" || ra[4] != "unlimited" || len(rb) < 5 || rb[3] != "none" {
		t.Errorf("fed pool get -o wide shows what each cluster holds:\n%s", b.String())
	}
	b.Reset()
	tw = newTabWriter(&b)
	writeFedPoolTable(tw, []*pelotonv1.FederatedPool{pool}, false)
	tw.Flush()
	want = `PATH   RESERVATION   LIMIT          SHARE   PLACEMENT   IN SYNC   FAIR SHARE   DISPATCHED   QUEUED    QUEUED JOBS
/w     9/900         18/unlimited   -       a=2,b=1     1/2       32/1024      16/512       48/1536   3
`
	if b.String() != want {
		t.Errorf("fed pool list:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	tw = newTabWriter(&b)
	writeFedPoolTable(tw, []*pelotonv1.FederatedPool{pool}, true)
	tw.Flush()
	if !strings.Contains(b.String(), "18/unlimited/unlimited/unlimited") || !strings.Contains(b.String(), "9/900/0/0") {
		t.Errorf("fed pool list -o wide shows every kind:\n%s", b.String())
	}

	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clusters := []*pelotonv1.Cluster{
		{Name: "a", State: pelotonv1.ClusterState_CLUSTER_READY, Health: pelotonv1.ClusterState_CLUSTER_READY, Endpoint: "10.0.0.1:5391",
			Labels: map[string]string{"zone": "b", "region": "east"}, Capacity: res(64, 262144), Allocation: res(2, 128),
			LastSeenTime: timestamppb.New(now.Add(-3 * time.Second)), LatencyMs: 1.25},
		{Name: "b", State: pelotonv1.ClusterState_CLUSTER_CORDONED, Health: pelotonv1.ClusterState_CLUSTER_UNREACHABLE, Endpoint: "10.0.0.2:5391",
			Message: "connection refused"},
	}
	b.Reset()
	tw = newTabWriter(&b)
	writeClusterTable(tw, clusters, false, now)
	tw.Flush()
	want = `NAME   STATE              ENDPOINT        LABELS               CAPACITY    LAST SEEN
a      CLUSTER_READY      10.0.0.1:5391   region=east,zone=b   64/262144   3s ago
b      CLUSTER_CORDONED   10.0.0.2:5391   -                    -           never
`
	if b.String() != want {
		t.Errorf("cluster list:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	tw = newTabWriter(&b)
	writeClusterTable(tw, clusters, true, now)
	tw.Flush()
	for _, s := range []string{"HEALTH", "LATENCY", "MESSAGE", "1.2ms", "CLUSTER_UNREACHABLE", "connection refused"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("cluster list -o wide lacks %q:\n%s", s, b.String())
		}
	}
}

// fedEnv is the federation run in this test process over two cluster
// stacks on the sim backend, all on one embedded etcd, for the CLI to talk
// to as it would to `peloton up --clusters a,b`.
type fedEnv struct {
	t        *testing.T
	fed      string            // the federation's gRPC address
	clusters map[string]string // each cluster's gRPC address
}

// startFedEnv starts an etcd, clusters a and b (two simulated hosts of 32
// CPUs each) and a federation that checks them every 100ms.
func startFedEnv(t *testing.T) *fedEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts two cluster stacks and a federation")
	}
	logOut, level := io.Discard, slog.LevelWarn
	if os.Getenv("PELOTON_TEST_DEBUG") != "" {
		logOut, level = os.Stderr, slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	e, _ := storetest.StartEtcd(t)
	env := &fedEnv{t: t, clusters: map[string]string{}}
	for _, name := range []string{"a", "b"} {
		env.clusters[name] = startSimCluster(t, e.Endpoints(), name, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), Prefix: federation.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	f := federation.New(st, federation.Options{Logger: log.With("component", "federation"),
		CheckEvery: 100 * time.Millisecond, CallTimeout: 2 * time.Second, UnreachableAfter: 5 * time.Second})
	if err := f.Start(ctx); err != nil {
		st.Close()
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := federation.NewServer(f, log).GRPCServer()
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); f.Close(); st.Close() })
	env.fed = lis.Addr().String()
	return env
}

// startSimCluster runs a cluster stack named name on the etcd at endpoints
// and returns its gRPC address; it stops when the test ends.
func startSimCluster(t *testing.T, endpoints []string, name string, log *slog.Logger) string {
	t.Helper()
	ready := make(chan string, 1)
	cfg := cluster.Config{ClusterName: name, DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		EtcdEndpoints: endpoints, Backend: "sim", Hosts: 2, ShutdownGrace: 2 * time.Second, Logger: log.With("cluster", name),
		OnReady: func(info cluster.ReadyInfo) { ready <- info.GRPCAddr }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cluster.Run(ctx, cfg) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("cluster %s did not start: %v", name, err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("cluster %s not serving within 60s", name)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("cluster %s did not stop within 30s", name)
		}
	})
	return addr
}

// run runs one CLI command against the federation (--federation), with
// stdin.
func (e *fedEnv) run(stdin string, args ...string) result {
	e.t.Helper()
	return runCLI(e.t, stdin, append([]string{"--federation", e.fed}, args...)...)
}

// ok runs a command that must succeed and returns its stdout.
func (e *fedEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != exitOK {
		e.t.Fatalf("peloton %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs a command that must fail with code and the error line want
// (a prefix of it when want ends in "...").
func (e *fedEnv) fails(code int, want string, args ...string) {
	e.t.Helper()
	wantError(e.t, e.run("", args...), code, want, args...)
}

// get runs a command with -o json and decodes its answer into m.
func (e *fedEnv) get(m proto.Message, args ...string) {
	e.t.Helper()
	out := e.ok(append(args, "-o", "json")...)
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		e.t.Fatalf("peloton %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitFor waits until cond holds, failing the test after within with what
// cond last said.
func (e *fedEnv) waitFor(within time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	testutil.Eventually(e.t, within, what, func() error {
		if done, state := cond(); !done {
			return errors.New("last: " + state)
		}
		return nil
	})
}

// rowOf is the fields of the first line of a table whose first field is
// key (nil if none).
func rowOf(table, key string) []string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == key {
			return f
		}
	}
	return nil
}

// TestFederationCLI runs the cluster and fed commands against a real
// federation over two real cluster stacks: register, list, get, cordon;
// a global pool from a file reaching each cluster (seen with --cluster);
// federated jobs dispatched by selector and run to the end; and bad input.
func TestFederationCLI(t *testing.T) {
	env := startFedEnv(t)

	if out := env.ok("cluster", "list", "-o", "json"); out != "{\n  \"clusters\": []\n}\n" {
		t.Errorf("cluster list -o json of an empty registry: %q", out)
	}
	out := env.ok("cluster", "register", "a", "--endpoint", env.clusters["a"], "--labels", "region=east")
	if row := rowOf(out, "state:"); len(row) != 2 || row[1] != "CLUSTER_READY" {
		t.Errorf("cluster register a:\n%s", out)
	}
	env.ok("cluster", "register", "b", "--endpoint", env.clusters["b"], "--labels", "region=west,zone=b")

	env.waitFor(10*time.Second, "both clusters READY with their capacity", func() (bool, string) {
		out := env.ok("cluster", "list")
		for name, lbl := range map[string]string{"a": "region=east", "b": "region=west,zone=b"} {
			row := rowOf(out, name)
			if len(row) < 6 || row[1] != "CLUSTER_READY" || row[2] != env.clusters[name] || row[3] != lbl || row[4] != "64/262144" {
				return false, out
			}
		}
		return strings.HasPrefix(out, "NAME "), out
	})
	if out := env.ok("cluster", "list", "-o", "wide"); !strings.Contains(strings.Split(out, "\n")[0], "LATENCY") {
		t.Errorf("cluster list -o wide:\n%s", out)
	}
	var c pelotonv1.Cluster
	env.get(&c, "cluster", "get", "b")
	if c.GetEndpoint() != env.clusters["b"] || c.GetLabels()["zone"] != "b" || c.GetCapacity().GetCpu() != 64 {
		t.Errorf("cluster get b -o json: %v", &c)
	}
	if out := env.ok("cluster", "get", "a"); rowOf(out, "endpoint:") == nil || !strings.Contains(out, "capacity:") {
		t.Errorf("cluster get a:\n%s", out)
	}
	env.fails(exitError, "Error: AlreadyExists: name: cluster a is already registered with endpoint "+env.clusters["a"]+"...",
		"cluster", "register", "a", "--endpoint", "127.0.0.1:1")
	env.fails(exitError, "Error: NotFound: cluster nope is not registered", "cluster", "get", "nope")
	env.fails(exitUsage, "Error: missing --endpoint: the cluster's gRPC address, host:port", "cluster", "register", "c")

	out = env.ok("cluster", "cordon", "b")
	if row := rowOf(out, "state:"); len(row) != 2 || row[1] != "CLUSTER_CORDONED" {
		t.Errorf("cluster cordon b:\n%s", out)
	}
	if row := rowOf(env.ok("cluster", "list"), "b"); len(row) < 2 || row[1] != "CLUSTER_CORDONED" {
		t.Errorf("cluster list after cordon: %v", row)
	}
	out = env.ok("cluster", "uncordon", "b")
	if row := rowOf(out, "state:"); len(row) != 2 || row[1] == "CLUSTER_CORDONED" {
		t.Errorf("cluster uncordon b:\n%s", out)
	}

	// A global pool split 2:1 reaches each cluster, as --cluster shows.
	poolFile := writeSpec(t, "w.yaml", "reservation: {cpu: 9, memoryMb: 900}\nplacement:\n  weights: {a: 2, b: 1}\n")
	first := env.ok("fed", "pool", "create", "/w", "-f", poolFile, "--request-id", "w-1")
	if again := env.ok("fed", "pool", "create", "/w", "-f", poolFile, "--request-id", "w-1"); rowOf(again, "path:") == nil ||
		rowOf(first, "TOTAL") == nil {
		t.Errorf("fed pool create, and again with its request id:\n%s\n%s", first, again)
	}
	wantParts := func(parts map[string]float64) {
		t.Helper()
		for name, cpu := range parts {
			env.waitFor(20*time.Second, "/w in cluster "+name, func() (bool, string) {
				r := env.run("", "--cluster", name, "pool", "get", "/w", "-o", "json")
				if r.code != exitOK {
					return false, r.stderr
				}
				var p pelotonv1.Pool
				if err := protojson.Unmarshal([]byte(r.stdout), &p); err != nil {
					return false, err.Error()
				}
				return p.GetSpec().GetReservation().GetCpu() == cpu, r.stdout
			})
		}
	}
	wantParts(map[string]float64{"a": 6, "b": 3})
	env.waitFor(20*time.Second, "fed pool get to show both clusters in sync", func() (bool, string) {
		out := env.ok("fed", "pool", "get", "/w")
		a, b, total := rowOf(out, "a"), rowOf(out, "b"), rowOf(out, "TOTAL")
		return len(a) >= 7 && a[1] == "6/600" && a[6] == "yes" && len(b) >= 7 && b[1] == "3/300" && b[6] == "yes" &&
			len(total) >= 7 && total[1] == "9/900" && total[6] == "2/2", out
	})
	var fp pelotonv1.FederatedPool
	env.get(&fp, "fed", "pool", "get", "/w")
	if len(fp.GetClusters()) != 2 || fp.GetTotal().GetEntitlement() == nil {
		t.Errorf("fed pool get -o json: %v", &fp)
	}
	if row := rowOf(env.ok("fed", "pool", "list"), "/w"); len(row) != 10 || row[1] != "9/900" || row[4] != "a=2,b=1" || row[5] != "2/2" || row[9] != "0" {
		t.Errorf("fed pool list row of /w: %v", row)
	}
	bad := writeSpec(t, "bad.yaml", "placement: {weights: {nope: 1}}\n")
	env.fails(exitError, "Error: InvalidArgument: spec.placement.weights.nope: cluster nope is not registered", "fed", "pool", "create", "/x", "-f", bad)
	env.fails(exitError, "Error: NotFound: global pool /none does not exist", "fed", "pool", "get", "/none")

	upd := writeSpec(t, "w2.yaml", "reservation: {cpu: 12, memoryMb: 1200}\nplacement: {weights: {a: 2, b: 1}}\n")
	env.fails(exitError, "Error: FailedPrecondition: version: global pool /w is at version ...", "fed", "pool", "update", "/w", "-f", upd, "--version", "1")
	env.ok("fed", "pool", "update", "/w", "-f", upd, "--version", "0")
	wantParts(map[string]float64{"a": 8, "b": 4})

	// Federated jobs: a JobSpec sent west by --cluster-selector, a
	// FederatedJobSpec whose selector sends it east, one nothing matches.
	jobFile := writeSpec(t, "job.yaml", "name: west\ntype: BATCH\npool: /w\ninstanceCount: 2\n"+
		"defaultSpec: {command: [sleep, \"1\"], resources: {cpu: 1, memoryMb: 64}}\n")
	fedJobFile := writeSpec(t, "fedjob.yaml", "job:\n  name: east\n  type: BATCH\n  pool: /w\n  instanceCount: 1\n"+
		"  defaultSpec: {command: [sleep, \"1\"], resources: {cpu: 1, memoryMb: 64}}\nplacement:\n  clusterSelector: {region: east}\n")
	west := strings.TrimSpace(env.ok("fed", "job", "create", "-f", jobFile, "--cluster-selector", "region=west", "--request-id", "west-1"))
	if again := strings.TrimSpace(env.ok("fed", "job", "create", "-f", jobFile, "--cluster-selector", "region=west", "--request-id", "west-1")); again != west {
		t.Errorf("fed job create again with its request id: %q, want %q", again, west)
	}
	east := strings.TrimSpace(env.ok("fed", "job", "create", "-f", fedJobFile))
	env.fails(exitError, "Error: InvalidArgument: spec.placement.clusterSelector: {region=mars} matches no registered cluster ...",
		"fed", "job", "create", "-f", jobFile, "--cluster-selector", "region=mars")
	// A job for a cordoned cluster waits.
	env.ok("cluster", "cordon", "a")
	nowhere := strings.TrimSpace(env.ok("fed", "job", "create", "-f", jobFile, "--cluster-selector", "region=east"))
	jobs := map[string]*pelotonv1.FederatedJob{}
	for id, want := range map[string]string{west: "b", east: "a"} {
		env.waitFor(60*time.Second, "federated job "+id+" to succeed in "+want, func() (bool, string) {
			var j pelotonv1.FederatedJob
			env.get(&j, "fed", "job", "get", id)
			jobs[id] = &j
			return j.GetDispatchState() == pelotonv1.DispatchState_DISPATCH_DONE &&
				j.GetStatus().GetState() == pelotonv1.JobState_JOB_SUCCEEDED, protojson.Format(&j)
		})
		if j := jobs[id]; j.GetCluster() != want || j.GetClusterJobId() == "" || len(j.GetAttempts()) != 1 {
			t.Errorf("federated job %s went to %q as %q (%d attempts), want %s", id, j.GetCluster(), j.GetClusterJobId(), len(j.GetAttempts()), want)
		}
	}
	out = env.ok("fed", "job", "get", west)
	for _, want := range [][]string{{"dispatch", "state:", "DISPATCH_DONE"}, {"cluster:", "b"}, {"job", "state:", "JOB_SUCCEEDED"},
		{"tasks:", "SUCCEEDED=2"}, {"1", "b", jobs[west].GetClusterJobId()}} {
		if row := rowOf(out, want[0]); len(row) < len(want) || strings.Join(row[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("fed job get lacks %q:\n%s", want, out)
		}
	}
	if row := rowOf(env.ok("--cluster", "b", "job", "list"), jobs[west].GetClusterJobId()); len(row) < 2 || row[1] != "west" {
		t.Errorf("peloton --cluster b job list: no row for the dispatched job %s", jobs[west].GetClusterJobId())
	}
	out = env.ok("fed", "job", "list", "--in-cluster", "b")
	if rowOf(out, west) == nil || rowOf(out, east) != nil || rowOf(out, nowhere) != nil {
		t.Errorf("fed job list --in-cluster b:\n%s", out)
	}
	if out := env.ok("fed", "job", "list", "--limit", "2"); strings.Count(out, "\n") != 3 {
		t.Errorf("fed job list --limit 2:\n%s", out)
	}
	var list pelotonv1.ListFederatedJobsResponse
	env.get(&list, "fed", "job", "list")
	if len(list.GetJobs()) != 3 || list.GetJobs()[0].GetId() != nowhere {
		t.Errorf("fed job list -o json, newest first: %v", &list)
	}

	var j pelotonv1.FederatedJob
	env.get(&j, "fed", "job", "get", nowhere)
	if j.GetDispatchState() != pelotonv1.DispatchState_DISPATCH_PENDING || !strings.Contains(j.GetMessage(), "a CORDONED") {
		t.Errorf("federated job for a cordoned cluster: %s %q", j.GetDispatchState(), j.GetMessage())
	}
	if out := env.ok("fed", "job", "kill", nowhere); out != "federated job "+nowhere+": kill requested\n" {
		t.Errorf("fed job kill: %q", out)
	}
	env.get(&j, "fed", "job", "get", nowhere)
	if j.GetDispatchState() != pelotonv1.DispatchState_DISPATCH_DONE || !j.GetKilled() {
		t.Errorf("killed pending job: %s killed=%v", j.GetDispatchState(), j.GetKilled())
	}
	env.ok("cluster", "uncordon", "a")
	svc := writeSpec(t, "svc.yaml", "name: svc\ntype: SERVICE\npool: /w\ninstanceCount: 1\ndefaultSpec: {command: [sleep, \"10\"]}\n")
	env.fails(exitError, "Error: InvalidArgument: spec.job.type: the federation dispatches BATCH jobs; ...", "fed", "job", "create", "-f", svc)

	// Routing errors against the real federation.
	env.fails(exitError, "Error: cluster nope is not registered", "--cluster", "nope", "job", "list")
	env.fails(exitUsage, "Error: --cluster and --server both name where to send the command; give one",
		"--cluster", "a", "--server", env.clusters["a"], "job", "list")

	// Delete: /w still holds the jobs that ran in it, so its clusters keep
	// it and the global pool shows it is being deleted.
	if out := env.ok("fed", "pool", "delete", "/w"); out != "global pool /w: deleting from every cluster\n" {
		t.Errorf("fed pool delete: %q", out)
	}
	if row := rowOf(env.ok("fed", "pool", "list"), "/w"); len(row) < 7 || row[6] != "(deleting)" {
		t.Errorf("fed pool list row of /w being deleted: %v", row)
	}
	env.ok("cluster", "deregister", "b")
	env.fails(exitError, "Error: cluster b is not registered", "--cluster", "b", "job", "list")
}

// TestFedServiceFlags: bad flags and files of fed service fail before any
// call, naming the flag or the line and field.
func TestFedServiceFlags(t *testing.T) {
	fed := closedAddr(t) // nothing listens: a call would fail otherwise
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"", []string{"fed", "service", "create"}, exitUsage, "Error: missing --file (-f): the federated service spec"},
		{"job: {name: w}\njob: {}\n", []string{"fed", "service", "create", "-f", "-"}, exitError, "Error: stdin: line 2: job: given twice (first at line 1)"},
		{"placement: {clusters: [{nam: a}]}\n", []string{"fed", "service", "create", "-f", "-"}, exitError,
			`Error: stdin: placement.clusters[0]: unknown field "nam" (did you mean "name"?)`},
		{"", []string{"fed", "service", "update", "s-1"}, exitUsage, "Error: missing --file (-f): the new job spec"},
		{"name: w\n", []string{"fed", "service", "update", "s-1", "-f", "-", "--parallel-clusters", "0"}, exitUsage,
			"Error: invalid --parallel-clusters 0: must be >= 1 (leave it out for the default, 1)"},
		{"name: w\n", []string{"fed", "service", "update", "s-1", "-f", "-", "--batch-size", "0"}, exitUsage,
			"Error: invalid --batch-size 0: must be >= 1 (leave it out for the default, 1)"},
		{"nme: w\n", []string{"fed", "service", "update", "s-1", "-f", "-"}, exitError, `Error: stdin: unknown field "nme" (did you mean "name"?)`},
		{"", []string{"fed", "service", "pause"}, exitUsage, "Error: missing SERVICEID..."},
	} {
		args := append([]string{"--federation", fed}, tc.args...)
		wantError(t, runCLI(t, tc.stdin, args...), tc.code, tc.want, args...)
	}
}

// TestFedServiceTables renders a federated service with a rollout, and a
// list of services, as fed service get and list show them.
func TestFedServiceTables(t *testing.T) {
	svc := &pelotonv1.FederatedService{Id: "s-1", SpecVersion: 2, Desired: 5, Running: 4, Healthy: 4, Updated: 3,
		Spec: &pelotonv1.FederatedServiceSpec{Job: &pelotonv1.JobSpec{Name: "web", Pool: "/p", Sla: &pelotonv1.SlaSpec{MaximumUnavailableInstances: 2}}},
		Clusters: []*pelotonv1.ServiceCluster{
			{Cluster: "a", Desired: 3, Running: 3, Healthy: 3, Updated: 3, MaxUnavailable: 1, SpecVersion: 2, State: pelotonv1.JobState_JOB_RUNNING, ClusterJobId: "j-a"},
			{Cluster: "b", Desired: 2, Running: 1, Healthy: 1, MaxUnavailable: 1, SlaFallback: true, SpecVersion: 1, State: pelotonv1.JobState_JOB_RUNNING, ClusterJobId: "j-b", Message: "update u-2 UPDATE_ROLLING_FORWARD",
				Overridden: []string{"defaultSpec.command", "labels.tier"}},
		},
		Rollout: &pelotonv1.ServiceRollout{Id: 1, FromVersion: 1, ToVersion: 2, State: pelotonv1.RolloutState_ROLLOUT_ROLLING,
			Steps: []*pelotonv1.RolloutStep{
				{Cluster: "a", State: pelotonv1.RolloutStepState_STEP_DONE, UpdateId: "u-1", Desired: 3, FromDesired: 3, Message: "update u-1 succeeded"},
				{Cluster: "b", State: pelotonv1.RolloutStepState_STEP_UPDATING, UpdateId: "u-2", Desired: 2, FromDesired: 2},
			}},
	}
	var b bytes.Buffer
	tw := newTabWriter(&b)
	writeFedService(tw, svc)
	tw.Flush()
	want := `id:                s-1
name:              web
pool:              /p
instances:         4 running of 5, 4 healthy, 3 at spec version 2
budget:            2 unavailable at most
spec version:      2
created:           -
message:           -
rollout:           1: ROLLOUT_ROLLING, spec version 1 -> 2
rollout message:   -

CLUSTER   DESIRED   RUNNING   HEALTHY   UPDATED   BUDGET         VERSION   STATE         CLUSTER JOB ID   MESSAGE
a         3         3         3         3         1              2         JOB_RUNNING   j-a              -
b         2         1         1         0         1 (fallback)   1         JOB_RUNNING   j-b              update u-2 UPDATE_ROLLING_FORWARD

CLUSTER   OVERRIDDEN
b         defaultSpec.command, labels.tier

STEP   CLUSTER   STATE      INSTANCES   UPDATE   MESSAGE
1      a         DONE       3 -> 3      u-1      update u-1 succeeded
2      b         UPDATING   2 -> 2      u-2      -
`
	if b.String() != want {
		t.Errorf("fed service get:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	tw = newTabWriter(&b)
	writeFedServiceTable(tw, []*pelotonv1.FederatedService{svc}, true)
	tw.Flush()
	want = `ID    NAME   RUNNING   DESIRED   SPLIT     CREATED   POOL   MESSAGE
s-1   web    4         5         a=3 b=2   -         /p     -
`
	if b.String() != want {
		t.Errorf("fed service list -o wide:\n%s\nwant:\n%s", b.String(), want)
	}
}

// ListFederatedJobs answers one job, archived when the archive is asked
// for, and keeps the request.
func (f *fakeFederation) ListFederatedJobs(_ context.Context, req *pelotonv1.ListFederatedJobsRequest) (*pelotonv1.ListFederatedJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, req)
	return &pelotonv1.ListFederatedJobsResponse{Jobs: []*pelotonv1.FederatedJob{{Id: "fj-1", Archived: req.GetArchived(),
		Spec: &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: "nightly"}}, Status: &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_SUCCEEDED}}}}, nil
}

// TestFedJobListArchived: --archived asks the federation for its archive,
// and the table marks what it lists as archived.
func TestFedJobListArchived(t *testing.T) {
	ff := &fakeFederation{}
	fed := startFakeFederation(t, ff)
	r := runCLI(t, "", "--federation", fed, "fed", "job", "list", "--archived")
	if r.code != exitOK || !strings.Contains(r.stdout, "JOB_SUCCEEDED (archived)") {
		t.Fatalf("fed job list --archived: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "--federation", fed, "fed", "job", "list")
	if r.code != exitOK || strings.Contains(r.stdout, "archived") {
		t.Fatalf("fed job list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if len(ff.lists) != 2 || !ff.lists[0].Archived || ff.lists[1].Archived {
		t.Errorf("requests: %v", ff.lists)
	}
}
