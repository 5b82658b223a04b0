package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) taskCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Inspect and control the instances of a job",
	}
	a.group(cmd)
	cmd.AddCommand(
		a.taskListCommand(),
		a.taskGetCommand(),
		a.taskKillCommand(),
		a.taskLogsCommand(),
	)
	return cmd
}

func (a *app) taskListCommand() *cobra.Command {
	var states []string
	var limit int
	var watch bool
	cmd := &cobra.Command{
		Use:   "list JOBID",
		Short: "List the tasks of a job, every page (-o wide for more columns; --limit to stop early; --watch for each change)",
		Args:  argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st []pelotonv1.TaskState
			prepare := func() (err error) {
				st, err = parseTaskStates("state", states)
				return err
			}
			if watch {
				return a.taskListWatch(cmd.Context(), args[0], limit, prepare, &st)
			}
			return read(a, a.withClient, prepare, func(c *client) (*pelotonv1.ListTasksResponse, error) {
				tasks, err := allPages(limit, func(size uint32, token string) ([]*pelotonv1.Task, string, error) {
					page, err := call(cmd.Context(), c, c.Tasks.ListTasks, &pelotonv1.ListTasksRequest{JobId: args[0], States: st, PageSize: size, PageToken: token})
					return page.GetTasks(), page.GetNextPageToken(), err
				})
				return &pelotonv1.ListTasksResponse{Tasks: tasks}, err
			}, listed("tasks", (*pelotonv1.ListTasksResponse).GetTasks, writeTaskTable))
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only tasks in these states (repeatable or comma-separated; e.g. RUNNING)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many tasks (0: all)")
	watchFlag(cmd, &watch)
	return cmd
}

func (a *app) taskGetCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "get JOBID INSTANCE",
		Short: "Show one instance of a job, with its spec version, health, bound host and ports (--watch: then each change)",
		Args:  argsNamed("JOBID", "INSTANCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var inst uint32
			prepare := func() (err error) {
				inst, err = parseInstance(args[1])
				return asUsage(err)
			}
			if watch {
				return a.taskGetWatch(cmd.Context(), args[0], prepare, &inst)
			}
			return read(a, a.withClient, prepare, func(c *client) (*pelotonv1.GetTaskResponse, error) {
				return call(cmd.Context(), c, c.Tasks.GetTask, &pelotonv1.GetTaskRequest{JobId: args[0], InstanceId: inst})
			}, func(p *printer, resp *pelotonv1.GetTaskResponse) error {
				task := resp.GetTask()
				return p.object(task, func(w io.Writer, wide bool) { writeTaskDetail(w, task, wide) })
			})
		},
	}
	watchFlag(cmd, &watch)
	return cmd
}

func (a *app) taskKillCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "kill JOBID INSTANCE",
		Short: "Kill one instance of a job",
		Args:  argsNamed("JOBID", "INSTANCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			inst, err := parseInstance(args[1])
			if err != nil {
				return asUsage(err)
			}
			return a.withClient(func(c *client) error {
				if _, err := call(cmd.Context(), c, c.Tasks.KillTask, &pelotonv1.KillTaskRequest{JobId: args[0], InstanceId: inst}); err != nil {
					return err
				}
				return p.changed(fmt.Sprintf("job %s instance %d: kill requested", args[0], inst), func() (proto.Message, error) {
					resp, err := call(cmd.Context(), c, c.Tasks.GetTask, &pelotonv1.GetTaskRequest{JobId: args[0], InstanceId: inst})
					return resp.GetTask(), err
				})
			})
		},
	}
}

func (a *app) taskLogsCommand() *cobra.Command {
	var (
		run    uint32
		stderr bool
		follow bool
		tail   int
		since  string
		stamps bool
	)
	cmd := &cobra.Command{
		Use:   "logs JOBID INSTANCE",
		Short: "Print the output of one instance (stdout, or stderr with --stderr)",
		Args:  argsNamed("JOBID", "INSTANCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if p.structured() {
				return usageErrorf("invalid --output %q: task logs prints the run's output as it was written, not as a document", a.output)
			}
			inst, err := parseInstance(args[1])
			if err != nil {
				return asUsage(err)
			}
			if cmd.Flags().Changed("tail") && tail < 0 {
				return usageErrorf("invalid --tail %d: must be >= 0 (the number of last lines to print)", tail)
			}
			// Since is fixed once: with --tail -f, the follow stream
			// then repeats exactly the lines already printed.
			sinceTS, err := parseTimeFlag("since", since, time.Now())
			if err != nil {
				return err
			}
			req := &pelotonv1.GetTaskLogsRequest{JobId: args[0], InstanceId: inst, RunId: run, Follow: follow,
				Since: sinceTS, Timestamps: stamps}
			if stderr {
				req.Stream = pelotonv1.LogStream_STDERR
			}
			return a.withClient(func(c *client) error {
				ctx, cancel := cmd.Context(), context.CancelFunc(func() {})
				if !follow {
					// Following lasts as long as the run does; a plain read is
					// one call and gets the per-call timeout.
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
				}
				defer cancel()
				if cmd.Flags().Changed("tail") {
					return a.tailLogs(ctx, c, req, tail)
				}
				return a.streamLogs(ctx, c, req)
			})
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&run, "run", 0, "run to read (default: the latest)")
	f.BoolVar(&stderr, "stderr", false, "read stderr instead of stdout")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new output until the run ends")
	f.IntVar(&tail, "tail", 0, "print only the last N lines of the output so far (with -f, then what follows)")
	f.StringVar(&since, "since", "", "only the lines written since a time: how long ago (10m, 2h, 7d) or RFC 3339 (with --tail, the last N of those)")
	f.BoolVar(&stamps, "timestamps", false, "prefix each line with the time it was written (RFC 3339 with nanoseconds, UTC)")
	return cmd
}

// streamLogs copies the log chunks to stdout as raw bytes, as they come.
func (a *app) streamLogs(ctx context.Context, c *client, req *pelotonv1.GetTaskLogsRequest) error {
	stream, err := c.Tasks.GetTaskLogs(ctx, req)
	if err != nil {
		return c.wrap(err)
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.wrap(err)
		}
		if _, err := a.stdout.Write(chunk.GetData()); err != nil {
			return err
		}
	}
}

// listPageSize is the page size the CLI asks for: the server's largest.
const listPageSize = 5000

// pageSizeFor is the page size to ask for with limit (0: none) and have
// rows fetched so far.
func pageSizeFor(limit, have int) uint32 {
	if limit > 0 && limit-have < listPageSize {
		return uint32(limit - have)
	}
	return listPageSize
}

// allPages fetches pages until the last one, or until limit (0: none)
// rows are in: fetch gets the page size and token to ask for and returns
// the page's rows and its next token.
func allPages[T any](limit int, fetch func(size uint32, token string) ([]T, string, error)) ([]T, error) {
	var rows []T
	token := ""
	for {
		page, next, err := fetch(pageSizeFor(limit, len(rows)), token)
		if err != nil {
			return nil, err
		}
		rows = append(rows, page...)
		if next == "" || (limit > 0 && len(rows) >= limit) {
			return rows, nil
		}
		token = next
	}
}
