package federation_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"github.com/peloton-sched/peloton/sla/fed"
)

func serviceSpec(name string, n, budget uint32, shares ...*pelotonv1.ClusterShare) *pelotonv1.FederatedServiceSpec {
	return &pelotonv1.FederatedServiceSpec{
		Job: &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: n,
			Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: budget},
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}},
		Placement: &pelotonv1.ServicePlacement{Clusters: shares},
	}
}

// partJob is the job a service's part has in its cluster, as the cluster
// shows it.
func partJob(t *testing.T, s *stack, svc *pelotonv1.FederatedService) (*pelotonv1.Job, error) {
	t.Helper()
	for _, p := range svc.Clusters {
		if p.Cluster != s.name {
			continue
		}
		if p.ClusterJobId == "" {
			return nil, fmt.Errorf("cluster %s: no job yet (%s)", s.name, p.Message)
		}
		resp, err := s.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: p.ClusterJobId})
		if err != nil {
			return nil, err
		}
		return resp.Job, nil
	}
	return nil, fmt.Errorf("no part in cluster %s", s.name)
}

// TestFederatedService: a service split over three clusters by weight and
// fixed count runs there with its budget split too; bad placements are
// refused naming the field; parts removed or changed in a cluster are
// repaired; the service outlives a restart of the federation; a delete
// removes every part.
func TestFederatedService(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, map[string]string{"region": map[string]string{"a": "east", "b": "west", "c": "west"}[s.name]})
	}

	bad := []struct {
		spec *pelotonv1.FederatedServiceSpec
		code codes.Code
		msg  string
	}{
		{serviceSpec("x", 3, 1, &pelotonv1.ClusterShare{Name: "zz", Weight: 1}), codes.InvalidArgument,
			"spec.placement.clusters[0].name: cluster zz is not registered (registered: a, b, c)"},
		{serviceSpec("x", 3, 1, &pelotonv1.ClusterShare{Name: "a"}), codes.InvalidArgument,
			"spec.placement.clusters: 3 instances are left after the fixed counts and the weights sum to 0"},
		{serviceSpec("x", 3, 1, &pelotonv1.ClusterShare{Name: "a", Count: 4}), codes.InvalidArgument,
			"spec.placement.clusters: fixed counts add up to 4, above spec.job.instanceCount 3"},
		{func() *pelotonv1.FederatedServiceSpec {
			s := serviceSpec("x", 3, 1)
			s.Job.Type = pelotonv1.JobType_BATCH
			return s
		}(), codes.InvalidArgument, "spec.job.type: a federated service is a SERVICE or DAEMON job, not BATCH"},
		{func() *pelotonv1.FederatedServiceSpec {
			s := serviceSpec("x", 3, 1)
			s.Job.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{1: {}}
			return s
		}(), codes.InvalidArgument, "spec.job.instanceSpecs: per-instance overrides cannot follow instances across clusters"},
		{&pelotonv1.FederatedServiceSpec{}, codes.InvalidArgument, "spec.job: required"},
	}
	for _, b := range bad {
		_, err := f.Services().CreateService(ctxT(t), b.spec, "")
		if status.Code(err) != b.code || !contains(err, b.msg) {
			t.Errorf("create %v: %v, want %s %q", b.spec.GetPlacement(), err, b.code, b.msg)
		}
	}
	if l, _, _ := f.Services().ListServices("", 0, ""); len(l) != 0 {
		t.Fatalf("refused creates left %d services", len(l))
	}

	// 12 instances: 3 fixed in c, the 9 left 1:2 over a and the west
	// selector's b (c is named already, so the selector may not take it).
	spec := serviceSpec("web", 12, 3, &pelotonv1.ClusterShare{Name: "c", Count: 3}, &pelotonv1.ClusterShare{Name: "a", Weight: 1},
		&pelotonv1.ClusterShare{Name: "b", Weight: 2})
	svc, err := f.Services().CreateService(ctxT(t), spec, "svc-1")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.Services().CreateService(ctxT(t), spec, "svc-1"); err != nil || again.Id != svc.Id {
		t.Fatalf("retry with the same request id: %v %v, want %s", again.GetId(), err, svc.Id)
	}
	want := map[string][2]uint32{"a": {3, 1}, "b": {6, 1}, "c": {3, 1}} // instances, budget
	for _, p := range svc.Clusters {
		if w := want[p.Cluster]; p.Desired != w[0] || p.MaxUnavailable != w[1] {
			t.Errorf("cluster %s: %d instances, budget %d; want %v", p.Cluster, p.Desired, p.MaxUnavailable, w)
		}
	}
	running := func(n uint32) func() error {
		return func() error {
			s, err := f.Services().GetService(svc.Id)
			if err != nil {
				return err
			}
			if s.Running != n || s.Desired != 12 {
				return fmt.Errorf("%d of %d running: %v", s.Running, s.Desired, s.Clusters)
			}
			return nil
		}
	}
	testutil.Eventually(t, 30*time.Second, "12 instances running", running(12))
	cur, _ := f.Services().GetService(svc.Id)
	for _, s := range stacks {
		j, err := partJob(t, s, cur)
		if err != nil {
			t.Fatal(err)
		}
		if j.Spec.InstanceCount != want[s.name][0] || j.Spec.Labels[federation.LabelFederatedService] != svc.Id ||
			j.Spec.Sla.MaximumUnavailableInstances != want[s.name][1] || j.Spec.Type != pelotonv1.JobType_SERVICE {
			t.Errorf("cluster %s job: %d instances, labels %v, sla %v", s.name, j.Spec.InstanceCount, j.Spec.Labels, j.Spec.Sla)
		}
	}

	// Drift: b's job is cancelled there, a's is scaled there. b's part is
	// made again (a new job), a's set back to 3.
	bJob, _ := partJob(t, stacks[1], cur)
	if _, err := stacks[1].cli.Jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: bJob.Id}); err != nil {
		t.Fatal(err)
	}
	aJob, _ := partJob(t, stacks[0], cur)
	// A scale or update there is refused, naming the service: the
	// federation would undo it.
	_, err = stacks[0].cli.Jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: aJob.Id, InstanceCount: 1})
	wantRefusal := "job " + aJob.Id + " belongs to federated service " + svc.Id
	if status.Code(err) != codes.FailedPrecondition || !contains(err, wantRefusal) || !contains(err, "peloton fed service update "+svc.Id) {
		t.Fatalf("cluster-side scale of a service's job: %v, want FailedPrecondition %q", err, wantRefusal)
	}
	_, err = stacks[0].cli.Updates.CreateUpdate(ctxT(t), &pelotonv1.CreateUpdateRequest{JobId: aJob.Id, Spec: aJob.Spec})
	if status.Code(err) != codes.FailedPrecondition || !contains(err, wantRefusal) {
		t.Fatalf("cluster-side update of a service's job: %v, want FailedPrecondition %q", err, wantRefusal)
	}
	// One that gets through anyway (here: the federation's call key, as an
	// admin might send it) is set back.
	forced := metadata.AppendToOutgoingContext(ctxT(t), sla.FederationCallKey, svc.Id)
	if _, err := stacks[0].cli.Jobs.ScaleJob(forced, &pelotonv1.ScaleJobRequest{JobId: aJob.Id, InstanceCount: 1}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the drifted parts repaired", func() error {
		s, err := f.Services().GetService(svc.Id)
		if err != nil {
			return err
		}
		b, err := partJob(t, stacks[1], s)
		if err != nil {
			return err
		}
		if b.Id == bJob.Id {
			return fmt.Errorf("b's part is still the cancelled job %s (%s)", b.Id, b.Status.State)
		}
		a, err := partJob(t, stacks[0], s)
		if err != nil {
			return err
		}
		if a.Spec.InstanceCount != 3 {
			return fmt.Errorf("a's job has %d instances", a.Spec.InstanceCount)
		}
		return running(12)()
	})

	// A restart of the federation forgets nothing.
	f.Close()
	f = startFederation(t, e)
	got, err := f.Services().GetService(svc.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Desired != 12 || len(got.Clusters) != 3 || !proto.Equal(got.Spec, svc.Spec) {
		t.Fatalf("after a restart: %v", got)
	}
	testutil.Eventually(t, 30*time.Second, "12 instances running after the restart", running(12))

	// Delete: every part's job is stopped and deleted, then the service
	// is gone.
	last, _ := f.Services().GetService(svc.Id)
	if err := f.Services().DeleteService(ctxT(t), svc.Id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the deleted service forgotten", func() error {
		if _, err := f.Services().GetService(svc.Id); status.Code(err) != codes.NotFound {
			return fmt.Errorf("service still there: %v", err)
		}
		return nil
	})
	for _, s := range stacks {
		p := last.Clusters[0]
		for _, q := range last.Clusters {
			if q.Cluster == s.name {
				p = q
			}
		}
		if _, err := s.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: p.ClusterJobId}); status.Code(err) != codes.NotFound {
			t.Errorf("cluster %s still has job %s: %v", s.name, p.ClusterJobId, err)
		}
	}
	if _, err := f.Services().GetService(""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("get with no id: %v", err)
	}
	if err := f.Services().DeleteService(context.Background(), "nope"); status.Code(err) != codes.NotFound {
		t.Errorf("delete unknown: %v", err)
	}
}

