package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) hostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Show the hosts of the cluster and take them in and out of maintenance",
	}
	a.group(cmd)
	var selector string
	var sel labelSelector
	list := &cobra.Command{
		Use:   "list",
		Short: "List hosts with their state, used and total resources",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withClient, func() (err error) {
				sel, err = parseSelector(selector)
				return err
			}, func(c *client) (*pelotonv1.ListHostsResponse, error) {
				resp, err := call(cmd.Context(), c, c.Hosts.ListHosts, &pelotonv1.ListHostsRequest{})
				if err == nil {
					resp.Hosts = filterLabeled(sel, resp.GetHosts(), hostLabels)
				}
				return resp, err
			}, func(p *printer, resp *pelotonv1.ListHostsResponse) error { return showHostList(p, resp, time.Now()) })
		},
	}
	selectorFlag(list, &selector, "hosts (filtered here, not by the server)")
	cmd.AddCommand(list)
	drain := a.maintenanceStartCommand("drain HOST...",
		"Take hosts out of service (same as \"host maintenance start\")")
	cmd.AddCommand(drain, a.maintenanceCommand(), a.hostMoveCommand())
	return cmd
}

// hostMoveCommand is `peloton host move HOST --partition NAME`.
func (a *app) hostMoveCommand() *cobra.Command {
	var partition string
	var noWait, force, cancel bool
	var timeout time.Duration
	var drainSeconds uint32
	var finish []string
	cmd := &cobra.Command{
		Use:   "move HOST --partition NAME | move HOST --cancel",
		Short: "Move a host to another partition, draining it first",
		Long: "The host takes no new tasks while it moves. Its tasks are preempted and run again on\n" +
			"other hosts, as maintenance drains them: services one SLA grant at a time; a STATEFUL\n" +
			"instance holds the move until its owner acts. Once empty the host joins the new partition\n" +
			"and takes work again. The command shows the move's progress until it is done, unless\n" +
			"--no-wait.\n\n" +
			"A move that would strand its tasks (no host that stays in service fits instances that must\n" +
			"leave) is refused, naming the job; --force moves anyway. --cancel stops a move under way:\n" +
			"the host returns to the partition it was leaving and takes work again (tasks moved so far\n" +
			"stay where they went). The host advisor does not move a host whose move was cancelled\n" +
			"again for its hold-down.\n\n" +
			"--drain-seconds N gives the move a drain window: the host takes no new work at once, but\n" +
			"its runs that end within N seconds finish where they are (a preempted batch run loses its\n" +
			"work) and only those still running then are drained; with --finish, only the runs named\n" +
			"(task IDs) are left to the window and the others are drained at once.",
		Args: argsNamed("HOST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := call(cmd.Context(), c, c.Hosts.MoveHost, &pelotonv1.MoveHostRequest{Host: args[0], Partition: partition,
					Force: force, Cancel: cancel, DrainSeconds: drainSeconds, FinishTaskIds: finish})
				if err != nil {
					return err
				}
				h := resp.GetHost()
				if cancel && !p.structured() {
					_, err := fmt.Fprintf(p.w, "host %s: move cancelled; it stays in partition %s\n", h.GetName(), h.GetPartition())
					return err
				}
				if noWait || h.GetPartitionState() == pelotonv1.PartitionMoveState_PARTITION_SETTLED {
					return showHosts(p, resp, []*pelotonv1.Host{h})
				}
				return a.watchMove(cmd.Context(), c, p, h, timeout)
			})
		},
	}
	cmd.Flags().StringVar(&partition, "partition", "", "the partition to move the host to (required)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the move has started")
	cmd.Flags().BoolVar(&force, "force", false, "move even when no other host fits the tasks that must leave")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "cancel the host's move under way: it returns to the partition it was leaving")
	cmd.Flags().Uint32Var(&drainSeconds, "drain-seconds", 0, "a drain window (0 to 3600 s): runs that end within it finish before the host is drained")
	cmd.Flags().StringSliceVar(&finish, "finish", nil, "with --drain-seconds, the runs (task IDs) left to finish in the window; the others are drained at once")
	// Shadows the global per-call --timeout: here it bounds the whole wait.
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the move in all")
	return cmd
}

