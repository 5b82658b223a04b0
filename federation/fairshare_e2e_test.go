package federation_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// restartableFederation runs the federation on e with a stop that may be
// called before the test's end (a restart). Its calls to the clusters
// have the default deadline: a create cut short by a tighter one on a
// loaded machine can end a job in its cluster, which this test, counting
// jobs, must not see.
func restartableFederation(t *testing.T, e *store.Embedded) (*federation.Federation, func()) {
	t.Helper()
	return runFederation(t, e, 2*time.Second, 10*time.Second)
}

// submit creates n jobs of pool named prefix0, prefix1, ... and returns
// their ids.
func submit(t *testing.T, f *federation.Federation, prefix, pool string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id, err := f.Jobs().CreateJob(ctxT(t), fairJob(fmt.Sprint(prefix, i), pool, 1), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// fairJob is a federated batch job of pool: n instances of 16 CPUs that
// run until killed.
func fairJob(name, pool string, n uint32) *pelotonv1.FederatedJobSpec {
	return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: name, Type: pelotonv1.JobType_BATCH, Pool: pool, InstanceCount: n,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "100000"}, Resources: &pelotonv1.Resources{Cpu: 16, MemoryMb: 64}}}}
}

// dispatchStates counts the jobs ids by dispatch state, and gives the
// message of one pending job.
func dispatchStates(t *testing.T, f *federation.Federation, ids []string) (map[pelotonv1.DispatchState]int, string) {
	t.Helper()
	n := map[pelotonv1.DispatchState]int{}
	msg := ""
	for _, id := range ids {
		j, err := f.Jobs().GetJob(id)
		if err != nil {
			t.Fatal(err)
		}
		n[j.DispatchState]++
		if j.DispatchState == pelotonv1.DispatchState_DISPATCH_PENDING {
			msg = j.Message
		}
	}
	return n, msg
}

// wantStates waits until ids are dispatched and pending as wanted, the
// pending ones (if any) saying why containing reason.
func wantStates(t *testing.T, f *federation.Federation, what string, ids []string, dispatched, pending int, reason string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() error {
		n, msg := dispatchStates(t, f, ids)
		if n[pelotonv1.DispatchState_DISPATCHED] != dispatched || n[pelotonv1.DispatchState_DISPATCH_PENDING] != pending {
			var each []string
			for _, id := range ids {
				j, _ := f.Jobs().GetJob(id)
				each = append(each, fmt.Sprintf("%s %s in %q: %s", j.GetSpec().GetJob().GetName(), j.GetDispatchState(), j.GetCluster(), j.GetMessage()))
			}
			return fmt.Errorf("%v, want %d dispatched and %d pending (%s)", n, dispatched, pending, strings.Join(each, "; "))
		}
		if pending > 0 && !strings.Contains(msg, reason) {
			return fmt.Errorf("a pending job says %q, want %q", msg, reason)
		}
		return nil
	})
}

// wantShare waits until global pool path shows the standing wanted, in
// CPUs: entitlement, held by dispatched jobs, and queued.
func wantShare(t *testing.T, f *federation.Federation, path string, ent, held, queued float64) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, path+"'s global fair share", func() error {
		p, err := f.Pools().GetPool(path)
		if err != nil {
			return err
		}
		g := p.GetGlobal()
		if g.GetEntitlement().GetCpu() != ent || g.GetAllocation().GetCpu() != held || g.GetQueued().GetCpu() != queued || g.GetCapacity().GetCpu() != 64 {
			return fmt.Errorf("%s: %v, want entitlement %g, allocation %g, queued %g of 64 cpu", path, g, ent, held, queued)
		}
		return nil
	})
}

