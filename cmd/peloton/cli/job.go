package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) jobCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Create, inspect and control jobs",
	}
	a.group(cmd)
	cmd.AddCommand(
		a.jobCreateCommand(),
		a.jobGetCommand(),
		a.jobListCommand(),
		a.jobCancelCommand(),
		a.jobDeleteCommand(),
		a.jobRestartCommand(),
		a.jobWaitCommand(),
		a.jobScaleCommand(),
		a.jobVersionsCommand(),
		a.jobGangsCommand(),
		a.jobEventsCommand(),
		a.jobInitCommand(),
		a.jobApplyCommand(),
	)
	return cmd
}

func (a *app) jobCreateCommand() *cobra.Command {
	var file, rid string
	var dry bool
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a job from a spec file and print its ID",
		Long: `Create a job from a YAML or JSON file holding a JobSpec (see examples/hello.yaml);
"-f -" reads the spec from standard input. Only the new job's ID is printed;
-o json or -o yaml prints the new job, as "job get" does.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the job spec to create")
			}
			spec, err := loadJobSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if dry {
					return a.dryCreateJob(cmd.Context(), c, p, spec)
				}
				resp, err := create(cmd.Context(), c, c.Jobs.CreateJob, &pelotonv1.CreateJobRequest{Spec: spec, RequestId: reqID})
				if err != nil {
					return err
				}
				return p.changed(resp.GetJobId(), a.getJob(cmd.Context(), c, resp.GetJobId()))
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `job spec file, YAML or JSON ("-" for stdin)`)
	requestIDFlag(cmd, &rid)
	dryRunFlag(cmd, &dry)
	return cmd
}

func (a *app) jobGetCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "get JOBID",
		Short: "Show a job (--watch: then each change)",
		Args:  argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return a.jobGetWatch(cmd.Context(), args[0])
			}
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.GetJobResponse, error) {
				return call(cmd.Context(), c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: args[0]})
			}, func(p *printer, resp *pelotonv1.GetJobResponse) error {
				job := resp.GetJob()
				return p.object(job, func(w io.Writer, wide bool) { writeJobDetail(w, job, wide) })
			})
		},
	}
	watchFlag(cmd, &watch)
	return cmd
}

func (a *app) jobListCommand() *cobra.Command {
	var pool, name, since, until, selector string
	var sel labelSelector
	var states, labels []string
	var limit int
	var archived, watch bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first (every page; --limit to stop early)",
		Long: `List jobs, newest first (every page; --limit to stop early).

Finished jobs leave the live list once their time to live after they
finished has passed (spec.ttlSecondsAfterFinished, or the cluster's
--finished-job-ttl) and are kept in the archive: --archived lists those
instead, with the same filters. job get, task list, task get and task logs
of an archived job answer from the archive.`,
		Example: `  peloton job list --state running
  peloton job list --archived --label team=data --created-since 24h
  peloton job list --archived --created-since 2026-01-01T00:00:00Z --created-until 2026-02-01T00:00:00Z`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &pelotonv1.ListJobsRequest{Pool: pool, Name: name, Archived: archived}
			prepare := func() (err error) {
				if req.States, err = parseJobStates("state", states); err != nil {
					return err
				}
				if req.Labels, err = parseLabelFilter("label", labels); err != nil {
					return err
				}
				if sel, err = parseSelector(selector); err != nil {
					return err
				}
				for k, v := range sel.equalities() {
					if req.Labels == nil {
						req.Labels = map[string]string{}
					}
					req.Labels[k] = v
				}
				now := time.Now()
				if req.CreatedSince, err = parseTimeFlag("created-since", since, now); err != nil {
					return err
				}
				req.CreatedUntil, err = parseTimeFlag("created-until", until, now)
				return err
			}
			if watch {
				return a.jobListWatch(cmd.Context(), req, limit, prepare)
			}
			return read(a, a.withClient, prepare, func(c *client) (*pelotonv1.ListJobsResponse, error) {
				jobs, err := allPages(limit, func(size uint32, token string) ([]*pelotonv1.Job, string, error) {
					req.PageSize, req.PageToken = size, token
					page, err := call(cmd.Context(), c, c.Jobs.ListJobs, req)
					return filterLabeled(sel, page.GetJobs(), jobLabels), page.GetNextPageToken(), err
				})
				return &pelotonv1.ListJobsResponse{Jobs: jobs}, err
			}, listed("jobs", (*pelotonv1.ListJobsResponse).GetJobs, writeJobTable))
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "only jobs in this pool")
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (repeatable or comma-separated; e.g. RUNNING or JOB_RUNNING)")
	f.StringVar(&name, "name", "", "only jobs whose name contains this")
	f.StringArrayVar(&labels, "label", nil, "only jobs with this label, key=value (repeatable: every one must hold)")
	selectorFlag(cmd, &selector, "jobs (key=value terms filtered by the server, the others here)")
	f.StringVar(&since, "created-since", "", "only jobs created at or after this time: RFC 3339 (2026-01-02T15:04:05Z) or how long ago (24h, 7d)")
	f.StringVar(&until, "created-until", "", "only jobs created before this time: RFC 3339 or how long ago (24h, 7d)")
	f.BoolVar(&archived, "archived", false, "list the archive of finished jobs instead of the live jobs")
	f.IntVar(&limit, "limit", 0, "at most this many jobs (0: all)")
	watchFlag(cmd, &watch)
	return cmd
}

// parseLabelFilter reads repeated key=value flags into a map, naming the
// flag.
func parseLabelFilter(flag string, entries []string) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, usageErrorf("invalid --%s %q: want key=value, e.g. team=data", flag, e)
		}
		if prev, dup := out[k]; dup && prev != v {
			return nil, usageErrorf("invalid --%s %q: label %s is already given as %q, and a job has one value per label", flag, e, k, prev)
		}
		out[k] = v
	}
	return out, nil
}

// parseTimeFlag reads a time flag: an RFC 3339 time, or a duration that
// means that long before now (24h, 90m, or whole days: 7d). "" is unset.
func parseTimeFlag(flag, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok && err != nil {
		if n, nerr := strconv.ParseUint(days, 10, 16); nerr == nil {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil || d < 0 {
		return nil, usageErrorf("invalid --%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or how long ago (24h, 90m, 7d)", flag, v)
	}
	return timestamppb.New(now.Add(-d)), nil
}

func (a *app) jobCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel JOBID",
		Short: "Kill every task of a job; the job ends JOB_KILLED",
		Long: `Kill every task of a job; the job ends JOB_KILLED. A job that has already
finished stays as it ended, and the command says so (and succeeds).`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				get := a.getJob(cmd.Context(), c, args[0])
				// Ask first: cancelling a finished job changes nothing, and
				// "cancel requested" would say it did. An archived job is
				// left to the server, which refuses to touch it and says why.
				cur, err := call(cmd.Context(), c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: args[0]})
				if err != nil {
					return err
				}
				if st := cur.GetJob().GetStatus(); jobTerminal(st.GetState()) && !st.GetArchived() {
					return p.changed(fmt.Sprintf("job %s has already finished (%s): nothing to cancel", args[0], st.GetState()),
						func() (proto.Message, error) { return cur.GetJob(), nil })
				}
				if _, err := call(cmd.Context(), c, c.Jobs.CancelJob, &pelotonv1.CancelJobRequest{JobId: args[0]}); err != nil {
					return err
				}
				return p.changed(fmt.Sprintf("job %s: cancel requested", args[0]), get)
			})
		},
	}
}

func (a *app) jobDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete JOBID",
		Short: "Delete a job",
		Args:  argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if _, err := call(cmd.Context(), c, c.Jobs.DeleteJob, &pelotonv1.DeleteJobRequest{JobId: args[0]}); err != nil {
					return err
				}
				return p.deleted("job", "jobId", args[0], fmt.Sprintf("job %s deleted", args[0]))
			})
		},
	}
}

func (a *app) jobRestartCommand() *cobra.Command {
	var instances []string
	cmd := &cobra.Command{
		Use:   "restart JOBID",
		Short: "Restart instances of a job (by default every instance that has not succeeded)",
		Args:  argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			ids := make([]uint32, 0, len(instances))
			for _, s := range instances {
				v, err := parseNonNegative("--instances", s, 32)
				if err != nil {
					return err
				}
				id := uint32(v)
				ids = append(ids, id)
			}
			return a.withClient(func(c *client) error {
				if _, err := call(cmd.Context(), c, c.Jobs.RestartJob,
					&pelotonv1.RestartJobRequest{JobId: args[0], Instances: ids}); err != nil {
					return err
				}
				return p.changed(fmt.Sprintf("job %s: restart requested", args[0]), a.getJob(cmd.Context(), c, args[0]))
			})
		},
	}
	cmd.Flags().StringSliceVar(&instances, "instances", nil, "instances to restart, e.g. 0,3 (default: every instance that has not succeeded)")
	return cmd
}

func (a *app) jobWaitCommand() *cobra.Command {
	var forState string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait JOBID --for STATE",
		Short: "Wait until a job reaches a state, or every instance of a long-running job serves (--for HEALTHY)",
		Long: `Wait until a job reaches STATE (e.g. SUCCEEDED or JOB_SUCCEEDED, any case), or,
with --for HEALTHY, until every instance of a SERVICE, STATEFUL or DAEMON job
runs and passes its health checks. The wait follows the server's watch stream
(polling a server that has none) and prints a progress line on stderr every
10 seconds.

It fails at once when the state can no longer be reached, saying why: the job
ended in another terminal state (JOB_SUCCEEDED, JOB_FAILED, JOB_KILLED), or a
long-running job was asked to SUCCEED (it runs until cancelled).

Exit codes: 0 reached; 1 a call failed (no such job, server unreachable);
2 usage; 3 the state can no longer be reached; 4 timed out.`,
		Example: `  peloton job wait 3f2a... --for SUCCEEDED --timeout 30m
  peloton job wait 3f2a... --for HEALTHY`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if forState == "" {
				return usageErrorf("missing --for: the state to wait for")
			}
			want, err := parseWaitTarget(forState)
			if err != nil {
				return usageErrorf("invalid --for: %v", err)
			}
			if timeout <= 0 {
				return usageErrorf("invalid --timeout %s: must be > 0", timeout)
			}
			return a.withClient(func(c *client) error {
				return a.waitJob(cmd.Context(), c, p, args[0], want, timeout)
			})
		},
	}
	cmd.Flags().StringVar(&forState, "for", "", "state to wait for, e.g. SUCCEEDED, RUNNING or HEALTHY")
	// Shadows the global per-call --timeout: here it bounds the whole wait.
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait in all")
	return cmd
}

func (a *app) jobScaleCommand() *cobra.Command {
	var version uint64
	var dry bool
	var remove []string
	cmd := &cobra.Command{
		Use:   "scale JOBID [COUNT] [--remove 3,7]",
		Short: "Change the instance count of a job that has not finished, or remove chosen instances",
		Long: `Change a job's instance count. New instances start at once with the spec in
force; scaling down stops and removes the highest instance IDs. Each change is
a new spec version ("job versions" lists them). DAEMON jobs follow their hosts
and cannot be scaled; a job with an update in progress is scaled through the
update's spec instead.

--remove stops and removes the listed instances, whichever they are (a driver
releasing its idle executors). Without COUNT the job shrinks by their number;
with COUNT, COUNT is the new total: the listed instances go first, then the
highest others if COUNT is smaller still, or new instances are added if it is
larger. Removed IDs are holes that are never used again: new instances get IDs
above the highest. A gang goes whole or not at all.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(remove) > 0 && len(args) == 1 {
				return nil
			}
			return argsNamed("JOBID", "COUNT")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			var n uint64
			if len(args) > 1 {
				if n, err = strconv.ParseUint(strings.TrimSpace(args[1]), 10, 32); err != nil {
					return usageErrorf("invalid COUNT %q: want a number of instances", args[1])
				}
			}
			ids := make([]uint32, 0, len(remove))
			for _, s := range remove {
				v, err := parseNonNegative("--remove", s, 32)
				if err != nil {
					return err
				}
				ids = append(ids, uint32(v))
			}
			if cmd.Flags().Changed("version") && version == 0 {
				return usageErrorf("invalid --version 0: spec versions start at 1")
			}
			return a.withClient(func(c *client) error {
				req := &pelotonv1.ScaleJobRequest{JobId: args[0], InstanceCount: uint32(n), RemoveInstances: ids, Version: version}
				if dry {
					return a.dryScaleJob(cmd.Context(), c, p, req)
				}
				resp, err := call(cmd.Context(), c, c.Jobs.ScaleJob, req)
				if err != nil {
					return err
				}
				if p.structured() {
					return p.named("job", args[0], resp)
				}
				fmt.Fprintf(a.stdout, "job %s: %s, spec version %d\n", args[0], scaleSummary(uint32(n), ids), resp.GetSpecVersion())
				return nil
			})
		},
	}
	cmd.Flags().Uint64Var(&version, "version", 0, "scale only if the job is still at this spec version")
	cmd.Flags().StringSliceVar(&remove, "remove", nil, "instances to remove, e.g. 3,7 (COUNT then optional: the job shrinks by their number)")
	dryRunFlag(cmd, &dry)
	return cmd
}

