package federation

import (
	"bufio"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/federation/split"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzClusters are the registered clusters fuzzed services are split over.
var fuzzClusters = []split.ServiceCluster{
	{Name: "a", Labels: map[string]string{"zone": "east"}},
	{Name: "b", Labels: map[string]string{"zone": "west"}},
	{Name: "c", Labels: map[string]string{"zone": "east"}, Cordoned: true},
}

// FuzzValidateServiceSpec: validating a federated service spec never
// panics and refuses with InvalidArgument; a spec it accepts is a SERVICE
// job with instances, a valid pool, finite resources and no overrides, and
// its split over the clusters, when there is one, adds up to its instances
// on registered clusters only.
func FuzzValidateServiceSpec(f *testing.F) {
	job := func(n uint32, cpu float64) *pelotonv1.JobSpec {
		return &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: n,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"srv"}, Resources: &pelotonv1.Resources{Cpu: cpu, MemoryMb: 64}}}
	}
	for _, s := range []*pelotonv1.FederatedServiceSpec{
		{},
		{Job: job(3, 1)},
		{Job: job(10, 0.5), Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Name: "a", Count: 4}, {Selector: map[string]string{"zone": "east"}, Weight: 2}}}},
		{Job: job(2, 1), Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Name: "a"}, {Name: "a"}}}},
		{Job: job(1, 1), Placement: &pelotonv1.ServicePlacement{Clusters: []*pelotonv1.ClusterShare{{Name: "nowhere"}}, MinClusters: 3}},
		{Job: job(math.MaxUint32, 1)},
		{Job: job(1, math.NaN())},
		{Job: job(1, math.Inf(1))},
		{Job: job(1, 1e300)},
		{Job: &pelotonv1.JobSpec{Name: "x", Type: pelotonv1.JobType_SERVICE, Pool: "a//B", InstanceCount: 1}},
		{Job: &pelotonv1.JobSpec{Name: "x", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1}},
		{Job: &pelotonv1.JobSpec{Name: "x", Type: pelotonv1.JobType_SERVICE, Pool: "/p", InstanceCount: 2,
			InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{1: {}}}},
		{Job: &pelotonv1.JobSpec{Name: "x", Type: pelotonv1.JobType_SERVICE, Pool: "/p", InstanceCount: 1,
			Labels: map[string]string{LabelFederatedService: "forged"}}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		spec := &pelotonv1.FederatedServiceSpec{}
		if proto.Unmarshal(b, spec) != nil {
			return
		}
		// An update checks the same job as "job": every error names the
		// field where the request has it.
		if err := validateServiceJob(spec.Job, "job"); err != nil && !strings.HasPrefix(status.Convert(err).Message(), "job") {
			t.Fatalf("an update's error %q does not name a job field", status.Convert(err).Message())
		}
		if err := validateServiceSpec(spec); err != nil {
			if apierr.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "spec.job") {
				t.Fatalf("refused with %v, not InvalidArgument naming a spec.job field", err)
			}
			return
		}
		j := spec.Job
		if j.Type != pelotonv1.JobType_SERVICE || j.Name == "" || j.InstanceCount == 0 || len(j.InstanceSpecs) > 0 || j.Foreign != nil {
			t.Fatalf("accepted %v", j)
		}
		if _, ok := j.Labels[LabelFederatedService]; ok {
			t.Fatal("accepted a forged federated service label")
		}
		if _, err := resmgr.NormalizePath(j.Pool, "pool"); err != nil {
			t.Fatalf("accepted pool %q: %v", j.Pool, err)
		}
		if _, err := resources.FromProto(j.GetDefaultSpec().GetResources(), "r"); err != nil {
			t.Fatalf("accepted resources %v: %v", j.GetDefaultSpec().GetResources(), err)
		}
		parts, err := split.Service(j.InstanceCount, spec.Placement, fuzzClusters)
		if err != nil {
			if c := apierr.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
				t.Fatalf("split refused with %v", err)
			}
			return
		}
		var sum uint64
		for name, n := range parts {
			if !slices.ContainsFunc(fuzzClusters, func(c split.ServiceCluster) bool { return c.Name == name }) {
				t.Fatalf("split to unregistered cluster %q", name)
			}
			if n == 0 {
				t.Fatalf("split gives %s no instances but lists it", name)
			}
			sum += uint64(n)
		}
		if sum != uint64(j.InstanceCount) {
			t.Fatalf("split %v adds up to %d, not %d", parts, sum, j.InstanceCount)
		}
	})
}

// FuzzDispatchTable: the dispatch table's Check never panics, for states
// outside the enum too, and agrees with its rendering.
func FuzzDispatchTable(f *testing.F) {
	edges := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(DispatchTable.Render()))
	for sc.Scan() {
		if from, tos, ok := strings.Cut(sc.Text(), " -> "); ok && tos != "(none)" {
			edges[from] = strings.Fields(tos)
		}
	}
	for from := int32(-1); from < 6; from++ {
		for to := int32(-1); to < 6; to++ {
			f.Add(from, to)
		}
	}
	f.Fuzz(func(t *testing.T, from, to int32) {
		a, b := pelotonv1.DispatchState(from), pelotonv1.DispatchState(to)
		want := a == b || slices.Contains(edges[a.String()], b.String())
		err := DispatchTable.Check(a, b)
		if (err == nil) != want || err != nil && !errors.Is(err, fsm.ErrIllegal) {
			t.Fatalf("Check(%s, %s) = %v, the rendering says allowed=%v", a, b, err, want)
		}
	})
}
