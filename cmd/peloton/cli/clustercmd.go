package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

func (a *app) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Register, inspect and cordon the cluster stacks of the federation",
		Long: `Register, inspect and cordon the cluster stacks of the federation (--federation).

A cluster started with "peloton serve cluster --federation ADDR" (or by
"peloton up") registers itself; "cluster register" adds one by hand. Once
registered, "peloton --cluster NAME job list" (and every job, task, pool, host
and update command) goes to that cluster's API.`,
	}
	a.group(cmd)
	cmd.AddCommand(
		a.clusterListCommand(),
		a.clusterGetCommand(),
		a.clusterRegisterCommand(),
		a.clusterDeregisterCommand(),
		a.clusterCordonCommand(true),
		a.clusterCordonCommand(false),
	)
	return cmd
}

// showCluster prints one cluster in the -o format: its fields, one a line.
func showCluster(p *printer, c *pelotonv1.Cluster) error {
	return p.object(c, func(w io.Writer, _ bool) {
		writeCluster(w, c, time.Now())
	})
}

func (a *app) clusterListCommand() *cobra.Command {
	var selector string
	var sel labelSelector
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the registered clusters with their state, endpoint, labels and capacity",
		Long: `List the registered clusters, by name: state (READY, DEGRADED, UNREACHABLE or
CORDONED), gRPC endpoint, labels, capacity of the hosts in service (cpu/memoryMb)
and when a health check was last answered. -o wide adds the health of a
cordoned cluster, what its pools use, how long the last check took and why the
cluster is in its state.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withFederation, func() (err error) {
				sel, err = parseSelector(selector)
				return err
			}, func(f *fedClient) (*pelotonv1.ListClustersResponse, error) {
				resp, err := call(cmd.Context(), f, f.Clusters.ListClusters, &pelotonv1.ListClustersRequest{})
				if err == nil {
					resp.Clusters = filterLabeled(sel, resp.GetClusters(), clusterLabels)
				}
				return resp, err
			}, listed("clusters", (*pelotonv1.ListClustersResponse).GetClusters, func(w io.Writer, cs []*pelotonv1.Cluster, wide bool) {
				writeClusterTable(w, cs, wide, time.Now())
			}))
		},
	}
	selectorFlag(cmd, &selector, "clusters (filtered here, not by the federation)")
	return cmd
}

func (a *app) clusterGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a registered cluster",
		Args:  argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return read(a, a.withFederation, nil, func(f *fedClient) (*pelotonv1.GetClusterResponse, error) {
				return call(cmd.Context(), f, f.Clusters.GetCluster, &pelotonv1.GetClusterRequest{Name: args[0]})
			}, func(p *printer, resp *pelotonv1.GetClusterResponse) error { return showCluster(p, resp.GetCluster()) })
		},
	}
}

func (a *app) clusterRegisterCommand() *cobra.Command {
	var endpoint, httpEndpoint string
	var labelEntries []string
	var replace bool
	cmd := &cobra.Command{
		Use:   "register NAME --endpoint ADDR",
		Short: "Register a cluster stack with the federation",
		Long: `Register a cluster stack (its --cluster-name) with the federation, which checks
its health from then on, gives it its part of the global pools and sends it
federated jobs. A cluster that does not answer is registered all the same, as
UNREACHABLE. Registering a name again with another endpoint or other labels
is refused unless --replace.`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if endpoint == "" {
				return usageErrorf("missing --endpoint: the cluster's gRPC address, host:port")
			}
			lbls, err := parseLabels("labels", labelEntries)
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := call(cmd.Context(), f, f.Clusters.RegisterCluster, &pelotonv1.RegisterClusterRequest{
					Name: args[0], Endpoint: endpoint, HttpEndpoint: httpEndpoint, Labels: lbls, Replace: replace,
				})
				if err != nil {
					return err
				}
				return showCluster(p, resp.GetCluster())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoint, "endpoint", "", "the cluster's gRPC API address, host:port (required)")
	f.StringVar(&httpEndpoint, "http-endpoint", "", "the cluster's REST address, if it serves one")
	f.StringSliceVar(&labelEntries, "labels", nil, "labels for cluster selectors, comma-separated key=value (e.g. region=west,zone=b)")
	f.BoolVar(&replace, "replace", false, "replace the registration of a cluster of this name (another endpoint or other labels)")
	return cmd
}

func (a *app) clusterDeregisterCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "deregister NAME",
		Short: "Forget a cluster",
		Long: `Forget a cluster: the federation stops checking it. Its pools stay in it as they
are, and federated jobs dispatched to it that never started may go elsewhere.`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				if _, err := call(cmd.Context(), f, f.Clusters.DeregisterCluster, &pelotonv1.DeregisterClusterRequest{Name: args[0]}); err != nil {
					return err
				}
				return p.deleted("cluster", "name", args[0], fmt.Sprintf("cluster %s deregistered", args[0]))
			})
		},
	}
}

// clusterCordonCommand is `cluster cordon NAME` (cordon) or `cluster
// uncordon NAME`.
func (a *app) clusterCordonCommand(cordon bool) *cobra.Command {
	use, short := "uncordon NAME", "Let a cordoned cluster take new work again"
	if cordon {
		use, short = "cordon NAME", "Send a cluster no new work; it keeps its pools and its jobs"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				var c *pelotonv1.Cluster
				if cordon {
					resp, err := call(cmd.Context(), f, f.Clusters.CordonCluster, &pelotonv1.CordonClusterRequest{Name: args[0]})
					if err != nil {
						return err
					}
					c = resp.GetCluster()
				} else {
					resp, err := call(cmd.Context(), f, f.Clusters.UncordonCluster, &pelotonv1.UncordonClusterRequest{Name: args[0]})
					if err != nil {
						return err
					}
					c = resp.GetCluster()
				}
				return showCluster(p, c)
			})
		},
	}
}