// waitRollout waits until the service's current rollout is in state want.
func waitRollout(t *testing.T, f *federation.Federation, id string, want pelotonv1.RolloutState) *pelotonv1.FederatedService {
	t.Helper()
	var got *pelotonv1.FederatedService
	testutil.Eventually(t, 90*time.Second, "the rollout's end", func() error {
		s, err := f.Services().GetService(id)
		if err != nil {
			return err
		}
		got = s
		if r := s.Rollout; r == nil || r.State != want {
			return fmt.Errorf("rollout %v, want %s", r, want)
		}
		return nil
	})
	return got
}

// TestFederatedServiceRollout: an update rolls out cluster by cluster,
// the canary first; a paused rollout waits and resumes; a new count is
// split in proportion; a cluster that refuses its part fails the rollout
// and, with rollback on failure, the clusters already updated go back to
// the previous spec; the controls refuse what the state does not allow.
func TestFederatedServiceRollout(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, nil)
	}
	spec := serviceSpec("web", 5, 3, &pelotonv1.ClusterShare{Name: "a", Weight: 2}, &pelotonv1.ClusterShare{Name: "b", Weight: 2},
		&pelotonv1.ClusterShare{Name: "c", Weight: 1})
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	id := svc.Id
	testutil.Eventually(t, 30*time.Second, "5 instances running", func() error {
		s, _ := f.Services().GetService(id)
		if s.Running != 5 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutRollback); status.Code(err) != codes.FailedPrecondition || !contains(err, "has no rollout") {
		t.Errorf("rollback with no rollout: %v", err)
	}
	rollout := &pelotonv1.RolloutSpec{ParallelClusters: 2, Update: &pelotonv1.UpdateSpec{BatchSize: 2, MinReadySeconds: 1}}
	commandOf := func(s *stack, cur *pelotonv1.FederatedService) string {
		j, err := partJob(t, s, cur)
		if err != nil {
			return err.Error()
		}
		return j.Spec.DefaultSpec.Command[1]
	}

	// v2: a new command; c (the smallest part) is the canary.
	v2 := proto.Clone(spec.Job).(*pelotonv1.JobSpec)
	v2.DefaultSpec.Command = []string{"sleep", "3601"}
	up, err := f.Services().UpdateService(ctxT(t), id, v2, nil, rollout, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := up.Rollout; r.Steps[0].Cluster != "c" || r.FromVersion != 1 || r.ToVersion != 2 || up.SpecVersion != 2 {
		t.Fatalf("rollout %v", r)
	}
	if _, err := f.Services().UpdateService(ctxT(t), id, v2, nil, rollout, 0); status.Code(err) != codes.FailedPrecondition || !contains(err, "has rollout 1") {
		t.Errorf("second update while rolling: %v", err)
	}
	done := waitRollout(t, f, id, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED)
	var canaryEnd, othersStart time.Time
	for _, st := range done.Rollout.Steps {
		if st.Cluster == "c" {
			canaryEnd = st.EndTime.AsTime()
		} else if s := st.StartTime.AsTime(); othersStart.IsZero() || s.Before(othersStart) {
			othersStart = s
		}
	}
	if othersStart.Before(canaryEnd) {
		t.Errorf("a cluster started at %s, before the canary ended at %s", othersStart, canaryEnd)
	}
	for _, s := range stacks {
		if got := commandOf(s, done); got != "3601" {
			t.Errorf("cluster %s runs %s after the rollout", s.name, got)
		}
	}
	for _, p := range done.Clusters {
		if p.SpecVersion != 2 {
			t.Errorf("cluster %s part at version %d", p.Cluster, p.SpecVersion)
		}
	}
	// Each part, and the whole, counts its instances healthy and updated.
	testutil.Eventually(t, 10*time.Second, "every part counting its instances healthy and updated", func() error {
		s, _ := f.Services().GetService(id)
		for _, p := range s.Clusters {
			if p.Healthy != p.Desired || p.Updated != p.Desired {
				return fmt.Errorf("cluster %s: %d healthy, %d updated of %d", p.Cluster, p.Healthy, p.Updated, p.Desired)
			}
		}
		if s.Healthy != 5 || s.Updated != 5 {
			return fmt.Errorf("service: %d healthy, %d updated of 5", s.Healthy, s.Updated)
		}
		return nil
	})

	// v3: ten instances, created paused; the parts grow 2:2:1.
	v3 := proto.Clone(v2).(*pelotonv1.JobSpec)
	v3.InstanceCount = 10
	paused := proto.Clone(rollout).(*pelotonv1.RolloutSpec)
	paused.StartPaused = true
	if _, err := f.Services().UpdateService(ctxT(t), id, v3, nil, paused, 1); status.Code(err) != codes.Aborted {
		t.Errorf("update at a stale version: %v", err)
	}
	if _, err := f.Services().UpdateService(ctxT(t), id, v3, nil, paused, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutPause); status.Code(err) != codes.FailedPrecondition || !contains(err, "is ROLLOUT_PAUSED") {
		t.Errorf("pause of a paused rollout: %v", err)
	}
	// A paused rollout starts nothing, however many passes of the rollout
	// loop look at it.
	waitPasses(t, "rollout", f.RolloutPasses, 5)
	if s, _ := f.Services().GetService(id); s.Rollout.Steps[0].State != pelotonv1.RolloutStepState_STEP_PENDING {
		t.Fatalf("a paused rollout started a step: %v", s.Rollout)
	}
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutResume); err != nil {
		t.Fatal(err)
	}
	done = waitRollout(t, f, id, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED)
	for _, p := range done.Clusters {
		if want := map[string]uint32{"a": 4, "b": 4, "c": 2}[p.Cluster]; p.Desired != want {
			t.Errorf("cluster %s: %d instances, want %d", p.Cluster, p.Desired, want)
		}
	}
	testutil.Eventually(t, 30*time.Second, "10 instances running", func() error {
		s, _ := f.Services().GetService(id)
		if s.Running != 10 {
			return fmt.Errorf("%d of 10 running", s.Running)
		}
		return nil
	})

	// v4 with rollback on failure, a then b: b's job has an update of its
	// own under way, so b refuses; a, updated already, goes back to v3.
	bJob, _ := partJob(t, stacks[1], done)
	held := proto.Clone(bJob.Spec).(*pelotonv1.JobSpec)
	held.DefaultSpec.Command = []string{"sleep", "7"}
	// (Made with the federation's call key: a cluster refuses anyone
	// else's update of a service's job.)
	asFed := metadata.AppendToOutgoingContext(ctxT(t), sla.FederationCallKey, id)
	own, err := stacks[1].cli.Updates.CreateUpdate(asFed, &pelotonv1.CreateUpdateRequest{JobId: bJob.Id, Spec: held,
		UpdateSpec: &pelotonv1.UpdateSpec{StartPaused: true}})
	if err != nil {
		t.Fatal(err)
	}
	v4 := proto.Clone(v3).(*pelotonv1.JobSpec)
	v4.DefaultSpec.Command = []string{"sleep", "3602"}
	failing := proto.Clone(rollout).(*pelotonv1.RolloutSpec)
	failing.Order, failing.RollbackOnFailure, failing.ParallelClusters = []string{"a", "b", "c"}, true, 1
	if _, err := f.Services().UpdateService(ctxT(t), id, v4, nil, failing, 0); err != nil {
		t.Fatal(err)
	}
	back := waitRollout(t, f, id, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK)
	steps := map[string]*pelotonv1.RolloutStep{}
	for _, st := range back.Rollout.Steps {
		steps[st.Cluster] = st
	}
	if steps["a"].State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK || steps["a"].RollbackUpdateId == "" ||
		steps["b"].State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK || steps["c"].State != pelotonv1.RolloutStepState_STEP_PENDING {
		t.Errorf("steps after the rollback: %v", back.Rollout.Steps)
	}
	if back.SpecVersion != 3 || commandOf(stacks[0], back) != "3601" || commandOf(stacks[2], back) != "3601" {
		t.Errorf("after the rollback: version %d, a runs %s, c runs %s", back.SpecVersion, commandOf(stacks[0], back), commandOf(stacks[2], back))
	}
	if len(back.History) != 2 || back.History[0].Id != 2 {
		t.Errorf("history %v", back.History)
	}
	// The update made in b behind the federation's back is undone once
	// it is out of the way.
	if _, err := stacks[1].cli.Updates.AbortUpdate(ctxT(t), &pelotonv1.AbortUpdateRequest{UpdateId: own.Update.Id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the new command in cluster b", func() error {
		s, _ := f.Services().GetService(id)
		if got := commandOf(stacks[1], s); got != "3601" {
			return fmt.Errorf("b's job runs %s", got)
		}
		return nil
	})

	// Abort: a paused rollout stops for good; a new update may follow.
	if _, err := f.Services().UpdateService(ctxT(t), id, v4, nil, paused, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutAbort); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutResume); status.Code(err) != codes.FailedPrecondition || !contains(err, "is ROLLOUT_ABORTED") {
		t.Errorf("resume of an aborted rollout: %v", err)
	}
	bad := proto.Clone(v4).(*pelotonv1.JobSpec)
	bad.Pool = "/other"
	if _, err := f.Services().UpdateService(ctxT(t), id, bad, nil, nil, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "job.pool: cannot change") {
		t.Errorf("pool change: %v", err)
	}
	bad = proto.Clone(v4).(*pelotonv1.JobSpec)
	bad.InstanceCount = 2
	if _, err := f.Services().UpdateService(ctxT(t), id, bad, nil, nil, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "job.instanceCount: 2 is fewer than the service's 3 clusters") {
		t.Errorf("too few instances: %v", err)
	}
	if _, err := f.Services().UpdateService(ctxT(t), id, v4, nil, &pelotonv1.RolloutSpec{Order: []string{"zz"}}, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "rollout.order[0]") {
		t.Errorf("unknown cluster in the order: %v", err)
	}
}

