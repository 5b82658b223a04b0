package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/backendtest"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"golang.org/x/sys/unix"
)

var testCapacity = resources.Resources{MilliCPU: 4000, MemoryMB: 4096}

// supervisorOf is the pid of run id's supervisor in b.
func supervisorOf(t *testing.T, b *Backend, id string) int {
	t.Helper()
	tk, ok := b.lookup(id)
	if !ok {
		t.Fatalf("no run %s", id)
	}
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.sup <= 0 {
		t.Fatalf("run %s has no supervisor", id)
	}
	return tk.sup
}

// TestRunsHaveSupervisors: a run's parent is its supervisor, a process of
// this binary named peloton-supervisor in a session of its own, and the
// run's end reaches the backend through it with the true exit code.
func TestRunsHaveSupervisors(t *testing.T) {
	b := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: testCapacity})
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	const id = "sup-0-1"
	if err := b.Launch(context.Background(), hostmgr.LaunchSpec{TaskID: id, JobID: "sup", Host: "local-0",
		Command: []string{"sleep", "3600"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 16}}); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, id, pelotonv1.TaskState_RUNNING)
	sup := supervisorOf(t, b, id)
	tk, _ := b.lookup(id)
	if ppid := parentOf(t, tk.pgid); ppid != sup {
		t.Errorf("the run's parent is %d; want its supervisor %d", ppid, sup)
	}
	if sid, _ := unix.Getsid(sup); sid != sup {
		t.Errorf("the supervisor's session is %d; want its own (%d)", sid, sup)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/cmdline")
	if got := strings.ReplaceAll(string(cmdline), "\x00", " "); !strings.HasPrefix(got, supervise.ProcessName+" "+id) {
		t.Errorf("the supervisor's command line is %q; want %q first", got, supervise.ProcessName+" "+id)
	}
	if err := b.Kill(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	if end := rec.waitTerminal(t, id); end.State != pelotonv1.TaskState_KILLED {
		t.Fatalf("end of a killed run = %+v; want KILLED", end)
	}
	// Its files are gone once the record has the end.
	if _, err := os.Stat(b.statusPath(id)); !os.IsNotExist(err) {
		t.Errorf("the supervisor's status file is still there (%v)", err)
	}
}

// TestSupervisorKilledWhileWatched: a supervisor that dies while the
// backend watches takes the run's end with it. The run is stopped (no one
// could learn how it ends) and reported LOST with ReasonSupervisorLost.
func TestSupervisorKilledWhileWatched(t *testing.T) {
	b := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: testCapacity})
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	const id = "suplost-0-1"
	if err := b.Launch(context.Background(), hostmgr.LaunchSpec{TaskID: id, JobID: "suplost", Host: "local-0",
		Command: []string{"sleep", "3600"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 16}}); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, id, pelotonv1.TaskState_RUNNING)
	tk, _ := b.lookup(id)
	runPid := tk.pgid
	if err := syscall.Kill(supervisorOf(t, b, id), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	end := rec.waitTerminal(t, id)
	if end.State != pelotonv1.TaskState_LOST || end.Reason != ReasonSupervisorLost {
		t.Fatalf("end of a run whose supervisor was killed = %+v; want LOST %s", end, ReasonSupervisorLost)
	}
	testutil.Eventually(t, waitTimeout, "the orphaned run to be stopped", func() error {
		if _, err := procStartTicks(runPid); err == nil {
			return fmt.Errorf("process %d still runs", runPid)
		}
		return nil
	})
}

