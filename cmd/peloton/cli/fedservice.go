package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
		a.fedServiceUpdateCommand(),
		a.fedServiceWatchCommand(),
		a.fedServiceControlCommand("pause", "Pause a service's rollout; the update in each cluster pauses too", rolloutPause),
		a.fedServiceControlCommand("resume", "Resume a paused rollout", rolloutResume),
		a.fedServiceControlCommand("abort", "Stop a rollout for good; each cluster keeps the spec it runs", rolloutAbort),
		a.fedServiceControlCommand("rollback", "Return every cluster the rollout updated (or is updating) to the spec before it, newest first", rolloutRollback),
		a.fedServiceControlCommand("approve", "Let a rollout waiting for approval of a step (rollout steps with approval: true) go on to the next", rolloutApprove),
		a.fedServiceControlCommand("rebalance", "Start the pending rebalance of a service whose placement.rebalance is MANUAL (its clusters changed)", rebalanceStart),
	)
	return cmd
}

// The rollout controls, as the CLI sends them.
const (
	rolloutPause = iota
	rolloutResume
	rolloutAbort
	rolloutRollback
	rolloutApprove
	rebalanceStart
)

func (a *app) fedServiceUpdateCommand() *cobra.Command {
	var uf updateFlags
	var order []string
	var parallel uint32
	var wait bool
	var waitTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "update SERVICEID -f FILE",
		Short: "Roll a new spec out to a federated service's clusters, one cluster after another",
		Long: `Give a federated service a new job spec (a JobSpec file, or a FederatedServiceSpec
file with the same placement but for the clusters' overrides, which it may
change) and roll it out cluster by cluster: first the
cluster with the smallest part (the canary) alone, then --parallel-clusters at a
time, each cluster's part an update there with the --batch-size, --in-place,
--min-ready-seconds ... given. The next cluster starts only when the one before
succeeded. A cluster that fails stops the rollout, or with --rollback-on-failure
returns every cluster already updated to the previous spec, newest first.
"fed service pause|resume|abort|rollback" act on the rollout; "fed service get"
shows each cluster's step. The service's own rollout (its spec's rollout:) is the
default: the flags given, and the file's rollout:, override it field by field.
With rollout steps, each step's clusters update at once, then soak and wait for
"fed service approve" as the step says; "fed service get" shows what it waits for.`,
		Args: argsNamed("SERVICEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			us, err := uf.spec(cmd.Flags())
			if err != nil {
				return err
			}
			if wait && waitTimeout <= 0 {
				return usageErrorf("invalid --wait-timeout %s: must be > 0", waitTimeout)
			}
			if cmd.Flags().Changed("parallel-clusters") && parallel == 0 {
				return usageErrorf("invalid --parallel-clusters 0: must be >= 1 (leave it out for the default, 1)")
			}
			spec, err := loadFederatedServiceFile(uf.file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			rs := rolloutFromFlags(cmd.Flags(), spec.GetRollout(), us, order, parallel)
			return a.withFederation(func(f *fedClient) error {
				resp, err := call(cmd.Context(), f, f.Services.UpdateFederatedService, &pelotonv1.UpdateFederatedServiceRequest{
					ServiceId: args[0], Job: spec.Job, Placement: spec.Placement, Rollout: rs, SpecVersion: uf.jobVersion})
				if err != nil {
					return err
				}
				svc := resp.GetService()
				if wait {
					// Progress lines for the table formats; the service
					// at the end for -o json and -o yaml.
					return a.watchRollout(cmd.Context(), f, p, args[0], svc.GetRollout().GetId(), waitTimeout)
				}
				return p.object(svc, func(w io.Writer, _ bool) { writeFedService(w, svc) })
			})
		},
	}
	uf.register(cmd.Flags())
	cmd.Flags().BoolVar(&wait, "wait", false, `then follow the rollout cluster by cluster until it ends, as "fed service watch" does (and with its exit codes)`)
	cmd.Flags().DurationVar(&waitTimeout, "wait-timeout", 10*time.Minute, "with --wait, how long to wait in all")
	fs := cmd.Flags()
	fs.Lookup("rollback-on-failure").Usage = "when a cluster fails, return every cluster already updated (and the one updating) to the previous spec, newest first"
	fs.Lookup("start-paused").Usage = `create the rollout paused; "fed service resume" starts it`
	fs.Lookup("job-version").Usage = "update only if the service is still at this spec version"
	fs.StringSliceVar(&order, "order", nil, "clusters in rollout order, comma-separated; those left out follow, smallest part first")
	fs.Uint32Var(&parallel, "parallel-clusters", 0, "after the first cluster, how many are updated at once (default 1)")
	return cmd
}