// TestFederatedServiceFailover: a cluster stopped past the toleration has
// its parts run by the other clusters; when it comes back, a service with
// moveBack runs there again and the extra instances go, and one without
// keeps them where they went and its job there is removed.
func TestFederatedServiceFailover(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, nil)
	}
	create := func(name string, moveBack bool, budget uint32) string {
		spec := serviceSpec(name, 6, budget)
		spec.Placement.Failover = &pelotonv1.FailoverPolicy{TolerationSeconds: 1, MoveBack: moveBack}
		svc, err := f.Services().CreateService(ctxT(t), spec, "")
		if err != nil {
			t.Fatal(err)
		}
		return svc.Id
	}
	// back's budget of 3 is 1 in each cluster; stay's of 2 leaves c none.
	back, stay := create("back", true, 3), create("stay", false, 2)
	parts := func(id string, want map[string]uint32, running uint32) func() error {
		return func() error {
			s, err := f.Services().GetService(id)
			if err != nil {
				return err
			}
			got := map[string]uint32{}
			for _, p := range s.Clusters {
				if !p.FailedOver {
					got[p.Cluster] = p.Desired
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || s.Running < running {
				return fmt.Errorf("service %s: parts %v running %d, want %v running %d: %v; their jobs: %s", s.Spec.Job.Name, got, s.Running, want, running, s.Clusters, partJobs(stacks, s))
			}
			return nil
		}
	}
	even := map[string]uint32{"a": 2, "b": 2, "c": 2}
	testutil.Eventually(t, 30*time.Second, "the even split of the service moving back", parts(back, even, 6))
	testutil.Eventually(t, 30*time.Second, "the even split of the service staying", parts(stay, even, 6))

	stacks[2].stop(t)
	moved := map[string]uint32{"a": 3, "b": 3}
	testutil.Eventually(t, 30*time.Second, "the split of the service moving back without c", parts(back, moved, 6))
	testutil.Eventually(t, 30*time.Second, "the split of the service staying without c", parts(stay, moved, 6))
	for _, id := range []string{back, stay} {
		s, _ := f.Services().GetService(id)
		for _, p := range s.Clusters {
			if p.Cluster != "c" && p.Covering["c"] != 1 {
				t.Errorf("service %s: part %s covers %v, want 1 of c", s.Spec.Job.Name, p.Cluster, p.Covering)
			}
		}
		// Covering for c, a takes c's share of the budget (3 over a: 3
		// and b: 3 is 2 and 1, the odd one to the first by name).
		wantBudget := map[string]uint32{"back": 2, "stay": 1}[s.Spec.Job.Name]
		testutil.Eventually(t, 20*time.Second, "the part's job in cluster a resized, with its budget", func() error {
			s, _ := f.Services().GetService(s.Id)
			j, err := partJob(t, stacks[0], s)
			if err != nil || j.Spec.InstanceCount != 3 || j.Spec.GetSla().GetMaximumUnavailableInstances() != wantBudget || partOf(s, "a").MaxUnavailable != wantBudget {
				return fmt.Errorf("a's job of %s: %v instances, budget %d (%v, %v)", s.Spec.Job.Name, j.GetSpec().GetInstanceCount(), j.GetSpec().GetSla().GetMaximumUnavailableInstances(), err, j.GetStatus())
			}
			return nil
		})
	}

	// c comes back (a new process, registered anew on the same etcd).
	c := startStack(t, e.Endpoints(), "c", 2)
	if _, err := f.Register(ctxT(t), &pelotonv1.RegisterClusterRequest{Name: "c", Endpoint: c.addr, Replace: true}); err != nil {
		t.Fatal(err)
	}
	// Under a loaded machine (the whole suite beside it) the move back,
	// which waits for c to be seen ready again, took just over a minute.
	testutil.Eventually(t, 2*60*time.Second, "the service moving back split evenly again", parts(back, even, 6))
	testutil.Eventually(t, 30*time.Second, "a's budget back to its share", func() error {
		s, _ := f.Services().GetService(back)
		j, err := partJob(t, stacks[0], s)
		if err != nil || j.Spec.GetSla().GetMaximumUnavailableInstances() != 1 || partOf(s, "a").MaxUnavailable != 1 {
			return fmt.Errorf("a's job: budget %d, part %v (%v)", j.GetSpec().GetSla().GetMaximumUnavailableInstances(), partOf(s, "a"), err)
		}
		return nil
	})
	testutil.Eventually(t, 2*60*time.Second, "the staying service's parts", func() error {
		s, err := f.Services().GetService(stay)
		if err != nil {
			return err
		}
		if len(s.Clusters) != 2 || s.Desired != 6 {
			return fmt.Errorf("stay: %v", s.Clusters)
		}
		return parts(stay, moved, 6)()
	})
}

// TestGlobalSLA: clusters that ask the federation's global evaluator
// keep a federated service's budget across clusters: with a budget of 1
// over two clusters, a kill in one refuses a kill in the other (each
// cluster's own share would allow both). When the federation cannot be
// reached, a cluster decides on its share.
func TestGlobalSLA(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	f := startFederation(t, e)
	gs, lis, withGlobalSLA := serveGlobalSLA(t, f)
	a := startStackWith(t, e.Endpoints(), "a", 1, nil, withGlobalSLA("a"))
	b := startStackWith(t, e.Endpoints(), "b", 1, nil, withGlobalSLA("b"))
	register(t, f, a, nil)
	register(t, f, b, nil)
	svc, err := f.Services().CreateService(ctxT(t), serviceSpec("web", 2, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "2 instances running", func() error {
		s, _ := f.Services().GetService(svc.Id)
		if s.Running != 2 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
	cur, _ := f.Services().GetService(svc.Id)
	aJob, _ := partJob(t, a, cur)
	bJob, _ := partJob(t, b, cur)
	// A grant whose holder cannot be recorded (not UTF-8) is refused,
	// and nothing of it stays: not in memory, not in the store.
	if _, err := f.SLA().RequestDisruption(ctxT(t), &pelotonv1.RequestDisruptionRequest{Cluster: "a", JobId: aJob.Id,
		Instances: []uint32{0}, Holder: "drain/h\xff", TtlSeconds: 60}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a grant for a holder that is not UTF-8: %v, want InvalidArgument", err)
	}
	if n, per, _ := f.SLA().SLAView(svc.Id); n != 0 {
		t.Fatalf("after the refused grant the federation counts %d unavailable (%v), want 0", n, per)
	}
	if _, err := a.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: aJob.Id, InstanceId: 0}); err != nil {
		t.Fatalf("the first kill: %v", err)
	}
	if n, per, _ := f.SLA().SLAView(svc.Id); n != 1 || per["a"] != 1 {
		t.Errorf("the federation counts %d unavailable (%v), want 1 in a", n, per)
	}
	_, err = b.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: bJob.Id, InstanceId: 0})
	if status.Code(err) != codes.FailedPrecondition || !contains(err, "1 of its budget of 1 instances are unavailable across its clusters (a: 1)") {
		t.Fatalf("a kill in b over the global budget: %v", err)
	}
	// The federation's evaluator away: each cluster decides on its share
	// of the budget, rounded down so that the shares add up to no more
	// than the budget: a's is 1, b's 0, so b refuses, and both say that
	// they fall back, in their job's status and so in the service's.
	gs.Stop()
	_, err = b.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: bJob.Id, InstanceId: 0})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a kill in b on its share of 0 with the federation away: %v", err)
	}
	got, err := b.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: bJob.Id})
	if err != nil || !got.Job.Status.SlaFallback || !strings.Contains(got.Job.Status.Message, "share of the service's budget (0)") {
		t.Fatalf("b's job while the federation is away: %v %v", got.GetJob().GetStatus(), err)
	}
	testutil.Eventually(t, 30*time.Second, "the service showing b on its fallback share of 0", func() error {
		s, _ := f.Services().GetService(svc.Id)
		for _, p := range s.Clusters {
			if p.Cluster == "b" && p.SlaFallback && p.MaxUnavailable == 0 {
				return nil
			}
		}
		return fmt.Errorf("the service does not show b falling back on a share of 0: %v", s.Clusters)
	})

	// Back on the same address: b's next call reaches it, and b says so.
	lis2, err := net.Listen("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	gs2 := federation.NewServer(f, logger()).GRPCServer()
	go func() { _ = gs2.Serve(lis2) }()
	t.Cleanup(gs2.Stop)
	testutil.Eventually(t, 30*time.Second, "b asking the federation again once it is back", func() error {
		_, err := b.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: bJob.Id, InstanceId: 0})
		// The federation answers: granted (a's instance is back) or
		// refused over the global budget, never on b's share of 0.
		if err != nil && !contains(err, "across its clusters") {
			return fmt.Errorf("a kill in b with the federation back: %v", err)
		}
		got, err := b.cli.Jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: bJob.Id})
		if err != nil || got.Job.Status.SlaFallback {
			return fmt.Errorf("b's job with the federation back: %v %v", got.GetJob().GetStatus(), err)
		}
		return nil
	})
}

