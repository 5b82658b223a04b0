package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// --watch (-w) on job get, job list, task list and task get: the command
// prints what it prints without it, from the server's watch stream
// (WatchJobs, WatchTasks), then one row per change (-o json and -o yaml:
// one document per changed object). It runs until Ctrl-C, or until
// --timeout when given, and both end it with exit 0.

// watchFlag adds --watch (-w) to cmd.
func watchFlag(cmd *cobra.Command, watch *bool) {
	cmd.Flags().BoolVarP(watch, "watch", "w", false, "after printing, keep printing each change as it comes (until Ctrl-C, or --timeout if given)")
}

// recver is a server stream as its client reads it.
type recver[M any] interface{ Recv() (M, error) }

// watchContext is the context a watch runs in: ended by Ctrl-C (or
// SIGTERM), and by --timeout only when it was given.
func (a *app) watchContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	if a.globals != nil && a.globals.Changed("timeout") {
		tctx, cancel := context.WithTimeout(ctx, a.timeout)
		return tctx, func() { cancel(); stop() }
	}
	return ctx, stop
}

// follow reads stream until it ends, handing each message to handle. The
// end of ctx (Ctrl-C, --timeout) is a clean end; so is handle saying done.
func follow[M any](ctx context.Context, c *client, stream recver[M], err error, handle func(M) (done bool, err error)) error {
	if err != nil {
		if watchEnded(ctx) {
			return nil
		}
		return c.wrap(err)
	}
	for {
		m, err := stream.Recv()
		if watchEnded(ctx) {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.wrap(err)
		}
		done, err := handle(m)
		if err != nil || done {
			return err
		}
	}
}

// watchEnded says whether ctx ended or its deadline passed: a stream may see
// the deadline pass (DeadlineExceeded) an instant before ctx says so.
func watchEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// watchPrinter prints a watch: the objects of the initial state together
// (a table, or one document each), then each change.
type watchPrinter struct {
	p *printer
	// docs counts the documents printed, to separate YAML ones with ---.
	docs int
}

// doc prints m as one JSON or YAML document.
func (w *watchPrinter) doc(m proto.Message) error {
	if w.p.format == formatYAML && w.docs > 0 {
		if _, err := io.WriteString(w.p.w, "---\n"); err != nil {
			return err
		}
	}
	w.docs++
	return w.p.object(m, nil)
}

// row prints one changed object as the rows table writes below its header,
// aligned at least as the header is.
func (w *watchPrinter) row(table func(io.Writer, bool)) error {
	var buf bytes.Buffer
	tw := newTabWriter(&buf)
	table(tw, w.p.format == formatWide)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, rows, _ := strings.Cut(buf.String(), "\n")
	_, err := io.WriteString(w.p.w, rows)
	return err
}

// line prints a line of its own (a job deleted, an instance removed); -o
// json and -o yaml print doc instead.
func (w *watchPrinter) line(text string, doc proto.Message) error {
	if w.p.structured() {
		return w.doc(doc)
	}
	_, err := fmt.Fprintln(w.p.w, text)
	return err
}

// watchJobs streams the jobs ids (none: every job with labels) and
// prints them with initial (the table of the initial state) and row (one
// changed job); keep filters the jobs shown.
func (a *app) watchJobs(ctx context.Context, c *client, p *printer, req *pelotonv1.WatchJobsRequest, keep func(*pelotonv1.Job) bool,
	initial func(io.Writer, []*pelotonv1.Job, bool), row func(io.Writer, *pelotonv1.Job, bool)) error {
	ctx, stop := a.watchContext(ctx)
	defer stop()
	w := &watchPrinter{p: p}
	var first []*pelotonv1.Job
	synced := false
	stream, err := c.Jobs.WatchJobs(ctx, req)
	return follow(ctx, c, stream, err, func(ch *pelotonv1.JobChange) (bool, error) {
		switch {
		case ch.GetSynced():
			synced = true
			if p.structured() {
				for _, j := range first {
					if err := w.doc(j); err != nil {
						return false, err
					}
				}
				return false, nil
			}
			return false, p.object(nil, func(tw io.Writer, wide bool) { initial(tw, first, wide) })
		case ch.GetDeleted():
			return false, w.line("job "+ch.GetJob().GetId()+" deleted", ch)
		case !keep(ch.GetJob()):
			return false, nil
		case !synced:
			first = append(first, ch.GetJob())
			return false, nil
		case p.structured():
			return false, w.doc(ch.GetJob())
		}
		return false, w.row(func(tw io.Writer, wide bool) { row(tw, ch.GetJob(), wide) })
	})
}

// watchTasks streams job id's instances (only instance only, if set) and
// prints them as watchJobs does.
func (a *app) watchTasks(ctx context.Context, c *client, p *printer, id string, only func(*pelotonv1.Task) bool,
	initial func(io.Writer, []*pelotonv1.Task, bool), row func(io.Writer, *pelotonv1.Task, bool)) error {
	ctx, stop := a.watchContext(ctx)
	defer stop()
	w := &watchPrinter{p: p}
	var first []*pelotonv1.Task
	synced := false
	stream, err := c.Tasks.WatchTasks(ctx, &pelotonv1.WatchTasksRequest{JobId: id})
	return follow(ctx, c, stream, err, func(ch *pelotonv1.TaskChange) (bool, error) {
		t := ch.GetTask()
		switch {
		case ch.GetSynced():
			synced = true
			if p.structured() {
				for _, t := range first {
					if err := w.doc(t); err != nil {
						return false, err
					}
				}
				return false, nil
			}
			return false, p.object(nil, func(tw io.Writer, wide bool) { initial(tw, first, wide) })
		case !only(t):
			return false, nil
		case ch.GetRemoved():
			return false, w.line(fmt.Sprintf("instance %d removed", t.GetInstanceId()), ch)
		case !synced:
			first = append(first, t)
			return false, nil
		case p.structured():
			return false, w.doc(t)
		}
		return false, w.row(func(tw io.Writer, wide bool) { row(tw, t, wide) })
	})
}

