package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// retentionBackend starts a Backend over dir whose sweeper passes follow
// each other quickly.
func retentionBackend(t *testing.T, dir string, cfg Config) (*Backend, *recorder) {
	t.Helper()
	cfg.Dir, cfg.HostCapacity = dir, testCapacity
	if cfg.sweepEvery == 0 {
		cfg.sweepEvery = 20 * time.Millisecond
	}
	b := mustNew(t, cfg)
	rec := newRecorder()
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	return b, rec
}

func jobSpec(job string, inst, run uint32, cmd ...string) hostmgr.LaunchSpec {
	return hostmgr.LaunchSpec{TaskID: fmt.Sprintf("%s-%d-%d", job, inst, run), JobID: job, InstanceID: inst, RunID: run,
		Host: "local-0", Command: cmd}
}

// runToEnd launches s and waits for its end.
func runToEnd(t *testing.T, b *Backend, rec *recorder, s hostmgr.LaunchSpec) hostmgr.TaskEvent {
	t.Helper()
	launch(t, b, s)
	return rec.waitTerminal(t, s.TaskID)
}

// readOutput reads a run's stdout through Logs.
func readOutput(b *Backend, id string) (string, error) {
	r, err := b.Logs(context.Background(), id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: false})
	if err != nil {
		return "", err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return string(data), err
}

// outputGone reports, as an error, whether run id still has output or a
// record on disk, or is still known to Status.
func outputGone(b *Backend, id string) error {
	if _, err := os.Lstat(filepath.Join(b.dir, id)); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox of %s still there (%v)", id, err)
	}
	if _, err := readOutput(b, id); !errors.Is(err, hostmgr.ErrUnknownTask) {
		return fmt.Errorf("Logs of %s = %v, want ErrUnknownTask", id, err)
	}
	return nil
}

func recordGone(t *testing.T, b *Backend, id string) {
	t.Helper()
	if _, err := os.Lstat(b.recordPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of %s still there (%v)", id, err)
	}
	if _, err := b.Status(id); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("Status of %s = %v, want ErrUnknownTask", id, err)
	}
}

func outputIs(t *testing.T, b *Backend, id, want string) {
	t.Helper()
	got, err := readOutput(b, id)
	if err != nil || got != want {
		t.Errorf("output of %s = %q, %v; want %q", id, got, err, want)
	}
}

// TestOutputLivesAsLongAsItsJob: with no retention, a job's runs' output
// and records go when the job leaves the live store, and another job's
// stay. A run of the removed job that still runs keeps its output until
// it has ended.
func TestOutputLivesAsLongAsItsJob(t *testing.T) {
	b, rec := retentionBackend(t, t.TempDir(), Config{})
	a0, a1, other := jobSpec("a", 0, 1, "echo", "a0"), jobSpec("a", 1, 3, "echo", "a1"), jobSpec("b", 0, 1, "echo", "b0")
	for _, s := range []hostmgr.LaunchSpec{a0, a1, other} {
		runToEnd(t, b, rec, s)
	}
	live := jobSpec("a", 2, 1, "sh", "-c", "echo live; exec sleep 3600")
	launch(t, b, live)
	rec.waitState(t, live.TaskID, pelotonv1.TaskState_RUNNING)
	testutil.Eventually(t, waitTimeout, "the live run's output", func() error {
		if got, err := readOutput(b, live.TaskID); got != "live\n" {
			return fmt.Errorf("%q, %v", got, err)
		}
		return nil
	})
	outputIs(t, b, a0.TaskID, "a0\n")
	if supervise.Supported {
		// The times of its lines are kept beside the output, and go with it.
		if _, err := os.Stat(filepath.Join(b.dir, a0.TaskID, "stdout"+supervise.TimesSuffix)); err != nil {
			t.Errorf("no time index beside the output of %s: %v", a0.TaskID, err)
		}
	}

	if err := b.RemoveJobOutput(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a0.TaskID, a1.TaskID} {
		recordGone(t, b, id) // at once: the job's ends were observed
		testutil.Eventually(t, waitTimeout, "output of "+id+" removed", func() error { return outputGone(b, id) })
	}
	if err := b.RemoveJobOutput(context.Background(), "a"); err != nil {
		t.Errorf("a second RemoveJobOutput = %v, want nil", err)
	}
	if err := b.RemoveJobOutput(context.Background(), "never-seen"); err != nil {
		t.Errorf("RemoveJobOutput of an unknown job = %v, want nil", err)
	}
	if err := b.RemoveJobOutput(context.Background(), "../x"); err == nil {
		t.Errorf("RemoveJobOutput of a job ID that is no file name = nil, want an error")
	}
	// Several sweeps later, the live run and the other job are untouched.
	b.waitSweeps(t, 3)
	outputIs(t, b, live.TaskID, "live\n")
	outputIs(t, b, other.TaskID, "b0\n")
	if ev, err := b.Status(other.TaskID); err != nil || ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status of another job's run = %+v, %v", ev, err)
	}
	if err := b.Kill(context.Background(), live.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, live.TaskID)
	testutil.Eventually(t, waitTimeout, "output of the removed job's last run removed once it ended", func() error {
		return outputGone(b, live.TaskID)
	})
	testutil.Eventually(t, waitTimeout, "the job's tombstone dropped", func() error {
		if left, _ := os.ReadDir(filepath.Join(b.dir, runsDir, removedDir)); len(left) > 0 {
			return fmt.Errorf("tombstones left: %v", left)
		}
		return nil
	})
	outputIs(t, b, other.TaskID, "b0\n")
}