// partJobs says how each of service s's parts' jobs stands in its cluster,
// for a failure message: state, task counts and message.
func partJobs(stacks []*stack, s *pelotonv1.FederatedService) string {
	var out []string
	for _, p := range s.Clusters {
		for _, st := range stacks {
			if st.name != p.Cluster || p.ClusterJobId == "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := st.cli.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: p.ClusterJobId})
			cancel()
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", p.Cluster, err))
				continue
			}
			js := resp.Job.Status
			out = append(out, fmt.Sprintf("%s: %s %v %q", p.Cluster, js.State, js.TaskCounts, js.Message))
		}
	}
	return strings.Join(out, "; ")
}

// TestGlobalSLACountsGrantsMadeOnAShare: instances a cluster reports held
// by grants it made on its own share (while it could not reach the
// federation) count against the service's budget like the federation's
// own grants, named in a refusal, until a report leaves them out.
func TestGlobalSLACountsGrantsMadeOnAShare(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	f := startFederation(t, e)
	a := startStack(t, e.Endpoints(), "a", 1)
	b := startStack(t, e.Endpoints(), "b", 1)
	register(t, f, a, nil)
	register(t, f, b, nil)
	svc, err := f.Services().CreateService(ctxT(t), serviceSpec("web", 2, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	var aJob, bJob *pelotonv1.Job
	testutil.Eventually(t, 30*time.Second, "both parts made", func() error {
		cur, _ := f.Services().GetService(svc.Id)
		for _, p := range cur.Clusters {
			if p.ClusterJobId == "" {
				return fmt.Errorf("part %s has no job yet", p.Cluster)
			}
		}
		aJob, _ = partJob(t, a, cur)
		bJob, _ = partJob(t, b, cur)
		return nil
	})
	f.SLA().ReportUnavailable("a", aJob.Id, nil, []uint32{0})
	if n, per, _ := f.SLA().SLAView(svc.Id); n != 1 || per["a"] != 1 {
		t.Fatalf("with a's grant reported: %d unavailable (%v), want 1 in a", n, per)
	}
	_, err = f.SLA().RequestDisruption(ctxT(t), &pelotonv1.RequestDisruptionRequest{Cluster: "b", JobId: bJob.Id,
		Instances: []uint32{0}, Holder: "drain/h", TtlSeconds: 60})
	if status.Code(err) != codes.FailedPrecondition || !contains(err, "(a: 1)") {
		t.Fatalf("b's disruption over the budget a's own grant holds: %v", err)
	}
	f.SLA().ReportUnavailable("a", aJob.Id, nil, nil)
	if _, err := f.SLA().RequestDisruption(ctxT(t), &pelotonv1.RequestDisruptionRequest{Cluster: "b", JobId: bJob.Id,
		Instances: []uint32{0}, Holder: "drain/h", TtlSeconds: 60}); err != nil {
		t.Fatalf("b's disruption once a's grant is over: %v", err)
	}
}

// serveGlobalSLA serves f's API (its global SLA evaluator among it) on a
// loopback port until the test ends, and gives a stack option that makes a
// cluster named name ask it, as a federated cluster's stack does.
func serveGlobalSLA(t *testing.T, f *federation.Federation) (*grpc.Server, net.Listener, func(name string) func(*cluster.Config)) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := federation.NewServer(f, logger()).GRPCServer()
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	fc, err := client.NewFederation(lis.Addr().String(), client.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close() })
	return gs, lis, func(name string) func(*cluster.Config) {
		return func(c *cluster.Config) {
			c.SLA = fed.New(sla.NewLocal(nil), fc.SLA, name, logger())
			c.SLATimeout = 2 * time.Second
		}
	}
}
