package cli

import (
	"context"
	"io"

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
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List hosts with their state, used and total resources",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := call(cmd.Context(), c, c.Hosts.ListHosts, &pelotonv1.ListHostsRequest{})
				if err != nil {
					return err
				}
				return showHosts(p, resp, resp.GetHosts())
			})
		},
	})
	drain := a.maintenanceStartCommand("drain HOST...",
		"Take hosts out of service (same as \"host maintenance start\")")
	cmd.AddCommand(drain, a.maintenanceCommand())
	return cmd
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
	return a.hostsCommand(use, short, func(ctx context.Context, c *client, hosts []string) (hostsResponse, error) {
		return call(ctx, c, c.Hosts.StartMaintenance, &pelotonv1.StartMaintenanceRequest{Hosts: hosts})
	})
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
func showHosts(p *printer, resp proto.Message, hosts []*pelotonv1.Host) error {
	return p.list(resp, "hosts", len(hosts), func(w io.Writer, wide bool) {
		writeHostTable(w, hosts, wide)
	})
}
