package federation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
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
		}(), codes.InvalidArgument, "spec.job.type: a federated service is a SERVICE job, not BATCH"},
		{func() *pelotonv1.FederatedServiceSpec {
			s := serviceSpec("x", 3, 1)
			s.Job.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{1: {}}
			return s
		}(), codes.InvalidArgument, "spec.job.instanceSpecs: per-instance overrides cannot follow instances across clusters"},
		{&pelotonv1.FederatedServiceSpec{}, codes.InvalidArgument, "spec.job: required"},
	}
	for _, b := range bad {
		_, err := f.CreateService(ctxT(t), b.spec, "")
		if status.Code(err) != b.code || !contains(err, b.msg) {
			t.Errorf("create %v: %v, want %s %q", b.spec.GetPlacement(), err, b.code, b.msg)
		}
	}
	if l, _, _ := f.ListServices("", 0, ""); len(l) != 0 {
		t.Fatalf("refused creates left %d services", len(l))
	}

	// 12 instances: 3 fixed in c, the 9 left 1:2 over a and the west
	// selector's b (c is named already, so the selector may not take it).
	spec := serviceSpec("web", 12, 3, &pelotonv1.ClusterShare{Name: "c", Count: 3}, &pelotonv1.ClusterShare{Name: "a", Weight: 1},
		&pelotonv1.ClusterShare{Name: "b", Weight: 2})
	svc, err := f.CreateService(ctxT(t), spec, "svc-1")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.CreateService(ctxT(t), spec, "svc-1"); err != nil || again.Id != svc.Id {
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
			s, err := f.GetService(svc.Id)
			if err != nil {
				return err
			}
			if s.Running != n || s.Desired != 12 {
				return fmt.Errorf("%d of %d running: %v", s.Running, s.Desired, s.Clusters)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, running(12))
	cur, _ := f.GetService(svc.Id)
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
	if _, err := stacks[0].cli.Jobs.ScaleJob(ctxT(t), &pelotonv1.ScaleJobRequest{JobId: aJob.Id, InstanceCount: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		s, err := f.GetService(svc.Id)
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
	got, err := f.GetService(svc.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Desired != 12 || len(got.Clusters) != 3 || !proto.Equal(got.Spec, svc.Spec) {
		t.Fatalf("after a restart: %v", got)
	}
	eventually(t, 30*time.Second, running(12))

	// Delete: every part's job is stopped and deleted, then the service
	// is gone.
	last, _ := f.GetService(svc.Id)
	if err := f.DeleteService(ctxT(t), svc.Id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if _, err := f.GetService(svc.Id); status.Code(err) != codes.NotFound {
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
	if _, err := f.GetService(""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("get with no id: %v", err)
	}
	if err := f.DeleteService(context.Background(), "nope"); status.Code(err) != codes.NotFound {
		t.Errorf("delete unknown: %v", err)
	}
}
