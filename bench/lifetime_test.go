package bench_test

import (
	"context"
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/bench"
	"github.com/peloton-sched/peloton/cmd/peloton/cli"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// childEnv makes this test binary run as the peloton command: the
// lifetime scenario runs `peloton up` as a child process, and this binary,
// which links the same CLI, stands in for a built one.
const childEnv = "PELOTON_BENCH_TEST_AS_PELOTON"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
	testutil.LeakCheckMain(m, testutil.RunsCodeOf("bench"))
}

// TestLifetimeScenario runs the lifetime scenario at a tiny size: every
// figure is there, every job pushed and every live job was collected, and
// the restarts were measured. No timing is asserted.
func TestLifetimeScenario(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the scenario reads the child's memory from /proc")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(childEnv, "1")
	cfg := bench.LifetimeConfig{Hosts: 50, Checkpoints: []int{20, 40}, Instances: 10, TTL: 500 * time.Millisecond,
		LiveJobs: 5, MaxInFlight: 15, Samples: 20, PelotonBin: exe}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var lines []string
	r, err := bench.Lifetime(ctx, bench.Env{Progress: func(s string) { lines = append(lines, s); t.Log(s) }}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range bench.LifetimeFigures(cfg.Checkpoints) {
		v, ok := r.Figure(f)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Errorf("figure %s = %g (present %v)", f, v, ok)
		}
	}
	fig := func(name string) float64 {
		v, _ := r.Figure(name)
		return v
	}
	if got := fig("jobsPushed"); got != 40 {
		t.Errorf("jobsPushed %g, want 40", got)
	}
	// Every job pushed, and the 5 live jobs of each of the 2 restarts.
	if got := fig("jobsCollected"); got != 40+5*2 {
		t.Errorf("jobsCollected %g, want 50", got)
	}
	for _, cp := range []string{"20", "40"} {
		for _, f := range []string{"restartToReadyMs", "restartRssMb", "rssMb", "etcdDbBytes", "archiveBytes", "pushJobsPerSec", "jobListMsP99", "archivedGetMsP99"} {
			if fig(f+cp) <= 0 {
				t.Errorf("%s%s = %g, want > 0", f, cp, fig(f+cp))
			}
		}
	}
	if fig("archiveBytes40") < fig("archiveBytes20") {
		t.Errorf("the archive shrank: %g bytes after 20 jobs, %g after 40", fig("archiveBytes20"), fig("archiveBytes40"))
	}
	if got, want := fig("restartToReadyMs40Over20"), fig("restartToReadyMs40")/fig("restartToReadyMs20"); math.Abs(got-want) > 1e-9 {
		t.Errorf("restartToReadyMs40Over20 = %g, want %g", got, want)
	}
	if _, ok := r.Figure("archivedGetApiMsP9920"); ok != (fig("archivedGetApiMsP9940") > 0) {
		t.Error("the API's archived reads were measured at one checkpoint only")
	}
	if len(lines) == 0 {
		t.Error("no progress reported")
	}
	for _, n := range r.Notes {
		t.Logf("note: %s", n)
	}
}
