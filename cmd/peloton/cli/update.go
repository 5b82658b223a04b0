package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) updateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Roll a new spec out to a SERVICE, STATEFUL or DAEMON job, batch by batch",
		Long: `A rolling update replaces a long-running job's instances with a new spec, a batch
at a time, never taking down more instances than the job's
sla.maximumUnavailableInstances allows. "update start" creates one; the others
inspect and steer it by its ID.`,
	}
	a.group(cmd)
	cmd.AddCommand(
		a.updateStartCommand(),
		a.updateGetCommand(),
		a.updateListCommand(),
		a.updateWatchCommand(),
		a.updateActionCommand("pause", "Stop an update from starting more instances (those being replaced finish)",
			func(ctx context.Context, c *client, id string) (updateResponse, error) {
				return call(ctx, c, c.Updates.PauseUpdate, &pelotonv1.PauseUpdateRequest{UpdateId: id})
			}),
		a.updateActionCommand("resume", "Continue a paused update",
			func(ctx context.Context, c *client, id string) (updateResponse, error) {
				return call(ctx, c, c.Updates.ResumeUpdate, &pelotonv1.ResumeUpdateRequest{UpdateId: id})
			}),
		a.updateActionCommand("abort", "Stop an update for good; every instance keeps the spec it runs",
			func(ctx context.Context, c *client, id string) (updateResponse, error) {
				return call(ctx, c, c.Updates.AbortUpdate, &pelotonv1.AbortUpdateRequest{UpdateId: id})
			}),
		a.updateActionCommand("rollback", "Return every instance an update changed to the spec before it",
			func(ctx context.Context, c *client, id string) (updateResponse, error) {
				return call(ctx, c, c.Updates.RollbackUpdate, &pelotonv1.RollbackUpdateRequest{UpdateId: id})
			}),
	)
	return cmd
}

// updateFlags are the flags of `update start`; each maps onto one field of
// UpdateSpec, except file and jobVersion.
type updateFlags struct {
	file                 string
	batchSize            uint32
	maxUnavailable       uint32
	inPlace              bool
	rollbackOnFailure    bool
	maxInstanceRetries   uint32
	maxTolerableFailures uint32
	startPaused          bool
	minReadySeconds      uint32
	jobVersion           uint64
}

func (f *updateFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&f.file, "file", "f", "", `the new job spec, YAML or JSON ("-" for stdin); name, type and pool may not change`)
	fs.Uint32Var(&f.batchSize, "batch-size", 0, "instances replaced at once (default 1)")
	fs.Uint32Var(&f.maxUnavailable, "max-unavailable", 0, "start no replacement while this many instances are unavailable (default --batch-size; sla.maximumUnavailableInstances bounds it further)")
	fs.BoolVar(&f.inPlace, "in-place", false, "restart each instance on its own host, its resources held for it meanwhile")
	fs.BoolVar(&f.rollbackOnFailure, "rollback-on-failure", false, "when the update fails, roll every changed instance back to the previous spec")
	fs.Uint32Var(&f.maxInstanceRetries, "max-instance-retries", 0, "times an instance that does not become ready is started again before it counts as failed")
	fs.Uint32Var(&f.maxTolerableFailures, "max-tolerable-failures", 0, "failed instances tolerated; one more fails the update")
	fs.BoolVar(&f.startPaused, "start-paused", false, `create the update paused; "update resume" starts it`)
	fs.Uint32Var(&f.minReadySeconds, "min-ready-seconds", 0, "seconds an instance must run (and pass its health check) to count as updated (0: the default, 5)")
	fs.Uint64Var(&f.jobVersion, "job-version", 0, "create the update only if the job is still at this spec version")
}

// spec validates the flags and builds the UpdateSpec. The server's defaults
// hide behind zero values, so a zero given explicitly is refused here: it
// would silently mean something other than what was typed.
func (f *updateFlags) spec(fs *pflag.FlagSet) (*pelotonv1.UpdateSpec, error) {
	if f.file == "" {
		return nil, usageErrorf("missing --file (-f): the new job spec")
	}
	if fs.Changed("batch-size") && f.batchSize == 0 {
		return nil, usageErrorf("invalid --batch-size 0: must be >= 1 (leave it out for the default, 1)")
	}
	if fs.Changed("max-unavailable") && f.maxUnavailable == 0 {
		return nil, usageErrorf("invalid --max-unavailable 0: must be >= 1 (leave it out for the default, --batch-size)")
	}
	if fs.Changed("job-version") && f.jobVersion == 0 {
		return nil, usageErrorf("invalid --job-version 0: spec versions start at 1")
	}
	return &pelotonv1.UpdateSpec{
		BatchSize:            f.batchSize,
		MaxUnavailable:       f.maxUnavailable,
		InPlace:              f.inPlace,
		RollbackOnFailure:    f.rollbackOnFailure,
		MaxInstanceRetries:   f.maxInstanceRetries,
		MaxTolerableFailures: f.maxTolerableFailures,
		StartPaused:          f.startPaused,
		MinReadySeconds:      f.minReadySeconds,
	}, nil
}

