package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Exit codes of the commands that wait (job wait, fed job wait, fed
// service update --wait, fed service watch), beside 0, 1 and 2.
const (
	// exitUnreachable: what was waited for can no longer happen (the job
	// ended in another state; a SERVICE was asked to SUCCEED).
	exitUnreachable = 3
	// exitTimeout: the timeout passed first.
	exitTimeout = 4
)

// unreachablef is a wait's failure because its goal can no longer be met.
func unreachablef(format string, args ...any) error {
	return &cmdutil.CodedError{Err: fmt.Errorf(format, args...), Code: exitUnreachable}
}

// timedOutf is a wait's failure because its timeout passed.
func timedOutf(format string, args ...any) error {
	return &cmdutil.CodedError{Err: fmt.Errorf(format, args...), Code: exitTimeout}
}

// defaultProgress is how often a long wait says on stderr where it is.
const defaultProgress = 10 * time.Second

// waitTarget is what job wait --for asks for: a job state, or HEALTHY.
type waitTarget struct {
	state   pelotonv1.JobState
	healthy bool
}

func (t waitTarget) String() string {
	if t.healthy {
		return "HEALTHY"
	}
	return t.state.String()
}

// parseWaitTarget reads --for: HEALTHY or a job state, any case.
func parseWaitTarget(s string) (waitTarget, error) {
	if strings.EqualFold(strings.TrimSpace(s), "healthy") {
		return waitTarget{healthy: true}, nil
	}
	st, err := parseJobState(s)
	if err != nil {
		return waitTarget{}, fmt.Errorf("%v, or HEALTHY", err)
	}
	return waitTarget{state: st}, nil
}

// waitVerdict says whether job j is where t asks (reached), or why it can
// no longer get there (never, "" while it still can).
func waitVerdict(j *pelotonv1.Job, t waitTarget) (reached bool, never string) {
	id, typ, st := j.GetId(), j.GetSpec().GetType(), j.GetStatus()
	state := st.GetState()
	why := ""
	if m := st.GetMessage(); m != "" {
		why = ": " + m
	}
	if t.healthy {
		switch {
		case typ == pelotonv1.JobType_BATCH:
			return false, fmt.Sprintf("job %s is a BATCH job: HEALTHY is for SERVICE, STATEFUL and DAEMON jobs (wait for RUNNING or SUCCEEDED)", id)
		case jobTerminal(state):
			return false, fmt.Sprintf("job %s is %s, so it will not be HEALTHY%s", id, state, why)
		}
		total := instancesOf(st)
		return state == pelotonv1.JobState_JOB_RUNNING && total > 0 && st.GetHealthy() >= total, ""
	}
	switch {
	case state == t.state:
		return true, ""
	case t.state == pelotonv1.JobState_JOB_SUCCEEDED && typ != pelotonv1.JobType_BATCH:
		return false, fmt.Sprintf("job %s is a %s job: it runs until cancelled and never becomes JOB_SUCCEEDED (wait for HEALTHY or RUNNING)", id, typ)
	case jobTerminal(state):
		return false, fmt.Sprintf("job %s is %s, not %s%s", id, state, t.state, why)
	}
	return false, ""
}

// instancesOf is how many instances a job has, by its task counts.
func instancesOf(st *pelotonv1.JobStatus) uint32 {
	var n uint32
	for _, c := range st.GetTaskCounts() {
		n += c
	}
	return n
}

// waitProgress is the line a long wait prints on stderr.
func waitProgress(j *pelotonv1.Job, t waitTarget, since time.Duration) string {
	st := j.GetStatus()
	line := fmt.Sprintf("waiting for job %s to be %s: %s", j.GetId(), t, st.GetState())
	if c := taskCounts(st.GetTaskCounts()); c != "" {
		line += " " + c
	}
	if t.healthy {
		line += fmt.Sprintf(", %d/%d healthy", st.GetHealthy(), instancesOf(st))
	}
	return line + fmt.Sprintf(" (%s so far)", since.Round(time.Second))
}

// waitJob waits until job id is where t asks, it can no longer get there,
// or timeout passes. It follows the job's watch stream, opened again if
// the server drops it, and polls a server that has none. It prints the job
// it reached (-o json and -o yaml: the whole job).
func (a *app) waitJob(ctx context.Context, c *client, p *printer, id string, t waitTarget, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var last atomic.Pointer[pelotonv1.Job]
	stopProgress := a.progressLines(func() string {
		if j := last.Load(); j != nil {
			return waitProgress(j, t, time.Since(start))
		}
		return ""
	})
	defer stopProgress()
	check := func(j *pelotonv1.Job) (bool, error) {
		last.Store(j)
		reached, never := waitVerdict(j, t)
		if reached {
			stopProgress()
			return true, p.changed(fmt.Sprintf("job %s is %s", id, t), func() (proto.Message, error) { return j, nil })
		}
		if never != "" {
			return true, unreachablef("%s", never)
		}
		return false, nil
	}
	timedOut := func() error {
		state := pelotonv1.JobState_JOB_STATE_UNSPECIFIED.String()
		if j := last.Load(); j != nil {
			state = j.GetStatus().GetState().String()
			if t.healthy {
				state += fmt.Sprintf(" with %d/%d instances healthy", j.GetStatus().GetHealthy(), instancesOf(j.GetStatus()))
			}
		}
		return timedOutf("job %s is %s, not %s (timed out after %s)", id, state, t, timeout)
	}
	for {
		err := a.waitWatching(ctx, c, id, check)
		switch {
		case err == nil:
			return nil
		case watchEnded(ctx):
			// The stream may see the deadline pass (DeadlineExceeded)
			// an instant before ctx says so: either is the timeout.
			return timedOut()
		case unimplemented(err):
			return pollUntil(ctx, c, a.poll, timeout, timedOut, func(ctx context.Context) (bool, error) {
				resp, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: id})
				if err != nil {
					return false, err
				}
				return check(resp.GetJob())
			})
		case !rewatch(err):
			return err
		}
		// The server dropped the watch (it stopped, or the watcher fell
		// behind): watch again, shortly.
		select {
		case <-ctx.Done():
			return timedOut()
		case <-time.After(a.poll):
		}
	}
}

// waitWatching follows job id's watch stream until check says done.
func (a *app) waitWatching(ctx context.Context, c *client, id string, check func(*pelotonv1.Job) (bool, error)) error {
	stream, err := c.Jobs.WatchJobs(ctx, &pelotonv1.WatchJobsRequest{JobIds: []string{id}})
	if err != nil {
		return c.wrap(err)
	}
	for {
		ch, err := stream.Recv()
		if err != nil {
			return c.wrap(err)
		}
		if ch.GetDeleted() {
			return unreachablef("job %s was deleted while waiting", id)
		}
		if ch.GetSynced() {
			continue
		}
		if done, err := check(ch.GetJob()); done || err != nil {
			return err
		}
	}
}

// rewatch says whether a watch that ended with err is worth opening again.
func rewatch(err error) bool {
	var rpcErr *rpcError
	if !errors.As(err, &rpcErr) || rpcErr.unreachable {
		return false
	}
	switch rpcErr.st.Code() {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// progressLines prints line() on stderr every a.progress until the
// returned stop is called (which may be called more than once).
func (a *app) progressLines(line func() string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(a.progress)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if l := line(); l != "" {
					fmt.Fprintln(a.stderr, l)
				}
			}
		}
	}()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(done)
		}
		<-finished
	}
}
