package security

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// roleEnv is what the calls of the role table act on.
type roleEnv struct {
	t      *testing.T
	root   *pclient.Client
	jobA   string // a batch job in /a/x
	jobB   string // a batch job in /b
	svcA   string // a service in /a/x with an update
	update string
	n      atomic.Int64
}

// freshJob is a new batch job in /a/x, for calls that end it.
func (e *roleEnv) freshJob() string {
	e.t.Helper()
	return createJob(e.t, e.root, batchSpec(e.name("j"), "/a/x"))
}

func (e *roleEnv) name(prefix string) string { return fmt.Sprintf("%s%d", prefix, e.n.Add(1)) }

// freshPool is a new empty pool under /a/q (whose subtree runs no jobs,
// so pools can be made in it).
func (e *roleEnv) freshPool() string {
	e.t.Helper()
	p := "/a/q/" + e.name("p")
	createPool(e.t, e.root, p)
	return p
}

// roleCall makes one call of a method as c; only whether the guard let it
// through matters.
type roleCall func(e *roleEnv, c *pclient.Client) error

// Who may call each method of the cluster API, by the test's policy:
// bob views /a/**, alice submits in /a/**, carol and ops-bot (group ops)
// operate the cluster, root administers it, agent-1 reports usage, dave
// holds nothing. Lists answer everyone, filtered.
const (
	viewers    = "bob alice carol ops root"
	submitters = "alice carol ops root"
	operators  = "carol ops root"
	everyone   = "bob alice carol ops root agent-1 dave"
)