// jobListFilter is what job list's filters keep of a watched job: the
// server filters the labels, the rest is checked here.
func jobListFilter(req *pelotonv1.ListJobsRequest) func(*pelotonv1.Job) bool {
	states := map[pelotonv1.JobState]bool{}
	for _, s := range req.GetStates() {
		states[s] = true
	}
	return func(j *pelotonv1.Job) bool {
		spec, st := j.GetSpec(), j.GetStatus()
		created := st.GetCreateTime().AsTime()
		switch {
		case req.GetPool() != "" && spec.GetPool() != req.GetPool():
			return false
		case req.GetName() != "" && !strings.Contains(spec.GetName(), req.GetName()):
			return false
		case len(states) > 0 && !states[st.GetState()]:
			return false
		case req.GetCreatedSince() != nil && created.Before(req.GetCreatedSince().AsTime()):
			return false
		case req.GetCreatedUntil() != nil && !created.Before(req.GetCreatedUntil().AsTime()):
			return false
		}
		return true
	}
}

// unimplemented says whether err is a server's answer that it has no such
// method (an older server): the caller falls back to polling.
func unimplemented(err error) bool {
	var rpcErr *rpcError
	if errors.As(err, &rpcErr) {
		return rpcErr.st.Code() == codes.Unimplemented
	}
	return status.Code(err) == codes.Unimplemented
}

// jobGetWatch is job get --watch: the job's detail, then a row per change.
func (a *app) jobGetWatch(ctx context.Context, id string) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	return a.withClient(func(c *client) error {
		return a.watchJobs(ctx, c, p, &pelotonv1.WatchJobsRequest{JobIds: []string{id}}, func(*pelotonv1.Job) bool { return true },
			func(w io.Writer, jobs []*pelotonv1.Job, wide bool) {
				if len(jobs) == 1 {
					writeJobDetail(w, jobs[0], wide)
				}
			},
			func(w io.Writer, j *pelotonv1.Job, wide bool) {
				writeJobColumns(w, []*pelotonv1.Job{j}, wide, j.GetSpec().GetType() != pelotonv1.JobType_BATCH)
			})
	})
}

// jobListWatch is job list --watch: the jobs that pass the filters, then a
// row per change of one that does.
func (a *app) jobListWatch(ctx context.Context, req *pelotonv1.ListJobsRequest, limit int, prepare func() error) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	if err := prepare(); err != nil {
		return err
	}
	if req.GetArchived() {
		return usageErrorf("--watch and --archived: archived jobs no longer change")
	}
	if limit != 0 {
		return usageErrorf("--watch and --limit: a watch shows every job that changes")
	}
	return a.withClient(func(c *client) error {
		return a.watchJobs(ctx, c, p, &pelotonv1.WatchJobsRequest{Labels: req.GetLabels()}, jobListFilter(req),
			func(w io.Writer, jobs []*pelotonv1.Job, wide bool) {
				// Newest first, as job list prints them.
				slices.SortStableFunc(jobs, func(x, y *pelotonv1.Job) int {
					return y.GetStatus().GetCreateTime().AsTime().Compare(x.GetStatus().GetCreateTime().AsTime())
				})
				writeJobTable(w, jobs, wide)
			},
			func(w io.Writer, j *pelotonv1.Job, wide bool) { writeJobTable(w, []*pelotonv1.Job{j}, wide) })
	})
}

// taskListWatch is task list --watch: the instances (in the states asked
// for), then a row per change of one.
func (a *app) taskListWatch(ctx context.Context, id string, limit int, prepare func() error, states *[]pelotonv1.TaskState) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	if err := prepare(); err != nil {
		return err
	}
	if limit != 0 {
		return usageErrorf("--watch and --limit: a watch shows every instance that changes")
	}
	return a.withClient(func(c *client) error {
		return a.watchTasks(ctx, c, p, id, func(t *pelotonv1.Task) bool {
			return len(*states) == 0 || slices.Contains(*states, t.GetStatus().GetState())
		}, writeTaskTable, func(w io.Writer, t *pelotonv1.Task, wide bool) { writeTaskTable(w, []*pelotonv1.Task{t}, wide) })
	})
}

// taskGetWatch is task get --watch: the instance's detail, then a row per
// change.
func (a *app) taskGetWatch(ctx context.Context, id string, prepare func() error, inst *uint32) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	if err := prepare(); err != nil {
		return err
	}
	return a.withClient(func(c *client) error {
		// The detail's spec is not in the stream: fetch the instance once.
		resp, err := call(ctx, c, c.Tasks.GetTask, &pelotonv1.GetTaskRequest{JobId: id, InstanceId: *inst})
		if err != nil {
			return err
		}
		return a.watchTasks(ctx, c, p, id, func(t *pelotonv1.Task) bool { return t.GetInstanceId() == *inst },
			func(w io.Writer, tasks []*pelotonv1.Task, wide bool) {
				t := resp.GetTask()
				if len(tasks) == 1 {
					t = proto.Clone(tasks[0]).(*pelotonv1.Task)
					t.Spec = resp.GetTask().GetSpec()
				}
				writeTaskDetail(w, t, wide)
			},
			func(w io.Writer, t *pelotonv1.Task, wide bool) { writeTaskColumns(w, []*pelotonv1.Task{t}, wide, true) })
	})
}
