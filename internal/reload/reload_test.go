package reload

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkEveryTime makes every Get look at the files, for the rest of the
// test.
func checkEveryTime(t *testing.T) {
	old := Interval
	Interval = 0
	t.Cleanup(func() { Interval = old })
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// write replaces path the way a careful operator does: a new file renamed
// into place.
func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// intFile loads the number each of paths holds; the files must agree (as
// a certificate must match its key). loads counts the loads.
func intFile(t *testing.T, loads *int, paths ...string) (*File[int], error) {
	t.Helper()
	return New(paths, func() (int, error) {
		*loads++
		var n int
		for i, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return 0, err
			}
			v, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return 0, fmt.Errorf("%s: %w", p, err)
			}
			if i > 0 && v != n {
				return 0, fmt.Errorf("%s holds %d, %s %d", paths[0], n, p, v)
			}
			n = v
		}
		return n, nil
	}, quiet)
}

func TestNewFailsWhenTheFilesDoNotLoad(t *testing.T) {
	dir := t.TempDir()
	var loads int
	if _, err := intFile(t, &loads, filepath.Join(dir, "missing")); err == nil {
		t.Error("New of a missing file: no error")
	}
	p := filepath.Join(dir, "n")
	write(t, p, "not a number")
	if _, err := intFile(t, &loads, p); err == nil || !strings.Contains(err.Error(), "invalid syntax") {
		t.Errorf("New of a file that does not load: %v, want the load's error", err)
	}
}

func TestReloadsAfterAChange(t *testing.T) {
	checkEveryTime(t)
	p := filepath.Join(t.TempDir(), "n")
	write(t, p, "1")
	var loads int
	f, err := intFile(t, &loads, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != 1 {
		t.Fatalf("Get = %d, want 1", got)
	}
	if loads != 1 {
		t.Errorf("%d loads of an unchanged file, want 1", loads)
	}
	write(t, p, "22")
	if got := f.Get(); got != 22 {
		t.Errorf("after the file changed, Get = %d, want 22", got)
	}
	if err := f.Err(); err != nil {
		t.Errorf("Err after a good reload = %v", err)
	}
}

func TestLooksAtMostOncePerInterval(t *testing.T) {
	old := Interval
	Interval = time.Hour
	t.Cleanup(func() { Interval = old })
	p := filepath.Join(t.TempDir(), "n")
	write(t, p, "1")
	var loads int
	f, err := intFile(t, &loads, p)
	if err != nil {
		t.Fatal(err)
	}
	write(t, p, "2")
	if got := f.Get(); got != 1 || loads != 1 {
		t.Errorf("within the interval: Get = %d after %d loads, want 1 after 1", got, loads)
	}
}

// A replacement that does not load keeps the value loaded before, says
// why in Err, is not loaded again until it changes, and a good one after
// it loads.
func TestBrokenReplacementKeepsTheOldValue(t *testing.T) {
	checkEveryTime(t)
	p := filepath.Join(t.TempDir(), "n")
	write(t, p, "1")
	var loads int
	f, err := intFile(t, &loads, p)
	if err != nil {
		t.Fatal(err)
	}
	write(t, p, "half-writ")
	if got := f.Get(); got != 1 {
		t.Errorf("after a broken replacement, Get = %d, want the old 1", got)
	}
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), "invalid syntax") {
		t.Errorf("Err = %v, want why the replacement did not load", err)
	}
	before := loads
	if got := f.Get(); got != 1 || loads != before {
		t.Errorf("unchanged broken file: Get = %d, %d more loads; want 1 and none", got, loads-before)
	}
	if f.Err() == nil {
		t.Error("Err forgot the broken file while it is still there")
	}
	write(t, p, "3")
	if got := f.Get(); got != 3 {
		t.Errorf("after a good replacement, Get = %d, want 3", got)
	}
	if err := f.Err(); err != nil {
		t.Errorf("Err after a good replacement = %v, want nil", err)
	}
}

// A certificate and its key are replaced one after the other: between the
// two the pair does not load, and the old pair is served; once both are
// there the new pair is.
func TestHalfReplacedPairKeepsTheOldPair(t *testing.T) {
	checkEveryTime(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "cert"), filepath.Join(dir, "key")
	write(t, a, "1")
	write(t, b, "1")
	var loads int
	f, err := intFile(t, &loads, a, b)
	if err != nil {
		t.Fatal(err)
	}
	write(t, a, "2")
	if got := f.Get(); got != 1 || f.Err() == nil {
		t.Errorf("half replaced: Get = %d, Err = %v; want 1 and an error", got, f.Err())
	}
	write(t, b, "2")
	if got := f.Get(); got != 2 || f.Err() != nil {
		t.Errorf("both replaced: Get = %d, Err = %v; want 2 and nil", got, f.Err())
	}
}

// A file that vanishes keeps the value; Err says so while it is away and
// nothing once the same file is back.
func TestMissingFileKeepsTheValue(t *testing.T) {
	checkEveryTime(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "n")
	write(t, p, "1")
	var loads int
	f, err := intFile(t, &loads, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p, p+".away"); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != 1 {
		t.Errorf("file gone: Get = %d, want 1", got)
	}
	if err := f.Err(); !os.IsNotExist(err) {
		t.Errorf("file gone: Err = %v, want a not-exist error", err)
	}
	if err := os.Rename(p+".away", p); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != 1 {
		t.Errorf("file back: Get = %d, want 1", got)
	}
	if err := f.Err(); err != nil {
		t.Errorf("the same file is back, but Err = %v", err)
	}
	if loads != 1 {
		t.Errorf("%d loads, want 1: the file that came back is the one loaded", loads)
	}
}

// A replacement of the same size and modification time (cp -p, tar,
// rsync -t) is still a new file.
func TestReplacementWithTheSameSizeAndTime(t *testing.T) {
	checkEveryTime(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "n")
	write(t, p, "1")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	var loads int
	f, err := intFile(t, &loads, p)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "n.new")
	if err := os.WriteFile(tmp, []byte("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != 2 {
		t.Errorf("Get = %d, want 2 from the file renamed into place", got)
	}
}

// Get is safe for concurrent use while the file changes (run with -race).
func TestConcurrentGets(t *testing.T) {
	checkEveryTime(t)
	p := filepath.Join(t.TempDir(), "n")
	write(t, p, "1")
	f, err := New([]string{p}, func() (int, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(b))
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if v := f.Get(); v < 1 || v > 9 {
					t.Errorf("Get = %d, never written", v)
					return
				}
			}
		}()
	}
	for i := 2; i <= 9; i++ {
		write(t, p, strconv.Itoa(i))
	}
	wg.Wait()
	if got := f.Get(); got != 9 {
		t.Errorf("after the last write Get = %d, want 9", got)
	}
}