// TestSupervisorKilledWithTheControlPlane: a crash that takes the run's
// supervisor with it leaves the run orphaned; the next backend follows the
// run by its own process, and reports its end LOST (its exit status cannot
// be read), so it runs again.
func TestSupervisorKilledWithTheControlPlane(t *testing.T) {
	dir := t.TempDir()
	old := mustNew(t, Config{Dir: dir, HostCapacity: testCapacity})
	rec := newRecorder()
	if err := old.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	const id = "supcrash-0-1"
	if err := old.Launch(context.Background(), hostmgr.LaunchSpec{TaskID: id, JobID: "supcrash", Host: "local-0",
		Command: []string{"sleep", "1"}, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 16}}); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, id, pelotonv1.TaskState_RUNNING)
	sup := supervisorOf(t, old, id)
	old.detach()
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	next := mustNew(t, Config{Dir: dir, HostCapacity: testCapacity})
	rec2 := newRecorder()
	if err := next.Start(context.Background(), rec2.sink); err != nil {
		t.Fatal(err)
	}
	var end hostmgr.TaskEvent
	testutil.Eventually(t, waitTimeout, "the end of the orphaned run", func() error {
		st, err := next.Status(id)
		end = st
		if err == nil && !terminal(st.State) {
			err = fmt.Errorf("%s", st.State)
		}
		return err
	})
	if end.State != pelotonv1.TaskState_LOST {
		t.Fatalf("end of a run whose supervisor died with the control plane = %+v; want LOST", end)
	}
}

// TestConformanceWithoutSupervisors: runs started as children of the
// backend (off Linux, and the benchmark's baseline) pass the suite too,
// except adoption, whose ends they cannot know.
func TestConformanceWithoutSupervisors(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		Caps: backendtest.Capabilities{HealthChecks: true, Volumes: true, Partitions: true},
		Setup: func(t *testing.T) func() hostmgr.Backend {
			dir := t.TempDir()
			return func() hostmgr.Backend {
				b, err := New(Config{Dir: dir, Hosts: 2, HostCapacity: testCapacity,
					Logger: slog.New(slog.DiscardHandler), direct: true})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
	})
}

// parentOf is the parent pid of pid, from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// BenchmarkSupervisorCost launches -benchtime runs of `sleep` (e.g.
// -benchtime 300x), 16 launches at a time as the job manager's launchers
// issue them, once started directly and once under supervisors, in the
// same run: launches/s for each, and for supervisors their memory per run
// (proportional set size: the binary's pages are shared between them, so
// RSS overstates it; both are reported).
func BenchmarkSupervisorCost(b *testing.B) {
	for _, mode := range []struct {
		name   string
		direct bool
	}{{"direct", true}, {"supervised", false}} {
		b.Run(mode.name, func(b *testing.B) {
			be := mustNew(b, Config{Dir: b.TempDir(), Hosts: 1,
				HostCapacity: resources.Resources{MilliCPU: 1000 * 1000, MemoryMB: 1 << 20}, direct: mode.direct})
			c := &runningCounter{running: make(chan struct{}, b.N), ended: make(chan struct{}, b.N)}
			if err := be.Start(context.Background(), c.sink); err != nil {
				b.Fatal(err)
			}
			ids := make(chan string, b.N)
			for i := range b.N {
				ids <- fmt.Sprintf("cost-%d", i)
			}
			close(ids)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for id := range ids {
						if err := be.Launch(context.Background(), spec(id, "sleep", "3600")); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
			for range b.N {
				<-c.running
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "launches/s")
			if !mode.direct {
				var pss, rss int
				for i := range b.N {
					tk, _ := be.lookup(fmt.Sprintf("cost-%d", i))
					pss += smapsField(b, tk.sup, "Pss")
					rss += smapsField(b, tk.sup, "Rss")
				}
				b.ReportMetric(float64(pss)/float64(b.N)/1024, "sup-pss-MiB/run")
				b.ReportMetric(float64(rss)/float64(b.N)/1024, "sup-rss-MiB/run")
			}
			if err := be.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// smapsField is a field of /proc/<pid>/smaps_rollup, in kB.
func smapsField(b *testing.B, pid int, field string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	b.Fatalf("/proc/%d/smaps_rollup: no %s", pid, field)
	return 0
}
