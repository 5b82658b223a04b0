package local

import (
	"context"
	"io"
	"os"
	"sync"
	"time"
)

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
