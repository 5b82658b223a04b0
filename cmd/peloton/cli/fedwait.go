package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// The federation has no watch stream: fed job wait, fed service watch and
// fed service update --wait poll it (every a.poll, and a.updatePoll for
// rollouts), with job wait's exit codes (wait.go).

func (a *app) fedJobWaitCommand() *cobra.Command {
	var forState string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait JOBID --for STATE",
		Short: "Wait until a federated job's job in its cluster reaches a state",
		Long: `Wait until the job a federated job was dispatched as reaches STATE (e.g.
SUCCEEDED or RUNNING), polling the federation, with a progress line on stderr
every 10 seconds (where it was dispatched, its state and task counts).

It fails at once when the state can no longer be reached: the job ended in
another terminal state, or was killed before it reached a cluster.

Exit codes: 0 reached; 1 a call failed; 2 usage; 3 the state can no longer be
reached; 4 timed out.`,
		Example: `  peloton fed job wait 3f2a... --for SUCCEEDED --timeout 1h`,
		Args:    argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if forState == "" {
				return usageErrorf("missing --for: the state to wait for")
			}
			want, err := parseJobState(forState)
			if err != nil {
				return usageErrorf("invalid --for: %v", err)
			}
			if timeout <= 0 {
				return usageErrorf("invalid --timeout %s: must be > 0", timeout)
			}
			return a.withFederation(func(f *fedClient) error {
				return a.waitFedJob(cmd.Context(), f, p, args[0], want, timeout)
			})
		},
	}
	cmd.Flags().StringVar(&forState, "for", "", "state to wait for, e.g. SUCCEEDED or RUNNING")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait in all")
	return cmd
}

// fedJobVerdict says whether federated job j's job is in state want, or
// why it can no longer get there ("" while it can).
func fedJobVerdict(j *pelotonv1.FederatedJob, want pelotonv1.JobState) (reached bool, never string) {
	state := j.GetStatus().GetState()
	switch {
	case state == want:
		return true, ""
	case jobTerminal(state):
		msg := fmt.Sprintf("federated job %s is %s in cluster %s, not %s", j.GetId(), state, j.GetCluster(), want)
		if m := j.GetStatus().GetMessage(); m != "" {
			msg += ": " + m
		}
		return false, msg
	case j.GetDispatchState() == pelotonv1.DispatchState_DISPATCH_DONE:
		msg := fmt.Sprintf("federated job %s was killed before it reached a cluster, so it will not be %s", j.GetId(), want)
		if m := j.GetMessage(); m != "" {
			msg += ": " + m
		}
		return false, msg
	}
	return false, ""
}

// fedJobProgress is the line a long fed job wait prints.
func fedJobProgress(j *pelotonv1.FederatedJob, want pelotonv1.JobState, since time.Duration) string {
	line := fmt.Sprintf("waiting for federated job %s to be %s: %s", j.GetId(), want, j.GetDispatchState())
	if c := j.GetCluster(); c != "" {
		line += " to " + c
	}
	if st := j.GetStatus(); st != nil {
		line += ", " + st.GetState().String()
		if c := taskCounts(st.GetTaskCounts()); c != "" {
			line += " " + c
		}
	} else if m := j.GetMessage(); m != "" {
		line += ": " + m
	}
	return line + fmt.Sprintf(" (%s so far)", since.Round(time.Second))
}

// waitFedJob polls federated job id until its job is in state want, can
// no longer get there, or timeout passes.
func (a *app) waitFedJob(ctx context.Context, f *fedClient, p *printer, id string, want pelotonv1.JobState, timeout time.Duration) error {
	start := time.Now()
	var last atomic.Pointer[pelotonv1.FederatedJob]
	stop := a.progressLines(func() string {
		if j := last.Load(); j != nil {
			return fedJobProgress(j, want, time.Since(start))
		}
		return ""
	})
	defer stop()
	timedOut := func() error {
		state := "not dispatched"
		if j := last.Load(); j != nil && j.GetStatus() != nil {
			state = j.GetStatus().GetState().String()
		}
		return timedOutf("federated job %s is %s, not %s (timed out after %s)", id, state, want, timeout)
	}
	return pollUntil(ctx, f.perCall(), a.poll, timeout, timedOut, func(ctx context.Context) (bool, error) {
		resp, err := call(ctx, f, f.Jobs.GetFederatedJob, &pelotonv1.GetFederatedJobRequest{JobId: id})
		if err != nil {
			return false, err
		}
		j := resp.GetJob()
		last.Store(j)
		reached, never := fedJobVerdict(j, want)
		if reached {
			stop()
			return true, p.changed(fmt.Sprintf("federated job %s is %s in cluster %s", id, want, j.GetCluster()), func() (proto.Message, error) { return j, nil })
		}
		if never != "" {
			return true, unreachablef("%s", never)
		}
		return false, nil
	})
}