// rolloutFromFlags is the rollout an update asks for: the file's rollout,
// if it has one, with each flag given taking the place of its field. The
// federation fills what is left from the service's own rollout, so a flag
// not given leaves that field to the service.
func rolloutFromFlags(fs *pflag.FlagSet, file *pelotonv1.RolloutSpec, us *pelotonv1.UpdateSpec, order []string, parallel uint32) *pelotonv1.RolloutSpec {
	rs := &pelotonv1.RolloutSpec{}
	if file != nil {
		rs = proto.Clone(file).(*pelotonv1.RolloutSpec)
	}
	if fs.Changed("order") {
		rs.Order = order
	}
	if fs.Changed("parallel-clusters") {
		rs.ParallelClusters = parallel
	}
	if fs.Changed("rollback-on-failure") {
		rs.RollbackOnFailure = us.RollbackOnFailure
	}
	if fs.Changed("start-paused") {
		rs.StartPaused = us.StartPaused
	}
	us.RollbackOnFailure, us.StartPaused = false, false
	for _, name := range []string{"batch-size", "max-unavailable", "in-place", "max-instance-retries", "max-tolerable-failures", "min-ready-seconds"} {
		if fs.Changed(name) {
			rs.Update = us
			break
		}
	}
	return rs
}

// loadFederatedServiceFile reads a FederatedServiceSpec, or a JobSpec
// which it wraps as the spec's job (see loadFederatedJobSpec).
func loadFederatedServiceFile(path string, stdin io.Reader) (*pelotonv1.FederatedServiceSpec, error) {
	spec := &pelotonv1.FederatedServiceSpec{}
	job, err := loadJobOrWrapper(path, stdin, spec)
	if job != nil {
		spec.Job = job
	}
	return spec, err
}

func (a *app) fedServiceControlCommand(verb, short string, c int) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " SERVICEID",
		Short: short,
		Args:  argsNamed("SERVICEID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				var resp *pelotonv1.FederatedServiceRolloutResponse
				var err error
				switch c {
				case rolloutPause:
					resp, err = call(cmd.Context(), f, f.Services.PauseFederatedService, &pelotonv1.PauseFederatedServiceRequest{ServiceId: args[0]})
				case rolloutResume:
					resp, err = call(cmd.Context(), f, f.Services.ResumeFederatedService, &pelotonv1.ResumeFederatedServiceRequest{ServiceId: args[0]})
				case rolloutAbort:
					resp, err = call(cmd.Context(), f, f.Services.AbortFederatedService, &pelotonv1.AbortFederatedServiceRequest{ServiceId: args[0]})
				case rolloutApprove:
					resp, err = call(cmd.Context(), f, f.Services.ApproveFederatedService, &pelotonv1.ApproveFederatedServiceRequest{ServiceId: args[0]})
				case rebalanceStart:
					var rb *pelotonv1.RebalanceFederatedServiceResponse
					rb, err = call(cmd.Context(), f, f.Services.RebalanceFederatedService, &pelotonv1.RebalanceFederatedServiceRequest{ServiceId: args[0]})
					resp = &pelotonv1.FederatedServiceRolloutResponse{Service: rb.GetService()}
				default:
					resp, err = call(cmd.Context(), f, f.Services.RollbackFederatedService, &pelotonv1.RollbackFederatedServiceRequest{ServiceId: args[0]})
				}
				if err != nil {
					return err
				}
				svc := resp.GetService()
				return p.object(svc, func(w io.Writer, _ bool) { writeFedService(w, svc) })
			})
		},
	}
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
    - name: a
      weight: 1
      override: {image: web:canary, env: {MODE: canary}}   # a's part only
    minClusters: 2
    failover: {tolerationSeconds: 60, moveBack: true}   # optional
    rebalance: AUTO                       # or MANUAL: wait for "fed service rebalance"
  rollout:                                # optional: how its updates roll out
    steps:
    - {clusters: [c], soakSeconds: 600, approval: true}
    - {clusters: [a]}                     # clusters named in no step come last

