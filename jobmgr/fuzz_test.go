package jobmgr

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/internal/fsm"
	"github.com/peloton-sched/peloton/internal/fsm/fsmtest"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// fuzzLargest is the largest host the fuzzed specs are checked against.
var fuzzLargest = resources.Resources{MilliCPU: 64000, MemoryMB: 256 << 10, DiskMB: 1 << 20, GPU: 8}

// fuzzJobSeeds are the seed specs of FuzzValidateJobSpec: valid specs of
// every type, and the edge cases validation must refuse.
func fuzzJobSeeds() []*pelotonv1.JobSpec {
	task := func(cpu, mem float64) *pelotonv1.TaskSpec {
		return &pelotonv1.TaskSpec{Command: []string{"sleep", "1"}, Resources: &pelotonv1.Resources{Cpu: cpu, MemoryMb: mem}}
	}
	svc := &pelotonv1.TaskSpec{
		Command:     []string{"srv"},
		Resources:   &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64},
		Ports:       []*pelotonv1.PortSpec{{Name: "http"}},
		HealthCheck: &pelotonv1.HealthCheck{Http: &pelotonv1.HttpProbe{Port: "http", Path: "/healthz"}},
		Metrics:     &pelotonv1.MetricsSpec{Port: "http", Path: "/metrics", LatencyHistogram: "http_request_duration_seconds"},
	}
	return []*pelotonv1.JobSpec{
		{Name: "batch", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 3, DefaultSpec: task(1, 128),
			Sla: &pelotonv1.SlaSpec{MinimumRunningInstances: 3, MaximumRunningInstances: 3}},
		{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 2, DefaultSpec: svc,
			Sla: &pelotonv1.SlaSpec{LatencySloMs: 50}},
		{Name: "daemon", Type: pelotonv1.JobType_DAEMON, Pool: "/default", DefaultSpec: task(0.1, 16)},
		{Name: "stateful", Type: pelotonv1.JobType_STATEFUL, Pool: "/default", InstanceCount: 1,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"db"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 1, DiskMb: 10}, Volume: &pelotonv1.VolumeSpec{SizeMb: 100}}},
		{Name: "overrides", Type: pelotonv1.JobType_BATCH, Pool: "/a/b", InstanceCount: 4, DefaultSpec: task(1, 1),
			InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{0: {Resources: &pelotonv1.Resources{Cpu: 2, MemoryMb: 2}}, 3: {Command: []string{"x"}}}},
		// Only overrides: the default is never used, so it need not be valid.
		{Name: "all overridden", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1,
			InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{0: task(1, 1)}},
		{Name: "nan", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(math.NaN(), 1)},
		{Name: "inf", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1, math.Inf(1))},
		{Name: "huge", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1e300, 1)},
		{Name: "negative", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(-1, 1)},
		{Name: "tiny", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1e-9, 1e-9)},
		{Name: "too many", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: math.MaxUint32, DefaultSpec: task(1, 1)},
		{Name: "gang", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 2, DefaultSpec: task(1, 1), Sla: &pelotonv1.SlaSpec{MinimumRunningInstances: 3}},
		{Name: "bad\x01utf8", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1, 1)},
		{Name: strings.Repeat("n", 300), Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1, 1)},
		{Name: "unknown type", Type: 99, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1, 1)},
		{Name: "override out of range", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1, DefaultSpec: task(1, 1),
			InstanceSpecs: map[uint32]*pelotonv1.TaskSpec{7: task(1, 1)}},
		{Name: "empty env", Type: pelotonv1.JobType_BATCH, Pool: "/p", InstanceCount: 1,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"x"}, Env: map[string]string{"": "v"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 1}}},
		{},
	}
}