func (a *app) fedServiceWatchCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch SERVICEID",
		Short: "Follow a federated service's rollout cluster by cluster until it ends",
		Long: `Print the progress of a federated service's current rollout, a line each time
it or one of its clusters' steps changes (state, update, instances, message),
until the rollout ends; -o json or -o yaml prints the service at the end.
It polls the federation.

Exit codes: 0 the rollout succeeded (or there is none under way: the line
says so); 1 a call failed; 2 usage; 3 the rollout ended otherwise (failed,
aborted, rolled back); 4 timed out.`,
		Example: `  peloton fed service watch s-1a2b --timeout 30m`,
		Args:    argsNamed("SERVICEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usageErrorf("invalid --timeout %s: must be > 0", timeout)
			}
			return a.withFederation(func(f *fedClient) error {
				return a.watchRollout(cmd.Context(), f, p, args[0], 0, timeout)
			})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to watch in all")
	return cmd
}

// rolloutLines are the lines that say where rollout r of service id is:
// one for the rollout, one per step.
func rolloutLines(id string, r *pelotonv1.ServiceRollout) []string {
	head := fmt.Sprintf("service %s rollout %d (spec version %d -> %d): %s", id, r.GetId(), r.GetFromVersion(), r.GetToVersion(),
		strings.TrimPrefix(r.GetState().String(), "ROLLOUT_"))
	if m := r.GetMessage(); m != "" {
		head += ": " + m
	}
	if w := r.GetWaiting(); w != "" {
		head += "; waits for " + w + " (since " + timestamp(r.GetWaitingSince()) + ")"
	}
	lines := []string{head}
	for _, st := range r.GetSteps() {
		l := fmt.Sprintf("  cluster %s: %s, %d -> %d instances", st.GetCluster(), strings.TrimPrefix(st.GetState().String(), "STEP_"),
			st.GetFromDesired(), st.GetDesired())
		if u := st.GetUpdateId(); u != "" {
			l += ", update " + u
		}
		if u := st.GetRollbackUpdateId(); u != "" {
			l += ", back: " + u
		}
		if m := st.GetMessage(); m != "" {
			l += ": " + m
		}
		lines = append(lines, l)
	}
	return lines
}

// rolloutEnded says whether a rollout in state s is over.
func rolloutEnded(s pelotonv1.RolloutState) bool {
	switch s {
	case pelotonv1.RolloutState_ROLLOUT_SUCCEEDED, pelotonv1.RolloutState_ROLLOUT_FAILED,
		pelotonv1.RolloutState_ROLLOUT_ABORTED, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK:
		return true
	}
	return false
}

// watchRollout polls service id, printing each line of its rollout (rollout
// number want; 0: the current one) that changed, until the rollout ends or
// timeout passes.
func (a *app) watchRollout(ctx context.Context, f *fedClient, p *printer, id string, want uint32, timeout time.Duration) error {
	printed := map[int]string{}
	var last atomic.Pointer[pelotonv1.ServiceRollout]
	timedOut := func() error {
		state := "not started"
		if r := last.Load(); r != nil {
			state = r.GetState().String()
		}
		return timedOutf("service %s's rollout is %s (timed out after %s)", id, state, timeout)
	}
	return pollUntil(ctx, f.perCall(), a.updatePoll, timeout, timedOut, func(ctx context.Context) (bool, error) {
		resp, err := call(ctx, f, f.Services.GetFederatedService, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
		if err != nil {
			return false, err
		}
		svc := resp.GetService()
		r := svc.GetRollout()
		if r == nil || (want != 0 && r.GetId() != want) {
			if want != 0 {
				return false, nil // not shown yet
			}
			return true, p.changed(fmt.Sprintf("service %s has no rollout", id), func() (proto.Message, error) { return svc, nil })
		}
		last.Store(r)
		if !p.structured() {
			// The rollout's line first, then its steps; once begun, the
			// steps that changed before the rollout's line, so that its
			// end is the last line.
			lines := rolloutLines(id, r)
			order := make([]int, 0, len(lines))
			for i := 1; i < len(lines); i++ {
				order = append(order, i)
			}
			if len(printed) == 0 {
				order = append([]int{0}, order...)
			} else {
				order = append(order, 0)
			}
			for _, i := range order {
				if printed[i] != lines[i] {
					printed[i] = lines[i]
					fmt.Fprintln(p.w, lines[i])
				}
			}
		}
		if !rolloutEnded(r.GetState()) {
			return false, nil
		}
		if p.structured() {
			if err := p.object(svc, nil); err != nil {
				return true, err
			}
		}
		if r.GetState() != pelotonv1.RolloutState_ROLLOUT_SUCCEEDED {
			msg := fmt.Sprintf("service %s's rollout %d ended %s", id, r.GetId(), r.GetState())
			if m := r.GetMessage(); m != "" {
				msg += ": " + m
			}
			return true, unreachablef("%s", msg)
		}
		return true, nil
	})
}

// perCall is a client that carries only f's per-call timeout, which is all
// pollUntil reads of it.
func (f *fedClient) perCall() *client { return &client{timeout: f.timeout} }
