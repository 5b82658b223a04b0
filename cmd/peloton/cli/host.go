package cli

import (
	"io"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) hostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Show the hosts of the cluster",
	}
	a.group(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List hosts with their used and total resources",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			c, err := a.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := call(cmd.Context(), c, c.hosts.ListHosts, &pelotonv1.ListHostsRequest{})
			if err != nil {
				return err
			}
			return p.list(resp, "hosts", len(resp.GetHosts()), func(w io.Writer, wide bool) {
				writeHostTable(w, resp.GetHosts(), wide)
			})
		},
	})
	return cmd
}