// FuzzValidateJobSpec: validation never panics, and a spec it accepts holds
// what the rest of jobmgr relies on (checkValidJobSpec); validating it again
// accepts it and changes nothing, and it survives the store's encoding.
func FuzzValidateJobSpec(f *testing.F) {
	for _, s := range fuzzJobSeeds() {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// proto.Marshal refuses invalid UTF-8; the wire may carry it.
		if strings.Contains(s.Name, "\x01") {
			f.Add([]byte(strings.Replace(string(b), "\x01", "\xff", 1)))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &pelotonv1.JobSpec{}
		if proto.Unmarshal(b, s) != nil {
			return
		}
		if validateJobSpec(s, fuzzLargest) != nil {
			return
		}
		checkValidJobSpec(t, s)
		once := proto.Clone(s).(*pelotonv1.JobSpec)
		if err := validateJobSpec(s, fuzzLargest); err != nil {
			t.Fatalf("valid once, refused the second time: %v", err)
		}
		if !proto.Equal(once, s) {
			t.Fatalf("validating again changed the spec:\n%v\n%v", once, s)
		}
		enc, err := encodeSpec(s)
		if err != nil {
			t.Fatalf("encode a valid spec: %v", err)
		}
		dec, err := decodeSpec(enc)
		if err != nil || !proto.Equal(dec, s) {
			t.Fatalf("a valid spec does not survive the store: %v", err)
		}
	})
}

// checkValidJobSpec asserts the invariants of a spec validateJobSpec
// accepted.
func checkValidJobSpec(t *testing.T, s *pelotonv1.JobSpec) {
	t.Helper()
	if s.Name == "" || len(s.Name) > MaxNameLength || !utf8.ValidString(s.Name) {
		t.Fatalf("name %q accepted", s.Name)
	}
	if s.Pool == "" {
		t.Fatal("empty pool accepted")
	}
	if _, ok := pelotonv1.JobType_name[int32(s.Type)]; !ok || s.Type == pelotonv1.JobType_JOB_TYPE_UNSPECIFIED {
		t.Fatalf("type %d accepted", s.Type)
	}
	if s.InstanceCount > MaxInstances {
		t.Fatalf("instanceCount %d accepted", s.InstanceCount)
	}
	if (s.Type == pelotonv1.JobType_DAEMON) != (s.InstanceCount == 0) {
		t.Fatalf("%s job with instanceCount %d accepted", s.Type, s.InstanceCount)
	}
	if g := s.GetSla().GetMinimumRunningInstances(); g > s.InstanceCount {
		t.Fatalf("gang %d of %d instances accepted", g, s.InstanceCount)
	}
	if mx, g := s.GetSla().GetMaximumRunningInstances(), s.GetSla().GetMinimumRunningInstances(); mx > 0 && g > mx {
		t.Fatalf("gang %d with maximumRunningInstances %d accepted", g, mx)
	}
	if s.DefaultSpec == nil {
		t.Fatal("validation left defaultSpec nil")
	}
	if n := proto.Size(s); n > MaxSpecBytes {
		t.Fatalf("%d bytes accepted", n)
	}
	// Every instance's effective spec: the overridden ones, and one that
	// uses the default when some instance does.
	insts := make([]uint32, 0, len(s.InstanceSpecs)+1)
	for k := range s.InstanceSpecs {
		if k >= s.InstanceCount {
			t.Fatalf("override of instance %d of %d accepted", k, s.InstanceCount)
		}
		insts = append(insts, k)
	}
	for i := uint32(0); i < s.InstanceCount; i++ {
		if _, ok := s.InstanceSpecs[i]; !ok {
			insts = append(insts, i)
			break
		}
	}
	effective := make([]*pelotonv1.TaskSpec, 0, len(insts)+1)
	for _, i := range insts {
		effective = append(effective, instanceSpec(s, i))
	}
	if s.Type == pelotonv1.JobType_DAEMON {
		effective = append(effective, s.DefaultSpec)
	}
	for _, ts := range effective {
		if len(ts.Command) == 0 || ts.Command[0] == "" {
			t.Fatalf("task without a command accepted: %v", ts)
		}
		for _, v := range []float64{ts.GetResources().GetCpu(), ts.GetResources().GetMemoryMb(), ts.GetResources().GetDiskMb(), ts.GetResources().GetGpu()} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("resource %g accepted", v)
			}
		}
		r, err := resources.FromProto(ts.Resources, "r")
		if err != nil {
			t.Fatalf("accepted resources that do not convert: %v", err)
		}
		if r.MilliCPU <= 0 || r.MemoryMB <= 0 || !r.FitsIn(fuzzLargest) {
			t.Fatalf("resources %s accepted (largest host %s)", r, fuzzLargest)
		}
		if _, ok := pelotonv1.PlacementStrategy_name[int32(ts.GetPlacement().GetStrategy())]; !ok {
			t.Fatalf("placement strategy %d accepted", ts.GetPlacement().GetStrategy())
		}
		if (s.Type == pelotonv1.JobType_STATEFUL) != (ts.Volume != nil) {
			t.Fatalf("%s job with volume %v accepted", s.Type, ts.Volume)
		}
	}
}