// watchMove polls host h until it settled in its new partition, printing
// each change of its move as a line (or the host, for -o json and yaml).
func (a *app) watchMove(ctx context.Context, c *client, p *printer, h *pelotonv1.Host, timeout time.Duration) error {
	name, target := h.GetName(), h.GetTargetPartition()
	last := h
	var shown string
	show := func(h *pelotonv1.Host) error {
		line := moveLine(h)
		if line == shown {
			return nil
		}
		shown = line
		if p.structured() {
			return showHosts(p, &pelotonv1.ListHostsResponse{Hosts: []*pelotonv1.Host{h}}, []*pelotonv1.Host{h})
		}
		_, err := fmt.Fprintln(p.w, line)
		return err
	}
	timedOut := func() error {
		return fmt.Errorf("host %s: %s (timed out after %s; the move goes on)", name, moveLine(last), timeout)
	}
	return pollUntil(ctx, c, a.updatePoll, timeout, timedOut, func(ctx context.Context) (bool, error) {
		resp, err := call(ctx, c, c.Hosts.ListHosts, &pelotonv1.ListHostsRequest{})
		if err != nil {
			return false, err
		}
		var cur *pelotonv1.Host
		for _, x := range resp.GetHosts() {
			if x.GetName() == name {
				cur = x
			}
		}
		if cur == nil {
			return false, fmt.Errorf("host %s: gone from the cluster while moving to partition %s", name, target)
		}
		last = cur
		if err := show(cur); err != nil {
			return false, err
		}
		return cur.GetPartitionState() == pelotonv1.PartitionMoveState_PARTITION_SETTLED, nil
	})
}

// moveLine is one line of a move's progress.
func moveLine(h *pelotonv1.Host) string {
	if h.GetPartitionState() == pelotonv1.PartitionMoveState_PARTITION_SETTLED {
		return fmt.Sprintf("host %s is in partition %s", h.GetName(), h.GetPartition())
	}
	return fmt.Sprintf("host %s %s", h.GetName(), h.GetPartitionMessage())
}

func (a *app) maintenanceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Take hosts out of service and back",
		Long: "A host in maintenance takes no new tasks. \"start\" makes it HOST_DRAINING: its tasks are\n" +
			"preempted and run again on other hosts; once it holds none it is HOST_DRAINED. \"complete\"\n" +
			"returns it to HOST_UP (from HOST_DRAINING it stops the drain early). Every host named\n" +
			"changes, or none does.",
	}
	a.group(cmd)
	cmd.AddCommand(
		a.maintenanceStartCommand("start HOST...", "Take hosts out of service: drain them of tasks"),
		a.hostsCommand("complete HOST...", "Return hosts in maintenance to service",
			func(ctx context.Context, c *client, hosts []string) (hostsResponse, error) {
				return call(ctx, c, c.Hosts.CompleteMaintenance, &pelotonv1.CompleteMaintenanceRequest{Hosts: hosts})
			}),
	)
	return cmd
}

func (a *app) maintenanceStartCommand(use, short string) *cobra.Command {
	var force bool
	cmd := a.hostsCommand(use, short, func(ctx context.Context, c *client, hosts []string) (hostsResponse, error) {
		return call(ctx, c, c.Hosts.StartMaintenance, &pelotonv1.StartMaintenanceRequest{Hosts: hosts, Force: force})
	})
	cmd.Long = "A drain that would strand its tasks (no host that stays in service fits instances that\n" +
		"must leave) is refused, naming the job: they would wait with nowhere to go, and a service\n" +
		"waiting for its SLA would hold the drain for ever. --force drains anyway."
	cmd.Flags().BoolVar(&force, "force", false, "drain even when no other host fits the tasks that must leave")
	return cmd
}

// hostsResponse is an answer that lists hosts after a change.
type hostsResponse interface {
	proto.Message
	GetHosts() []*pelotonv1.Host
}

// hostsCommand runs one maintenance call on the hosts named as arguments
// and shows them as the server left them.
func (a *app) hostsCommand(use, short string, do func(context.Context, *client, []string) (hostsResponse, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("missing HOST")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := do(cmd.Context(), c, args)
				if err != nil {
					return err
				}
				return showHosts(p, resp, resp.GetHosts())
			})
		},
	}
}

// showHosts prints a response listing hosts in the -o format.
// showHostList is host list's output. While the backend does not reach
// its substrate, a line above the table says so and why; a document
// carries the status whole (substrate), even with no host.
func showHostList(p *printer, resp *pelotonv1.ListHostsResponse, now time.Time) error {
	if p.structured() {
		return p.object(resp, nil)
	}
	if s := resp.GetSubstrate(); s != nil && !s.GetReachable() {
		fmt.Fprintln(p.w, substrateLine(s, now))
	}
	return showHosts(p, resp, resp.GetHosts())
}

// substrateLine says that a substrate is not reachable, since when and
// why, in the words of the API's /readyz.
func substrateLine(s *pelotonv1.Substrate, now time.Time) string {
	name := s.GetName()
	if name == "" {
		name = s.GetBackend() + " substrate"
	}
	since := ""
	if s.GetSince() != nil {
		since = " (since " + ago(s.GetSince(), now) + ")"
	}
	return fmt.Sprintf("the %s is not reachable%s: %s; the hosts are as last seen, and new work waits", name, since, s.GetReason())
}

func showHosts(p *printer, resp proto.Message, hosts []*pelotonv1.Host) error {
	return p.list(resp, "hosts", len(hosts), func(w io.Writer, wide bool) {
		writeHostTable(w, hosts, wide, time.Now())
	})
}
