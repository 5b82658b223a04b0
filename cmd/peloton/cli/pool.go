package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) poolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Manage the resource pool tree",
	}
	a.group(cmd)
	cmd.AddCommand(
		a.poolCreateCommand(),
		a.poolGetCommand(),
		a.poolUpdateCommand(),
		a.poolDeleteCommand(),
		a.poolListCommand(),
		a.poolMoveCommand(),
	)
	return cmd
}

// showPool prints one pool in the -o format.
func showPool(p *printer, pool *pelotonv1.Pool) error {
	return p.object(pool, func(w io.Writer, wide bool) {
		writePoolTable(w, []*pelotonv1.Pool{pool}, wide)
	})
}

func (a *app) poolCreateCommand() *cobra.Command {
	var file, rid string
	var parents bool
	cmd := &cobra.Command{
		Use:   "create PATH -f FILE",
		Short: "Create a pool (e.g. /org/team) from a PoolSpec file",
		Long: `Create a pool (e.g. /org/team) from a PoolSpec file. Its parent must exist,
unless --parents creates the missing ancestors: each reserves what the new
pool reserves (a parent must reserve at least what its children do), with no
limit and share 1; change them later with "peloton pool update".`,
		Args: argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the pool spec")
			}
			spec, err := loadPoolSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if parents {
					if err := createAncestors(cmd.Context(), c, args[0], spec); err != nil {
						return err
					}
				}
				resp, err := create(cmd.Context(), c, c.Pools.CreatePool, &pelotonv1.CreatePoolRequest{Path: args[0], Spec: spec, RequestId: reqID})
				if err != nil {
					if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound && strings.HasPrefix(st.Message(), "path: parent pool ") {
						return &rpcError{st: status.New(codes.NotFound, st.Message()+"; or pass --parents to create the missing ancestors")}
					}
					return err
				}
				for _, w := range resp.GetWarnings() {
					fmt.Fprintf(a.stderr, "warning: %s\n", w)
				}
				return showPool(p, resp.GetPool())
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `pool spec file, YAML or JSON ("-" for stdin)`)
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing ancestors first, each reserving what the new pool reserves")
	requestIDFlag(cmd, &rid)
	return cmd
}

// createAncestors creates the missing ancestors of path, top down, each
// reserving what spec reserves, so that the new pool fits under them.
func createAncestors(ctx context.Context, c *client, path string, spec *pelotonv1.PoolSpec) error {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 1; i < len(segs); i++ {
		anc := "/" + strings.Join(segs[:i], "/")
		_, err := call(ctx, c, c.Pools.GetPool, &pelotonv1.GetPoolRequest{Path: anc})
		if status.Code(err) != codes.NotFound {
			if err != nil {
				return err
			}
			continue
		}
		_, err = call(ctx, c, c.Pools.CreatePool, &pelotonv1.CreatePoolRequest{Path: anc,
			Spec: &pelotonv1.PoolSpec{Reservation: spec.GetReservation()}})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create ancestor %s: %w", anc, err)
		}
	}
	return nil
}

func (a *app) poolGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH",
		Short: "Show a pool",
		Args:  argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.GetPoolResponse, error) {
				return call(cmd.Context(), c, c.Pools.GetPool, &pelotonv1.GetPoolRequest{Path: args[0]})
			}, func(p *printer, resp *pelotonv1.GetPoolResponse) error { return showPool(p, resp.GetPool()) })
		},
	}
}

func (a *app) poolUpdateCommand() *cobra.Command {
	var file string
	var version uint64
	cmd := &cobra.Command{
		Use:   "update PATH -f FILE",
		Short: "Replace a pool's spec",
		Args:  argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the pool spec")
			}
			spec, err := loadPoolSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := call(cmd.Context(), c, c.Pools.UpdatePool,
					&pelotonv1.UpdatePoolRequest{Path: args[0], Spec: spec, Version: version})
				if err != nil {
					return err
				}
				return showPool(p, resp.GetPool())
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `pool spec file, YAML or JSON ("-" for stdin)`)
	cmd.Flags().Uint64Var(&version, "version", 0, "update only if the pool is still at this version (0: unconditionally)")
	return cmd
}

func (a *app) poolDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete PATH",
		Short: "Delete a pool",
		Args:  argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				if _, err := call(cmd.Context(), c, c.Pools.DeletePool, &pelotonv1.DeletePoolRequest{Path: args[0]}); err != nil {
					return err
				}
				return p.deleted("pool", "path", args[0], fmt.Sprintf("pool %s deleted", args[0]))
			})
		},
	}
}

func (a *app) poolListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List pools",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withClient, nil, func(c *client) (*pelotonv1.ListPoolsResponse, error) {
				return call(cmd.Context(), c, c.Pools.ListPools, &pelotonv1.ListPoolsRequest{})
			}, listed("pools", (*pelotonv1.ListPoolsResponse).GetPools, writePoolTable))
		},
	}
}

func (a *app) poolMoveCommand() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move PATH --to NEW_PARENT",
		Short: "Move a pool and its children under another parent",
		Long: "Move a pool and its children under another parent; PATH becomes NEW_PARENT/<its last segment>.\n" +
			"Pools that hold jobs cannot be moved, and a pool cannot be moved inside itself.",
		Args: argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErrorf("--to is required: the new parent pool")
			}
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withClient(func(c *client) error {
				resp, err := call(cmd.Context(), c, c.Pools.MovePool, &pelotonv1.MovePoolRequest{Path: args[0], NewParent: to})
				if err != nil {
					return err
				}
				return showPool(p, resp.GetPool())
			})
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the new parent pool")
	return cmd
}
