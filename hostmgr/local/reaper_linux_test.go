package local

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// procStatus returns a field of /proc/self/status as a number (kB for the
// memory fields).
func procStatus(t testing.TB, field string) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatalf("/proc/self/status %s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/status: no %s", field)
	return 0
}

// openFDs counts the process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// runningCounter counts the runs that have reported RUNNING and those that
// have ended.
type runningCounter struct {
	running, ended chan struct{}
}

func (c *runningCounter) sink(ev hostmgr.TaskEvent) {
	switch {
	case ev.State == pelotonv1.TaskState_RUNNING && ev.Health == pelotonv1.HealthState_HEALTH_UNKNOWN:
		c.running <- struct{}{}
	case terminal(ev.State):
		c.ended <- struct{}{}
	}
}

// startSleeps launches n runs of `sleep 3600` and waits until all run.
func startSleeps(t testing.TB, n int) (*Backend, *runningCounter) {
	t.Helper()
	c := &runningCounter{running: make(chan struct{}, n), ended: make(chan struct{}, n)}
	b, err := New(Config{Dir: t.TempDir(), Hosts: 1, HostCapacity: resources.Resources{MilliCPU: 1000, MemoryMB: 1024}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := b.Start(context.Background(), c.sink); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := b.Launch(context.Background(), spec(fmt.Sprintf("sleep-%d", i), "sleep", "3600")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(2 * time.Minute)
	for i := range n {
		select {
		case <-c.running:
		case <-deadline:
			t.Fatalf("only %d of %d runs reported RUNNING", i, n)
		}
	}
	return b, c
}

// watched waits until the reaper watches at least n runs.
func watched(t testing.TB, n int) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("the reaper watches %d runs", n), func() error {
		theReaper.mu.Lock()
		k := len(theReaper.waiting)
		theReaper.mu.Unlock()
		if k < n {
			return fmt.Errorf("it watches %d", k)
		}
		return nil
	})
}

// TestManyRunsFewThreads checks that waiting for runs costs no thread per
// run: with 500 processes running, the test process has a small number of
// threads (it had one more per run when each wait blocked a thread).
func TestManyRunsFewThreads(t *testing.T) {
	const n, maxThreads = 500, 50
	b, c := startSleeps(t, n)
	// Count once every run's end is watched: by the reaper, through its
	// pidfd, with no thread waiting (a wait that blocked a thread would
	// not register there, and this wait would fail).
	watched(t, n)
	if got := procStatus(t, "Threads"); got > maxThreads {
		t.Fatalf("%d runs: %d threads, want <= %d", n, got, maxThreads)
	}
	// One descriptor per run (its pidfd), not two: 10,000 runs must fit in
	// a file limit of 20,000 with room to spare.
	if got := openFDs(t); got > n+maxThreads {
		t.Fatalf("%d runs: %d open descriptors, want <= %d", n, got, n+maxThreads)
	}
	// Every run is still reaped and reported: kill them all and count.
	for i := range n {
		if err := b.Kill(context.Background(), fmt.Sprintf("sleep-%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(2 * time.Minute)
	for i := range n {
		select {
		case <-c.ended:
		case <-deadline:
			t.Fatalf("only %d of %d runs ended after Kill", i, n)
		}
	}
	if got := procStatus(t, "Threads"); got > maxThreads {
		t.Fatalf("after the kills: %d threads, want <= %d", got, maxThreads)
	}
}

// BenchmarkManyRuns starts -benchtime runs of `sleep` (e.g. -benchtime
// 10000x) at once on one virtual host and reports the process's threads,
// open descriptors and resident memory while they all run; ns/op is the
// time from the first Launch to the last RUNNING, per run.
func BenchmarkManyRuns(b *testing.B) {
	n := b.N
	threads0, rss0 := procStatus(b, "Threads"), procStatus(b, "VmRSS")
	be, c := startSleeps(b, n)
	b.StopTimer()
	watched(b, n)
	threads, rss, fds := procStatus(b, "Threads"), procStatus(b, "VmRSS"), openFDs(b)
	b.ReportMetric(float64(n), "runs")
	b.ReportMetric(float64(threads), "threads")
	b.ReportMetric(float64(threads-threads0), "threads-added")
	b.ReportMetric(float64(fds), "fds")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(rss-rss0)*1024/float64(n), "rss-B/run")
	if err := be.Close(); err != nil {
		b.Fatal(err)
	}
	for range n {
		<-c.ended
	}
}

// TestExitNotifyLeavesZombie checks both ways of waiting (the pidfd reaper
// and its blocking fallback): the channel closes once the child has exited,
// the child is left for its owner to reap with its exit status, and the
// reaper's loop stops when it watches nothing.
func TestExitNotifyLeavesZombie(t *testing.T) {
	for name, notify := range map[string]func(int) <-chan struct{}{
		"pidfd":    exitNotify,
		"blocking": func(pid int) <-chan struct{} { return blockingNotify(pid) },
	} {
		t.Run(name, func(t *testing.T) {
			p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "sleep 0.2; exit 3"}, &os.ProcAttr{})
			if err != nil {
				t.Fatal(err)
			}
			pid := p.Pid
			p.Release()
			select {
			case <-notify(pid):
			case <-time.After(waitTimeout):
				t.Fatal("no exit notification")
			}
			ws, err := wait4(pid)
			if err != nil {
				t.Fatalf("wait4 after the notification: %v (the child was reaped by someone else)", err)
			}
			if ws.ExitStatus() != 3 {
				t.Fatalf("exit status %d, want 3", ws.ExitStatus())
			}
			testutil.Eventually(t, waitTimeout, "the reaper's loop ends with nothing to watch", func() bool {
				theReaper.mu.Lock()
				defer theReaper.mu.Unlock()
				return theReaper.epfd < 0 && len(theReaper.waiting) == 0
			})
		})
	}
}
