// Package reload keeps a value loaded from files and loads it again when
// they change: the certificates of TLS listeners, the token file, the
// authorization policy. Operators replace those files while the daemon
// runs; the next use after a change (looked for at most once per
// Interval) gets the new value. A replacement that does not load - a
// half-written file, a policy with a mistake - is logged and the value
// loaded before is kept, so a typo never locks everyone out.
package reload

import (
	"log/slog"
	"os"
	"sync"
	"time"
)

// Interval is how often, at most, the files are looked at again.
var Interval = time.Second

// File is a value loaded from some files.
type File[T any] struct {
	paths []string
	load  func() (T, error)
	log   *slog.Logger

	mu      sync.Mutex
	val     T
	stamps  []stamp
	checked time.Time
	// stampsErr is why the files as stamps describe them did not load,
	// nil if they did.
	stampsErr error
	// err is what is wrong now: the files cannot be looked at, or
	// stampsErr.
	err error
}

// New loads the value now and returns it kept; it fails if it does not
// load.
func New[T any](paths []string, load func() (T, error), log *slog.Logger) (*File[T], error) {
	if log == nil {
		log = slog.Default()
	}
	st, err := stampOf(paths)
	if err != nil {
		return nil, err
	}
	v, err := load()
	if err != nil {
		return nil, err
	}
	return &File[T]{paths: paths, load: load, log: log, val: v, stamps: st, checked: time.Now()}, nil
}

// Get returns the value, loading it again first if the files changed.
func (f *File[T]) Get() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.checked) < Interval {
		return f.val
	}
	f.checked = now
	st, err := stampOf(f.paths)
	if err != nil {
		if f.err == nil || f.err.Error() != err.Error() {
			f.log.Warn("cannot look at a file; keeping what was loaded from it", "files", f.paths, "err", err)
		}
		f.err = err
		return f.val
	}
	if sameStamps(st, f.stamps) {
		// A file that could not be looked at for a while (moved away and
		// back) is fine again if it is the one last looked at.
		f.err = f.stampsErr
		return f.val
	}
	v, err := f.load()
	if err != nil {
		// Perhaps half-written: it is loaded again when it changes next.
		f.log.Warn("a file changed but does not load; keeping what was loaded before", "files", f.paths, "err", err)
		f.stamps, f.stampsErr, f.err = st, err, err
		return f.val
	}
	f.val, f.stamps, f.stampsErr, f.err = v, st, nil, nil
	f.log.Info("reloaded", "files", f.paths)
	return f.val
}

// Err is why the files' last change did not load, or nil.
func (f *File[T]) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// stamp tells whether a file changed: its size, its modification time,
// and which file it is - a replacement renamed into place with the old
// one's size and time (cp -p, tar, rsync -t) is still a change.
type stamp struct {
	size int64
	mod  time.Time
	fi   os.FileInfo
}

func stampOf(paths []string) ([]stamp, error) {
	out := make([]stamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = stamp{fi.Size(), fi.ModTime(), fi}
	}
	return out, nil
}

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) || !os.SameFile(a[i].fi, b[i].fi) {
			return false
		}
	}
	return true
}
