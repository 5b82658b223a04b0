package history

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// equalJobs fails t unless a and b hold the same job.
func equalJobs(t testing.TB, what string, got, want *Job) {
	t.Helper()
	equalJobsSampled(t, what, got, want, 1)
}

// equalJobsSampled is equalJobs comparing one instance in every in full,
// and the main fields of all of them.
func equalJobsSampled(t testing.TB, what string, got, want *Job, every int) {
	t.Helper()
	if got.Cluster != want.Cluster || got.ID != want.ID {
		t.Fatalf("%s: job %s/%s, want %s/%s", what, got.Cluster, got.ID, want.Cluster, want.ID)
	}
	if !got.ArchiveTime.Equal(want.ArchiveTime) {
		t.Fatalf("%s: archive time %v, want %v", what, got.ArchiveTime, want.ArchiveTime)
	}
	if !proto.Equal(got.Status, want.Status) {
		t.Fatalf("%s: status\n%v\nwant\n%v", what, got.Status, want.Status)
	}
	if len(got.Versions) != len(want.Versions) || len(got.Updates) != len(want.Updates) || len(got.Tasks) != len(want.Tasks) {
		t.Fatalf("%s: %d versions, %d updates, %d tasks; want %d, %d, %d", what,
			len(got.Versions), len(got.Updates), len(got.Tasks), len(want.Versions), len(want.Updates), len(want.Tasks))
	}
	for i := range want.Versions {
		if !proto.Equal(got.Versions[i], want.Versions[i]) {
			t.Fatalf("%s: version %d\n%v\nwant\n%v", what, i, got.Versions[i], want.Versions[i])
		}
	}
	for i := range want.Updates {
		if !proto.Equal(got.Updates[i], want.Updates[i]) {
			t.Fatalf("%s: update %d\n%v\nwant\n%v", what, i, got.Updates[i], want.Updates[i])
		}
	}
	for i, w := range want.Tasks {
		g := got.Tasks[i]
		if (g == nil) != (w == nil) {
			t.Fatalf("%s: instance %d\n%v\nwant\n%v", what, i, g, w)
		}
		if w == nil {
			continue
		}
		if g.State != w.State || g.RunId != w.RunId || g.Host != w.Host || g.ExitCode != w.ExitCode ||
			len(g.History) != len(w.History) || !g.CompletionTime.AsTime().Equal(w.CompletionTime.AsTime()) ||
			(i%every == 0 || i == len(want.Tasks)-1) && !sameMessage(g, w) {
			t.Fatalf("%s: instance %d\n%v\nwant\n%v", what, i, g, w)
		}
	}
}

// sameMessage is proto.Equal, made fast for the common case: equal
// deterministic encodings mean equal messages (proto.Equal's reflection
// takes most of a 100,000-instance test's time under the race detector).
func sameMessage(a, b proto.Message) bool {
	det := proto.MarshalOptions{Deterministic: true}
	ab, errA := det.Marshal(a)
	bb, errB := det.Marshal(b)
	if errA == nil && errB == nil && bytes.Equal(ab, bb) {
		return true
	}
	return proto.Equal(a, b)
}

func roundTrip(t testing.TB, j *Job) *Job {
	t.Helper()
	b, err := encode(j)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestCodecRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *Job
	}{
		{"one instance", makeJob("a", "j1").obj()},
		{"many instances and versions", makeJob("a", "j2").instances(300).specVersions(3).seeded(7).obj()},
		{"no instances", makeJob("a", "j3").instances(0).obj()},
		{"no archive time", func() *Job { j := makeJob("a", "j4").obj(); j.ArchiveTime = time.Time{}; return j }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			equalJobs(t, tc.name, roundTrip(t, tc.job), tc.job)
		})
	}
}

// TestCodecRoundTripRandom checks that the columns lose nothing, whatever
// a TaskStatus holds: each field set or not at random, absent instances,
// times the columns cannot hold, maps and messages they do not have.
func TestCodecRoundTripRandom(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 9))
		j := makeJob("c", "rand").obj()
		n := rng.IntN(40)
		j.Tasks = make([]*pelotonv1.TaskStatus, n)
		for i := range j.Tasks {
			if rng.IntN(8) == 0 {
				continue // never created
			}
			j.Tasks[i] = randomStatus(rng)
		}
		got := roundTrip(t, j)
		equalJobs(t, fmt.Sprintf("seed %d", seed), got, j)
	}
}

