package local

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestStampReader reads output against an index written by hand: a line
// takes the time of the latest entry at or before it, since starts at the
// first line of that time or later, and a last line without a newline is
// stamped too.
func TestStampReader(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "stdout")
	if err := os.WriteFile(out, []byte("a\nb\nc\nd"), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	var index []byte
	for _, e := range []struct {
		off int64
		at  time.Duration
	}{{0, 0}, {4, 250 * time.Millisecond}, {6, 400 * time.Millisecond}} {
		index = binary.LittleEndian.AppendUint64(index, uint64(e.off))
		index = binary.LittleEndian.AppendUint64(index, uint64(t0.Add(e.at).UnixNano()))
	}
	if err := os.WriteFile(out+supervise.TimesSuffix, index, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func(opts hostmgr.LogOptions) string {
		t.Helper()
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		x, err := openTimes(dir, "stdout")
		if err != nil {
			t.Fatal(err)
		}
		opts.Stream = pelotonv1.LogStream_STDOUT
		r, err := newStampReader(f, x, opts, func(f *os.File) io.ReadCloser { return f })
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, c := range []struct {
		opts hostmgr.LogOptions
		want string
	}{
		{hostmgr.LogOptions{Timestamps: true}, "2026-01-02T15:04:05Z a\n2026-01-02T15:04:05Z b\n2026-01-02T15:04:05.25Z c\n2026-01-02T15:04:05.4Z d"},
		{hostmgr.LogOptions{Since: t0.Add(time.Millisecond)}, "c\nd"},
		{hostmgr.LogOptions{Since: t0.Add(250 * time.Millisecond), Timestamps: true}, "2026-01-02T15:04:05.25Z c\n2026-01-02T15:04:05.4Z d"},
		{hostmgr.LogOptions{Since: t0.Add(-time.Hour)}, "a\nb\nc\nd"},
		{hostmgr.LogOptions{Since: t0.Add(time.Second)}, ""},
	} {
		if got := read(c.opts); got != c.want {
			t.Errorf("since %v, timestamps %v: %q, want %q", c.opts.Since, c.opts.Timestamps, got, c.want)
		}
	}
}