// scaleSummary says what a scale asked for: a count, removed instances, or
// both.
func scaleSummary(count uint32, remove []uint32) string {
	var parts []string
	if count > 0 {
		parts = append(parts, fmt.Sprintf("%d instances", count))
	}
	if len(remove) > 0 {
		ids := make([]string, len(remove))
		for i, id := range remove {
			ids[i] = strconv.FormatUint(uint64(id), 10)
		}
		parts = append(parts, "removed instances "+strings.Join(ids, ","))
	}
	return strings.Join(parts, ", ")
}

func (a *app) jobVersionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "versions JOBID",
		Short: "List a job's spec versions, oldest first (-o yaml shows each spec)",
		Long: `List every spec version of a job with when and why it was made: "created",
"scaled from 3 to 5 instances", "update <id>", "rollback of update <id>". The
last one is the spec in force. -o json or -o yaml shows the specs themselves.`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := call(cmd.Context(), c, c.Jobs.ListJobVersions, &pelotonv1.ListJobVersionsRequest{JobId: args[0]})
				if err != nil {
					return err
				}
				return p.list(resp, "versions", len(resp.GetVersions()), func(w io.Writer, wide bool) {
					writeVersionTable(w, resp.GetVersions(), wide)
				})
			})
		},
	}
}