The instances left after the fixed counts are split by weight. Without
clusters, every registered cluster that is not cordoned gets an equal part.
The budget is split over the clusters in proportion to their parts (at least
one each). The federation makes one SERVICE job per cluster, labelled
peloton.io/federated-service=<id>, and keeps it at its part: a job removed,
stopped, scaled or updated there is made again or set back. With failover, the
part of a cluster unreachable past tolerationSeconds is run by the others (within
their pools' room) and, with moveBack, returns once the cluster does.
When the clusters the placement covers change (a cluster registered or
deregistered, cordoned or uncordoned, its labels changed), the instances are
split again over them and move gradually within the budget: the new parts grow
first, the old ones shrink once those run. With rebalance: MANUAL the move waits
for "fed service rebalance ID"; "fed service get" shows what it does.

A share's override (image, command, env merged, resources, labels merged)
changes the job spec of the parts of the clusters it names or matches only;
"fed service get" lists the fields each part overrides, -o yaml the overrides.
A DAEMON job (type: DAEMON, no instanceCount) runs on every matching host of
each cluster the placement selects: shares take no weight or count, and
failover does not apply.`

func (a *app) fedServiceCreateCommand() *cobra.Command {
	var file, rid string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a federated service and print its ID and split",
		Long:  "Create a federated service: its instances are split over clusters and each cluster's part runs as a SERVICE job there.\n\n" + fedServiceSpecHelp,
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the federated service spec")
			}
			spec, err := loadFederatedServiceSpec(file, cmd.InOrStdin())
			if err != nil {
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
				fmt.Fprintf(a.stderr, "split: %s\n", splitCell(resp.GetSplit()))
				return p.changed(resp.GetServiceId(), a.getFedService(cmd.Context(), f, resp.GetServiceId()))
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
			return read(a, a.withFederation, nil, func(f *fedClient) (*pelotonv1.GetFederatedServiceResponse, error) {
				return call(cmd.Context(), f, f.Services.GetFederatedService, &pelotonv1.GetFederatedServiceRequest{ServiceId: args[0]})
			}, func(p *printer, resp *pelotonv1.GetFederatedServiceResponse) error {
				svc := resp.GetService()
				return p.object(svc, func(w io.Writer, _ bool) { writeFedService(w, svc) })
			})
		},
	}
}

func (a *app) fedServiceListCommand() *cobra.Command {
	var inCluster, selector string
	var limit int
	var archived bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List federated services, newest first (every page; --limit to stop early)",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sel labelSelector
			return read(a, a.withFederation, func() (err error) {
				sel, err = parseSelector(selector)
				if err != nil {
					return err
				}
				return checkLimit(limit)
			}, func(f *fedClient) (*pelotonv1.ListFederatedServicesResponse, error) {
				svcs, err := allPages(limit, func(size uint32, token string) ([]*pelotonv1.FederatedService, string, error) {
					page, err := call(cmd.Context(), f, f.Services.ListFederatedServices,
						&pelotonv1.ListFederatedServicesRequest{Cluster: inCluster, PageSize: size, PageToken: token, Archived: archived})
					return filterLabeled(sel, page.GetServices(), fedServiceLabels), page.GetNextPageToken(), err
				})
				return &pelotonv1.ListFederatedServicesResponse{Services: svcs}, err
			}, listed("services", (*pelotonv1.ListFederatedServicesResponse).GetServices, writeFedServiceTable))
		},
	}
	cmd.Flags().StringVar(&inCluster, "in-cluster", "", "only services with a part in this cluster")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many services (0: all)")
	cmd.Flags().BoolVar(&archived, "archived", false, "list the federation's archive of deleted services instead of the live ones")
	selectorFlag(cmd, &selector, "services (their job's labels; filtered here, not by the federation)")
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
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				if _, err := call(cmd.Context(), f, f.Services.DeleteFederatedService, &pelotonv1.DeleteFederatedServiceRequest{ServiceId: args[0]}); err != nil {
					return err
				}
				if !p.structured() {
					_, err := fmt.Fprintf(a.stdout, "federated service %s: deleting from every cluster\n", args[0])
					return err
				}
				// The service stays, deleting, until every cluster's part is gone.
				svc, err := a.getFedService(cmd.Context(), f, args[0])()
				if status.Code(err) == codes.NotFound {
					return p.deleted("fedservice", "serviceId", args[0], "")
				}
				if err != nil {
					return err
				}
				return p.object(svc, nil)
			})
		},
	}
}

// loadFederatedServiceSpec reads a FederatedServiceSpec from path ("-"
// reads stdin). A plain JobSpec, which is what a user new to federated
// services tries first, is refused saying what wrapper it needs, not with
// the first of its fields the wrapper does not know.
func loadFederatedServiceSpec(path string, stdin io.Reader) (*pelotonv1.FederatedServiceSpec, error) {
	name, data, err := readSpecFile(path, stdin)
	if err != nil {
		return nil, err
	}
	spec := &pelotonv1.FederatedServiceSpec{}
	if !federatedJobFile(data) && decodeSpec(name, data, &pelotonv1.JobSpec{}) == nil {
		return nil, fmt.Errorf("%s: a federated service expects a job:/placement: wrapper, and this file is a JobSpec: put it under job: "+
			`(with placement: saying where its instances run; see "peloton fed service create --help")`, name)
	}
	if err := decodeSpec(name, data, spec); err != nil {
		if decodeSpec(name, data, &pelotonv1.FederatedJobSpec{}) == nil {
			return nil, fmt.Errorf("%s: this file is a federated job (placement.clusterSelector), not a service: run it with peloton fed job create -f %s; a service's placement names clusters (placement.clusters)", name, path)
		}
		return nil, err
	}
	return spec, nil
}

// getFedService fetches federated service id as the federation has it now,
// for -o json and -o yaml after a change.
func (a *app) getFedService(ctx context.Context, f *fedClient, id string) func() (proto.Message, error) {
	return func() (proto.Message, error) {
		resp, err := call(ctx, f, f.Services.GetFederatedService, &pelotonv1.GetFederatedServiceRequest{ServiceId: id})
		return resp.GetService(), err
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
	if job.GetType() == pelotonv1.JobType_DAEMON {
		field("type", "DAEMON")
		field("instances", fmt.Sprintf("%d running (one per matching host of each cluster), %d healthy, %d at spec version %d", s.GetRunning(),
			s.GetHealthy(), s.GetUpdated(), s.GetSpecVersion()))
	} else {
		field("instances", fmt.Sprintf("%d running of %d, %d healthy, %d at spec version %d", s.GetRunning(), s.GetDesired(),
			s.GetHealthy(), s.GetUpdated(), s.GetSpecVersion()))
	}
	field("budget", strconv.FormatUint(uint64(max(job.GetSla().GetMaximumUnavailableInstances(), 1)), 10)+" unavailable at most")
	field("spec version", strconv.FormatUint(s.GetSpecVersion(), 10))
	field("created", timestamp(s.GetCreateTime()))
	if s.GetDeleting() {
		field("deleting", "yes")
	}
	field("message", s.GetMessage())
	if r := s.GetRollout(); r != nil {
		field("rollout", fmt.Sprintf("%d: %s, spec version %d -> %d", r.GetId(), r.GetState(), r.GetFromVersion(), r.GetToVersion()))
		field("rollout message", r.GetMessage())
		if w := r.GetWaiting(); w != "" {
			field("rollout waits for", w+" (since "+timestamp(r.GetWaitingSince())+")")
		}
	}
	writeRebalance(field, s.GetRebalance())
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CLUSTER\tDESIRED\tRUNNING\tHEALTHY\tUPDATED\tBUDGET\tVERSION\tSTATE\tCLUSTER JOB ID\tMESSAGE")
	n := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	for _, p := range s.GetClusters() {
		state := ""
		if p.GetState() != pelotonv1.JobState_JOB_STATE_UNSPECIFIED {
			state = p.GetState().String()
		}
		budget := n(p.GetMaxUnavailable())
		if p.GetSlaFallback() {
			budget += " (fallback)"
		}
		row(w, p.GetCluster(), n(p.GetDesired()), n(p.GetRunning()), n(p.GetHealthy()), n(p.GetUpdated()),
			budget, strconv.FormatUint(p.GetSpecVersion(), 10), state, p.GetClusterJobId(), p.GetMessage())
	}
	writeOverridden(w, s.GetClusters())
	if r := s.GetRollout(); r != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "STEP\tCLUSTER\tSTATE\tINSTANCES\tUPDATE\tMESSAGE")
		for i, st := range r.GetSteps() {
			upd := st.GetUpdateId()
			if st.GetRollbackUpdateId() != "" {
				upd += " (back: " + st.GetRollbackUpdateId() + ")"
			}
			row(w, strconv.Itoa(i+1), st.GetCluster(), strings.TrimPrefix(st.GetState().String(), "STEP_"),
				fmt.Sprintf("%d -> %d", st.GetFromDesired(), st.GetDesired()), upd, st.GetMessage())
		}
	}
}

// writeRebalance writes what a service's latest rebalance does: from
// which counts per cluster to which, how far, and what it waits for.
func writeRebalance(field func(k, v string), rb *pelotonv1.ServiceRebalance) {
	if rb == nil {
		return
	}
	state := strings.TrimPrefix(rb.GetState().String(), "REBALANCE_")
	if rb.GetState() == pelotonv1.RebalanceState_REBALANCE_PENDING {
		state = "pending"
	}
	field("rebalance", fmt.Sprintf("%d: %s (%s), %s -> %s, %d moved", rb.GetId(), state, rb.GetReason(), splitCell(rb.GetFrom()), splitCell(rb.GetTo()), rb.GetMoved()))
	if w := rb.GetWaiting(); w != "" {
		field("rebalance waits for", w+" (since "+timestamp(rb.GetWaitingSince())+")")
	}
}

// writeOverridden lists, for the parts whose job spec a per-cluster
// override changes, the fields it changes (-o yaml shows the overrides).
func writeOverridden(w io.Writer, parts []*pelotonv1.ServiceCluster) {
	head := false
	for _, p := range parts {
		if len(p.GetOverridden()) == 0 {
			continue
		}
		if !head {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "CLUSTER\tOVERRIDDEN")
			head = true
		}
		row(w, p.GetCluster(), strings.Join(p.GetOverridden(), ", "))
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
