package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errNotServed is why openOutput refuses a file a run put in its sandbox.
var errNotServed = errors.New("not a plain file of the run's own; it is not served")

// openOutput opens the file name (stdout or stderr) of a run's sandbox for
// reading. The control plane reads it with rights the run may not have
// (root's, with a task user), and the run owns its sandbox: it may replace
// its output by a symbolic link to /etc/shadow, a hard link to a file
// elsewhere, or a FIFO that would block the reader forever. So the sandbox
// and the file are opened without following a symbolic link (O_NOFOLLOW,
// the file relative to the sandbox's descriptor), without blocking on a
// FIFO, and the file is served only if it is a regular file that is either
// the sandbox owner's (the run's user's) or has no other name than this
// one: a hard link to someone else's file has two. A missing file is
// fs.ErrNotExist.
func openOutput(sandbox, name string) (*os.File, error) {
	path := filepath.Join(sandbox, name)
	dfd, err := unix.Open(sandbox, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, outputErr(sandbox, err)
	}
	defer unix.Close(dfd)
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: sandbox, Err: err}
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, outputErr(path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || (st.Nlink != 1 && st.Uid != dst.Uid) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, errNotServed)
	}
	// Regular files ignore O_NONBLOCK, but os.File would try to poll it.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// outputErr is the error of opening path: a symbolic link where a
// directory or file should be (ELOOP with O_NOFOLLOW; ENOTDIR for the
// sandbox; EMLINK on the BSDs) is refused as not served.
func outputErr(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EMLINK), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s: %w", path, errNotServed)
	case errors.Is(err, syscall.ENOENT):
		return &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// follower reads a run's output file as it grows. It needs no goroutine:
// Read polls the file and waits in place between polls.
type follower struct {
	ctx    context.Context
	f      *os.File
	exited <-chan struct{} // closed once the run's process is reaped

	closeOnce sync.Once
	closed    chan struct{}
}

func newFollower(ctx context.Context, f *os.File, exited <-chan struct{}) *follower {
	return &follower{ctx: ctx, f: f, exited: exited, closed: make(chan struct{})}
}

// Read returns the next bytes of the file. At the end of the file it waits
// for more, polling every followPoll, until the run has exited and one last
// read finds nothing new, or ctx is done; then it returns io.EOF.
func (r *follower) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if r.ctx.Err() != nil {
			return 0, io.EOF
		}
		// Read exited before the file: bytes written before the exit are
		// then certain to be seen by this read or an earlier one.
		ended := isClosed(r.exited)
		n, err := r.f.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		if ended {
			return 0, io.EOF
		}
		if timer == nil {
			timer = time.NewTimer(followPoll)
		} else {
			timer.Reset(followPoll)
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-r.closed:
			return 0, os.ErrClosed
		case <-r.exited:
		case <-timer.C:
		}
	}
}

// Close closes the file and wakes a Read waiting for output.
func (r *follower) Close() error {
	err := os.ErrClosed
	r.closeOnce.Do(func() {
		close(r.closed)
		err = r.f.Close()
	})
	return err
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
