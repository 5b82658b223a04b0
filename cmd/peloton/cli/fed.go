package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fedClient is the federation API client (cluster/client) the cluster and
// fed commands use, with the CLI's way of reporting errors.
type fedClient struct {
	*pclient.Federation
	timeout time.Duration
	// sec explains failures caused by the connection's security.
	sec *connSettings
}

// fedHint says what to do when the federation does not answer.
const fedHint = `is it running? "peloton up" runs one beside its cluster; or point --federation or $` + federationEnv + ` at it`

// dialFederation prepares a connection to --federation (or the context's
// federation, see conn), with the same TLS files and token as the
// cluster's; every unary call is bounded by --timeout. command says the
// caller is a cluster or fed command, which talks to the federation
// itself: --cluster means nothing to it, and is refused rather than
// ignored (a context's cluster is only a default, and left alone).
func (a *app) dialFederation(command bool) (*fedClient, error) {
	if a.timeout <= 0 {
		return nil, usageErrorf("invalid --timeout %s: must be > 0", a.timeout)
	}
	if command && a.clusterName != "" && a.globals != nil && a.globals.Changed("cluster") {
		return nil, usageErrorf("--cluster sends job, task, pool, host and update commands to one cluster; " +
			"the cluster and fed commands talk to the federation (--federation); " +
			"to list the federated jobs in a cluster, use fed job list --in-cluster NAME")
	}
	s, err := a.conn()
	if err != nil {
		return nil, err
	}
	opts, err := s.options(a.timeout)
	if err != nil {
		return nil, err
	}
	addr := s.federation.val
	f, err := pclient.NewFederation(addr, opts)
	if err != nil {
		return nil, s.dialError(s.federation.name("--federation"), addr, err)
	}
	return &fedClient{Federation: f, timeout: a.timeout, sec: s}, nil
}

// withFederation dials --federation, runs fn with the client, and closes it.
func (a *app) withFederation(fn func(f *fedClient) error) error {
	f, err := a.dialFederation(true)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f)
}

// unreachable reports whether a call failed because the federation could
// not be reached (as client.wrap tells it for a cluster).
func (f *fedClient) unreachable(st *status.Status) bool {
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return !f.Connected()
	}
	return false
}

// wrap turns a failed call into an rpcError, or into an unreachableError
// that names --federation when the federation could not be reached.
func (f *fedClient) wrap(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if e := f.sec.explain(st, f.Connected(), "the federation at "+f.Addr); e != nil {
		return e
	}
	if f.unreachable(st) {
		return &unreachableError{what: "the federation", addr: f.Addr, st: st, hint: fedHint}
	}
	return &rpcError{st: st, addr: f.Addr}
}

// unreachableError is a server other than --server that could not be
// reached: the federation, or the cluster --cluster named. It says which,
// where, why and what to do. It does not carry the gRPC status on purpose:
// formatError would print the bare status instead of this message.
type unreachableError struct {
	what, addr string
	// purpose, if set, says what the CLI wanted of it (" to look up ...").
	purpose string
	st      *status.Status
	hint    string
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach %s at %s%s (%s: %s); %s", e.what, e.addr, e.purpose,
		e.st.Code(), dialNoise.ReplaceAllString(e.st.Message(), "$1"), e.hint)
}

func (a *app) fedCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fed",
		Short: "Global pools, federated batch jobs and federated services, across the clusters of the federation",
		Long: `Global pools, federated batch jobs and federated services, through the
federation (--federation).

A global pool is declared once and split across the clusters: each gets a pool
at the same path whose reservation and limit are its part (by placement
weights, or by capacity), kept there by the federation. A federated job is a
BATCH job the federation sends to one cluster that matches its selector and
has room. A federated service is a SERVICE job split over several clusters, each
part kept there by the federation. "peloton --cluster NAME ..." shows what a
cluster holds.`,
	}
	a.group(cmd)
	pool := &cobra.Command{Use: "pool", Short: "Manage the global pool tree"}
	a.group(pool)
	pool.AddCommand(
		a.fedPoolCreateCommand(),
		a.fedPoolGetCommand(),
		a.fedPoolListCommand(),
		a.fedPoolUpdateCommand(),
		a.fedPoolDeleteCommand(),
	)
	job := &cobra.Command{Use: "job", Short: "Create, inspect and kill federated batch jobs"}
	a.group(job)
	job.AddCommand(
		a.fedJobCreateCommand(),
		a.fedJobGetCommand(),
		a.fedJobListCommand(),
		a.fedJobKillCommand(),
		a.fedJobWaitCommand(),
	)
	cmd.AddCommand(pool, job, a.fedServiceCommand())
	return cmd
}