// FuzzValidateUpdateSpec: validation never panics, and an accepted spec
// gives the planner a batch of at least one instance and at most the job's,
// and a bounded wait.
func FuzzValidateUpdateSpec(f *testing.F) {
	f.Add(uint32(1), uint32(0), uint32(0), uint32(0), uint32(10))
	f.Add(uint32(10), uint32(5), uint32(3), uint32(3600), uint32(10))
	f.Add(uint32(11), uint32(0), uint32(0), uint32(3601), uint32(10))
	f.Add(uint32(math.MaxUint32), uint32(math.MaxUint32), uint32(math.MaxUint32), uint32(math.MaxUint32), uint32(0))
	f.Fuzz(func(t *testing.T, batch, maxUnavail, retries, minReady, instances uint32) {
		s := &pelotonv1.UpdateSpec{BatchSize: batch, MaxUnavailable: maxUnavail, MaxInstanceRetries: retries, MinReadySeconds: minReady}
		if validateUpdateSpec(s, instances) != nil {
			return
		}
		if b := batchSize(s); b < 1 || instances > 0 && b > int(instances) {
			t.Fatalf("batch %d of %d instances accepted", b, instances)
		}
		if maxUnavailable(s) < 1 {
			t.Fatalf("maxUnavailable %d", maxUnavailable(s))
		}
		if s.MinReadySeconds > 3600 {
			t.Fatalf("minReadySeconds %d accepted", s.MinReadySeconds)
		}
		if validateUpdateSpec(nil, instances) != nil {
			t.Fatal("no update spec (the defaults) refused")
		}
	})
}

// checkTable asserts that tb's Check agrees with its golden rendering for from
// and to, which may be any value, states outside the enum included.
func checkTable[S fsm.State](t *testing.T, tb *fsm.Table[S], edges map[string][]string, from, to S) {
	t.Helper()
	want := from == to || slices.Contains(edges[from.String()], to.String())
	err := tb.Check(from, to)
	if (err == nil) != want {
		t.Fatalf("%s: Check(%s, %s) = %v, but the golden file says allowed=%v", tb.Name(), from, to, err, want)
	}
	if err != nil && !errors.Is(err, fsm.ErrIllegal) {
		t.Fatalf("%s: Check(%s, %s) = %v, not ErrIllegal", tb.Name(), from, to, err)
	}
	if tb.Allowed(from, to) != want {
		t.Fatalf("%s: Allowed(%s, %s) disagrees with Check", tb.Name(), from, to)
	}
	if want && from != to && !slices.Contains(tb.Sources(to), from) {
		t.Fatalf("%s: %s -> %s allowed but %s is not among Sources(%s)", tb.Name(), from, to, from, to)
	}
}

// FuzzTransitionTables: for any pair of values, states outside the enums
// included, the task, job and update tables' Check never panics and agrees
// with their reviewed rendering in testdata/transitions.golden.
func FuzzTransitionTables(f *testing.F) {
	const golden = "testdata/transitions.golden"
	task, job, upd := fsmtest.GoldenEdges(f, golden, taskTransitions.Name()), fsmtest.GoldenEdges(f, golden, jobTransitions.Name()), fsmtest.GoldenEdges(f, golden, updateTransitions.Name())
	for from := int32(-1); from < 12; from++ {
		for to := int32(-1); to < 12; to++ {
			f.Add(from, to)
		}
	}
	f.Add(int32(math.MaxInt32), int32(math.MinInt32))
	f.Fuzz(func(t *testing.T, from, to int32) {
		checkTable(t, taskTransitions, task, pelotonv1.TaskState(from), pelotonv1.TaskState(to))
		checkTable(t, jobTransitions, job, pelotonv1.JobState(from), pelotonv1.JobState(to))
		checkTable(t, updateTransitions, upd, pelotonv1.UpdateState(from), pelotonv1.UpdateState(to))
	})
}
