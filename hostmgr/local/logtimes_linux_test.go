package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// stampedLine is one line of output read with timestamps.
type stampedLine struct {
	at   time.Time
	text string
}

func parseStamped(t *testing.T, out string) []stampedLine {
	t.Helper()
	var lines []stampedLine
	for _, l := range strings.SplitAfter(out, "\n") {
		if l == "" {
			continue
		}
		ts, text, ok := strings.Cut(l, " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			t.Fatalf("line %q has no RFC 3339 time first: %v", l, err)
		}
		lines = append(lines, stampedLine{at, text})
	}
	return lines
}

func readOpts(t *testing.T, b *Backend, id string, opts hostmgr.LogOptions) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rc, err := b.Logs(ctx, id, opts)
	if err != nil {
		t.Fatalf("Logs %s %+v: %v", id, opts, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitOutput waits until the run's stdout holds want.
func waitOutput(t *testing.T, b *Backend, id, want string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, id+" writes "+want, func() error {
		data, _ := os.ReadFile(filepath.Join(b.dir, id, "stdout"))
		if string(data) != want {
			return fmt.Errorf("stdout %q", data)
		}
		return nil
	})
}

// pastLastTime waits until the clock is more than supervise.TimesEvery
// past the last time recorded for the run's stdout, so that the next line
// gets a time of its own, and returns the time then.
func pastLastTime(t *testing.T, b *Backend, id string) time.Time {
	t.Helper()
	f, err := os.Open(filepath.Join(b.dir, id, "stdout"+supervise.TimesSuffix))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x := supervise.NewTimeIndex(f)
	n, err := x.Len()
	if err != nil || n == 0 {
		t.Fatalf("index of %s: %d entries, %v", id, n, err)
	}
	last, err := x.At(n - 1)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the clock past the last recorded time", func() error {
		if time.Since(last.Time) <= supervise.TimesEvery {
			return errors.New("not yet")
		}
		return nil
	})
	return time.Now()
}

func TestLogsSinceAndTimestamps(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	const id = "stamped"
	before := time.Now()
	launch(t, b, spec(id, "sh", "-c",
		`echo a; echo b; while [ ! -e go ]; do sleep 0.01; done; echo c; echo d; while [ ! -e go2 ]; do sleep 0.01; done; echo e`))
	waitOutput(t, b, id, "a\nb\n")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	follow, err := b.Logs(ctx, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Follow: true, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	cut := pastLastTime(t, b, id)
	if err := os.WriteFile(filepath.Join(b.dir, id, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, b, id, "a\nb\nc\nd\n")
	pastLastTime(t, b, id)
	if err := os.WriteFile(filepath.Join(b.dir, id, "go2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if end := rec.waitTerminal(t, id); end.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("end = %+v", end)
	}
	after := time.Now()

	all := readOpts(t, b, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Timestamps: true})
	lines := parseStamped(t, all)
	var texts []string
	for i, l := range lines {
		texts = append(texts, l.text)
		if l.at.Before(before) || l.at.After(after) {
			t.Errorf("line %q at %v: outside the run's life [%v, %v]", l.text, l.at, before, after)
		}
		if i > 0 && l.at.Before(lines[i-1].at) {
			t.Errorf("line %q at %v is before the line above it (%v)", l.text, l.at, lines[i-1].at)
		}
	}
	if got := strings.Join(texts, ""); got != "a\nb\nc\nd\ne\n" {
		t.Fatalf("stamped lines %q", got)
	}
	if !lines[1].at.Before(cut) || lines[2].at.Before(cut) {
		t.Errorf("b at %v, c at %v: want b before and c at or after %v", lines[1].at, lines[2].at, cut)
	}
	// Following stamps the lines written while it reads, the same way.
	if got, err := io.ReadAll(follow); err != nil || string(got) != all {
		t.Errorf("followed with timestamps = %q, %v; want %q", got, err, all)
	}
	for _, c := range []struct {
		since time.Time
		want  string
	}{{before.Add(-time.Hour), "a\nb\nc\nd\ne\n"}, {cut, "c\nd\ne\n"}, {lines[4].at, "e\n"}, {after, ""}} {
		if got := readOpts(t, b, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Since: c.since}); got != c.want {
			t.Errorf("since %v = %q, want %q", c.since, got, c.want)
		}
	}
	if got := readOpts(t, b, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Since: cut, Timestamps: true}); !strings.HasSuffix(all, got) || parseStamped(t, got)[0].text != "c\n" {
		t.Errorf("since %v with timestamps = %q, want the end of %q from c", cut, got, all)
	}
	if got := readOpts(t, b, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDERR, Timestamps: true}); got != "" {
		t.Errorf("stderr = %q", got)
	}
}