// fedPoolSpecHelp is the file format of fed pool create and update.
const fedPoolSpecHelp = `The file (YAML or JSON, "-" for stdin) is a FederatedPoolSpec: a pool spec
whose reservation and limit are split across the clusters, and where to split
it:

  reservation: {cpu: 9, memoryMb: 9216}
  limit: {cpu: 18}
  share: {cpu: 1}
  placement:
    weights: {a: 2, b: 1}     # a gets 2/3, b 1/3; other clusters none

Without weights the pool is split by each cluster's capacity.`

func (a *app) fedPoolCreateCommand() *cobra.Command {
	var file, rid string
	cmd := &cobra.Command{
		Use:   "create PATH -f FILE",
		Short: "Create a global pool (e.g. /org/team) from a FederatedPoolSpec file",
		Long:  "Create a global pool, split across the clusters. Its parent must exist.\n\n" + fedPoolSpecHelp,
		Args:  argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the global pool spec")
			}
			spec := &pelotonv1.FederatedPoolSpec{}
			if err := loadSpec(file, cmd.InOrStdin(), spec); err != nil {
				return err
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := create(cmd.Context(), f, f.Pools.CreateFederatedPool,
					&pelotonv1.CreateFederatedPoolRequest{Path: args[0], Spec: spec, RequestId: reqID})
				if err != nil {
					return err
				}
				return showFedPool(p, resp.GetPool())
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `global pool spec file, YAML or JSON ("-" for stdin)`)
	requestIDFlag(cmd, &rid)
	return cmd
}

func (a *app) fedPoolGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH",
		Short: "Show a global pool: each cluster's part and the total",
		Long: `Show a global pool: its spec, then one row per cluster with the cluster's part
(reservation and limit the federation wants there) and what the cluster reports
(entitlement, allocation, demand), whether the cluster's pool is as wanted (IN
SYNC) and why not; the TOTAL row has the global spec and the sums.
Resources read cpu/memoryMb; -o wide shows cpu/memoryMb/diskMb/gpu, what each
cluster's pool actually is (ACTUAL ...; "none" when it has no such pool), and
the pending and running tasks.`,
		Args: argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return read(a, a.withFederation, nil, func(f *fedClient) (*pelotonv1.GetFederatedPoolResponse, error) {
				return call(cmd.Context(), f, f.Pools.GetFederatedPool, &pelotonv1.GetFederatedPoolRequest{Path: args[0]})
			}, func(p *printer, resp *pelotonv1.GetFederatedPoolResponse) error {
				return showFedPool(p, resp.GetPool())
			})
		},
	}
}

func (a *app) fedPoolListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List global pools with their spec and how many clusters are in sync",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return read(a, a.withFederation, nil, func(f *fedClient) (*pelotonv1.ListFederatedPoolsResponse, error) {
				return call(cmd.Context(), f, f.Pools.ListFederatedPools, &pelotonv1.ListFederatedPoolsRequest{})
			}, listed("pools", (*pelotonv1.ListFederatedPoolsResponse).GetPools, writeFedPoolTable))
		},
	}
}

