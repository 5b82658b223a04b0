package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// jobEvent is one thing that happened to a job, as `job events` shows it.
// Events are derived from what the server keeps anyway (the job's status
// times, its spec versions, its updates, each instance's latest state
// changes), so they cost no writes and outlive restarts; an instance keeps
// its latest 16 changes, so older ones of a busy instance are gone.
type jobEvent struct {
	Time time.Time `json:"time"`
	// Object is what the event is about: "job", "instance 3",
	// "version 2", "update <id>".
	Object string `json:"object"`
	// Instance and Run are set for an instance's events.
	Instance *uint32 `json:"instance,omitempty"`
	Run      uint32  `json:"run,omitempty"`
	// Event is what happened: a state reached, "created", "scaled ...".
	Event  string `json:"event"`
	Reason string `json:"reason,omitempty"`
	// Message is the detail the server gave, if any.
	Message string `json:"message,omitempty"`
}

// jobEvents derives a job's events from its status, versions, updates and
// tasks, oldest first (events at the same time in the order job, versions,
// updates, instances).
func jobEvents(job *pelotonv1.Job, versions []*pelotonv1.JobVersion, updates []*pelotonv1.Update, tasks []*pelotonv1.Task) []jobEvent {
	var evs []jobEvent
	at := func(ts *timestamppb.Timestamp) (time.Time, bool) {
		if ts == nil {
			return time.Time{}, false
		}
		return ts.AsTime().UTC(), true
	}
	st := job.GetStatus()
	if t, ok := at(st.GetCreateTime()); ok {
		evs = append(evs, jobEvent{Time: t, Object: "job", Event: "created", Message: fmt.Sprintf("%s job %q, %d instances in %s",
			job.GetSpec().GetType(), job.GetSpec().GetName(), job.GetSpec().GetInstanceCount(), job.GetSpec().GetPool())})
	}
	if t, ok := at(st.GetStartTime()); ok {
		evs = append(evs, jobEvent{Time: t, Object: "job", Event: "started"})
	}
	if t, ok := at(st.GetCompletionTime()); ok {
		evs = append(evs, jobEvent{Time: t, Object: "job", Event: st.GetState().String(), Message: st.GetMessage()})
	}
	for _, v := range versions {
		if t, ok := at(v.GetCreateTime()); ok && v.GetVersion() > 1 {
			evs = append(evs, jobEvent{Time: t, Object: "version " + strconv.FormatUint(v.GetVersion(), 10), Event: v.GetCause(),
				Message: fmt.Sprintf("%d instances", v.GetSpec().GetInstanceCount())})
		}
	}
	for _, u := range updates {
		evs = append(evs, updateEvents(u)...)
	}
	for _, tk := range tasks {
		evs = append(evs, taskEvents(tk)...)
	}
	slices.SortStableFunc(evs, func(a, b jobEvent) int { return a.Time.Compare(b.Time) })
	return evs
}

// updateEvents are an update's start, and its end or where it is now.
func updateEvents(u *pelotonv1.Update) []jobEvent {
	st := u.GetStatus()
	obj := "update " + u.GetId()
	var evs []jobEvent
	if ts := st.GetCreateTime(); ts != nil {
		msg := fmt.Sprintf("%d instances", st.GetInstancesTotal())
		evs = append(evs, jobEvent{Time: ts.AsTime().UTC(), Object: obj, Event: "started", Reason: u.GetCause(), Message: msg})
	}
	last := st.GetCompletionTime()
	if last == nil {
		last = st.GetUpdateTime()
	}
	if last != nil {
		msg := fmt.Sprintf("%d/%d instances done", st.GetInstancesDone(), st.GetInstancesTotal())
		if n := st.GetInstancesFailed(); n > 0 {
			msg += fmt.Sprintf(", %d failed", n)
		}
		if m := st.GetMessage(); m != "" {
			msg += ": " + m
		}
		evs = append(evs, jobEvent{Time: last.AsTime().UTC(), Object: obj, Event: st.GetState().String(), Message: msg})
	}
	return evs
}

