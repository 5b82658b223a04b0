package federation_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// batchPoolInSync creates the global pool /batch and waits until every
// registered cluster holds its part.
func batchPoolInSync(t *testing.T, f *federation.Federation, cpu float64) {
	t.Helper()
	if _, err := f.Pools().CreatePool(ctxT(t), "/batch", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: cpu}}, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "/batch's parts in the clusters", func() error {
		p, err := f.Pools().GetPool("/batch")
		if err != nil {
			return err
		}
		for _, c := range p.Clusters {
			if !c.InSync || c.Status == nil {
				return fmt.Errorf("cluster %s not in sync: %s", c.Cluster, c.Message)
			}
		}
		return nil
	})
}

func longBatchJob(name string) *pelotonv1.FederatedJobSpec {
	return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: "/batch", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "3600"}, Resources: &pelotonv1.Resources{Cpu: 0.05, MemoryMb: 8}}}}
}

// clusterJobIDs waits until every federated job of ids has its cluster
// job id in f, and returns them.
func clusterJobIDs(t *testing.T, f *federation.Federation, ids []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	testutil.Eventually(t, 60*time.Second, "every job in its cluster", func() error {
		for _, id := range ids {
			j, err := f.Jobs().GetJob(id)
			if err != nil {
				return err
			}
			if j.ClusterJobId == "" {
				return fmt.Errorf("job %s is %s in %q: %s", id, j.DispatchState, j.Cluster, j.Message)
			}
			out[id] = j.ClusterJobId
		}
		return nil
	})
	return out
}

// clusterJobs lists the ids of the jobs a cluster holds.
func clusterJobs(t *testing.T, s *stack) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	token := ""
	for range 100 {
		resp, err := s.cli.Jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.Jobs {
			out[j.Id] = true
		}
		if token = resp.NextPageToken; token == "" {
			return out
		}
	}
	t.Fatal("ListJobs did not end within 100 pages")
	return nil
}

// TestDispatchNeverTwiceAcrossRestart: jobs created in a burst are sent to
// their cluster in batches; the federation stops in the middle of it
// (some jobs pending, some dispatched, some sent, some with their answer
// in flight) and starts again on the same store. Every job ends up in the
// cluster exactly once, under the cluster job id the federation holds.
func TestDispatchNeverTwiceAcrossRestart(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 4)
	f1, stop1 := runFederation(t, e, 2*time.Second, 10*time.Second)
	register(t, f1, a, nil)
	batchPoolInSync(t, f1, 20)

	const n = 60
	ids := make([]string, n)
	for i := range n {
		id, err := f1.Jobs().CreateJob(ctxT(t), longBatchJob(fmt.Sprintf("burst-%d", i)), fmt.Sprintf("burst-req-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	stop1()

	f2, _ := runFederation(t, e, 2*time.Second, 10*time.Second)
	got := clusterJobIDs(t, f2, ids)
	in := clusterJobs(t, a)
	seen := map[string]string{}
	for id, cid := range got {
		if other, ok := seen[cid]; ok {
			t.Errorf("jobs %s and %s share cluster job %s", other, id, cid)
		}
		seen[cid] = id
		if !in[cid] {
			t.Errorf("job %s: cluster job %s is not in the cluster", id, cid)
		}
	}
	if len(in) != n {
		t.Errorf("the cluster holds %d jobs for %d federated jobs: a create was carried out twice or lost", len(in), n)
	}
}

// TestDispatchLostAnswerIsAnsweredAgain: a create the cluster carried out
// but whose answer never reached the federation (here: made beforehand
// under the attempt's request id) is answered again when the federation
// sends it: the federation takes that job, and the cluster holds one.
func TestDispatchLostAnswerIsAnsweredAgain(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 2)
	f := startFederation(t, e)
	register(t, f, a, nil)
	batchPoolInSync(t, f, 10)
	if _, err := f.Cordon(ctxT(t), "a", true); err != nil {
		t.Fatal(err)
	}
	id, err := f.Jobs().CreateJob(ctxT(t), longBatchJob("lost"), "")
	if err != nil {
		t.Fatal(err)
	}
	waitPasses(t, "dispatcher", f.DispatchPasses, 2)
	j, err := f.Jobs().GetJob(id)
	if err != nil || j.DispatchState != pelotonv1.DispatchState_DISPATCH_PENDING {
		t.Fatalf("job for a cordoned cluster: %v %v, want pending", j, err)
	}
	// What the first attempt's create will be: attempt 1 of the job.
	pre, err := a.cli.Jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: j.Spec.Job, RequestId: "fed-" + id + "-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Cordon(ctxT(t), "a", false); err != nil {
		t.Fatal(err)
	}
	if got := clusterJobIDs(t, f, []string{id})[id]; got != pre.JobId {
		t.Errorf("the federation took cluster job %s, want %s (the create made before)", got, pre.JobId)
	}
	if in := clusterJobs(t, a); len(in) != 1 {
		t.Errorf("the cluster holds %d jobs, want 1", len(in))
	}
}

// TestDispatchRefusedItemEndsAlone: jobs sent to a cluster together, one
// of which the cluster refuses: the refused one ends with the cluster's
// words (the field, not the batch's item number), the other is created.
func TestDispatchRefusedItemEndsAlone(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStackWith(t, e.Endpoints(), "a", 2, nil, func(c *cluster.Config) { c.MaxInstances = 1 })
	f := startFederation(t, e)
	register(t, f, a, nil)
	batchPoolInSync(t, f, 10)
	// Cordoned while both are created, so both are dispatched in one pass.
	if _, err := f.Cordon(ctxT(t), "a", true); err != nil {
		t.Fatal(err)
	}
	two := longBatchJob("two")
	two.Job.InstanceCount = 2
	bad, err := f.Jobs().CreateJob(ctxT(t), two, "")
	if err != nil {
		t.Fatal(err)
	}
	good, err := f.Jobs().CreateJob(ctxT(t), longBatchJob("one"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Cordon(ctxT(t), "a", false); err != nil {
		t.Fatal(err)
	}
	clusterJobIDs(t, f, []string{good})
	testutil.Eventually(t, 30*time.Second, "the refused job done", func() error {
		j, err := f.Jobs().GetJob(bad)
		if err != nil {
			return err
		}
		if j.DispatchState != pelotonv1.DispatchState_DISPATCH_DONE || j.ClusterJobId != "" {
			return fmt.Errorf("refused job is %s in %q (%q): %s", j.DispatchState, j.Cluster, j.ClusterJobId, j.Message)
		}
		if want := "cluster a refused the job: spec.instanceCount: "; !strings.HasPrefix(j.Message, want) {
			return fmt.Errorf("message %q, want it to start %q", j.Message, want)
		}
		return nil
	})
	if in := clusterJobs(t, a); len(in) != 1 {
		t.Errorf("the cluster holds %d jobs, want 1", len(in))
	}
}