func (a *app) fedPoolUpdateCommand() *cobra.Command {
	var file string
	var version uint64
	cmd := &cobra.Command{
		Use:   "update PATH -f FILE",
		Short: "Replace a global pool's spec; every cluster's part follows",
		Long:  "Replace a global pool's spec; the federation changes every cluster's part to match.\n\n" + fedPoolSpecHelp,
		Args:  argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the global pool spec")
			}
			spec := &pelotonv1.FederatedPoolSpec{}
			if err := loadSpec(file, cmd.InOrStdin(), spec); err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := call(cmd.Context(), f, f.Pools.UpdateFederatedPool,
					&pelotonv1.UpdateFederatedPoolRequest{Path: args[0], Spec: spec, Version: version})
				if err != nil {
					return err
				}
				return showFedPool(p, resp.GetPool())
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `global pool spec file, YAML or JSON ("-" for stdin)`)
	cmd.Flags().Uint64Var(&version, "version", 0, "update only if the global pool is still at this version (0: unconditionally)")
	return cmd
}

func (a *app) fedPoolDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete PATH",
		Short: "Delete a global pool from every cluster",
		Long: `Delete a global pool without children. The federation removes it from every
cluster and forgets it once all have removed it; a cluster whose pool still has
jobs keeps it until they are gone ("fed pool get" shows which).`,
		Args: argsNamed("PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				if _, err := call(cmd.Context(), f, f.Pools.DeleteFederatedPool, &pelotonv1.DeleteFederatedPoolRequest{Path: args[0]}); err != nil {
					return err
				}
				if !p.structured() {
					_, err := fmt.Fprintf(a.stdout, "global pool %s: deleting from every cluster\n", args[0])
					return err
				}
				// The pool stays, deleting, until every cluster removed it.
				resp, err := call(cmd.Context(), f, f.Pools.GetFederatedPool, &pelotonv1.GetFederatedPoolRequest{Path: args[0]})
				if status.Code(err) == codes.NotFound {
					return p.deleted("fedpool", "path", args[0], "")
				}
				if err != nil {
					return err
				}
				return p.object(resp.GetPool(), nil)
			})
		},
	}
}

