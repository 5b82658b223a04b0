package federation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/paging"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func TestNextHealth(t *testing.T) {
	start := time.Unix(1000, 0)
	const slow, unreachable = time.Second, 5 * time.Second
	ready, degraded, gone := pelotonv1.ClusterState_CLUSTER_READY, pelotonv1.ClusterState_CLUSTER_DEGRADED, pelotonv1.ClusterState_CLUSTER_UNREACHABLE
	for _, tc := range []struct {
		name     string
		in       healthInput
		want     pelotonv1.ClusterState
		wantWhy  string
		whyEmpty bool
	}{
		{"prompt answer", healthInput{current: degraded, obs: observation{answered: true, latency: 10 * time.Millisecond}, now: start}, ready, "", true},
		{"slow answer", healthInput{current: ready, obs: observation{answered: true, latency: 2 * time.Second}, now: start}, degraded, "slower than 1s", false},
		{"error answer", healthInput{current: ready, obs: observation{answered: true, err: "Internal: boom"}, now: start}, degraded, "answered with an error: Internal: boom", false},
		{"one lost check", healthInput{current: ready, obs: observation{err: "refused"}, lastSeen: start, since: start, now: start.Add(time.Second)}, degraded, "no answer: refused", false},
		{"silent past the bound", healthInput{current: degraded, obs: observation{err: "refused"}, lastSeen: start, since: start, now: start.Add(6 * time.Second)}, gone, "no answer for 6s", false},
		{"silent since start, never seen", healthInput{current: ready, obs: observation{err: "refused"}, since: start, now: start.Add(5 * time.Second)}, gone, "no answer for 5s", false},
		{"unreachable stays until it answers", healthInput{current: gone, obs: observation{err: "refused"}, lastSeen: start, since: start, now: start.Add(time.Second)}, gone, "no answer", false},
		{"back from unreachable", healthInput{current: gone, obs: observation{answered: true}, now: start}, ready, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := nextHealth(tc.in, slow, unreachable)
			if got != tc.want || (tc.whyEmpty && why != "") || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("nextHealth = %s %q, want %s containing %q", got, why, tc.want, tc.wantWhy)
			}
		})
	}
}

func cpuSpec(res, limit float64) *pelotonv1.PoolSpec {
	return &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: res}, Limit: &pelotonv1.Resources{Cpu: limit}}
}

func TestPlanPoolsOrder(t *testing.T) {
	have := map[string]*pelotonv1.Pool{
		"/a":      {Path: "/a", Spec: cpuSpec(10, 0)},
		"/a/x":    {Path: "/a/x", Spec: cpuSpec(8, 0)},
		"/old":    {Path: "/old", Spec: cpuSpec(1, 0)},
		"/old/y":  {Path: "/old/y", Spec: cpuSpec(1, 0)},
		"/theirs": {Path: "/theirs", Spec: cpuSpec(5, 0)}, // not owned: left alone
	}
	want := map[string]*pelotonv1.PoolSpec{
		"/a":     cpuSpec(4, 0),  // shrinks below its child's 8: the child must shrink first
		"/a/x":   cpuSpec(3, 0),  // shrinks
		"/b":     cpuSpec(2, 0),  // new
		"/b/z":   cpuSpec(1, 0),  // new child: after its parent
		"/a/new": cpuSpec(1, 10), // new child of a
		// cpu shrinks, memory grows: a shrink first, the rest later.
		"/c": {Reservation: &pelotonv1.Resources{Cpu: 1, MemoryMb: 20}},
	}
	have["/c"] = &pelotonv1.Pool{Path: "/c", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2, MemoryMb: 10}}}
	owned := []string{"/a", "/a/x", "/a/new", "/b", "/b/z", "/c", "/old", "/old/y"}
	var got []string
	for _, a := range planPools(want, have, owned, nil) {
		got = append(got, a.kind+" "+a.path)
	}
	// Shrinks children first, deletes children first, then creates
	// parents first (every depth-1 pool before any depth-2 one). /a and
	// /a/x only shrink, so they have no second update; /c has two.
	wantOrder := "update /a/x,update /a,update /c,delete /old/y,delete /old,update /c,create /b,create /b/z,create /a/new"
	if strings.Join(got, ",") != wantOrder {
		t.Errorf("plan:\n got %s\nwant %s", strings.Join(got, ","), wantOrder)
	}
}

