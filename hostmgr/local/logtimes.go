package local

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/local/supervise"
)

// Lines with times. A supervised run's output file has an index beside it
// (<file>.times, written by its supervisor: supervise/logtimes.go) that
// says when its lines arrived. Logs with Since or Timestamps reads the
// output through a stampReader, which looks each line's time up there.
//
// Runs without an index (started directly without a supervisor, off Linux,
// or by a backend from before the index existed) have no time per line:
// Logs refuses Since and Timestamps for them with hostmgr.ErrNoLogTimes
// rather than guess, and serves them as before without those options.

// openTimes opens the index of output file name in sandbox.
func openTimes(sandbox, name string) (*os.File, error) {
	f, err := openOutput(sandbox, name+supervise.TimesSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: the run's %s has no record of when its lines were written (it was started before "+
			"this version of the local backend kept one, or without a supervisor)", hostmgr.ErrNoLogTimes, name)
	}
	return f, err
}

// stampReader reads output from src, keeping the lines written at or after
// since (all when zero) and, with stamps, prefixing each with its time.
// Times never decrease along the output, so once a line is kept all later
// ones are.
type stampReader struct {
	src      io.ReadCloser
	index    *os.File
	idx      *supervise.TimeIndex
	since    time.Time
	stamps   bool
	off      int64 // offset in the output file of src's next byte
	lineHead bool  // the next byte starts a line
	keep     bool  // the current line is passed on

	n         int                 // entries of the index known
	next      int                 // the first entry not yet applied
	cur       time.Time           // time of the latest entry at or before off
	ahead     supervise.TimeEntry // entry next, once read
	haveAhead bool

	buf     []byte
	pending []byte
}

// newStampReader reads the output file out (open, at offset 0) with its
// index; wrap turns the positioned file into the reader to use (a
// follower, or the file itself).
func newStampReader(out, index *os.File, opts hostmgr.LogOptions, wrap func(*os.File) io.ReadCloser) (*stampReader, error) {
	r := &stampReader{index: index, idx: supervise.NewTimeIndex(index), since: opts.Since, stamps: opts.Timestamps,
		lineHead: true, buf: make([]byte, 32<<10)}
	n, err := r.idx.Len()
	if err != nil {
		return nil, err
	}
	r.n = n
	if !r.since.IsZero() && n > 0 {
		// Start at the first entry at or after since or, when every
		// entry is older, at the last: the lines after it are older
		// too until a newer entry comes (the reader may be following).
		i, err := r.idx.FirstSince(n, r.since)
		if err != nil {
			return nil, err
		}
		i = min(i, n-1)
		e, err := r.idx.At(i)
		if err != nil {
			return nil, err
		}
		if _, err := out.Seek(e.Offset, io.SeekStart); err != nil {
			return nil, err
		}
		r.off, r.next = e.Offset, i
	}
	r.src = wrap(out)
	return r, nil
}

// timeAt is the time of the line starting at off: that of the latest entry
// at or before it. Offsets are asked for in increasing order. A line with
// no entry before it (only in a damaged index) has the zero time: older
// than any since, and stamped 0001-01-01T00:00:00Z.
func (r *stampReader) timeAt(off int64) time.Time {
	for r.next < r.n {
		if !r.haveAhead {
			e, err := r.idx.At(r.next)
			if err != nil {
				return r.cur
			}
			r.ahead, r.haveAhead = e, true
		}
		if r.ahead.Offset > off {
			break
		}
		r.cur, r.next, r.haveAhead = r.ahead.Time, r.next+1, false
	}
	return r.cur
}

// Read returns the kept lines, stamped when asked.
func (r *stampReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		n, err := r.src.Read(r.buf)
		if n > 0 {
			r.chunk(r.buf[:n])
		}
		if err != nil && len(r.pending) == 0 {
			return 0, err
		}
		if err != nil {
			break
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// chunk passes on the kept lines of one read of the output.
func (r *stampReader) chunk(b []byte) {
	// The supervisor writes an entry before the bytes it describes, so
	// the index as it is now has the entries of every line in b.
	if n, err := r.idx.Len(); err == nil && n > r.n {
		r.n = n
	}
	for len(b) > 0 {
		if r.lineHead {
			t := r.timeAt(r.off)
			r.keep = r.since.IsZero() || !t.Before(r.since)
			if r.keep && r.stamps {
				r.pending = t.UTC().AppendFormat(r.pending, time.RFC3339Nano)
				r.pending = append(r.pending, ' ')
			}
		}
		end := len(b)
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			end = i + 1
		}
		if r.keep {
			r.pending = append(r.pending, b[:end]...)
		}
		r.lineHead = b[end-1] == '\n'
		r.off += int64(end)
		b = b[end:]
	}
}

// Close closes the output and its index.
func (r *stampReader) Close() error {
	err := r.src.Close()
	if ierr := r.index.Close(); err == nil {
		err = ierr
	}
	return err
}