func randomStatus(rng *rand.Rand) *pelotonv1.TaskStatus {
	maybe := func() bool { return rng.IntN(2) == 0 }
	str := func() string {
		if maybe() {
			return ""
		}
		return []string{"a", "host-1", "exit-nonzero", "ü", "x y z"}[rng.IntN(5)]
	}
	ts := func() *timestamppb.Timestamp {
		switch rng.IntN(6) {
		case 0:
			return nil
		case 1:
			return &timestamppb.Timestamp{} // 1970, set
		case 2: // beyond what a column holds
			return &timestamppb.Timestamp{Seconds: 253402300799, Nanos: 999999999}
		case 3:
			return &timestamppb.Timestamp{Seconds: -62135596800} // year 1
		default:
			return &timestamppb.Timestamp{Seconds: 1.9e9 + rng.Int64N(1e6), Nanos: rng.Int32N(1e9)}
		}
	}
	u32 := func() uint32 {
		if maybe() {
			return 0
		}
		return []uint32{1, 2, math.MaxUint32, 77}[rng.IntN(4)]
	}
	t := &pelotonv1.TaskStatus{
		State: pelotonv1.TaskState(rng.IntN(16)), GoalState: pelotonv1.TaskState(rng.IntN(16)),
		RunId: u32(), Host: str(), ExitCode: int32(rng.IntN(3)) - 1, Reason: str(), Message: str(),
		FailureCount: u32(), StartTime: ts(), CompletionTime: ts(), UpdateTime: ts(), DesiredRunId: u32(),
		PendingReason: str(), PreviousHost: str(), SpecVersion: uint64(u32()), Health: pelotonv1.HealthState(rng.IntN(3)),
		BoundHost: str(), DesiredSpecVersion: uint64(u32()) << (rng.IntN(2) * 32), RestartInPlace: maybe(), Revocable: maybe(),
	}
	if maybe() {
		t.Ports = map[string]uint32{"http": 8080 + u32()}
	}
	if rng.IntN(4) == 0 {
		t.Usage = &pelotonv1.TaskUsage{Cpu: 0.5, MemoryUsedMb: 10}
	}
	if rng.IntN(5) == 0 {
		t.State = pelotonv1.TaskState(-3) // a value no version has
	}
	for range rng.IntN(5) {
		t.History = append(t.History, &pelotonv1.TaskTransition{State: pelotonv1.TaskState(rng.IntN(16)), RunId: u32(), Time: ts(), Reason: str()})
	}
	return t
}

func TestDecodeRefusesCorruptRecords(t *testing.T) {
	b, err := encode(makeJob("a", "j").instances(10).obj())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, {}, {2}, b[:len(b)/2], append([]byte{formatV1}, "not zstd"...)} {
		if _, err := decode(bad); err == nil {
			t.Errorf("decode(%q...) succeeded", bad[:min(len(bad), 8)])
		}
	}
}

// TestCodecHundredThousandInstances measures the record of a job of
// 100,000 instances against the same data stored as one TaskStatus per
// instance and compressed alike, and keeps it within bounds.
func TestCodecHundredThousandInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	j := bigJob()
	b, err := encode(j)
	if err != nil {
		t.Fatal(err)
	}
	naive := &pelotonv1.ListTasksResponse{}
	for i, s := range j.Tasks {
		naive.Tasks = append(naive.Tasks, &pelotonv1.Task{InstanceId: uint32(i), Status: s})
	}
	// The bounds are sizes, not speeds: the record must stay a few MiB,
	// and the columns must beat the naive form clearly.
	if len(b) > 8<<20 {
		t.Errorf("record %d bytes, over 8 MiB", len(b))
	}
	if raceEnabled {
		// Marshalling the naive form takes long under the race detector,
		// and says nothing about races.
		t.Logf("100,000 instances: record %d KiB (%.1f B per instance)", len(b)>>10, float64(len(b))/1e5)
		equalJobsSampled(t, "100k", roundTrip(t, j), j, 97)
		return
	}
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(naive)
	naiveZ := zenc.EncodeAll(raw, nil)
	t.Logf("100,000 instances: record %d KiB (%.1f B per instance); as TaskStatus messages %d KiB raw, %d KiB compressed",
		len(b)>>10, float64(len(b))/1e5, len(raw)>>10, len(naiveZ)>>10)
	if len(b) > len(naiveZ)*3/4 {
		t.Errorf("record %d bytes, not clearly below the naive %d", len(b), len(naiveZ))
	}
	equalJobs(t, "100k", roundTrip(t, j), j)
}