var roleTable = map[string]struct {
	allowed string
	call    roleCall
}{
	"JobService.CreateJob": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.CreateJob(ctx(e.t), &pelotonv1.CreateJobRequest{Spec: batchSpec(e.name("c"), "/a/x")})
		return err
	}},
	"JobService.CreateJobs": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.CreateJobs(ctx(e.t), &pelotonv1.CreateJobsRequest{Requests: []*pelotonv1.CreateJobRequest{{Spec: batchSpec(e.name("cs"), "/a/x")}}})
		return err
	}},
	"JobService.GetJob": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.GetJob(ctx(e.t), &pelotonv1.GetJobRequest{JobId: e.jobA})
		return err
	}},
	// jobA has no gangs: past the guard the call is refused as
	// FailedPrecondition, which is not a refusal of the caller.
	"JobService.GetGang": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.GetGang(ctx(e.t), &pelotonv1.GetGangRequest{JobId: e.jobA})
		return err
	}},
	"JobService.ListJobs": {everyone, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.ListJobs(ctx(e.t), &pelotonv1.ListJobsRequest{})
		return err
	}},
	"JobService.CancelJob": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.CancelJob(ctx(e.t), &pelotonv1.CancelJobRequest{JobId: e.freshJob()})
		return err
	}},
	"JobService.DeleteJob": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.DeleteJob(ctx(e.t), &pelotonv1.DeleteJobRequest{JobId: e.freshJob()})
		return err
	}},
	"JobService.RestartJob": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.RestartJob(ctx(e.t), &pelotonv1.RestartJobRequest{JobId: e.freshJob()})
		return err
	}},
	"JobService.ScaleJob": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.ScaleJob(ctx(e.t), &pelotonv1.ScaleJobRequest{JobId: e.jobA, InstanceCount: 1})
		return err
	}},
	"JobService.ListJobVersions": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Jobs.ListJobVersions(ctx(e.t), &pelotonv1.ListJobVersionsRequest{JobId: e.jobA})
		return err
	}},
	"TaskService.ListTasks": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Tasks.ListTasks(ctx(e.t), &pelotonv1.ListTasksRequest{JobId: e.jobA})
		return err
	}},
	"TaskService.GetTask": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Tasks.GetTask(ctx(e.t), &pelotonv1.GetTaskRequest{JobId: e.jobA})
		return err
	}},
	"TaskService.KillTask": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Tasks.KillTask(ctx(e.t), &pelotonv1.KillTaskRequest{JobId: e.freshJob()})
		return err
	}},
	"TaskService.GetTaskLogs": {viewers, func(e *roleEnv, c *pclient.Client) error {
		s, err := c.Tasks.GetTaskLogs(ctx(e.t), &pelotonv1.GetTaskLogsRequest{JobId: e.jobA})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		if err == io.EOF {
			return nil
		}
		return err
	}},
	"JobService.WatchJobs": {viewers, func(e *roleEnv, c *pclient.Client) error {
		return firstOfWatch(e.t, func(cx context.Context) (recver[*pelotonv1.JobChange], error) {
			return c.Jobs.WatchJobs(cx, &pelotonv1.WatchJobsRequest{JobIds: []string{e.jobA}})
		})
	}},
	"TaskService.WatchTasks": {viewers, func(e *roleEnv, c *pclient.Client) error {
		return firstOfWatch(e.t, func(cx context.Context) (recver[*pelotonv1.TaskChange], error) {
			return c.Tasks.WatchTasks(cx, &pelotonv1.WatchTasksRequest{JobId: e.jobA})
		})
	}},
	"PoolService.CreatePool": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.CreatePool(ctx(e.t), &pelotonv1.CreatePoolRequest{Path: "/a/q/" + e.name("n"), Spec: &pelotonv1.PoolSpec{}})
		return err
	}},
	"PoolService.GetPool": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.GetPool(ctx(e.t), &pelotonv1.GetPoolRequest{Path: "/a/x"})
		return err
	}},
	"PoolService.UpdatePool": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.UpdatePool(ctx(e.t), &pelotonv1.UpdatePoolRequest{Path: e.freshPool(), Spec: &pelotonv1.PoolSpec{}})
		return err
	}},
	"PoolService.DeletePool": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.DeletePool(ctx(e.t), &pelotonv1.DeletePoolRequest{Path: e.freshPool()})
		return err
	}},
	"PoolService.ListPools": {everyone, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.ListPools(ctx(e.t), &pelotonv1.ListPoolsRequest{})
		return err
	}},
	"PoolService.MovePool": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Pools.MovePool(ctx(e.t), &pelotonv1.MovePoolRequest{Path: e.freshPool(), NewParent: "/a/q"})
		return err
	}},
	"HostService.ListHosts": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Hosts.ListHosts(ctx(e.t), &pelotonv1.ListHostsRequest{})
		return err
	}},
	"HostService.StartMaintenance": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Hosts.StartMaintenance(ctx(e.t), &pelotonv1.StartMaintenanceRequest{Hosts: []string{"no-such-host"}})
		return err
	}},
	"HostService.CompleteMaintenance": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Hosts.CompleteMaintenance(ctx(e.t), &pelotonv1.CompleteMaintenanceRequest{Hosts: []string{"no-such-host"}})
		return err
	}},
	"HostService.MoveHost": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Hosts.MoveHost(ctx(e.t), &pelotonv1.MoveHostRequest{Host: "no-such-host", Partition: "batch"})
		return err
	}},
	"PartitionService.ListPartitions": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Partitions.ListPartitions(ctx(e.t), &pelotonv1.ListPartitionsRequest{})
		return err
	}},
	"PartitionService.ListPartitionMoves": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Partitions.ListPartitionMoves(ctx(e.t), &pelotonv1.ListPartitionMovesRequest{})
		return err
	}},
	"PartitionService.PublishAdvice": {operators, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Partitions.PublishAdvice(ctx(e.t), &pelotonv1.PublishAdviceRequest{})
		return err
	}},
	"HostAgentService.ReportUsage": {"agent-1 root", func(e *roleEnv, c *pclient.Client) error {
		s, err := pelotonv1.NewHostAgentServiceClient(c.Conn).ReportUsage(ctx(e.t))
		if err != nil {
			return err
		}
		if err := s.Send(&pelotonv1.UsageReport{Host: "no-such-host", AgentId: "x", Sequence: 1}); err != nil && err != io.EOF {
			return err
		}
		_, err = s.Recv()
		return err
	}},
	"UpdateService.CreateUpdate": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.CreateUpdate(ctx(e.t), &pelotonv1.CreateUpdateRequest{JobId: e.svcA, Spec: serviceSpec("svc", "/a/x")})
		return err
	}},
	"UpdateService.GetUpdate": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.GetUpdate(ctx(e.t), &pelotonv1.GetUpdateRequest{UpdateId: e.update})
		return err
	}},
	"UpdateService.ListUpdates": {viewers, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.ListUpdates(ctx(e.t), &pelotonv1.ListUpdatesRequest{JobId: e.svcA})
		return err
	}},
	"UpdateService.PauseUpdate": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.PauseUpdate(ctx(e.t), &pelotonv1.PauseUpdateRequest{UpdateId: e.update})
		return err
	}},
	"UpdateService.ResumeUpdate": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.ResumeUpdate(ctx(e.t), &pelotonv1.ResumeUpdateRequest{UpdateId: e.update})
		return err
	}},
	"UpdateService.AbortUpdate": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.AbortUpdate(ctx(e.t), &pelotonv1.AbortUpdateRequest{UpdateId: e.update})
		return err
	}},
	"UpdateService.RollbackUpdate": {submitters, func(e *roleEnv, c *pclient.Client) error {
		_, err := c.Updates.RollbackUpdate(ctx(e.t), &pelotonv1.RollbackUpdateRequest{UpdateId: e.update})
		return err
	}},
}