// TestOutputKeptForItsRetention: with a retention, a run's output stays
// readable after its job left the live store (its record does not) and
// goes once the retention has passed since the run ended, whatever its
// job; a sandbox whose record was long forgotten goes by the age of its
// files.
func TestOutputKeptForItsRetention(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	// A sandbox of a run whose record is gone (pruned, or from before
	// records), written now.
	orphan := filepath.Join(dir, "old-0-1")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan, "stdout"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory that is no run's: never removed.
	notes := filepath.Join(dir, "notes")
	if err := os.Mkdir(notes, 0o700); err != nil {
		t.Fatal(err)
	}
	b, rec := retentionBackend(t, dir, Config{LogRetention: time.Hour, now: clock.Now})
	gone := jobSpec("gone", 0, 1, "echo", "kept")
	live := jobSpec("live", 0, 1, "echo", "also kept")
	runToEnd(t, b, rec, gone)
	runToEnd(t, b, rec, live)
	if err := b.RemoveJobOutput(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	recordGone(t, b, gone.TaskID)
	b.waitSweeps(t, 3)
	outputIs(t, b, gone.TaskID, "kept\n")
	outputIs(t, b, live.TaskID, "also kept\n")
	outputIs(t, b, "old-0-1", "old\n")

	clock.Advance(59 * time.Minute)
	b.waitSweeps(t, 3)
	outputIs(t, b, gone.TaskID, "kept\n")

	clock.Advance(2 * time.Minute)
	for _, id := range []string{gone.TaskID, live.TaskID, "old-0-1"} {
		testutil.Eventually(t, waitTimeout, "output of "+id+" removed after the retention", func() error { return outputGone(b, id) })
	}
	b.waitSweeps(t, 2)
	if _, err := os.Stat(notes); err != nil {
		t.Errorf("a directory that is no run's sandbox was removed: %v", err)
	}
	// The record of the run whose job is still live stays: its end may
	// still be asked for.
	if ev, err := b.Status(live.TaskID); err != nil || ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status of a live job's run after its output went = %+v, %v", ev, err)
	}
}

// TestRunRecordsBounded: ended runs' records and supervisor files do not
// accumulate: the oldest beyond the bound go, in this backend and when
// another starts over the same Dir.
func TestRunRecordsBounded(t *testing.T) {
	dir := t.TempDir()
	b, rec := retentionBackend(t, dir, Config{maxFinished: 3})
	for i := range 6 {
		runToEnd(t, b, rec, jobSpec("many", uint32(i), 1, "true"))
	}
	countRecords := func() (records, other int) {
		entries, err := os.ReadDir(filepath.Join(dir, runsDir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch {
			case e.IsDir():
			case strings.HasSuffix(e.Name(), ".json"):
				records++
			default:
				other++
			}
		}
		return records, other
	}
	if n, other := countRecords(); n != 3 || other != 0 {
		t.Errorf("%d records and %d other files under runs/, want 3 and 0", n, other)
	}
	if _, err := b.Status("many-0-1"); !errors.Is(err, hostmgr.ErrUnknownTask) {
		t.Errorf("Status of the oldest run = %v, want ErrUnknownTask", err)
	}
	if ev, err := b.Status("many-5-1"); err != nil || ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status of the newest run = %+v, %v", ev, err)
	}
	// The output is not the records': it stays with its job.
	outputIs(t, b, "many-0-1", "")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, _ := retentionBackend(t, dir, Config{maxFinished: 2})
	if n, _ := countRecords(); n != 2 {
		t.Errorf("%d records after a restart with a bound of 2, want 2", n)
	}
	if ev, err := b2.Status("many-5-1"); err != nil || ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("Status of the newest run after a restart = %+v, %v", ev, err)
	}
}

func TestNegativeLogRetentionRefused(t *testing.T) {
	_, err := New(Config{Dir: t.TempDir(), LogRetention: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "logRetention") {
		t.Fatalf("New with a negative retention = %v, want an error naming it", err)
	}
}

// waitSweeps waits until the sweeper has gone over the whole Dir n more
// times.
func (b *Backend) waitSweeps(t *testing.T, n int64) {
	t.Helper()
	b.sweepMu.Lock()
	want := b.sweepCycles + n
	b.sweepMu.Unlock()
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("%d sweeps", n), func() error {
		b.sweepMu.Lock()
		defer b.sweepMu.Unlock()
		if b.sweepCycles < want {
			return fmt.Errorf("%d of %d sweeps", b.sweepCycles, want)
		}
		return nil
	})
}