func TestPlanPoolsDrift(t *testing.T) {
	have := map[string]*pelotonv1.Pool{"/a": {Path: "/a", Spec: cpuSpec(1, 0)}}
	want := map[string]*pelotonv1.PoolSpec{"/a": cpuSpec(5, 0), "/b": cpuSpec(1, 0)}
	left := map[string]*pelotonv1.PoolSpec{"/a": cpuSpec(5, 0), "/b": cpuSpec(1, 0)}
	acts := planPools(want, have, []string{"/a", "/b"}, left)
	drift := map[string]bool{}
	for _, a := range acts {
		drift[a.path] = drift[a.path] || a.drift
	}
	// /a was left at 5 and is 1 now; /b was left there and is gone: both drift.
	if !drift["/a"] || !drift["/b"] {
		t.Errorf("drift = %v, want both", drift)
	}
	// A desired state that moved on is no drift.
	acts = planPools(map[string]*pelotonv1.PoolSpec{"/a": cpuSpec(7, 0)}, map[string]*pelotonv1.Pool{"/a": {Path: "/a", Spec: cpuSpec(5, 0)}},
		[]string{"/a"}, map[string]*pelotonv1.PoolSpec{"/a": cpuSpec(5, 0)})
	if len(acts) != 1 || acts[0].drift {
		t.Errorf("a new desired state: %+v, want one update without drift", acts)
	}
}

func TestChooseCluster(t *testing.T) {
	req := resources.Resources{MilliCPU: 2000, MemoryMB: 100}
	room := func(cpu int64) resources.Resources {
		return resources.Resources{MilliCPU: cpu * 1000, MemoryMB: 1 << 20}
	}
	ready, cordoned := pelotonv1.ClusterState_CLUSTER_READY, pelotonv1.ClusterState_CLUSTER_CORDONED
	east := map[string]string{"region": "east"}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		cands    []candidate
		want     string
		why      string
	}{
		{"most headroom", nil, []candidate{
			{name: "a", state: ready, hasPool: true, headroom: room(4)},
			{name: "b", state: ready, hasPool: true, headroom: room(10)}}, "b", ""},
		{"ties: least used, then name", nil, []candidate{
			{name: "a", state: ready, hasPool: true, headroom: room(4), used: 0.5},
			{name: "b", state: ready, hasPool: true, headroom: room(4), used: 0.2},
			{name: "c", state: ready, hasPool: true, headroom: room(4), used: 0.2}}, "b", ""},
		{"selector", east, []candidate{
			{name: "a", labels: east, state: ready, hasPool: true, headroom: room(1)},
			{name: "b", state: ready, hasPool: true, headroom: room(100)}}, "a", ""},
		{"cordoned and degraded take nothing", nil, []candidate{
			{name: "a", state: cordoned, hasPool: true, headroom: room(100)},
			{name: "b", state: pelotonv1.ClusterState_CLUSTER_DEGRADED, hasPool: true, headroom: room(100)}}, "", "no matching cluster takes work now (a CORDONED, b DEGRADED)"},
		{"no pool", nil, []candidate{{name: "a", state: ready}}, "", "not a leaf pool in any READY matching cluster (a)"},
		{"overdrawn still goes to the least overdrawn", nil, []candidate{
			{name: "a", state: ready, hasPool: true, headroom: room(-4)},
			{name: "b", state: ready, hasPool: true, headroom: room(-1)}}, "b", ""},
		{"nobody matches", map[string]string{"region": "mars"}, []candidate{{name: "a", labels: east, state: ready, hasPool: true}}, "", "no cluster matches clusterSelector {region=mars}"},
		{"none registered", nil, nil, "", "no cluster is registered"},
		{"hosts too small (clusters shrank) wait, saying so", nil, []candidate{
			{name: "a", state: ready, hasPool: true, headroom: room(100), knowsLargest: true, largest: resources.Resources{MilliCPU: 500, MemoryMB: 1 << 20}},
			{name: "b", state: cordoned, hasPool: true, headroom: room(100)}}, "",
			"waiting for a larger host: one task asks cpu=1 memoryMb=0 diskMb=0 gpu=0, more than the largest host of every READY matching cluster that has the pool (a cpu=0.5 memoryMb=1048576 diskMb=0 gpu=0); not READY: b CORDONED"},
		{"a host that fits is taken", nil, []candidate{
			{name: "a", state: ready, hasPool: true, headroom: room(100), knowsLargest: true, largest: resources.Resources{MilliCPU: 500}},
			{name: "b", state: ready, hasPool: true, headroom: room(1), knowsLargest: true, largest: resources.Resources{MilliCPU: 1000}}}, "b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := chooseCluster(req, resources.Resources{MilliCPU: 1000}, tc.selector, tc.cands)
			if got != tc.want || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
				t.Errorf("chooseCluster = %q %q, want %q %q", got, why, tc.want, tc.why)
			}
		})
	}
}