// TestEachRoleAllowedExactlyItsCalls calls every method of the cluster API
// as each principal of the policy, over mutual TLS with tokens, and checks
// the guard lets through exactly the principals the rights model says. A
// method of the API missing from the table fails the test: a new RPC needs
// a rule and an expectation here.
func TestEachRoleAllowedExactlyItsCalls(t *testing.T) {
	p := newPKI(t)
	e, _ := storetest.StartEtcd(t)
	s := startStack(t, "roles", e.Endpoints(), p.security(t, ""))
	addr := s.info.GRPCAddr
	env := &roleEnv{t: t, root: p.as(t, addr, "root")}
	for _, pool := range []string{"/a", "/a/x", "/a/q", "/b"} {
		createPool(t, env.root, pool)
	}
	env.jobA = env.freshJob()
	env.jobB = createJob(t, env.root, batchSpec("b", "/b"))
	env.svcA = createJob(t, env.root, serviceSpec("svc", "/a/x"))
	next := serviceSpec("svc", "/a/x")
	next.DefaultSpec.Command = []string{"sleep", "601"}
	u, err := env.root.Updates.CreateUpdate(ctx(t), &pelotonv1.CreateUpdateRequest{JobId: env.svcA, Spec: next})
	if err != nil {
		t.Fatal(err)
	}
	env.update = u.GetUpdate().GetId()

	clients := map[string]*pclient.Client{}
	for _, who := range strings.Fields(everyone) {
		if who == "ops" {
			c, err := pclient.New(addr, pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: p.opsCert, KeyFile: p.opsKey}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			clients[who] = c
			continue
		}
		clients[who] = p.as(t, addr, who)
	}

	var served []string
	files := pelotonv1.File_peloton_api_v1_peloton_proto.Services()
	for i := range files.Len() {
		svc := files.Get(i)
		for j := range svc.Methods().Len() {
			served = append(served, string(svc.Name())+"."+string(svc.Methods().Get(j).Name()))
		}
	}
	for _, m := range served {
		row, ok := roleTable[m]
		if !ok {
			t.Errorf("%s has no row in the role table: add one (and its rule in cluster/api/authz.go)", m)
			continue
		}
		allowed := strings.Fields(row.allowed)
		for _, who := range strings.Fields(everyone) {
			err := row.call(env, clients[who])
			want := slices.Contains(allowed, who)
			if got := !denied(err); got != want {
				t.Errorf("%s as %s: allowed=%v, want %v (err: %v)", m, who, got, want, err)
			}
			if !want && status.Code(err) == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), "role") {
				t.Errorf("%s as %s: the refusal does not name the role missing: %v", m, who, err)
			}
		}
	}
	for m := range roleTable {
		if !slices.Contains(served, m) {
			t.Errorf("the role table has %s, which the API does not serve", m)
		}
	}

	// Pool subtrees: alice submits in /a/** but not in /b, and her lists
	// leave /b out.
	_, err = clients["alice"].Jobs.CancelJob(ctx(t), &pelotonv1.CancelJobRequest{JobId: env.jobB})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "submitter role on pool /b") {
		t.Errorf("alice cancelling a job of /b: %v, want PermissionDenied naming the submitter role on /b", err)
	}
	jobs := listJobs(t, clients["alice"])
	for _, j := range jobs {
		if j.GetSpec().GetPool() != "/a/x" {
			t.Errorf("alice's job list shows %s of %s", j.GetId(), j.GetSpec().GetPool())
		}
	}
	if len(jobs) == 0 {
		t.Error("alice's job list is empty; it should show the jobs of /a/x")
	}
	all := listJobs(t, env.root)
	if len(all) <= len(jobs) {
		t.Errorf("root sees %d jobs, alice %d: root should also see /b's", len(all), len(jobs))
	}
	pr, err := clients["dave"].Pools.ListPools(ctx(t), &pelotonv1.ListPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pools := pr.GetPools()
	if len(pools) != 0 {
		t.Errorf("dave, granted nothing, sees %d pools", len(pools))
	}
	if _, err := clients["alice"].Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{Pool: "/b"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice listing /b's jobs: %v, want PermissionDenied", err)
	}
	// Watching every job needs the viewer role cluster-wide; a job of a
	// pool one may not view cannot be watched by naming it.
	for who, want := range map[string]bool{"bob": false, "alice": false, "carol": true, "root": true} {
		err := firstOfWatch(t, func(cx context.Context) (recver[*pelotonv1.JobChange], error) {
			return clients[who].Jobs.WatchJobs(cx, &pelotonv1.WatchJobsRequest{})
		})
		if got := !denied(err); got != want {
			t.Errorf("%s watching every job: allowed=%v, want %v (err: %v)", who, got, want, err)
		}
	}
	err = firstOfWatch(t, func(cx context.Context) (recver[*pelotonv1.JobChange], error) {
		return clients["alice"].Jobs.WatchJobs(cx, &pelotonv1.WatchJobsRequest{JobIds: []string{env.jobA, env.jobB}})
	})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "pool /b") {
		t.Errorf("alice watching a job of /b: %v, want PermissionDenied naming pool /b", err)
	}
}

// recver is a server stream as its client reads it.
type recver[M any] interface{ Recv() (M, error) }

// firstOfWatch opens a watch and receives its first message, then ends it.
func firstOfWatch[M any](t *testing.T, open func(context.Context) (recver[M], error)) error {
	cx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	s, err := open(cx)
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}
