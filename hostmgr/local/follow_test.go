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
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// secretFile is a file of the control plane's user that no run may read
// through Logs.
func secretFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("the control plane's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// logsRefused checks that Logs refuses the stream, at once and without
// serving a byte, with or without follow.
func logsRefused(t *testing.T, b *Backend, id string, stream pelotonv1.LogStream) {
	t.Helper()
	for _, follow := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rc, err := b.Logs(ctx, id, hostmgr.LogOptions{Stream: stream, Follow: follow})
		cancel()
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(rc, 1<<10))
			rc.Close()
			t.Fatalf("Logs(%s, %v, follow=%v) served %q", id, stream, follow, data)
		}
		if !errors.Is(err, errNotServed) || !strings.Contains(err.Error(), id) {
			t.Errorf("Logs(%s, %v, follow=%v) = %v, want it refused as not the run's own", id, stream, follow, err)
		}
	}
}

// TestLogsDoNotFollowLinks: a run that replaces its stdout by a symbolic
// link to a file it may not read, and its stderr by a FIFO, gets neither
// served nor the reader stuck.
func TestLogsDoNotFollowLinks(t *testing.T) {
	t.Parallel()
	secret := secretFile(t)
	b, rec := newBackend(t)
	s := spec("escape-0-1", "sh", "-c", `cd "$PELOTON_SANDBOX" && rm stdout stderr && ln -s `+secret+` stdout && mkfifo stderr`)
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal %+v", ev)
	}
	logsRefused(t, b, s.TaskID, pelotonv1.LogStream_STDOUT)
	logsRefused(t, b, s.TaskID, pelotonv1.LogStream_STDERR)

	// While the run is still running too, and for a run whose own
	// output is fine the logs are served as ever.
	s = spec("escape-0-2", "sh", "-c", `cd "$PELOTON_SANDBOX" && echo visible >&2 && rm stdout && ln -s `+secret+` stdout && echo linked >&2 && exec sleep 100`)
	launch(t, b, s)
	waitFile(t, filepath.Join(b.dir, s.TaskID, "stderr"))
	testutil.Eventually(t, waitTimeout, "the run replacing its stdout", func() error {
		data, _ := os.ReadFile(filepath.Join(b.dir, s.TaskID, "stderr"))
		if !strings.Contains(string(data), "linked") {
			return fmt.Errorf("stderr %q", data)
		}
		return nil
	})
	logsRefused(t, b, s.TaskID, pelotonv1.LogStream_STDOUT)
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
	if got := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDERR, true); got != "visible\nlinked\n" {
		t.Errorf("stderr = %q", got)
	}
}

// TestLogsOfTaskUserRunStayInItsSandbox: a run of nobody that links its
// stdout to /etc/shadow gets nothing served; nor does a hard link to a
// file of root's in its sandbox (which nobody cannot make where
// fs.protected_hardlinks is on, so the test makes it).
func TestLogsOfTaskUserRunStayInItsSandbox(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	b, rec := userBackend(t, newUserLayout(t))
	s := spec("shadow-0-1", "sh", "-c", `id -u >&2; ln -sf /etc/shadow "$PELOTON_SANDBOX/stdout" && echo linked >&2`)
	launch(t, b, s)
	if ev := rec.waitTerminal(t, s.TaskID); ev.State != pelotonv1.TaskState_SUCCEEDED {
		t.Fatalf("terminal %+v", ev)
	}
	logsRefused(t, b, s.TaskID, pelotonv1.LogStream_STDOUT)

	// Hard links: one to root's secret is refused; the run's own file
	// with a second name of its own is still the run's.
	sandbox := filepath.Join(b.dir, s.TaskID)
	stderr := filepath.Join(sandbox, "stderr")
	if err := os.Link(stderr, filepath.Join(sandbox, "stderr.copy")); err != nil {
		t.Fatal(err)
	}
	if got := readLogs(t, b, s.TaskID, pelotonv1.LogStream_STDERR, false); !strings.HasSuffix(got, "linked\n") {
		t.Errorf("the run's own stderr, with two names: %q", got)
	}
	if err := os.Remove(stderr); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secretFile(t), stderr); err != nil {
		t.Fatal(err)
	}
	logsRefused(t, b, s.TaskID, pelotonv1.LogStream_STDERR)
}

// TestOpenOutput covers what a run cannot do to its sandbox but what
// openOutput refuses all the same: a sandbox that is itself a link.
func TestOpenOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "stdout"), []byte("out\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(real, "stderr"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := openOutput(real, "stdout")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(data) != "out\n" {
		t.Errorf("read %q, %v", data, err)
	}
	for _, c := range []struct{ sandbox, name string }{{filepath.Join(dir, "link"), "stdout"}, {real, "stderr"}} {
		if f, err := openOutput(c.sandbox, c.name); !errors.Is(err, errNotServed) {
			if f != nil {
				f.Close()
			}
			t.Errorf("openOutput(%s, %s) = %v, want it refused", c.sandbox, c.name, err)
		}
	}
	if _, err := openOutput(real, "missing"); !errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
}
