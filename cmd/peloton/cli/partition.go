package cli

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// partitionCommand is `peloton partition`: the partitions and the moves of
// hosts between them.
func (a *app) partitionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partition",
		Short: "Show the partitions (batch, stateless, ...) and the moves of hosts between them",
	}
	a.group(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List partitions: hosts, capacity, use, zones, pressure and oversubscription",
		Long: `List every partition: its hosts (and those moving in or out), capacity, what
runs hold and use, the hosts by zone, the pressure and the mean
oversubscription factor, as the host advisor last said them. The last line
says which advisor speaks, in which mode, and how fresh its word is.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.ListPartitionsResponse, error) {
				return call(cmd.Context(), c, c.Partitions.ListPartitions, &pelotonv1.ListPartitionsRequest{})
			}, func(p *printer, resp *pelotonv1.ListPartitionsResponse) error {
				// The table has the advisor's status under the rows.
				return p.list(resp, "partitions", len(resp.GetPartitions()), func(w io.Writer, _ bool) {
					writePartitionTable(w, resp, time.Now())
				})
			})
		},
	})
	var host string
	var limit uint32
	moves := &cobra.Command{
		Use:   "moves",
		Short: "Show the history of host moves between partitions, newest first, with their reasons",
		Long: `Show the moves of hosts between partitions, newest first: who moved what from
where to where and why (the advisor gives the numbers that caused it), and
what became of each: MOVING, DONE, SUPERSEDED (moved again before it
finished), or OBSERVED (an advisor in observe mode would have made it).`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.ListPartitionMovesResponse, error) {
				return call(cmd.Context(), c, c.Partitions.ListPartitionMoves, &pelotonv1.ListPartitionMovesRequest{Host: host, Limit: limit})
			}, listed("moves", (*pelotonv1.ListPartitionMovesResponse).GetMoves, func(w io.Writer, moves []*pelotonv1.PartitionMove, _ bool) {
				writeMoveTable(w, moves, time.Now())
			}))
		},
	}
	moves.Flags().StringVar(&host, "host", "", "only the moves of this host")
	moves.Flags().Uint32Var(&limit, "limit", 100, "the most moves to show (at most 1000)")
	cmd.AddCommand(moves)
	return cmd
}

// writePartitionTable writes the partitions and the advisor's status.
func writePartitionTable(w io.Writer, resp *pelotonv1.ListPartitionsResponse, now time.Time) {
	fmt.Fprintln(w, "PARTITION\tHOSTS\tMOVING\tCPU\tMEM\tCPU USED\tMEM USED\tSLACK\tZONES\tPRESSURE\tOVERSUB\tSERVICES OVER SLO")
	for _, p := range resp.GetPartitions() {
		var zones []string
		for _, z := range []string{"green", "orange", "red", "unknown"} {
			if n := p.GetZones()[z]; n > 0 {
				zones = append(zones, z+"="+strconv.FormatUint(uint64(n), 10))
			}
		}
		moving := ""
		if p.GetMovingIn() > 0 || p.GetMovingOut() > 0 {
			moving = fmt.Sprintf("+%d/-%d", p.GetMovingIn(), p.GetMovingOut())
		}
		row(w, p.GetName(), strconv.FormatUint(uint64(p.GetHosts()), 10), moving,
			number(p.GetAllocated().GetCpu())+"/"+number(p.GetCapacity().GetCpu()),
			number(p.GetAllocated().GetMemoryMb())+"/"+number(p.GetCapacity().GetMemoryMb()),
			strconv.FormatFloat(p.GetCpuUsed(), 'f', 2, 64), strconv.FormatInt(p.GetMemoryUsedMb(), 10),
			number(p.GetSlack().GetCpu())+"/"+number(p.GetSlack().GetMemoryMb()),
			strings.Join(zones, ","),
			strconv.FormatFloat(p.GetPressure(), 'f', 2, 64),
			strconv.FormatFloat(p.GetOversubscriptionFactor(), 'f', 2, 64),
			fmt.Sprintf("%d/%d", p.GetServicesOverSlo(), p.GetServices()))
	}
	if st := resp.GetAdvisor(); st.GetMode() != "" {
		fmt.Fprintf(w, "advisor %s (%s mode), last advice %s\n", st.GetAdvisorId(), st.GetMode(), ago(st.GetPublished(), now))
	} else {
		fmt.Fprintln(w, "no advisor: zones, pressure and oversubscription are unknown (run one with --advisor-mode or peloton serve advisor)")
	}
}

// writeMoveTable writes the move history.
func writeMoveTable(w io.Writer, moves []*pelotonv1.PartitionMove, now time.Time) {
	fmt.Fprintln(w, "TIME\tHOST\tFROM\tTO\tSTATE\tREASON")
	for _, m := range slices.Clone(moves) {
		row(w, ago(m.GetTime(), now), m.GetHost(), m.GetFrom(), m.GetTo(), m.GetState(), m.GetReason())
	}
}
