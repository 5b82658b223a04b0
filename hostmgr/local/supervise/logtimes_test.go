package supervise

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// chunks is a pipe that returns one chunk per read, moving a fake clock
// before each.
type chunks struct {
	parts []string
	steps []time.Duration
	clock *time.Time
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, os.ErrClosed
	}
	*c.clock = c.clock.Add(c.steps[0])
	n := copy(p, c.parts[0])
	c.parts, c.steps = c.parts[1:], c.steps[1:]
	return n, nil
}

func TestCopierIndexesLineStartsAtMostEveryTimesEvery(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.OpenFile(filepath.Join(dir, "stdout"+TimesSuffix), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	clock := t0
	ms := time.Millisecond
	src := &chunks{clock: &clock,
		parts: []string{"a\nb\n", "c\n", "par", "tial\nd", "\n", "e\n", "f\ng\n", "h\n"},
		// c comes too soon after a for an entry of its own; "tial\nd"
		// starts d; "e\n" arrives after a wall clock step back, and no
		// entry is written until the clock is past the last one again.
		steps: []time.Duration{0, 50 * ms, 100 * ms, 100 * ms, 100 * ms, -time.Second, 200 * ms, time.Second}}
	newCopier(src, out, index, func() time.Time { return clock }).run()

	data, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "a\nb\nc\npartial\nd\ne\nf\ng\nh\n" {
		t.Fatalf("copied %q", data)
	}
	x := NewTimeIndex(index)
	n, err := x.Len()
	if err != nil {
		t.Fatal(err)
	}
	var got []TimeEntry
	for i := range n {
		e, err := x.At(i)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	// "par" at 150ms: a line start (offset 6). "tial\nd" at 250ms: d
	// (offset 14). "\n" at 350ms: no line starts in it. "e\n" at -650ms
	// and "f\ng\n" at -450ms: the clock went back, so they keep d's time.
	// "h\n" at 550ms: past d's time again.
	want := []TimeEntry{{0, t0}, {6, t0.Add(150 * ms)}, {14, t0.Add(250 * ms)}, {22, t0.Add(550 * ms)}}
	if len(got) != len(want) {
		t.Fatalf("index = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || !got[i].Time.Equal(want[i].Time) {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for since, first := range map[time.Duration]int{-time.Hour: 0, 1: 1, 150 * ms: 1, 151 * ms: 2, 251 * ms: 3, time.Hour: 4} {
		i, err := x.FirstSince(n, t0.Add(since))
		if err != nil || i != first {
			t.Errorf("FirstSince(t0%+v) = %d, %v; want %d", since, i, err, first)
		}
	}
	// A torn last entry (the supervisor killed while writing it) is not
	// one.
	if _, err := index.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if n2, _ := x.Len(); n2 != n {
		t.Errorf("Len with a torn entry = %d, want %d", n2, n)
	}
}