func (a *app) fedJobCreateCommand() *cobra.Command {
	var file, rid string
	var selector []string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a federated batch job and print its ID",
		Long: `Create a federated BATCH job; the federation sends it to one cluster whose
labels match its selector and which has the most room in the job's pool. The
file (YAML or JSON, "-" for stdin) is either a FederatedJobSpec:

  job: {name: hello, type: BATCH, pool: /batch, instanceCount: 2, ...}
  placement: {clusterSelector: {region: west}}

or a plain JobSpec (as for "peloton job create"), which may go to any cluster.
--cluster-selector replaces the selector of the file. Only the new job's
global ID is printed ("fed job get" shows where it went); -o json or -o yaml
prints the new job, as "fed job get" does.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			if file == "" {
				return usageErrorf("missing --file (-f): the job spec to create")
			}
			var sel map[string]string
			if cmd.Flags().Changed("cluster-selector") {
				var err error
				if sel, err = parseLabels("cluster-selector", selector); err != nil {
					return err
				}
			}
			spec, err := loadFederatedJobSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if sel != nil {
				spec.Placement = &pelotonv1.FederatedJobPlacement{ClusterSelector: sel}
			}
			reqID, err := requestID(rid)
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				resp, err := create(cmd.Context(), f, f.Jobs.CreateFederatedJob,
					&pelotonv1.CreateFederatedJobRequest{Spec: spec, RequestId: reqID})
				if err != nil {
					return err
				}
				return p.changed(resp.GetJobId(), a.getFedJob(cmd.Context(), f, resp.GetJobId()))
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `job spec file: a FederatedJobSpec or a JobSpec, YAML or JSON ("-" for stdin)`)
	cmd.Flags().StringSliceVar(&selector, "cluster-selector", nil, "only clusters with these labels, comma-separated key=value (e.g. region=west); replaces the file's placement.clusterSelector")
	requestIDFlag(cmd, &rid)
	return cmd
}

// loadFederatedJobSpec reads a FederatedJobSpec from path ("-" reads stdin),
// or a JobSpec, which it wraps as the spec's job. A file is a
// FederatedJobSpec when its top level has "job" or "placement", neither of
// which is a JobSpec field, so the two cannot be confused; either is
// decoded with the same strict rules as every spec file.
func loadFederatedJobSpec(path string, stdin io.Reader) (*pelotonv1.FederatedJobSpec, error) {
	spec := &pelotonv1.FederatedJobSpec{}
	name, data, err := readSpecFile(path, stdin)
	if err != nil {
		return nil, err
	}
	job, err := loadJobOrWrapper(path, bytes.NewReader(data), spec)
	if err != nil && federatedJobFile(data) && decodeSpec(name, data, &pelotonv1.FederatedServiceSpec{}) == nil {
		return nil, fmt.Errorf("%s: this file is a federated service (placement.clusters), not a batch job: run it with peloton fed service create -f %s", name, path)
	}
	if job != nil {
		spec.Job = job
	}
	return spec, err
}

// loadJobOrWrapper reads path into wrapper (a spec with "job" and
// "placement", e.g. a FederatedJobSpec) when the file is one, and returns
// nil; otherwise it reads a JobSpec and returns it for the caller to wrap.
func loadJobOrWrapper(path string, stdin io.Reader, wrapper proto.Message) (*pelotonv1.JobSpec, error) {
	name, data, err := readSpecFile(path, stdin)
	if err != nil {
		return nil, err
	}
	if federatedJobFile(data) {
		return nil, decodeSpec(name, data, wrapper)
	}
	job := &pelotonv1.JobSpec{}
	if err := decodeSpec(name, data, job); err != nil {
		return nil, err
	}
	return job, nil
}

// federatedJobFile reports whether data is a mapping with a "job" or
// "placement" key. Anything it cannot read is left to decodeSpec, which
// says what is wrong.
func federatedJobFile(data []byte) bool {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return false
	}
	var top map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(js)).Decode(&top); err != nil {
		return false
	}
	_, job := top["job"]
	_, placement := top["placement"]
	return job || placement
}

// getFedJob fetches federated job id as the federation has it now, for -o
// json and -o yaml after a change.
func (a *app) getFedJob(ctx context.Context, f *fedClient, id string) func() (proto.Message, error) {
	return func() (proto.Message, error) {
		resp, err := call(ctx, f, f.Jobs.GetFederatedJob, &pelotonv1.GetFederatedJobRequest{JobId: id})
		return resp.GetJob(), err
	}
}

func (a *app) fedJobGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get JOBID",
		Short: "Show a federated job: where it went and how it does there",
		Args:  argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return read(a, a.withFederation, nil, func(f *fedClient) (*pelotonv1.GetFederatedJobResponse, error) {
				return call(cmd.Context(), f, f.Jobs.GetFederatedJob, &pelotonv1.GetFederatedJobRequest{JobId: args[0]})
			}, func(p *printer, resp *pelotonv1.GetFederatedJobResponse) error {
				job := resp.GetJob()
				return p.object(job, func(w io.Writer, _ bool) { writeFedJob(w, job) })
			})
		},
	}
}

func (a *app) fedJobListCommand() *cobra.Command {
	var inCluster, selector string
	var limit int
	var archived bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List federated jobs, newest first (every page; --limit to stop early)",
		Args:  argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sel labelSelector
			return read(a, a.withFederation, func() (err error) {
				sel, err = parseSelector(selector)
				if err != nil {
					return err
				}
				return checkLimit(limit)
			}, func(f *fedClient) (*pelotonv1.ListFederatedJobsResponse, error) {
				jobs, err := allPages(limit, func(size uint32, token string) ([]*pelotonv1.FederatedJob, string, error) {
					page, err := call(cmd.Context(), f, f.Jobs.ListFederatedJobs, &pelotonv1.ListFederatedJobsRequest{Cluster: inCluster, PageSize: size, PageToken: token, Archived: archived})
					return filterLabeled(sel, page.GetJobs(), fedJobLabels), page.GetNextPageToken(), err
				})
				return &pelotonv1.ListFederatedJobsResponse{Jobs: jobs}, err
			}, listed("jobs", (*pelotonv1.ListFederatedJobsResponse).GetJobs, writeFedJobTable))
		},
	}
	f := cmd.Flags()
	f.StringVar(&inCluster, "in-cluster", "", "only jobs dispatched to this cluster")
	f.IntVar(&limit, "limit", 0, "at most this many jobs (0: all)")
	f.BoolVar(&archived, "archived", false, "list the federation's archive of done jobs (those past its --finished-job-ttl) instead of the live ones")
	selectorFlag(cmd, &selector, "jobs (filtered here, not by the federation)")
	return cmd
}

func (a *app) fedJobKillCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "kill JOBID",
		Short: "Kill a federated job wherever it is",
		Long: `Kill a federated job: one not yet dispatched is done at once; one in a cluster is
cancelled there by the federation.`,
		Args: argsNamed("JOBID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			return a.withFederation(func(f *fedClient) error {
				if _, err := call(cmd.Context(), f, f.Jobs.KillFederatedJob, &pelotonv1.KillFederatedJobRequest{JobId: args[0]}); err != nil {
					return err
				}
				return p.changed(fmt.Sprintf("federated job %s: kill requested", args[0]), a.getFedJob(cmd.Context(), f, args[0]))
			})
		},
	}
}

// showFedPool prints one global pool in the -o format.
func showFedPool(p *printer, pool *pelotonv1.FederatedPool) error {
	return p.object(pool, func(w io.Writer, wide bool) {
		writeFedPool(w, pool, wide)
	})
}

// writeFedPool writes a global pool's spec, then a row per cluster and a
// TOTAL row. A cluster's reservation and limit are its part as the
// federation wants it (what it holds, when it should hold none); wide adds
// what it holds ("none": no such pool there). The TOTAL row's are the
// global spec's, and its statuses the sums.
func writeFedPool(w io.Writer, pool *pelotonv1.FederatedPool, wide bool) {
	spec := pool.GetSpec()
	fmt.Fprintf(w, "path:\t%s\n", pool.GetPath())
	fmt.Fprintf(w, "version:\t%d\n", pool.GetVersion())
	fmt.Fprintf(w, "placement:\t%s\n", weightsCell(spec.GetPlacement().GetWeights()))
	fmt.Fprintf(w, "share:\t%s\n", orDash(kindsCell(spec.GetShare(), wide)))
	fmt.Fprintf(w, "children:\t%s\n", orDash(strings.Join(pool.GetChildren(), ",")))
	if g := pool.GetGlobal(); g != nil {
		fmt.Fprintf(w, "fair share:\tentitled to %s of the clusters' %s; %s held by %d dispatched jobs; %s asked by %d jobs waiting at the federation\n",
			kindsCell(g.GetEntitlement(), wide), kindsCell(g.GetCapacity(), wide), kindsCell(g.GetAllocation(), wide), g.GetDispatchedJobs(),
			kindsCell(g.GetQueued(), wide), g.GetQueuedJobs())
	}
	if pool.GetDeleting() {
		fmt.Fprintf(w, "deleting:\tyes: being removed from its clusters\n")
	}
	fmt.Fprintln(w)
	head := []string{"CLUSTER", "RESERVATION", "LIMIT"}
	if wide {
		head = append(head, "ACTUAL RESERVATION", "ACTUAL LIMIT")
	}
	head = append(head, "ENTITLEMENT", "ALLOCATION", "DEMAND")
	if wide {
		head = append(head, "PENDING", "RUNNING")
	}
	head = append(head, "IN SYNC", "MESSAGE")
	fmt.Fprintln(w, strings.Join(head, "\t"))
	inSync := 0
	for _, c := range pool.GetClusters() {
		part, actual := c.GetDesired(), c.GetActual()
		if part == nil {
			part = actual
		}
		st := c.GetStatus()
		cells := []string{c.GetCluster(), kindsCell(part.GetReservation(), wide), limitKinds(part.GetLimit(), wide)}
		if wide {
			res, lim := "none", "none"
			if actual != nil {
				res, lim = kindsCell(actual.GetReservation(), wide), limitKinds(actual.GetLimit(), wide)
			}
			cells = append(cells, res, lim)
		}
		cells = append(cells, kindsCell(st.GetEntitlement(), wide), kindsCell(st.GetAllocation(), wide), kindsCell(st.GetDemand(), wide))
		if wide {
			cells = append(cells, tasksCell(st, st.GetPendingTasks()), tasksCell(st, st.GetRunningTasks()))
		}
		sync := "no"
		if c.GetInSync() {
			sync = "yes"
			inSync++
		}
		row(w, append(cells, sync, c.GetMessage())...)
	}
	total := pool.GetTotal()
	cells := []string{"TOTAL", kindsCell(spec.GetReservation(), wide), limitKinds(spec.GetLimit(), wide)}
	if wide {
		cells = append(cells, "", "")
	}
	cells = append(cells, kindsCell(total.GetEntitlement(), wide), kindsCell(total.GetAllocation(), wide), kindsCell(total.GetDemand(), wide))
	if wide {
		cells = append(cells, tasksCell(total, total.GetPendingTasks()), tasksCell(total, total.GetRunningTasks()))
	}
	row(w, append(cells, fmt.Sprintf("%d/%d", inSync, len(pool.GetClusters())), "")...)
}

// writeFedPoolTable writes global pools as a table, with each pool's
// standing in the federation's global fair share; wide adds the totals
// the clusters report and the record version.
func writeFedPoolTable(w io.Writer, pools []*pelotonv1.FederatedPool, wide bool) {
	head := []string{"PATH", "RESERVATION", "LIMIT", "SHARE", "PLACEMENT", "IN SYNC", "FAIR SHARE", "DISPATCHED", "QUEUED", "QUEUED JOBS"}
	if wide {
		head = append(head, "ENTITLEMENT", "ALLOCATION", "DEMAND", "VERSION")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, p := range pools {
		spec, total := p.GetSpec(), p.GetTotal()
		cells := []string{
			p.GetPath(),
			kindsCell(spec.GetReservation(), wide),
			limitKinds(spec.GetLimit(), wide),
			kindsCell(spec.GetShare(), wide),
			weightsCell(spec.GetPlacement().GetWeights()),
			syncCell(p),
			// The federation's batch dispatch: the pool's global
			// entitlement, what its dispatched jobs hold and what its
			// waiting jobs ask.
			kindsCell(p.GetGlobal().GetEntitlement(), wide),
			kindsCell(p.GetGlobal().GetAllocation(), wide),
			kindsCell(p.GetGlobal().GetQueued(), wide),
			strconv.FormatUint(uint64(p.GetGlobal().GetQueuedJobs()), 10),
		}
		if wide {
			cells = append(cells, kindsCell(total.GetEntitlement(), wide), kindsCell(total.GetAllocation(), wide),
				kindsCell(total.GetDemand(), wide), strconv.FormatUint(p.GetVersion(), 10))
		}
		row(w, cells...)
	}
}

// syncCell is how many of a global pool's clusters hold their part as
// wanted, "2/3", and says when the pool is being deleted.
func syncCell(p *pelotonv1.FederatedPool) string {
	n := 0
	for _, c := range p.GetClusters() {
		if c.GetInSync() {
			n++
		}
	}
	s := fmt.Sprintf("%d/%d", n, len(p.GetClusters()))
	if p.GetDeleting() {
		s += " (deleting)"
	}
	return s
}

// tasksCell is a task count, empty when the cluster reported no status.
func tasksCell(st *pelotonv1.PoolStatus, n uint32) string {
	if st == nil {
		return ""
	}
	return strconv.FormatUint(uint64(n), 10)
}

// kindsCell renders resources as "cpu/memoryMb" (as pool list does), or,
// wide, "cpu/memoryMb/diskMb/gpu".
func kindsCell(r *pelotonv1.Resources, wide bool) string {
	if !wide || r == nil {
		return cpuMem(r)
	}
	return cpuMem(r) + "/" + number(r.GetDiskMb()) + "/" + number(r.GetGpu())
}

// limitKinds renders a limit as limitCell does, each kind left unset
// reading "unlimited"; wide shows all four kinds.
func limitKinds(r *pelotonv1.Resources, wide bool) string {
	if !wide {
		return limitCell(r)
	}
	vals := []float64{r.GetCpu(), r.GetMemoryMb(), r.GetDiskMb(), r.GetGpu()}
	if !slices.ContainsFunc(vals, func(v float64) bool { return v != 0 }) {
		return "unlimited"
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = "unlimited"
		if v != 0 {
			parts[i] = number(v)
		}
	}
	return strings.Join(parts, "/")
}

// weightsCell renders a global pool's placement: "a=2,b=1", or how it is
// split without weights.
func weightsCell(w map[string]float64) string {
	if len(w) == 0 {
		return "by capacity"
	}
	parts := make([]string, 0, len(w))
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, k+"="+number(w[k]))
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeFedJob writes one federated job: what it is, where it is and how it
// does there, then its dispatch attempts.
func writeFedJob(w io.Writer, j *pelotonv1.FederatedJob) {
	spec := j.GetSpec().GetJob()
	st := j.GetStatus()
	field := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, orDash(v)) }
	field("id", j.GetId())
	field("name", spec.GetName())
	field("pool", spec.GetPool())
	field("instances", strconv.FormatUint(uint64(spec.GetInstanceCount()), 10))
	field("selector", selectorCell(j))
	field("dispatch state", j.GetDispatchState().String())
	field("cluster", j.GetCluster())
	field("cluster job id", j.GetClusterJobId())
	state := ""
	if st != nil {
		state = st.GetState().String()
	}
	field("job state", state)
	field("tasks", taskCounts(st.GetTaskCounts()))
	field("created", timestamp(j.GetCreateTime()))
	if j.GetKilled() {
		field("killed", "yes")
	}
	field("message", j.GetMessage())
	if m := st.GetMessage(); m != "" {
		field("job message", m)
	}
	if len(j.GetAttempts()) == 0 {
		field("attempts", "none")
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ATTEMPT\tCLUSTER\tCLUSTER JOB ID\tDISPATCHED\tEND REASON")
	for i, at := range j.GetAttempts() {
		row(w, strconv.Itoa(i+1), at.GetCluster(), at.GetClusterJobId(), timestamp(at.GetDispatchTime()), at.GetEndReason())
	}
}

// writeFedJobTable writes federated jobs as a table; wide adds the job's
// id in its cluster, its selector, its attempts and the message.
func writeFedJobTable(w io.Writer, jobs []*pelotonv1.FederatedJob, wide bool) {
	head := []string{"ID", "NAME", "POOL", "INSTANCES", "DISPATCH", "CLUSTER", "STATE", "TASKS", "CREATED"}
	if wide {
		head = append(head, "CLUSTER JOB ID", "SELECTOR", "ATTEMPTS", "MESSAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, j := range jobs {
		spec, st := j.GetSpec().GetJob(), j.GetStatus()
		state := ""
		if st != nil {
			state = st.GetState().String()
		}
		if j.GetArchived() {
			state += " (archived)"
		}
		cells := []string{
			j.GetId(),
			spec.GetName(),
			spec.GetPool(),
			strconv.FormatUint(uint64(spec.GetInstanceCount()), 10),
			j.GetDispatchState().String(),
			j.GetCluster(),
			state,
			taskCounts(st.GetTaskCounts()),
			timestamp(j.GetCreateTime()),
		}
		if wide {
			cells = append(cells, j.GetClusterJobId(), selectorCell(j), strconv.Itoa(len(j.GetAttempts())), j.GetMessage())
		}
		row(w, cells...)
	}
}

// selectorCell is a federated job's cluster selector, "region=west", or
// "any cluster".
func selectorCell(j *pelotonv1.FederatedJob) string {
	if sel := j.GetSpec().GetPlacement().GetClusterSelector(); len(sel) > 0 {
		return labels(sel)
	}
	return "any cluster"
}