// taskEvents are an instance's state changes the server keeps; the last
// one carries the run's message and exit code when it is the current run's.
func taskEvents(tk *pelotonv1.Task) []jobEvent {
	st := tk.GetStatus()
	inst := tk.GetInstanceId()
	hist := st.GetHistory()
	evs := make([]jobEvent, 0, len(hist))
	for i, tr := range hist {
		if tr.GetTime() == nil {
			continue
		}
		ev := jobEvent{Time: tr.GetTime().AsTime().UTC(), Object: fmt.Sprintf("instance %d", inst), Instance: &inst,
			Run: tr.GetRunId(), Event: tr.GetState().String(), Reason: tr.GetReason()}
		if i == len(hist)-1 && tr.GetRunId() == st.GetRunId() && tr.GetState() == st.GetState() {
			ev.Message = st.GetMessage()
			if host := st.GetHost(); host != "" && ev.Message == "" {
				ev.Message = "on " + host
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// writeEventTable writes events as a table.
func writeEventTable(w io.Writer, evs []jobEvent, _ bool) {
	fmt.Fprintln(w, "TIME\tOBJECT\tRUN\tEVENT\tREASON\tMESSAGE")
	for _, e := range evs {
		run := ""
		if e.Run > 0 {
			run = strconv.FormatUint(uint64(e.Run), 10)
		}
		row(w, e.Time.Format(time.RFC3339), e.Object, run, e.Event, e.Reason, e.Message)
	}
}

func (a *app) jobEventsCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "events JOBID",
		Short: "List what happened to a job, oldest first: its states, spec versions, updates and its instances' state changes",
		Long: `List a job's events in time order: when it was created, started and ended; each
new spec version and why (scaled, update, rollback); each update's start and
end (or progress); and each instance's state changes with their reasons
(launched, running, failed with exit-nonzero, killed, preempted, lost) and the
current run's message.

The events are read from what the cluster keeps anyway - the job's status,
versions and updates, and the latest 16 state changes of each instance - so
they survive restarts and cost nothing to keep; an instance that changed more
than 16 times shows only its latest 16 changes.

With --watch (-w), the events that happen next are printed as they come: the
job's watch stream says when it changed, and the events are read again at
most once a second. Ctrl-C (or --timeout, when given) ends it with exit 0.`,
		Example: `  peloton job events 3f2a...
  peloton job events 3f2a... -o json
  peloton job events 3f2a... --watch`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			id := args[0]
			return a.withClient(func(c *client) error {
				evs, err := fetchJobEvents(cmd.Context(), c, id)
				if err != nil {
					return err
				}
				if watch {
					return a.watchJobEvents(cmd.Context(), c, p, id, evs)
				}
				if p.structured() {
					if evs == nil {
						evs = []jobEvent{} // "events": [], for scripts to iterate over
					}
					b, err := json.Marshal(map[string][]jobEvent{"events": evs})
					if err != nil {
						return err
					}
					return p.document(b)
				}
				return p.object(nil, func(w io.Writer, wide bool) { writeEventTable(w, evs, wide) })
			})
		},
	}
	watchFlag(cmd, &watch)
	return cmd
}

// fetchJobEvents reads what job id's events are derived from.
func fetchJobEvents(ctx context.Context, c *client, id string) ([]jobEvent, error) {
	job, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	vs, err := call(ctx, c, c.Jobs.ListJobVersions, &pelotonv1.ListJobVersionsRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	us, err := call(ctx, c, c.Updates.ListUpdates, &pelotonv1.ListUpdatesRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	tasks, err := allPages(0, func(size uint32, token string) ([]*pelotonv1.Task, string, error) {
		page, err := call(ctx, c, c.Tasks.ListTasks, &pelotonv1.ListTasksRequest{JobId: id, PageSize: size, PageToken: token})
		return page.GetTasks(), page.GetNextPageToken(), err
	})
	if err != nil {
		return nil, err
	}
	return jobEvents(job.GetJob(), vs.GetVersions(), us.GetUpdates(), tasks), nil
}

// key names an event, so that a watch prints it once. The message is not
// part of it: the current run's message may change under one event.
func (e jobEvent) key() string {
	return fmt.Sprint(e.Time.UnixNano(), "|", e.Object, "|", e.Run, "|", e.Event, "|", e.Reason)
}

// watchJobEvents prints evs, then the events that happen next: each time
// the job's watch stream says it changed (at most every a.updatePoll), its
// events are read again and the new ones printed.
func (a *app) watchJobEvents(ctx context.Context, c *client, p *printer, id string, evs []jobEvent) error {
	ctx, stop := a.watchContext(ctx)
	defer stop()
	seen := map[string]bool{}
	docs := 0
	show := func(evs []jobEvent, header bool) error {
		var fresh []jobEvent
		for _, e := range evs {
			if k := e.key(); !seen[k] {
				seen[k] = true
				fresh = append(fresh, e)
			}
		}
		if p.structured() {
			for _, e := range fresh {
				if p.format == formatYAML && docs > 0 {
					if _, err := io.WriteString(p.w, "---\n"); err != nil {
						return err
					}
				}
				docs++
				b, err := json.Marshal(e)
				if err != nil {
					return err
				}
				if err := p.document(b); err != nil {
					return err
				}
			}
			return nil
		}
		if header {
			return p.object(nil, func(w io.Writer, wide bool) { writeEventTable(w, fresh, wide) })
		}
		if len(fresh) == 0 {
			return nil
		}
		return (&watchPrinter{p: p}).row(func(w io.Writer, wide bool) { writeEventTable(w, fresh, wide) })
	}
	if err := show(evs, true); err != nil {
		return err
	}
	stream, err := c.Jobs.WatchJobs(ctx, &pelotonv1.WatchJobsRequest{JobIds: []string{id}})
	if err != nil {
		return c.wrap(err)
	}
	changed := make(chan struct{}, 1)
	gone := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		for {
			ch, err := stream.Recv()
			if err != nil {
				ended <- err
				return
			}
			if ch.GetDeleted() {
				close(gone)
				return
			}
			select {
			case changed <- struct{}{}:
			default: // a change is pending already: one read shows both
			}
		}
	}()
	tick := time.NewTicker(a.updatePoll)
	defer tick.Stop()
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ended:
			if watchEnded(ctx) || errors.Is(err, io.EOF) {
				return nil
			}
			return c.wrap(err)
		case <-gone:
			_, err := fmt.Fprintf(p.w, "job %s deleted\n", id)
			return err
		case <-changed:
			dirty = true
		case <-tick.C:
			if !dirty {
				continue
			}
			dirty = false
			evs, err := fetchJobEvents(ctx, c, id)
			if watchEnded(ctx) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := show(evs, false); err != nil {
				return err
			}
		}
	}
}
