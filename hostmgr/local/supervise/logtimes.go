package supervise

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sort"
	"time"
)

// Log times. A run's output has no time per line of its own: the run
// writes bytes. To answer "the lines since 10:02" and to stamp each line
// with its time, the supervisor gives the run pipes instead of its output
// files, copies each pipe to its file unchanged and, beside the file,
// appends to an index (TimesSuffix) entries of a fixed size: the byte
// offset of a line's start and the time its bytes arrived. At most one
// entry is written per line start and at most one per TimesEvery per
// stream, which bounds the index to a few hundred kilobytes per stream and
// hour however much the run writes; a line takes the time of the latest
// entry at or before its offset, so a line's time is never later than
// when it was written and at most TimesEvery (plus one read) earlier.
//
// Each entry is written to the index before the bytes it describes are
// written to the output file, so a reader that has read a line's first
// byte finds its entry. Times never decrease along the index (a wall clock
// stepped back repeats the last time), so both offsets and times are
// sorted and can be searched.

// TimesSuffix is appended to an output file's name to name its index.
const TimesSuffix = ".times"

// TimesEvery is the least time between two entries of one index.
const TimesEvery = 100 * time.Millisecond

// entrySize is the size of one index entry: the offset and the unix
// nanoseconds, both little-endian 64-bit integers.
const entrySize = 16

// drainBound is how long a supervisor waits, after the run's process group
// is killed, for the copiers to read what the run wrote before it writes
// the status: a process that left the group may hold a pipe open for ever.
const drainBound = 2 * time.Second

// copier copies one pipe to an output file and writes its index.
type copier struct {
	src   io.Reader
	out   *os.File
	index *os.File
	now   func() time.Time

	atLineStart bool
	last        int64 // unix nanos of the last entry; 0: none yet
	offset      int64 // where the next byte goes in out
}

// newCopier copies src to out, indexing line starts in index (nil: no
// index).
func newCopier(src io.Reader, out, index *os.File, now func() time.Time) *copier {
	return &copier{src: src, out: out, index: index, now: now, atLineStart: true}
}

// run copies until src ends or fails. A failure to write the index stops
// the indexing, never the copying: the run's output matters more than its
// times.
func (c *copier) run() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.src.Read(buf)
		if n > 0 {
			c.chunk(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// chunk indexes and writes one read of the pipe.
func (c *copier) chunk(p []byte) {
	if c.index != nil {
		// The backend and the supervisor's own complaints share the
		// file's offset; ask it rather than count.
		if off, err := c.out.Seek(0, io.SeekCurrent); err == nil {
			c.offset = off
		}
		now := c.now().UnixNano()
		if c.last == 0 || now-c.last >= int64(TimesEvery) {
			if start, ok := firstLineStart(p, c.atLineStart); ok {
				now = max(now, c.last)
				var e [entrySize]byte
				binary.LittleEndian.PutUint64(e[:8], uint64(c.offset+int64(start)))
				binary.LittleEndian.PutUint64(e[8:], uint64(now))
				if _, err := c.index.Write(e[:]); err != nil {
					complain("could not record the times of the run's output: %v", err)
					c.index = nil
				} else {
					c.last = now
				}
			}
		}
	}
	c.atLineStart = p[len(p)-1] == '\n'
	n, err := c.out.Write(p)
	c.offset += int64(n)
	if err != nil {
		// The file is full or gone: the bytes are dropped, as a write
		// to the file itself would have failed for the run.
		c.offset += int64(len(p) - n)
	}
}

// firstLineStart is the index in p of the first line that starts within
// it: 0 when p starts a line, else just after its first newline (when
// that is not p's last byte: the line after it has not arrived yet).
func firstLineStart(p []byte, atLineStart bool) (int, bool) {
	if atLineStart {
		return 0, true
	}
	i := bytes.IndexByte(p, '\n')
	if i < 0 || i == len(p)-1 {
		return 0, false
	}
	return i + 1, true
}

// TimeEntry is one entry of an output file's index: the line starting at
// Offset arrived at Time.
type TimeEntry struct {
	Offset int64
	Time   time.Time
}

// TimeIndex reads an output file's index, which may still be growing.
type TimeIndex struct {
	r io.ReaderAt
}

// NewTimeIndex reads the index in r.
func NewTimeIndex(r io.ReaderAt) *TimeIndex { return &TimeIndex{r: r} }

// Len is the number of whole entries written so far (a torn last entry,
// from a supervisor killed while writing it, is not counted).
func (x *TimeIndex) Len() (int, error) {
	type stater interface{ Stat() (os.FileInfo, error) }
	s, ok := x.r.(stater)
	if !ok {
		return 0, errors.New("supervise: time index: no size")
	}
	fi, err := s.Stat()
	if err != nil {
		return 0, err
	}
	return int(fi.Size() / entrySize), nil
}

// At reads entry i.
func (x *TimeIndex) At(i int) (TimeEntry, error) {
	var e [entrySize]byte
	if _, err := x.r.ReadAt(e[:], int64(i)*entrySize); err != nil {
		return TimeEntry{}, err
	}
	return TimeEntry{
		Offset: int64(binary.LittleEndian.Uint64(e[:8])),
		Time:   time.Unix(0, int64(binary.LittleEndian.Uint64(e[8:]))),
	}, nil
}

// FirstSince is the index of the first of the first n entries whose time
// is at or after since (n when there is none).
func (x *TimeIndex) FirstSince(n int, since time.Time) (int, error) {
	var ferr error
	i := sort.Search(n, func(i int) bool {
		e, err := x.At(i)
		if err != nil {
			ferr = err
			return true
		}
		return !e.Time.Before(since)
	})
	return i, ferr
}