func (a *app) updateStartCommand() *cobra.Command {
	var f updateFlags
	var rid string
	var dry bool
	cmd := &cobra.Command{
		Use:   "start JOBID -f FILE",
		Short: "Start a rolling update of a job to a new spec",
		Long: `Start a rolling update of a SERVICE, STATEFUL or DAEMON job to the JobSpec in FILE
(the same kind of file "job create -f" reads). Only the instances whose task
changes are replaced; a changed instanceCount takes effect at once.

The update's ID goes to stdout and a one-line summary to stderr, so
  id=$(peloton update start JOBID -f new.yaml)
works; -o json or -o yaml prints the whole update instead.`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			us, err := f.spec(cmd.Flags())
			if err != nil {
				return err
			}
			spec, err := loadJobSpec(f.file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				req := &pelotonv1.CreateUpdateRequest{JobId: args[0], Spec: spec, UpdateSpec: us, JobVersion: f.jobVersion, RequestId: reqID}
				if dry {
					return a.dryCreateUpdate(cmd.Context(), c, p, req)
				}
				resp, err := create(cmd.Context(), c, c.Updates.CreateUpdate, req)
				if err != nil {
					return err
				}
				u := resp.GetUpdate()
				if p.structured() {
					return p.object(u, nil)
				}
				fmt.Fprintln(a.stdout, u.GetId())
				fmt.Fprintln(a.stderr, updateSummary(u))
				return nil
			})
		},
	}
	f.register(cmd.Flags())
	requestIDFlag(cmd, &rid)
	dryRunFlag(cmd, &dry)
	return cmd
}

// updateSummary is the line `update start` prints about a new update.
func updateSummary(u *pelotonv1.Update) string {
	st := u.GetStatus()
	return fmt.Sprintf("update %s of job %s: spec version %d -> %d, %d instances to replace, batch size %d, %s",
		u.GetId(), u.GetJobId(), u.GetFromVersion(), u.GetToVersion(), st.GetInstancesTotal(),
		max(u.GetSpec().GetBatchSize(), 1), st.GetState())
}

func (a *app) updateGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get UPDATEID",
		Short: "Show an update and its progress",
		Args:  argsNamed("UPDATEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.GetUpdateResponse, error) {
				return call(cmd.Context(), c, c.Updates.GetUpdate, &pelotonv1.GetUpdateRequest{UpdateId: args[0]})
			}, func(p *printer, resp *pelotonv1.GetUpdateResponse) error { return showUpdate(p, resp.GetUpdate()) })
		},
	}
}

func (a *app) updateListCommand() *cobra.Command {
	var job string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List updates, newest first",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.ListUpdatesResponse, error) {
				return call(cmd.Context(), c, c.Updates.ListUpdates, &pelotonv1.ListUpdatesRequest{JobId: job})
			}, listed("updates", (*pelotonv1.ListUpdatesResponse).GetUpdates, writeUpdateTable))
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only the updates of this job")
	return cmd
}

// updateResponse is an answer that carries one update after a change.
type updateResponse interface {
	GetUpdate() *pelotonv1.Update
}

// updateActionCommand builds a command that makes one call on the update
// named as its argument and shows the update as the server left it.
func (a *app) updateActionCommand(verb, short string, do func(context.Context, *client, string) (updateResponse, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " UPDATEID",
		Short: short,
		Args:  argsNamed("UPDATEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := do(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}
				return showUpdate(p, resp.GetUpdate())
			})
		},
	}
}

func showUpdate(p *printer, u *pelotonv1.Update) error {
	return p.object(u, func(w io.Writer, wide bool) {
		writeUpdateTable(w, []*pelotonv1.Update{u}, wide)
	})
}

func (a *app) updateWatchCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch UPDATEID",
		Short: "Print an update's progress until it ends",
		Long: `Poll an update every second and print a line each time its progress changes
(with -o json or -o yaml, the whole update instead), until it ends.
Exits 0 when it ends UPDATE_SUCCEEDED, or UPDATE_ROLLED_BACK after a
rollback the user asked for ("update rollback"); non-zero when it ends
UPDATE_FAILED or UPDATE_ABORTED, when it rolled back on its own (only an
update with --rollback-on-failure does; the server does not record who
asked, so such an update counts as rolled back on its own), or when
--timeout passes first (the update itself goes on).`,
		Args: argsNamed("UPDATEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usageErrorf("invalid --timeout %s: must be > 0", timeout)
			}
			return a.withClient(func(c *client) error {
				return a.watchUpdate(cmd.Context(), c, p, args[0], timeout)
			})
		},
	}
	// Shadows the global per-call --timeout: here it bounds the whole watch.
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to watch in all")
	return cmd
}

