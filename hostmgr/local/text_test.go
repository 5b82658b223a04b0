package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/sanitize"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestHealthCheckOutputNotUTF8: a command check's output is whatever the
// job's program prints. Output that is not valid UTF-8, and longer than the
// backend keeps, reaches the stack (through hostmgr, as in a running
// cluster) as a valid message, and the backend's own message is already
// valid and cut between runes.
func TestHealthCheckOutputNotUTF8(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(out, []byte("not \xff\xfe ready "+strings.Repeat("é", 400)), 0o644); err != nil {
		t.Fatal(err)
	}
	b := mustNew(t, Config{Dir: t.TempDir(), HostCapacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	hm := hostmgr.NewManager(b, hostmgr.Options{})
	if err := hm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := spec("dirtycheck", "sleep", "100")
	s.HealthCheck = every1s(1, "sh", "-c", "cat "+out+"; exit 3")
	if err := hm.Launch(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(waitTimeout)
	var ev hostmgr.TaskEvent
	for ev.Health != pelotonv1.HealthState_UNHEALTHY {
		select {
		case ev = <-hm.Events():
		case <-deadline:
			t.Fatal("no UNHEALTHY event")
		}
	}
	if !utf8.ValidString(ev.Message) || len(ev.Message) > sanitize.MaxMessage || !strings.Contains(ev.Message, "not \uFFFD ready éé") {
		t.Errorf("UNHEALTHY message %q: want valid UTF-8 with the output's readable part", ev.Message)
	}
	if err := hm.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
}

// TestCappedBufferCutsBetweenRunes: the kept output is cut on a rune
// boundary and made valid, whatever was written.
func TestCappedBufferCutsBetweenRunes(t *testing.T) {
	c := &cappedBuffer{max: 8}
	c.Write([]byte("a\xffé€€€"))
	if got := c.String(); got != "a\uFFFDé€" {
		t.Errorf("String() = %q, want the whole runes of the first 8 bytes", got)
	}
}

// TestHealthCheckThatCannotBeRecorded: a health check protojson refuses
// (a string that is not UTF-8; jobmgr never sends one, since it could not
// store the spec) is not written into the run's record half-encoded: the
// run runs, unrecorded, and says so in the log.
func TestHealthCheckThatCannotBeRecorded(t *testing.T) {
	t.Parallel()
	b, rec := newBackend(t)
	s := spec("unrecorded", "sleep", "100")
	s.HealthCheck = every1s(1, "true", "\xff")
	launch(t, b, s)
	rec.waitState(t, s.TaskID, pelotonv1.TaskState_RUNNING)
	if _, err := os.Stat(b.recordPath(s.TaskID)); !os.IsNotExist(err) {
		t.Errorf("a record was written for a run whose check cannot be encoded: %v", err)
	}
	if err := b.Kill(context.Background(), s.TaskID, 0); err != nil {
		t.Fatal(err)
	}
	rec.waitTerminal(t, s.TaskID)
}