// pollUntil calls step every interval until it reports done or fails, for
// at most timeout in all; then it returns timedOut(). step's calls are
// bounded by the per-call timeout and by the poll's.
func pollUntil(ctx context.Context, c *client, every, timeout time.Duration, timedOut func() error,
	step func(context.Context) (done bool, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		// When the poll's deadline is the nearer one, a DeadlineExceeded from
		// the server means the poll ran out; gRPC can report it a moment
		// before ctx itself is done, so do not rely on ctx.Err() alone. Only
		// failed calls count: an answer step turned into an error stands.
		deadline, _ := ctx.Deadline()
		pollBounds := time.Until(deadline) <= c.timeout
		done, err := step(ctx)
		var rpcErr *rpcError
		if err != nil && errors.As(err, &rpcErr) &&
			(errors.Is(ctx.Err(), context.DeadlineExceeded) || (pollBounds && status.Code(err) == codes.DeadlineExceeded)) {
			return timedOut()
		}
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timedOut()
			}
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// getJob fetches job id as the server has it now, for -o json and -o yaml
// after a change.
func (a *app) getJob(ctx context.Context, c *client, id string) func() (proto.Message, error) {
	return func() (proto.Message, error) {
		resp, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: id})
		return resp.GetJob(), err
	}
}

// parseInstance parses an instance number.
func parseInstance(s string) (uint32, error) {
	v, err := parseNonNegative("instance", s, 32)
	return uint32(v), err
}
