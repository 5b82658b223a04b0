package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) jobGangsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gangs JOBID [GANG]",
		Short: "List a job's gangs and where each member runs",
		Long: `List the gangs of a job (spec.gang, or the instances 0..k-1 of
sla.minimumRunningInstances k) with each member's rank, instance, state and
host:port: what the members get at launch in PELOTON_GANG_MEMBERS, in rank
order. The port is the member's first port when the spec fixes its number; a
port the backend picks shows as the host alone. With GANG, only that gang.`,
		Example: `  peloton job gangs 3f2a...
  peloton job gangs 3f2a... 1
  peloton job gangs 3f2a... 0 -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usageErrorf("missing JOBID")
			case len(args) > 2:
				return usageErrorf("unexpected argument %q", args[2])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			one := len(args) == 2
			var gang uint32
			if one {
				n, err := strconv.ParseUint(args[1], 10, 32)
				if err != nil {
					return usageErrorf("invalid GANG %q: a gang index, 0 or more", args[1])
				}
				gang = uint32(n)
			}
			return a.withClient(func(c *client) error {
				if one {
					g, err := call(cmd.Context(), c, c.Jobs.GetGang, &pelotonv1.GetGangRequest{JobId: args[0], Gang: gang})
					if err != nil {
						return err
					}
					return p.object(g, func(w io.Writer, _ bool) { writeGangTable(w, []*pelotonv1.Gang{g}) })
				}
				gs, err := fetchGangs(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}
				if !p.structured() {
					return p.render(gs[0], "", func(w io.Writer, _ bool) { writeGangTable(w, gs) })
				}
				return printGangList(p, gs)
			})
		},
	}
}

// fetchGangs reads every gang of job id, in order. A job without gangs
// gets the server's answer for gang 0, which says so.
func fetchGangs(ctx context.Context, c *client, id string) ([]*pelotonv1.Gang, error) {
	resp, err := call(ctx, c, c.Jobs.GetJob, &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	spec := resp.GetJob().GetSpec()
	n := max(gangCount(spec), 1)
	gs := make([]*pelotonv1.Gang, 0, n)
	for g := range n {
		if size := spec.GetGang().GetSize(); size > 1 && !jobmgr.HasInstance(spec, g*size) {
			continue // a gang a scale removed (spec.removedInstances)
		}
		gang, err := call(ctx, c, c.Jobs.GetGang, &pelotonv1.GetGangRequest{JobId: id, Gang: g})
		if err != nil {
			return nil, err
		}
		gs = append(gs, gang)
	}
	return gs, nil
}

// gangCount is how many gangs spec makes, as the server lays them out.
func gangCount(spec *pelotonv1.JobSpec) uint32 {
	if size := spec.GetGang().GetSize(); size > 1 {
		return (jobmgr.InstanceExtent(spec) + size - 1) / size // over the IDs, holes included
	}
	if spec.GetSla().GetMinimumRunningInstances() > 1 {
		return 1
	}
	return 0
}

// printGangList prints gangs as one document, {"gangs": [...]}.
func printGangList(p *printer, gs []*pelotonv1.Gang) error {
	items := make([]json.RawMessage, len(gs))
	for i, g := range gs {
		b, err := marshalJSON(g)
		if err != nil {
			return err
		}
		items[i] = b
	}
	b, err := json.Marshal(map[string][]json.RawMessage{"gangs": items})
	if err != nil {
		return err
	}
	return p.emit(b, nil, "gangs")
}

// writeGangTable writes one row per member of each gang.
func writeGangTable(w io.Writer, gs []*pelotonv1.Gang) {
	fmt.Fprintln(w, "GANG\tRANK\tINSTANCE\tSTATE\tHOST:PORT")
	for _, g := range gs {
		for _, m := range g.GetMembers() {
			addr := m.GetHost()
			if addr == "" {
				addr = "-"
			} else if m.GetPort() != 0 {
				addr += ":" + strconv.FormatUint(uint64(m.GetPort()), 10)
			}
			row(w, strconv.FormatUint(uint64(g.GetIndex()), 10), strconv.FormatUint(uint64(m.GetRank()), 10),
				strconv.FormatUint(uint64(m.GetInstance()), 10), m.GetState().String(), addr)
		}
	}
}