// watchUpdate polls update id and prints it whenever it changed, until it
// reaches a terminal state or timeout passes.
func (a *app) watchUpdate(ctx context.Context, c *client, p *printer, id string, timeout time.Duration) error {
	var last *pelotonv1.Update
	var shown []byte
	timedOut := func() error {
		if last == nil {
			return fmt.Errorf("update %s: no answer (timed out after %s)", id, timeout)
		}
		st := last.GetStatus()
		return fmt.Errorf("update %s is %s, %d/%d done (timed out after %s; the update goes on)",
			id, st.GetState(), st.GetInstancesDone(), st.GetInstancesTotal(), timeout)
	}
	return pollUntil(ctx, c, a.updatePoll, timeout, timedOut, func(ctx context.Context) (bool, error) {
		resp, err := call(ctx, c, c.Updates.GetUpdate, &pelotonv1.GetUpdateRequest{UpdateId: id})
		if err != nil {
			return false, err
		}
		u := resp.GetUpdate()
		last = u
		if err := showProgress(p, u, &shown); err != nil {
			return false, err
		}
		if !updateTerminal(u.GetStatus().GetState()) {
			return false, nil
		}
		ok, msg := updateOutcome(u)
		if !ok {
			return true, errors.New(msg)
		}
		if !p.structured() {
			fmt.Fprintln(a.stdout, msg)
		}
		return true, nil
	})
}

// updateOutcome is whether an update that ended ended as its user wanted,
// and the line that says how it ended. A rollback is what the user wanted
// when a user asked for it (rollbackCause "user"), not when the update
// turned around on its own after failures ("failure"). An update stored
// before the server said which has no cause: then only rollbackOnFailure
// could have turned it around on its own.
func updateOutcome(u *pelotonv1.Update) (bool, string) {
	st := u.GetStatus()
	msg := fmt.Sprintf("update %s is %s", u.GetId(), st.GetState())
	switch st.GetState() {
	case pelotonv1.UpdateState_UPDATE_SUCCEEDED:
		return true, msg
	case pelotonv1.UpdateState_UPDATE_ROLLED_BACK:
		switch st.GetRollbackCause() {
		case "user":
			return true, msg + ", as asked"
		case "":
			if !u.GetSpec().GetRollbackOnFailure() {
				return true, msg + ", as asked"
			}
		}
	}
	if m := st.GetMessage(); m != "" {
		msg += ": " + m
	}
	return false, msg
}

// showProgress prints u if it differs from what was shown last (*shown):
// a progress line, or the whole update for -o json and -o yaml.
func showProgress(p *printer, u *pelotonv1.Update, shown *[]byte) error {
	var cur []byte
	if p.structured() {
		// The server stamps updateTime only when something changed, so the
		// whole document is the thing to compare.
		b, err := marshalJSON(u)
		if err != nil {
			return err
		}
		cur = b
	} else {
		cur = []byte(progressLine(u))
	}
	if bytes.Equal(cur, *shown) {
		return nil
	}
	*shown = cur
	switch p.format {
	case formatJSON:
		return p.document(cur)
	case formatYAML:
		// One YAML document per change.
		fmt.Fprintln(p.w, "---")
		return p.document(cur)
	}
	if p.structured() {
		return p.emit(cur, u.ProtoReflect().Descriptor(), "")
	}
	_, err := fmt.Fprintln(p.w, string(cur))
	return err
}

// progressLine is one line of `update watch`: state, counts, the instances
// being replaced and what the server says.
func progressLine(u *pelotonv1.Update) string {
	st := u.GetStatus()
	line := fmt.Sprintf("%s %d/%d done, %d failed", st.GetState(), st.GetInstancesDone(), st.GetInstancesTotal(), st.GetInstancesFailed())
	if cur := st.GetInstancesCurrent(); len(cur) > 0 {
		line += ", replacing " + instanceRanges(cur)
	}
	if m := st.GetMessage(); m != "" {
		line += ": " + m
	}
	return line
}

// updateTerminal reports whether an update in state s will never change
// state again.
func updateTerminal(s pelotonv1.UpdateState) bool {
	switch s {
	case pelotonv1.UpdateState_UPDATE_SUCCEEDED, pelotonv1.UpdateState_UPDATE_FAILED,
		pelotonv1.UpdateState_UPDATE_ROLLED_BACK, pelotonv1.UpdateState_UPDATE_ABORTED:
		return true
	}
	return false
}