// writeClusterTable writes clusters as a table; capacity is "cpu/memoryMb"
// as in pool list. wide adds the health under a cordon, the allocation,
// the last check's latency and the message. now is when "LAST SEEN" is
// counted from.
func writeClusterTable(w io.Writer, clusters []*pelotonv1.Cluster, wide bool, now time.Time) {
	head := []string{"NAME", "STATE", "ENDPOINT", "LABELS", "CAPACITY", "LAST SEEN"}
	if wide {
		head = append(head, "HEALTH", "ALLOCATION", "LATENCY", "MESSAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, c := range clusters {
		cells := []string{
			c.GetName(),
			c.GetState().String(),
			c.GetEndpoint(),
			labels(c.GetLabels()),
			cpuMem(c.GetCapacity()),
			ago(c.GetLastSeenTime(), now),
		}
		if wide {
			cells = append(cells, c.GetHealth().String(), cpuMem(c.GetAllocation()), latency(c), c.GetMessage())
		}
		row(w, cells...)
	}
}

// writeCluster writes every field of a cluster, one a line.
func writeCluster(w io.Writer, c *pelotonv1.Cluster, now time.Time) {
	field := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, orDash(v)) }
	field("name", c.GetName())
	field("state", c.GetState().String())
	field("health", c.GetHealth().String())
	field("endpoint", c.GetEndpoint())
	field("http endpoint", c.GetHttpEndpoint())
	field("labels", labels(c.GetLabels()))
	field("capacity", resourcesLong(c.GetCapacity()))
	field("allocation", resourcesLong(c.GetAllocation()))
	field("latency", latency(c))
	field("registered", timestamp(c.GetRegisteredTime()))
	seen := timestamp(c.GetLastSeenTime())
	if seen != "" {
		seen += " (" + ago(c.GetLastSeenTime(), now) + ")"
	}
	field("last seen", seen)
	field("state since", timestamp(c.GetStateTime()))
	field("message", c.GetMessage())
	field("version", strconv.FormatUint(c.GetVersion(), 10))
}

// ago is how long before now ts was, to the second ("3s ago", "5m ago"),
// or "never".
func ago(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "never"
	}
	d := max(now.Sub(ts.AsTime()), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// latency is how long the last health check took, empty before any was
// answered.
func latency(c *pelotonv1.Cluster) string {
	if c.GetLastSeenTime() == nil {
		return ""
	}
	return strconv.FormatFloat(c.GetLatencyMs(), 'f', 1, 64) + "ms"
}

// resourcesLong renders resources by the spec's field names, leaving out
// kinds of 0: "cpu 64, memoryMb 131072".
func resourcesLong(r *pelotonv1.Resources) string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, k := range []struct {
		name string
		v    float64
	}{{"cpu", r.GetCpu()}, {"memoryMb", r.GetMemoryMb()}, {"diskMb", r.GetDiskMb()}, {"gpu", r.GetGpu()}} {
		if k.v != 0 {
			parts = append(parts, k.name+" "+number(k.v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