// TestLogTimesAcrossARestart: the supervisor records times while no
// control plane runs, and the next one serves them.
func TestLogTimesAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	old := mustNew(t, Config{Dir: dir, HostCapacity: testCapacity})
	rec := newRecorder()
	if err := old.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	const id = "restamped-0-1"
	if err := old.Launch(context.Background(), hostmgr.LaunchSpec{TaskID: id, JobID: "restamped", Host: "local-0",
		Command:   []string{"sh", "-c", `echo a; while [ ! -e go ]; do sleep 0.01; done; echo b`},
		Resources: resources.Resources{MilliCPU: 100, MemoryMB: 16}}); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, old, id, "a\n")
	old.detach()
	cut := pastLastTime(t, old, id)
	if err := os.WriteFile(filepath.Join(dir, id, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, old, id, "a\nb\n")
	next := mustNew(t, Config{Dir: dir, HostCapacity: testCapacity})
	rec2 := newRecorder()
	if err := next.Start(context.Background(), rec2.sink); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the end of the adopted run", func() error {
		st, err := next.Status(id)
		if err == nil && st.State != pelotonv1.TaskState_SUCCEEDED {
			err = fmt.Errorf("%s", st.State)
		}
		return err
	})
	got := parseStamped(t, readOpts(t, next, id, hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Since: cut, Timestamps: true}))
	if len(got) != 1 || got[0].text != "b\n" || got[0].at.Before(cut) {
		t.Errorf("since %v after a restart = %+v, want b stamped at or after it", cut, got)
	}
}

// TestLogsWithoutTimes: a run without an index (started without a
// supervisor, or before the index existed) is served as it is, and Since
// and Timestamps are refused rather than guessed.
func TestLogsWithoutTimes(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	b := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: testCapacity, direct: true})
	if err := b.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	launch(t, b, spec("untimed", "echo", "x"))
	rec.waitTerminal(t, "untimed")
	if got := readLogs(t, b, "untimed", pelotonv1.LogStream_STDOUT, false); got != "x\n" {
		t.Errorf("stdout = %q", got)
	}
	for _, opts := range []hostmgr.LogOptions{{Since: time.Now().Add(-time.Hour)}, {Timestamps: true}} {
		opts.Stream = pelotonv1.LogStream_STDOUT
		_, err := b.Logs(context.Background(), "untimed", opts)
		if !errors.Is(err, hostmgr.ErrNoLogTimes) || !strings.Contains(err.Error(), "stdout") {
			t.Errorf("Logs %+v of a run without times = %v, want ErrNoLogTimes naming stdout", opts, err)
		}
	}
}

// TestOutputDrainedBeforeTheEnd: what a run writes just before it exits is
// in its output once its end is known, with a time for every line; a
// process that left the run's group and keeps its stdout open delays the
// end by a bounded time only.
func TestOutputDrainedBeforeTheEnd(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	launch(t, b, spec("burst", "seq", "1", "20000"))
	rec.waitTerminal(t, "burst")
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := readLogs(t, b, "burst", pelotonv1.LogStream_STDOUT, false); got != want.String() {
		t.Errorf("output read at the run's end: %d bytes, want %d", len(got), want.Len())
	}
	if got := parseStamped(t, readOpts(t, b, "burst", hostmgr.LogOptions{Stream: pelotonv1.LogStream_STDOUT, Timestamps: true})); len(got) != 20000 {
		t.Errorf("stamped lines: %d, want 20000", len(got))
	}

	launch(t, b, spec("escapes", "sh", "-c", `setsid sh -c 'echo $$ > stray.new; mv stray.new stray; exec sleep 60' & while [ ! -e stray ]; do sleep 0.01; done; echo left`))
	stray := readPid(t, filepath.Join(b.dir, "escapes", "stray"))
	t.Cleanup(func() { _ = syscall.Kill(stray, syscall.SIGKILL) })
	if end := rec.waitTerminal(t, "escapes"); end.State != pelotonv1.TaskState_SUCCEEDED {
		t.Errorf("end of a run whose child kept its stdout = %+v, want SUCCEEDED", end)
	}
	if got := readLogs(t, b, "escapes", pelotonv1.LogStream_STDOUT, true); got != "left\n" {
		t.Errorf("output = %q", got)
	}
}
