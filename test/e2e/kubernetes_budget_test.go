package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestKubernetesServiceBudget: on the kubernetes backend, the whole stack
// gives a service a PodDisruptionBudget from its SLA when its pods are
// launched, updates it when an update changes only the SLA, and deletes it
// with the job; a batch job gets none.
func TestKubernetesServiceBudget(t *testing.T) {
	kc := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := kc.AddNodes(ctx, kubetest.NodeSpec{Prefix: "kwok", Count: 3, CPU: "4", Memory: "8Gi"}); err != nil {
		t.Fatal(err)
	}
	if err := kc.CreateNamespace(ctx, "peloton"); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, t.TempDir(), stackOpts{backend: "kubernetes", kube: cluster.KubeConfig{Kubeconfig: kc.Kubeconfig}})

	spec := &pelotonv1.JobSpec{Name: "kube-svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 3,
		Sla:         &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}}
	cr, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.JobId
	batch, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: &pelotonv1.JobSpec{Name: "kube-batch", Type: pelotonv1.JobType_BATCH,
		Pool: "/default", InstanceCount: 1, DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"true"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.waitTasks(id, "the service runs", time.Minute, allRunning(3))
	s.waitJob(batch.JobId, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)

	budgets := func(jobID string) []policyv1.PodDisruptionBudget {
		l, err := kc.Client.PolicyV1().PodDisruptionBudgets("peloton").List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + jobID})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	minAvailable := func(want int) func() error {
		return func() error {
			l := budgets(id)
			if len(l) != 1 || l[0].Spec.MinAvailable == nil || l[0].Spec.MinAvailable.IntValue() != want {
				return fmt.Errorf("budgets %+v; want one with minAvailable %d", l, want)
			}
			return nil
		}
	}
	testutil.Eventually(t, 30*time.Second, "the service's PodDisruptionBudget", minAvailable(2))
	if l := budgets(batch.JobId); len(l) != 0 {
		t.Errorf("the batch job has budgets %+v", l)
	}

	next := proto.Clone(spec).(*pelotonv1.JobSpec)
	next.Sla.MaximumUnavailableInstances = 2
	if _, err := s.updates.CreateUpdate(ctx, &pelotonv1.CreateUpdateRequest{JobId: id, Spec: next, UpdateSpec: &pelotonv1.UpdateSpec{}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the budget after an update of the SLA", minAvailable(1))

	if _, err := s.jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	s.waitJob(id, pelotonv1.JobState_JOB_KILLED, time.Minute)
	if _, err := s.jobs.DeleteJob(ctx, &pelotonv1.DeleteJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "no budget once the job is deleted", func() error {
		if l := budgets(id); len(l) != 0 {
			return fmt.Errorf("budgets %+v", l)
		}
		return nil
	})
}
