package federation_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestFederatedServiceOverrides: a share's override (command, env, labels)
// reaches only its cluster's job; the service shows which fields each part
// overrides; overrides that could not run are refused naming the
// override's field; the part's job stays at its version over many passes
// (an override is no drift); a change of override through an update rolls
// out, and only the overridden cluster's job changes; a rollback returns
// the old override.
func TestFederatedServiceOverrides(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 2), startStack(t, e.Endpoints(), "b", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, map[string]string{"region": map[string]string{"a": "east", "b": "west"}[s.name]})
	}
	west := map[string]string{"region": "west"}
	withOverride := func(o *pelotonv1.ClusterOverride) *pelotonv1.FederatedServiceSpec {
		spec := serviceSpec("web", 4, 2, &pelotonv1.ClusterShare{Name: "a", Weight: 1}, &pelotonv1.ClusterShare{Selector: west, Weight: 1, Override: o})
		spec.Job.DefaultSpec.Env = map[string]string{"MODE": "main", "KEEP": "1"}
		return spec
	}
	bad := []struct {
		o   *pelotonv1.ClusterOverride
		msg string
	}{
		{&pelotonv1.ClusterOverride{Resources: &pelotonv1.Resources{MemoryMb: 64}}, "spec.placement.clusters[1].override.resources.cpu: must be > 0"},
		{&pelotonv1.ClusterOverride{Resources: &pelotonv1.Resources{Cpu: 5000, MemoryMb: 64}}, "spec.placement.clusters[1].override.resources.cpu: asks for"},
		{&pelotonv1.ClusterOverride{Command: []string{""}}, "spec.placement.clusters[1].override.command"},
		{&pelotonv1.ClusterOverride{Env: map[string]string{"": "x"}}, "spec.placement.clusters[1].override.env"},
		{&pelotonv1.ClusterOverride{Labels: map[string]string{federation.LabelFederatedService: "x"}}, "spec.placement.clusters[1].override.labels"},
	}
	for _, b := range bad {
		if _, err := f.Services().CreateService(ctxT(t), withOverride(b.o), ""); status.Code(err) != codes.InvalidArgument || !contains(err, b.msg) {
			t.Errorf("override %v: %v, want %q", b.o, err, b.msg)
		}
	}

	spec := withOverride(&pelotonv1.ClusterOverride{Command: []string{"sleep", "3602"}, Env: map[string]string{"MODE": "canary"},
		Labels: map[string]string{"tier": "west"}, Image: "web:canary", Resources: &pelotonv1.Resources{Cpu: 0.25, MemoryMb: 32}})
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "4 instances running", func() error {
		s, err := f.Services().GetService(svc.Id)
		if err != nil {
			return err
		}
		if s.Running != 4 {
			return fmt.Errorf("%d running: %v", s.Running, s.Clusters)
		}
		return nil
	})
	cur, _ := f.Services().GetService(svc.Id)
	ja, err := partJob(t, stacks[0], cur)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := partJob(t, stacks[1], cur)
	if err != nil {
		t.Fatal(err)
	}
	if c, env := ja.Spec.DefaultSpec.Command, ja.Spec.DefaultSpec.Env; c[1] != "3600" || env["MODE"] != "main" || ja.Spec.Labels["tier"] != "" ||
		ja.Spec.DefaultSpec.Resources.GetCpu() != 0.5 {
		t.Errorf("cluster a (no override): command %v env %v labels %v", c, env, ja.Spec.Labels)
	}
	if c, env := jb.Spec.DefaultSpec.Command, jb.Spec.DefaultSpec.Env; c[1] != "3602" || env["MODE"] != "canary" || env["KEEP"] != "1" ||
		jb.Spec.Labels["tier"] != "west" || jb.Spec.Labels[federation.LabelFederatedService] != svc.Id ||
		jb.Spec.DefaultSpec.Image != "web:canary" || jb.Spec.DefaultSpec.Resources.GetCpu() != 0.25 {
		t.Errorf("cluster b (override): command %v env %v labels %v image %q resources %v", c, env, jb.Spec.Labels, jb.Spec.DefaultSpec.Image, jb.Spec.DefaultSpec.Resources)
	}
	for _, p := range cur.Clusters {
		want := map[string][]string{"b": {"defaultSpec.command", "defaultSpec.env.MODE", "defaultSpec.image", "defaultSpec.resources", "labels.tier"}}[p.Cluster]
		if !reflect.DeepEqual(p.Overridden, want) || (want != nil) != (p.Override != nil) {
			t.Errorf("part %s: overridden %v (override %v), want %v", p.Cluster, p.Overridden, p.Override, want)
		}
	}

	// An override is not drift: over many worker passes neither job moves
	// from the version it was made at, nor does the part's record.
	at := map[string][2]uint64{}
	for i, s := range stacks {
		j := []*pelotonv1.Job{ja, jb}[i]
		at[s.name] = [2]uint64{j.Status.SpecVersion, partOf(cur, s.name).ClusterSpecVersion}
		waitPasses(t, "worker of "+s.name, func() uint64 { return f.WorkerPasses(s.name) }, 5)
	}
	later, _ := f.Services().GetService(svc.Id)
	for _, s := range stacks {
		j, err := partJob(t, s, later)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]uint64{j.Status.SpecVersion, partOf(later, s.name).ClusterSpecVersion}; got != at[s.name] {
			t.Errorf("cluster %s: job/part spec version %v after 5 passes, was %v: the override was taken for drift", s.name, got, at[s.name])
		}
	}

	// Overrides may change in an update; where the service runs may not.
	moved := proto.Clone(spec.Placement).(*pelotonv1.ServicePlacement)
	moved.Clusters[0].Weight = 3
	if _, err := f.Services().UpdateService(ctxT(t), svc.Id, spec.Job, moved, nil, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "placement: an update may change the clusters' overrides only") {
		t.Errorf("update moving instances: %v", err)
	}
	badPl := proto.Clone(spec.Placement).(*pelotonv1.ServicePlacement)
	badPl.Clusters[1].Override.Resources = &pelotonv1.Resources{Cpu: 1}
	if _, err := f.Services().UpdateService(ctxT(t), svc.Id, spec.Job, badPl, nil, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "placement.clusters[1].override.resources.memoryMb: must be > 0") {
		t.Errorf("update with a bad override: %v", err)
	}
	next := proto.Clone(spec.Placement).(*pelotonv1.ServicePlacement)
	next.Clusters[1].Override.Command = []string{"sleep", "3603"}
	up, err := f.Services().UpdateService(ctxT(t), svc.Id, spec.Job, next, &pelotonv1.RolloutSpec{Order: []string{"b", "a"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if up.SpecVersion != 2 || up.Rollout.Steps[0].Cluster != "b" {
		t.Fatalf("update: version %d, rollout %v", up.SpecVersion, up.Rollout)
	}
	done := waitRollout(t, f, svc.Id, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED)
	ja, _ = partJob(t, stacks[0], done)
	jb, _ = partJob(t, stacks[1], done)
	if ja.GetSpec().GetDefaultSpec().GetCommand()[1] != "3600" || jb.GetSpec().GetDefaultSpec().GetCommand()[1] != "3603" {
		t.Errorf("after the rollout: a runs %v, b runs %v", ja.GetSpec().GetDefaultSpec().GetCommand(), jb.GetSpec().GetDefaultSpec().GetCommand())
	}
	if got := done.Spec.Placement.Clusters[1].Override.Command; !slices.Equal(got, []string{"sleep", "3603"}) {
		t.Errorf("the service's placement keeps override command %v", got)
	}

	// A rollback returns the old override with the old spec.
	if _, err := f.Services().ControlRollout(ctxT(t), svc.Id, federation.RolloutRollback); err != nil {
		t.Fatal(err)
	}
	back := waitRollout(t, f, svc.Id, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK)
	jb, _ = partJob(t, stacks[1], back)
	if got := jb.GetSpec().GetDefaultSpec().GetCommand(); !slices.Equal(got, []string{"sleep", "3602"}) {
		t.Errorf("after the rollback b runs %v", got)
	}
	if got := back.Spec.Placement.Clusters[1].Override.Command; back.SpecVersion != 1 || !slices.Equal(got, []string{"sleep", "3602"}) {
		t.Errorf("after the rollback: spec version %d, override command %v", back.SpecVersion, got)
	}
}

func partOf(svc *pelotonv1.FederatedService, cluster string) *pelotonv1.ServiceCluster {
	for _, p := range svc.Clusters {
		if p.Cluster == cluster {
			return p
		}
	}
	return &pelotonv1.ServiceCluster{}
}

// TestFederatedDaemon: a DAEMON service runs one instance on every host of
// each cluster its placement selects (and none elsewhere), each part a
// DAEMON job with the whole budget; weights, counts and failover are
// refused naming the field; an update goes cluster by cluster.
func TestFederatedDaemon(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 1), startStack(t, e.Endpoints(), "b", 3), startStack(t, e.Endpoints(), "c", 2)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, map[string]string{"region": map[string]string{"a": "east", "b": "west", "c": "west"}[s.name]})
	}
	west := map[string]string{"region": "west"}
	daemon := func(shares ...*pelotonv1.ClusterShare) *pelotonv1.FederatedServiceSpec {
		spec := serviceSpec("agent", 0, 1, shares...)
		spec.Job.Type = pelotonv1.JobType_DAEMON
		return spec
	}
	bad := []struct {
		spec *pelotonv1.FederatedServiceSpec
		msg  string
	}{
		{daemon(&pelotonv1.ClusterShare{Selector: west, Weight: 1}), "spec.placement.clusters[0].weight"},
		{daemon(&pelotonv1.ClusterShare{Name: "b", Count: 2}), "spec.placement.clusters[0].count"},
		{func() *pelotonv1.FederatedServiceSpec {
			s := daemon(&pelotonv1.ClusterShare{Selector: west})
			s.Placement.Failover = &pelotonv1.FailoverPolicy{TolerationSeconds: 5}
			return s
		}(), "spec.placement.failover: does not apply to a DAEMON"},
		{func() *pelotonv1.FederatedServiceSpec {
			s := daemon(&pelotonv1.ClusterShare{Selector: west})
			s.Job.InstanceCount = 3
			return s
		}(), "spec.job.instanceCount: must be 0 or unset for a DAEMON"},
	}
	for _, b := range bad {
		if _, err := f.Services().CreateService(ctxT(t), b.spec, ""); status.Code(err) != codes.InvalidArgument || !contains(err, b.msg) {
			t.Errorf("create: %v, want %q", err, b.msg)
		}
	}

	spec := daemon(&pelotonv1.ClusterShare{Selector: west})
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Clusters) != 2 || svc.Clusters[0].Cluster != "b" || svc.Clusters[1].Cluster != "c" {
		t.Fatalf("parts %v, want b and c", svc.Clusters)
	}
	hosts := map[string]uint32{"b": 3, "c": 2}
	testutil.Eventually(t, 30*time.Second, "a daemon on every host of b and c", func() error {
		s, err := f.Services().GetService(svc.Id)
		if err != nil {
			return err
		}
		for _, p := range s.Clusters {
			if p.Running != hosts[p.Cluster] {
				return fmt.Errorf("cluster %s: %d running, want %d (%s)", p.Cluster, p.Running, hosts[p.Cluster], p.Message)
			}
		}
		if s.Running != 5 {
			return fmt.Errorf("%d running in all", s.Running)
		}
		return nil
	})
	cur, _ := f.Services().GetService(svc.Id)
	for _, s := range stacks[1:] {
		j, err := partJob(t, s, cur)
		if err != nil {
			t.Fatal(err)
		}
		if j.Spec.Type != pelotonv1.JobType_DAEMON || j.Spec.Sla.GetMaximumUnavailableInstances() != 1 {
			t.Errorf("cluster %s: job %s, sla %v", s.name, j.Spec.Type, j.Spec.Sla)
		}
	}
	waitPasses(t, "worker of b", func() uint64 { return f.WorkerPasses("b") }, 5)
	if s, _ := f.Services().GetService(svc.Id); partOf(s, "b").ClusterSpecVersion != partOf(cur, "b").ClusterSpecVersion || partOf(s, "b").Message != "" {
		t.Errorf("part b moved on its own: %v", partOf(s, "b"))
	}

	v2 := proto.Clone(spec.Job).(*pelotonv1.JobSpec)
	v2.DefaultSpec.Command = []string{"sleep", "3601"}
	bigger := proto.Clone(v2).(*pelotonv1.JobSpec)
	bigger.InstanceCount = 4
	if _, err := f.Services().UpdateService(ctxT(t), svc.Id, bigger, nil, nil, 0); status.Code(err) != codes.InvalidArgument || !contains(err, "job.instanceCount") {
		t.Errorf("update with a count: %v", err)
	}
	if _, err := f.Services().UpdateService(ctxT(t), svc.Id, v2, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	done := waitRollout(t, f, svc.Id, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED)
	steps := done.Rollout.Steps
	if len(steps) != 2 || steps[1].StartTime.AsTime().Before(steps[0].EndTime.AsTime()) {
		t.Errorf("steps not one cluster after the other: %v", steps)
	}
	for _, s := range stacks[1:] {
		j, err := partJob(t, s, done)
		if err != nil {
			t.Fatal(err)
		}
		if j.Spec.DefaultSpec.Command[1] != "3601" {
			t.Errorf("cluster %s runs %v after the rollout", s.name, j.Spec.DefaultSpec.Command)
		}
	}
	testutil.Eventually(t, 30*time.Second, "5 daemons running after the update", func() error {
		if s, _ := f.Services().GetService(svc.Id); s.Running != 5 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
}
