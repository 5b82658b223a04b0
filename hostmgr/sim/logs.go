package sim

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Logs opens a run's synthetic output. Stdout is one line naming the command
// and host ("sim: sleep 5 on sim-00003"), then, once the run has ended, one
// line with its outcome ("sim: succeeded (exit 0)"); stderr is always empty.
// The text is made on demand, so it costs nothing per task. With follow, a
// running task's reader returns the first line, then waits until the run
// ends, ctx is done or the backend closes, and then returns the rest and
// io.EOF. A forgotten or unknown run returns ErrUnknownTask. Its lines have
// no times: Since and Timestamps are refused (ErrNoLogTimes).
func (b *Backend) Logs(ctx context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	stream, follow := opts.Stream, opts.Follow
	if opts.NeedsTimes() {
		return nil, fmt.Errorf("sim: logs %s: %w: the sim backend makes its output up on demand and keeps no times", taskID, hostmgr.ErrNoLogTimes)
	}
	var stdout bool
	switch stream {
	case pelotonv1.LogStream_STDOUT:
		stdout = true
	case pelotonv1.LogStream_STDERR:
	default:
		return nil, fmt.Errorf("sim: logs %s: stream: unknown log stream %v", taskID, stream)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[taskID]
	if !ok {
		return nil, fmt.Errorf("sim: logs %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	var head string
	if stdout {
		head = fmt.Sprintf("sim: %s on %s\n", t.cmd, t.host)
	}
	if t.terminal() {
		if stdout {
			head += outcomeLine(t)
		}
		return io.NopCloser(strings.NewReader(head)), nil
	}
	if !follow || b.closed {
		return io.NopCloser(strings.NewReader(head)), nil
	}
	if t.ended == nil {
		t.ended = make(chan struct{})
	}
	return &follower{b: b, t: t, ctx: ctx, ended: t.ended, buf: head, stdout: stdout, closed: make(chan struct{})}, nil
}

// outcomeLine is the last stdout line of an ended run. The caller holds b.mu.
func outcomeLine(t *task) string {
	switch t.state {
	case pelotonv1.TaskState_SUCCEEDED:
		return "sim: succeeded (exit 0)\n"
	case pelotonv1.TaskState_FAILED:
		return fmt.Sprintf("sim: failed (exit %d)\n", t.exitCode)
	case pelotonv1.TaskState_KILLED:
		return "sim: killed\n"
	}
	return fmt.Sprintf("sim: %s\n", strings.ToLower(t.state.String()))
}

// follower reads a running task's output: what there is now, then the
// outcome once the task ends. It needs no goroutine: Read waits in place.
type follower struct {
	b      *Backend
	t      *task
	ctx    context.Context
	ended  <-chan struct{}
	buf    string // bytes not yet read
	stdout bool
	tail   bool // the wait for the end is over

	closeOnce sync.Once
	closed    chan struct{}
}

// Read returns buffered output, or waits for the task to end and then
// returns its outcome line, then io.EOF. A done ctx or a closed backend ends
// the wait with io.EOF, without the outcome.
func (r *follower) Read(p []byte) (int, error) {
	for {
		select {
		case <-r.closed:
			return 0, os.ErrClosed
		default:
		}
		if len(r.buf) > 0 {
			n := copy(p, r.buf)
			r.buf = r.buf[n:]
			return n, nil
		}
		if r.tail {
			return 0, io.EOF
		}
		select {
		case <-r.closed:
			return 0, os.ErrClosed
		case <-r.ctx.Done():
			r.tail = true
		case <-r.b.stop:
			r.tail = true
		case <-r.ended:
			r.tail = true
			if r.stdout {
				r.b.mu.Lock()
				r.buf = outcomeLine(r.t)
				r.b.mu.Unlock()
			}
		}
	}
}

// Close wakes a Read waiting for the end of the task.
func (r *follower) Close() error {
	err := os.ErrClosed
	r.closeOnce.Do(func() {
		close(r.closed)
		err = nil
	})
	return err
}