func killJobs(t *testing.T, f *federation.Federation, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := f.Jobs().KillJob(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGlobalFairShare: two clusters of one 32-CPU host each (64 CPUs in
// all) and two global pools with equal shares. /a floods: it takes every
// cluster while alone, the rest of its jobs wait at the federation saying
// why. /b then submits and is dispatched its share at once; /a gets more
// only once what it holds is back within its half. The count survives a
// restart of the federation; a limit and a reservation are honoured; a
// job that could never fit is refused naming the field.
func TestGlobalFairShare(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 1)
	b := startStack(t, e.Endpoints(), "b", 1)
	f, stop := restartableFederation(t, e)
	register(t, f, a, nil)
	register(t, f, b, nil)
	for _, p := range []string{"/a", "/b"} {
		if _, err := f.Pools().CreatePool(ctxT(t), p, &pelotonv1.FederatedPoolSpec{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "both pools in both clusters", func() error {
		for _, p := range []string{"/a", "/b"} {
			gp, err := f.Pools().GetPool(p)
			if err != nil {
				return err
			}
			if len(gp.Clusters) != 2 || !gp.Clusters[0].InSync || !gp.Clusters[1].InSync {
				return fmt.Errorf("%s not in sync in both clusters", p)
			}
		}
		return nil
	})

	// /a alone: four jobs of 16 CPUs fill both clusters; two wait.
	as := submit(t, f, "a", "/a", 6)
	wantStates(t, f, "/a's flood: 4 dispatched, 2 waiting", as, 4, 2,
		"waiting for global fair share: global pool /a is at its entitlement and lacks 16 cpu (entitled to 64 of the clusters' 64 cpu, 64 held by its dispatched jobs, this job asks 16)")
	wantShare(t, f, "/a", 64, 64, 32)
	waitPasses(t, "dispatcher", f.DispatchPasses, 3)
	wantStates(t, f, "/a still at 4 dispatched", as, 4, 2, "global pool /a is at its entitlement")

	// /b submits: its half is dispatched at once, /a's jobs keep waiting.
	bs := submit(t, f, "b", "/b", 3)
	wantStates(t, f, "/b's share dispatched", bs, 2, 1, "global pool /b is at its entitlement and lacks 16 cpu (entitled to 32 of the clusters' 64 cpu")
	wantShare(t, f, "/a", 32, 64, 32)
	wantShare(t, f, "/b", 32, 32, 16)
	wantStates(t, f, "/a waits over its share", as, 4, 2, "global pool /a is at its entitlement and lacks 48 cpu (entitled to 32")

	// Restart: the count is rebuilt from the jobs' records; nothing more
	// is dispatched. (Once every create was answered and seen in its
	// cluster: a create cut short by the stop may be undone by the
	// cluster after the next federation's retry was answered, ending the
	// job there, which is jobmgr's business and not this test's.)
	testutil.Eventually(t, 30*time.Second, "every dispatched job seen in its cluster", func() error {
		for _, id := range append(slices.Clone(as), bs...) {
			j, err := f.Jobs().GetJob(id)
			if err != nil {
				return err
			}
			if j.DispatchState == pelotonv1.DispatchState_DISPATCHED && (j.ClusterJobId == "" || j.Status == nil) {
				return fmt.Errorf("job %s not seen in %s yet", j.Spec.Job.Name, j.Cluster)
			}
		}
		return nil
	})
	stop()
	f, _ = restartableFederation(t, e)
	wantShare(t, f, "/a", 32, 64, 32)
	wantShare(t, f, "/b", 32, 32, 16)
	waitPasses(t, "dispatcher", f.DispatchPasses, 3)
	wantStates(t, f, "/a after the restart", as, 4, 2, "global pool /a is at its entitlement")
	wantStates(t, f, "/b after the restart", bs, 2, 1, "global pool /b is at its entitlement")

	// Ends are learned from the clusters: /a back within its half lets
	// one more of its jobs go.
	killJobs(t, f, as[0], as[1])
	wantStates(t, f, "/a at its half: still waiting", as[2:], 2, 2, "global pool /a is at its entitlement and lacks 16 cpu")
	killJobs(t, f, as[2])
	wantStates(t, f, "/a below its half: one more dispatched", as[3:], 2, 1, "global pool /a is at its entitlement and lacks 16 cpu")
	wantShare(t, f, "/a", 32, 32, 16)

	// A limit: /b may hold 16 CPUs only, so its waiting job says so.
	if _, err := f.Pools().UpdatePool(ctxT(t), "/b", &pelotonv1.FederatedPoolSpec{Limit: &pelotonv1.Resources{Cpu: 16}}, 0); err != nil {
		t.Fatal(err)
	}
	wantStates(t, f, "/b at its limit", bs, 2, 1, "waiting for global fair share: global pool /b would exceed its cpu limit of 16 (32 held by its dispatched jobs, this job asks 16)")
	// Bad input names the field: a job larger than its pool's limit
	// could never go; a bad share is refused as a cluster's would be.
	if _, err := f.Jobs().CreateJob(ctxT(t), fairJob("huge", "/b", 2), ""); status.Code(err) != codes.InvalidArgument ||
		!contains(err, "spec.job.instanceCount: the job asks for 32 CPUs in all, more than the cpu limit of global pool /b (16)") {
		t.Errorf("a job over its global pool's limit: %v", err)
	}
	if _, err := f.Pools().UpdatePool(ctxT(t), "/a", &pelotonv1.FederatedPoolSpec{Share: &pelotonv1.Resources{Cpu: -1}}, 0); status.Code(err) != codes.InvalidArgument ||
		!contains(err, "spec.share.cpu") {
		t.Errorf("a negative share: %v", err)
	}

	// A reservation is given first. Everything ends; /a reserves 48 of
	// the 64 CPUs. /b, alone, takes every cluster and queues more; once /a
	// asks 48, it is entitled to all of it (equal shares would give it 32)
	// and /b to the other 16, so /a's three jobs go and /b's wait.
	killJobs(t, f, append(as[3:], bs...)...)
	if _, err := f.Pools().UpdatePool(ctxT(t), "/b", &pelotonv1.FederatedPoolSpec{}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pools().UpdatePool(ctxT(t), "/a", &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: 48}}, 0); err != nil {
		t.Fatal(err)
	}
	wantShare(t, f, "/a", 32, 0, 0)
	wantShare(t, f, "/b", 32, 0, 0)
	bs2 := submit(t, f, "b2-", "/b", 6)
	wantStates(t, f, "/b alone takes every cluster", bs2, 4, 2, "global pool /b is at its entitlement and lacks 16 cpu (entitled to 64 of the clusters' 64 cpu")
	as2 := submit(t, f, "a2-", "/a", 3)
	wantStates(t, f, "/a's reservation dispatched", as2, 3, 0, "")
	wantShare(t, f, "/a", 48, 48, 0)
	testutil.Eventually(t, 30*time.Second, "/b waits beside the reservation", func() error {
		n, msg := dispatchStates(t, f, bs2)
		if n[pelotonv1.DispatchState_DISPATCH_PENDING] == 0 || !strings.Contains(msg, "(entitled to 16 of the clusters' 64 cpu") {
			return fmt.Errorf("/b's jobs %v, a pending one says %q", n, msg)
		}
		return nil
	})
}
