package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fedServiceCommand is "peloton fed service": SERVICE jobs run across
// clusters.
func (a *app) fedServiceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "service", Short: "Run services across clusters: create, inspect and delete federated services"}
	a.group(cmd)
	cmd.AddCommand(
		a.fedServiceCreateCommand(),
		a.fedServiceGetCommand(),
		a.fedServiceListCommand(),
		a.fedServiceDeleteCommand(),
	)
	return cmd
}

const fedServiceSpecHelp = `The file (YAML or JSON, "-" for stdin) is a FederatedServiceSpec: a SERVICE job
spec whose instanceCount is the total over all clusters and whose
sla.maximumUnavailableInstances is the budget of the whole, and where to run it:

  job:
    name: web
    type: SERVICE
    pool: /default
    instanceCount: 12
    sla: {maximumUnavailableInstances: 3}
    defaultSpec: {command: [sleep, "3600"], resources: {cpu: 0.5, memoryMb: 64}}
  placement:
    clusters:
    - {name: c, count: 3}                 # a fixed count in a named cluster
    - {selector: {region: west}, weight: 2}
    - {name: a, weight: 1}
    minClusters: 2

The instances left after the fixed counts are split by weight. Without
clusters, every registered cluster that is not cordoned gets an equal part.
The budget is split over the clusters in proportion to their parts (at least
one each). The federation makes one SERVICE job per cluster, labelled
peloton.io/federated-service=<id>, and keeps it at its part: a job removed,
stopped, scaled or updated there is made again or set back.`

func (a *app) fedServiceCreateCommand() *cobra.Command {
	var file, rid string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a federated service and print its ID and split",
		Long:  "Create a federated service: its instances are split over clusters and each cluster's part runs as a SERVICE job there.\n\n" + fedServiceSpecHelp,
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("missing --file (-f): the federated service spec")
			}
			spec := &pelotonv1.FederatedServiceSpec{}
			if err := loadSpec(file, cmd.InOrStdin(), spec); err != nil {
				return err
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := create(cmd.Context(), f, f.Services.CreateFederatedService,
					&pelotonv1.CreateFederatedServiceRequest{Spec: spec, RequestId: reqID})
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, resp.GetServiceId())
				fmt.Fprintf(a.stderr, "split: %s\n", splitCell(resp.GetSplit()))
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `federated service spec file, YAML or JSON ("-" for stdin)`)
	requestIDFlag(cmd, &rid)
	return cmd
}

func (a *app) fedServiceGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get SERVICEID",
		Short: "Show a federated service: its parts in each cluster and how they run",
		Args:  argsNamed("SERVICEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := call(cmd.Context(), f, f.Services.GetFederatedService, &pelotonv1.GetFederatedServiceRequest{ServiceId: args[0]})
				if err != nil {
					return err
				}
				svc := resp.GetService()
				return p.object(svc, func(w io.Writer, _ bool) { writeFedService(w, svc) })
			})
		},
	}
}

func (a *app) fedServiceListCommand() *cobra.Command {
	var inCluster string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List federated services, newest first (every page; --limit to stop early)",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if limit < 0 {
				return usageErrorf("invalid --limit %d: must be >= 0", limit)
			}
			return a.withFederation(func(f *fedClient) error {
				svcs, err := allPages(limit, func(size uint32, token string) ([]*pelotonv1.FederatedService, string, error) {
					page, err := call(cmd.Context(), f, f.Services.ListFederatedServices,
						&pelotonv1.ListFederatedServicesRequest{Cluster: inCluster, PageSize: size, PageToken: token})
					return page.GetServices(), page.GetNextPageToken(), err
				})
				if err != nil {
					return err
				}
				resp := &pelotonv1.ListFederatedServicesResponse{Services: svcs}
				return p.list(resp, "services", len(svcs), func(w io.Writer, wide bool) { writeFedServiceTable(w, svcs, wide) })
			})
		},
	}
	cmd.Flags().StringVar(&inCluster, "in-cluster", "", "only services with a part in this cluster")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many services (0: all)")
	return cmd
}

func (a *app) fedServiceDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete SERVICEID",
		Short: "Delete a federated service from every cluster",
		Long: `Delete a federated service: the federation stops and deletes its job in every
cluster, and forgets the service once all are gone ("fed service get" shows the
parts left until then).`,
		Args: argsNamed("SERVICEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withFederation(func(f *fedClient) error {
				if _, err := call(cmd.Context(), f, f.Services.DeleteFederatedService, &pelotonv1.DeleteFederatedServiceRequest{ServiceId: args[0]}); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "federated service %s: deleting from every cluster\n", args[0])
				return nil
			})
		},
	}
}

// splitCell is "a=3 b=6 c=3".
func splitCell(split map[string]uint32) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(split)) {
		parts = append(parts, name+"="+strconv.FormatUint(uint64(split[name]), 10))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// writeFedService writes one federated service, then a row per cluster.
func writeFedService(w io.Writer, s *pelotonv1.FederatedService) {
	job := s.GetSpec().GetJob()
	field := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, orDash(v)) }
	field("id", s.GetId())
	field("name", job.GetName())
	field("pool", job.GetPool())
	field("instances", fmt.Sprintf("%d running of %d", s.GetRunning(), s.GetDesired()))
	field("budget", strconv.FormatUint(uint64(max(job.GetSla().GetMaximumUnavailableInstances(), 1)), 10)+" unavailable at most")
	field("created", timestamp(s.GetCreateTime()))
	if s.GetDeleting() {
		field("deleting", "yes")
	}
	field("message", s.GetMessage())
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CLUSTER\tDESIRED\tRUNNING\tBUDGET\tSTATE\tCLUSTER JOB ID\tMESSAGE")
	for _, p := range s.GetClusters() {
		state := ""
		if p.GetState() != pelotonv1.JobState_JOB_STATE_UNSPECIFIED {
			state = p.GetState().String()
		}
		row(w, p.GetCluster(), strconv.FormatUint(uint64(p.GetDesired()), 10), strconv.FormatUint(uint64(p.GetRunning()), 10),
			strconv.FormatUint(uint64(p.GetMaxUnavailable()), 10), state, p.GetClusterJobId(), p.GetMessage())
	}
}

// writeFedServiceTable writes federated services as a table; wide adds the
// pool and the message.
func writeFedServiceTable(w io.Writer, svcs []*pelotonv1.FederatedService, wide bool) {
	head := []string{"ID", "NAME", "RUNNING", "DESIRED", "SPLIT", "CREATED"}
	if wide {
		head = append(head, "POOL", "MESSAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, s := range svcs {
		split := map[string]uint32{}
		for _, p := range s.GetClusters() {
			split[p.GetCluster()] = p.GetDesired()
		}
		cells := []string{s.GetId(), s.GetSpec().GetJob().GetName(), strconv.FormatUint(uint64(s.GetRunning()), 10),
			strconv.FormatUint(uint64(s.GetDesired()), 10), splitCell(split), timestamp(s.GetCreateTime())}
		if wide {
			msg := s.GetMessage()
			if s.GetDeleting() {
				msg = "deleting"
			}
			cells = append(cells, s.GetSpec().GetJob().GetPool(), msg)
		}
		row(w, cells...)
	}
}
