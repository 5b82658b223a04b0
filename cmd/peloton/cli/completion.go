package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Dynamic shell completion ("peloton completion bash|zsh|fish" prints the
// script): job, federated job, service and update ids, pool paths, hosts,
// partitions and clusters are asked of the server; states and -o values
// are known here. A completion asks with a short timeout and, on any
// error, offers nothing: an error printed into the shell's line would be
// worse than no suggestion.

// completionTimeout bounds each server call a completion makes.
const completionTimeout = 2 * time.Second

// completionPageSize is how many jobs a completion asks for: the newest,
// which are the ones people type.
const completionPageSize = 200

// lister returns candidates ("value" or "value\tdescription") from the
// server.
type lister func(ctx context.Context) ([]string, error)

// complete turns a lister into a cobra completion function that offers
// the candidates starting with what was typed.
func complete(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		all, err := list(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return filterPrefix(all, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// fixed is a completion function offering values.
func fixed(values []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return filterPrefix(values, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func filterPrefix(all []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, c := range all {
		if strings.HasPrefix(strings.ToLower(c), strings.ToLower(prefix)) {
			out = append(out, c)
		}
	}
	return out
}

// registerCompletions gives every command under root completion of its
// arguments (by their names in its Use line) and of the flags that name
// something the server knows.
func (a *app) registerCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("output", func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		// jsonpath= and the like take more text after the "=".
		return filterPrefix(outputValues, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	_ = root.RegisterFlagCompletionFunc("cluster", complete(a.clusterNames))
	_ = root.RegisterFlagCompletionFunc("context", complete(a.contextNames))
	a.registerUnder(root)
}

func (a *app) registerUnder(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		a.registerUnder(sub)
	}
	if cmd.RunE == nil || cmd.ValidArgsFunction != nil {
		return
	}
	var byPos []cobra.CompletionFunc
	for _, name := range idArgs(cmd) {
		byPos = append(byPos, a.argCompletion(cmd, name))
	}
	// HOST... takes any number of its last argument.
	variadic := strings.Contains(cmd.Use, "...")
	if len(byPos) > 0 {
		cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			i := len(args)
			if i >= len(byPos) {
				if !variadic {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				i = len(byPos) - 1
			}
			if byPos[i] == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return byPos[i](c, args, toComplete)
		}
	}
	flags := map[string]cobra.CompletionFunc{
		"pool":       complete(a.poolPaths),
		"to":         complete(a.poolPaths),
		"partition":  complete(a.partitionNames),
		"host":       complete(a.hostNames),
		"in-cluster": complete(a.clusterNames),
		"job":        complete(a.jobIDList),
		"for":        fixed(jobStateNames()),
		"state":      fixed(jobStateNames()),
	}
	if cmd.Parent() != nil && cmd.Parent().Name() == "task" {
		flags["state"] = fixed(taskStateNames())
	}
	if cmd.CommandPath() == "peloton job wait" {
		flags["for"] = fixed(append(jobStateNames(), "HEALTHY"))
	}
	for name, fn := range flags {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, fn)
		}
	}
}

// argCompletion completes the argument called name of cmd, or is nil
// when there is nothing to offer.
func (a *app) argCompletion(cmd *cobra.Command, name string) cobra.CompletionFunc {
	parent := ""
	if cmd.Parent() != nil {
		parent = cmd.Parent().Name()
	}
	fed := cmd.Parent() != nil && cmd.Parent().Parent() != nil && cmd.Parent().Parent().Name() == "fed"
	switch {
	case name == "JOBID" && fed:
		return complete(a.fedJobIDList)
	case name == "JOBID":
		return complete(a.jobIDList)
	case name == "SERVICEID":
		return complete(a.serviceIDList)
	case name == "UPDATEID":
		return complete(a.updateIDList)
	case name == "HOST":
		return complete(a.hostNames)
	case name == "PATH" && fed:
		return complete(a.fedPoolPaths)
	case name == "PATH" && parent == "pool":
		return complete(a.poolPaths)
	case name == "NAME" && parent == "cluster":
		return complete(a.clusterNames)
	case name == "NAME" && parent == "config":
		return complete(a.contextNames)
	}
	return nil
}

func (a *app) jobIDList(ctx context.Context) (out []string, err error) {
	err = a.withClient(func(c *client) error {
		resp, err := call(ctx, c, c.Jobs.ListJobs, &pelotonv1.ListJobsRequest{PageSize: completionPageSize})
		for _, j := range resp.GetJobs() {
			out = append(out, j.GetId()+"\t"+j.GetSpec().GetName()+" "+strings.TrimPrefix(j.GetStatus().GetState().String(), "JOB_"))
		}
		return err
	})
	return out, err
}

func (a *app) fedJobIDList(ctx context.Context) (out []string, err error) {
	err = a.withFederation(func(f *fedClient) error {
		resp, err := call(ctx, f, f.Jobs.ListFederatedJobs, &pelotonv1.ListFederatedJobsRequest{PageSize: completionPageSize})
		for _, j := range resp.GetJobs() {
			out = append(out, j.GetId()+"\t"+j.GetSpec().GetJob().GetName())
		}
		return err
	})
	return out, err
}

func (a *app) serviceIDList(ctx context.Context) (out []string, err error) {
	err = a.withFederation(func(f *fedClient) error {
		resp, err := call(ctx, f, f.Services.ListFederatedServices, &pelotonv1.ListFederatedServicesRequest{PageSize: completionPageSize})
		for _, s := range resp.GetServices() {
			out = append(out, s.GetId()+"\t"+s.GetSpec().GetJob().GetName())
		}
		return err
	})
	return out, err
}

func (a *app) updateIDList(ctx context.Context) (out []string, err error) {
	err = a.withClient(func(c *client) error {
		resp, err := call(ctx, c, c.Updates.ListUpdates, &pelotonv1.ListUpdatesRequest{})
		for _, u := range resp.GetUpdates() {
			out = append(out, u.GetId()+"\tjob "+u.GetJobId())
		}
		return err
	})
	return out, err
}

func (a *app) hostNames(ctx context.Context) (out []string, err error) {
	err = a.withClient(func(c *client) error {
		resp, err := call(ctx, c, c.Hosts.ListHosts, &pelotonv1.ListHostsRequest{})
		for _, h := range resp.GetHosts() {
			out = append(out, h.GetName())
		}
		return err
	})
	return out, err
}

func (a *app) poolPaths(ctx context.Context) (out []string, err error) {
	err = a.withClient(func(c *client) error {
		resp, err := call(ctx, c, c.Pools.ListPools, &pelotonv1.ListPoolsRequest{})
		for _, p := range resp.GetPools() {
			out = append(out, p.GetPath())
		}
		return err
	})
	return out, err
}

func (a *app) fedPoolPaths(ctx context.Context) (out []string, err error) {
	err = a.withFederation(func(f *fedClient) error {
		resp, err := call(ctx, f, f.Pools.ListFederatedPools, &pelotonv1.ListFederatedPoolsRequest{})
		for _, p := range resp.GetPools() {
			out = append(out, p.GetPath())
		}
		return err
	})
	return out, err
}

func (a *app) partitionNames(ctx context.Context) (out []string, err error) {
	err = a.withClient(func(c *client) error {
		resp, err := call(ctx, c, c.Partitions.ListPartitions, &pelotonv1.ListPartitionsRequest{})
		for _, p := range resp.GetPartitions() {
			out = append(out, p.GetName())
		}
		return err
	})
	return out, err
}

func (a *app) clusterNames(ctx context.Context) (out []string, err error) {
	err = a.withFederation(func(f *fedClient) error {
		resp, err := call(ctx, f, f.Clusters.ListClusters, &pelotonv1.ListClustersRequest{})
		for _, c := range resp.GetClusters() {
			out = append(out, c.GetName())
		}
		return err
	})
	return out, err
}

// contextNames are the contexts of the config file (no server asked).
func (a *app) contextNames(context.Context) ([]string, error) {
	cfg, _, _, err := a.readConfig()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(cfg.Contexts))
	for _, c := range cfg.Contexts {
		out = append(out, c.Name)
	}
	return out, nil
}