func TestJobRequest(t *testing.T) {
	spec := &pelotonv1.JobSpec{InstanceCount: 3, DefaultSpec: &pelotonv1.TaskSpec{Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 10}},
		InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{
			1: {Resources: &pelotonv1.Resources{Cpu: 4, MemoryMb: 40}},
			7: {Resources: &pelotonv1.Resources{Cpu: 100}}, // beyond the instance count: ignored
		}}
	got, err := jobRequest(spec, "spec.job")
	if err != nil || got != (resources.Resources{MilliCPU: 6000, MemoryMB: 60}) {
		t.Errorf("jobRequest = %v %v, want 6 cpu 60 MiB", got, err)
	}
}

// TestServiceJobErrorsNameTheRequestField: a bad number in a service
// update's job is refused naming job.defaultSpec..., where the update
// request has it; it used to say spec.job..., the create's path.
func TestServiceJobErrorsNameTheRequestField(t *testing.T) {
	job := &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Resources: &pelotonv1.Resources{Cpu: math.Inf(1)}}}
	for _, at := range []string{"spec.job", "job"} {
		err := validateServiceJob(job, at)
		want := at + ".defaultSpec.resources.cpu: "
		if apierr.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), want) {
			t.Errorf("validateServiceJob(%s) = %v, want InvalidArgument %q...", at, err, want)
		}
	}
}

func TestDispatchTableEveryState(t *testing.T) {
	for s := range pelotonv1.DispatchState_name {
		if st := pelotonv1.DispatchState(s); st != pelotonv1.DispatchState_DISPATCH_STATE_UNSPECIFIED && !DispatchTable.Has(st) {
			t.Errorf("dispatch state %s has no row", st)
		}
	}
	if DispatchTable.Allowed(pelotonv1.DispatchState_DISPATCH_DONE, pelotonv1.DispatchState_DISPATCH_PENDING) {
		t.Error("a done job may be dispatched again")
	}
}

func TestSweepDoneJobs(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	now := time.Unix(1_000_000, 0)
	f := New(st, Options{Now: func() time.Time { return now }, JobRetention: time.Hour})
	defer f.Close()
	ctx := context.Background()
	spec := func(name string) *pelotonv1.FederatedJobSpec {
		return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: name, Pool: "/p", InstanceCount: 1}}
	}
	done, err := f.Jobs().CreateJob(ctx, spec("done"), "")
	if err != nil {
		t.Fatal(err)
	}
	pending, err := f.Jobs().CreateJob(ctx, spec("pending"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Jobs().KillJob(ctx, done); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Jobs().sweepDone(ctx, 100); err != nil || n != 0 {
		t.Fatalf("sweep within retention deleted %d (%v)", n, err)
	}
	now = now.Add(2 * time.Hour)
	if n, err := f.Jobs().sweepDone(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep past retention deleted %d (%v), want the one done job", n, err)
	}
	if _, err := f.Jobs().GetJob(done); status.Code(err) != codes.NotFound {
		t.Errorf("swept job: %v", err)
	}
	if _, err := f.Jobs().GetJob(pending); err != nil {
		t.Errorf("a pending job was swept: %v", err)
	}
	if _, err := st.Get(ctx, jobKey(done)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("swept job still in etcd: %v", err)
	}
}

func TestListJobsPages(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	now := time.Unix(1_000_000, 0)
	f := New(st, Options{Now: func() time.Time { return now }})
	defer f.Close()
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		if i != 2 { // jobs 1 and 2 are created at the same time: the id breaks the tie
			now = now.Add(time.Second)
		}
		id, err := f.Jobs().CreateJob(ctx, &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: fmt.Sprint("j", i), Pool: "/p", InstanceCount: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var seen []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > len(ids) {
			t.Fatal("paging does not end")
		}
		page, next, err := f.Jobs().ListJobs("", 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			seen = append(seen, j.Id)
		}
		if pages == 0 {
			// The last job of the first page goes away: the next page
			// starts after where it stood all the same.
			f.mu.Lock()
			delete(f.jobs, page[len(page)-1].Id)
			f.mu.Unlock()
		}
		if token = next; token == "" {
			break
		}
	}
	want := slices.Clone(ids)
	slices.Reverse(want)   // newest first
	if want[2] > want[3] { // same time: by id
		want[2], want[3] = want[3], want[2]
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("pages listed %v, want %v", seen, want)
	}
	if _, _, err := f.Jobs().ListJobs("", 2, "garbage"); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "pageToken: ") {
		t.Errorf("a bad token: %v, want InvalidArgument naming pageToken", err)
	}
	if _, _, err := f.Services().ListServices("", 2, paging.EncodeMark("fedjobs", paging.Mark{})); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a jobs token given to the services list: %v, want InvalidArgument", err)
	}
	if _, _, err := f.Jobs().ListJobs("", 5001, ""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("page size 5001: %v, want InvalidArgument", err)
	}
}
