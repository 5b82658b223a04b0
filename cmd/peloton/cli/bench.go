package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peloton-sched/peloton/bench"
)

// benchFlags are the flags every bench scenario takes.
type benchFlags struct {
	timeout    time.Duration
	logLevel   string
	quiet      bool
	cpuProfile string
	memProfile string
}

func (f *benchFlags) register(fs *pflag.FlagSet) {
	// Shadows the global per-call --timeout: here it bounds the whole run.
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long the whole scenario may take")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level of the in-process stack: debug, info, warn or error")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "do not print progress to stderr")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (stack included) to this file, for go tool pprof")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a profile of the allocations of the whole run (stack included) to this file when it ends, for go tool pprof -sample_index=alloc_space")
}

func (a *app) benchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a benchmark scenario in this process and print its figures",
		Long: `Run one benchmark scenario and print what it measured: a table, or with
-o json one JSON object (scenario, params, figures, machine).

Every scenario except placement starts the whole stack in this process - the
same cluster stack "peloton up" runs, on the sim backend, with an embedded etcd
in a temp dir and loopback listeners on free ports, all removed afterwards -
and drives it through the gRPC API. Nothing else needs to run, and no server
flag applies. The kubernetes scenario runs the stack on the kubernetes backend
against a throw-away kube-apiserver with kwok nodes, next to kube-scheduler,
each Peloton phase as "peloton up" in a process of its own (--peloton-bin), so
that its CPU is measured apart from the bench's; it needs the binaries of
"make kube-tools" and a peloton built with the kube test harness, which the
release binary does not link:
  go build -tags kubebench -o bin/peloton-kubebench ./cmd/peloton
The lifetime scenario also runs "peloton up" (on the sim backend) in a process
of its own (--peloton-bin), for its memory alone and to kill and restart it.
Progress goes to stderr (-q silences it).

docs/benchmarks.md has the figures measured so far and the commands that
produced them.`,
	}
	a.group(cmd)
	for _, sc := range bench.Scenarios() {
		cmd.AddCommand(a.benchScenario(sc))
	}
	return cmd
}

// benchScenario builds the command of one scenario: its flags map onto the
// scenario's config, whose defaults are the sizes the docs quote.
func (a *app) benchScenario(sc bench.Scenario) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   sc.Name + " [flags]",
		Short: sc.Short,
		Long: "Benchmark: " + sc.Short + ".\n\nFigures: " + strings.Join(sc.Figures, ", ") +
			".\n\ndocs/benchmarks.md says how each is measured and what it measured so far.",
		Args: argsNamed(),
	}
	fs := cmd.Flags()
	f.register(fs)
	flags, ok := benchFlagSets[sc.Name]
	if !ok {
		panic("bench: no command for scenario " + sc.Name)
	}
	validate, run := flags(fs, &f)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return a.runBench(cmd.Context(), &f, validate, run)
	}
	return cmd
}

// benchRun runs one scenario once its flags are read.
type benchRun = func(context.Context, bench.Env) (*bench.Result, error)

// benchFlagSets registers each scenario's own flags on its command, and
// returns how to check them and how to run the scenario.
var benchFlagSets = map[string]func(fs *pflag.FlagSet, f *benchFlags) (func() error, benchRun){
	bench.ScenarioReclaim:      reclaimBenchFlags,
	bench.ScenarioBatch:        batchBenchFlags,
	bench.ScenarioEngines:      enginesBenchFlags,
	bench.ScenarioLargeJob:     largeJobBenchFlags,
	bench.ScenarioPlacement:    placementBenchFlags,
	bench.ScenarioGang:         gangBenchFlags,
	bench.ScenarioUpdate:       updateBenchFlags,
	bench.ScenarioKubernetes:   kubernetesBenchFlags,
	bench.ScenarioFederation:   federationBenchFlags,
	bench.ScenarioAgentReports: agentReportsBenchFlags,
	bench.ScenarioHostAgent:    hostAgentBenchFlags,
	bench.ScenarioColocation:   colocationBenchFlags,
	bench.ScenarioLifetime:     lifetimeBenchFlags,
	bench.ScenarioMesos:        func(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) { return mesosBenchFlags(fs) },
}

// reclaimBenchFlags registers the flags of the reclaim scenario.
func reclaimBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultReclaimConfig()
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts")
	fs.Float64Var(&c.HostCPU, "host-cpu", c.HostCPU, "CPUs of each host")
	fs.IntVar(&c.TasksPerPool, "tasks-per-pool", c.TasksPerPool, "tasks each of the three pools submits (0: half the cluster each)")
	fs.Float64Var(&c.TaskCPU, "task-cpu", c.TaskCPU, "CPUs of each task")
	fs.Float64Var(&c.TaskMemoryMB, "task-memory-mb", c.TaskMemoryMB, "memory of each task in MiB")
	fs.IntVar(&c.ReservationPct, "reservation-pct", c.ReservationPct, "percent of the cluster each pool reserves")
	fs.DurationVar(&c.ReclaimDelay, "reclaim-delay", c.ReclaimDelay, "the stack's reclaim hysteresis (as peloton up --reclaim-delay)")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Reclaim(ctx, env, c) }
}

// batchBenchFlags registers the flags of the batch scenario.
func batchBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultBatchConfig()
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts (32 CPUs each unless --host-cpu)")
	fs.IntVar(&c.Tasks, "tasks", c.Tasks, "tasks in all")
	fs.IntVar(&c.JobSize, "job-size", c.JobSize, "tasks per job")
	fs.Float64Var(&c.HostCPU, "host-cpu", c.HostCPU, "CPUs of each host (0: sim's 32)")
	fs.Float64Var(&c.TaskCPU, "task-cpu", c.TaskCPU, "CPUs of each task")
	fs.Float64Var(&c.TaskMemoryMB, "task-memory-mb", c.TaskMemoryMB, "memory of each task in MiB")
	fs.DurationVar(&c.Poll, "poll", c.Poll, "how often every job's task counts are read")
	fs.IntVar(&c.Engines, "placement-engines", c.Engines, "placement engines running at once (active-active)")
	fs.IntVar(&c.Submitters, "submitters", c.Submitters, "clients submitting the jobs at once, each one CreateJob after the other")
	fs.IntVar(&c.CeilingWriters, "ceiling-writers", c.CeilingWriters, "concurrent writers of the store-ceiling probe")
	fs.DurationVar(&c.CeilingFor, "ceiling-for", c.CeilingFor, "how long the store-ceiling probe counts before the scenario (0: no probe)")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Batch(ctx, env, c) }
}

// enginesBenchFlags registers the flags of the engines scenario.
func enginesBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultEnginesConfig()
	fs.IntVar(&c.Batch.Hosts, "hosts", c.Batch.Hosts, "simulated hosts (32 CPUs each)")
	fs.IntVar(&c.Batch.Tasks, "tasks", c.Batch.Tasks, "tasks in all, per engine count")
	fs.IntVar(&c.Batch.JobSize, "job-size", c.Batch.JobSize, "tasks per job")
	fs.DurationVar(&c.Batch.Poll, "poll", c.Batch.Poll, "how often every job's task counts are read")
	fs.IntVar(&c.Batch.Submitters, "submitters", c.Batch.Submitters, "clients submitting the jobs at once, each one CreateJob after the other")
	fs.IntSliceVar(&c.Engines, "engines", c.Engines, "engine counts to run, comma-separated, starting with 1")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "runs of each engine count, in order then in reverse, averaged")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Engines(ctx, env, c) }
}

// largeJobBenchFlags registers the flags of the largeJob scenario.
func largeJobBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultLargeJobConfig()
	fs.IntVar(&c.Tasks, "tasks", c.Tasks, "instances of the one job")
	fs.IntVar(&c.OverrideEvery, "override-every", c.OverrideEvery, "give every n-th instance a per-instance override (0: none)")
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts (kept small: the job is measured, not run)")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "wait this long after the tasks exist before counting bytes at rest")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.LargeJob(ctx, env, c) }
}

// placementBenchFlags registers the flags of the placement scenario.
func placementBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultPlacementConfig()
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "hosts in the snapshot")
	fs.IntVar(&c.Tasks, "tasks", c.Tasks, "tasks to place")
	fs.IntVar(&c.Round, "round", c.Round, "gangs per Place call")
	fs.IntVar(&c.GangSize, "gang-size", c.GangSize, "tasks per gang")
	fs.Float64Var(&c.HostCPU, "host-cpu", c.HostCPU, "CPUs of each host")
	fs.Float64Var(&c.TaskCPU, "task-cpu", c.TaskCPU, "CPUs of each task")
	fs.Int64Var(&c.TaskMemoryMB, "task-memory-mb", c.TaskMemoryMB, "memory of each task in MiB")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Placement(ctx, env, c) }
}

// gangBenchFlags registers the flags of the gang scenario: its stream mode
// (issue 33's benchmark, the default) and its fragment mode. --hosts and
// --host-cpu serve both, each mode with its own default.
func gangBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	st, fr := bench.DefaultGangStreamConfig(), bench.DefaultGangConfig()
	mode := bench.GangModeStream
	var hosts int
	var hostCPU float64
	fs.StringVar(&mode, "scenario", mode, "stream: big gangs arriving in a stream of small tasks, against the same stream alone; fragment: gangs on a fragmented cluster")
	fs.IntVar(&hosts, "hosts", 0, fmt.Sprintf("simulated hosts (default %d for stream, %d for fragment)", st.Hosts, fr.Hosts))
	fs.Float64Var(&hostCPU, "host-cpu", 0, fmt.Sprintf("CPUs of each host (default %g for stream, %g for fragment)", st.HostCPU, fr.HostCPU))
	fs.Float64Var(&st.SmallCPU, "small-cpu", st.SmallCPU, "stream: CPUs of each small task")
	fs.Float64Var(&st.SmallTaskSeconds, "small-task-seconds", st.SmallTaskSeconds, "stream: how long each small task runs (simulated seconds)")
	fs.Float64Var(&st.SmallSpread, "small-task-spread", st.SmallSpread, "stream: small tasks run small-task-seconds times 1 ± this, spread evenly")
	fs.IntVar(&st.SmallJobSize, "small-job-size", st.SmallJobSize, "stream: small tasks per job")
	fs.Float64Var(&st.Backlog, "backlog", st.Backlog, "stream: small tasks kept waiting, as a fraction of what the cluster holds")
	fs.IntVar(&st.GangSize, "gang-size", st.GangSize, "stream: members of each gang")
	fs.Float64Var(&st.GangCPU, "gang-cpu", st.GangCPU, "stream: CPUs of each gang member")
	fs.Float64Var(&st.GangSeconds, "gang-seconds", st.GangSeconds, "stream: how long each gang runs (simulated seconds)")
	fs.DurationVar(&st.GangEvery, "gang-every", st.GangEvery, "stream: a gang arrives this often (simulated)")
	fs.DurationVar(&st.Duration, "duration", st.Duration, "stream: the measured window of each run (simulated)")
	fs.DurationVar(&st.WaitBound, "gang-wait-bound", st.WaitBound, "stream: the goal for a gang's wait; the last gang arrives this long before the window ends")
	fs.DurationVar(&st.ReservationAfter, "reservation-after", st.ReservationAfter, "stream: the stack's --reservation-after (simulated)")
	fs.Float64Var(&st.TimeScale, "time-scale", st.TimeScale, "stream: wall-clock seconds per simulated second")
	fs.Float64Var(&fr.FillCPU, "fill-cpu", fr.FillCPU, "fragment: CPUs of each filler task")
	fs.Float64Var(&fr.KillFraction, "kill-fraction", fr.KillFraction, "fragment: fraction of the fillers killed at random to fragment the cluster")
	fs.IntVar(&fr.MinGang, "min-gang", fr.MinGang, "fragment: smallest gang (sizes double up to --max-gang)")
	fs.IntVar(&fr.MaxGang, "max-gang", fr.MaxGang, "fragment: largest gang")
	fs.IntVar(&fr.GangsPerSize, "gangs-per-size", fr.GangsPerSize, "fragment: gangs of each size")
	fs.Float64Var(&fr.TaskCPU, "task-cpu", fr.TaskCPU, "fragment: CPUs of each gang member")
	fs.Uint64Var(&fr.Seed, "seed", fr.Seed, "fragment: seed of the random choice of fillers to kill")
	fs.DurationVar(&fr.Poll, "poll", fr.Poll, "pause between two reads of a gang job (fragment: each gang has its own poller; stream: one loop reads them all)")
	validate := func() error {
		if fs.Changed("poll") {
			st.Poll = fr.Poll
		}
		toHosts, toCPU, check := &st.Hosts, &st.HostCPU, st.Validate
		switch mode {
		case bench.GangModeStream:
		case bench.GangModeFragment:
			toHosts, toCPU, check = &fr.Hosts, &fr.HostCPU, fr.Validate
		default:
			return fmt.Errorf("--scenario %q: must be %s or %s", mode, bench.GangModeStream, bench.GangModeFragment)
		}
		if fs.Changed("hosts") {
			*toHosts = hosts
		}
		if fs.Changed("host-cpu") {
			*toCPU = hostCPU
		}
		return check()
	}
	return validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) {
		if mode == bench.GangModeFragment {
			return bench.Gang(ctx, env, fr)
		}
		return bench.GangStream(ctx, env, st)
	}
}

// updateBenchFlags registers the flags of the update scenario.
func updateBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultUpdateConfig()
	fs.IntVar(&c.Instances, "instances", c.Instances, "instances of the service")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "instances replaced at once (also the job's sla.maximumUnavailableInstances)")
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts")
	fs.Float64Var(&c.HostCPU, "host-cpu", c.HostCPU, "CPUs of each host")
	fs.BoolVar(&c.InPlace, "in-place", c.InPlace, "restart every instance on its host")
	fs.DurationVar(&c.Poll, "poll", c.Poll, "pause between two GetUpdate calls")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Update(ctx, env, c) }
}

// kubernetesBenchFlags registers the flags of the kubernetes scenario.
func kubernetesBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultKubernetesConfig()
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "kwok nodes")
	fs.IntVar(&c.NodeCPU, "node-cpu", c.NodeCPU, "allocatable CPUs of each node")
	fs.IntVar(&c.NodeMemoryGiB, "node-memory-gib", c.NodeMemoryGiB, "allocatable memory of each node in GiB")
	fs.IntVar(&c.Pods, "pods", c.Pods, "pods of each phase (Peloton: instances of its one BATCH job)")
	fs.Float64Var(&c.PodCPU, "pod-cpu", c.PodCPU, "CPUs each pod requests")
	fs.IntVar(&c.PodMemoryMB, "pod-memory-mb", c.PodMemoryMB, "memory each pod requests in MiB")
	fs.Float32SliceVar(&c.QPS, "qps", c.QPS, "Peloton's client QPS, comma-separated for several runs; kube-scheduler runs at each too (its equal-QPS phases)")
	fs.IntVar(&c.Burst, "burst", c.Burst, "client burst of Peloton and of the equal-QPS kube-scheduler (0: twice each --qps)")
	fs.StringSliceVar(&c.BindModes, "bind-modes", c.BindModes, "Peloton's --kube-bind-mode values to run, comma-separated: binding, node-name")
	fs.IntVar(&c.KwokPodWorkers, "kwok-pod-workers", c.KwokPodWorkers, "pods kwok turns Running at once, standing in for the nodes' kubelets (0: kwok's default, 4)")
	fs.Float32Var(&c.CreateQPS, "create-qps", c.CreateQPS, "client QPS of the bench's own pod creator (raw and kube-scheduler phases)")
	fs.IntVar(&c.CreateWorkers, "create-workers", c.CreateWorkers, "goroutines of the bench's own pod creator")
	fs.DurationVar(&c.PhaseTimeout, "phase-timeout", c.PhaseTimeout, "bound of each phase, first create to last pod Running")
	fs.StringVar(&c.Bin, "kube-bin", c.Bin, "folder with kube-apiserver, kube-scheduler and kwok (default: $PELOTON_KUBE_BIN, or what make kube-tools built)")
	fs.StringVar(&c.PelotonBin, "peloton-bin", c.PelotonBin, "the peloton binary whose up runs each Peloton phase in a process of its own, for its CPU alone (default: this one)")
	fs.StringVar(&c.PelotonCPUProfile, "peloton-cpuprofile", "", "have each Peloton phase's process write its CPU profile to this file, the phase's name added before the extension")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Kubernetes(ctx, env, c) }
}

// federationBenchFlags registers the flags of the federation scenario.
func federationBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultFederationConfig()
	fs.IntVar(&c.RegistryClusters, "registry-clusters", c.RegistryClusters, "clusters registered for the registry phase (0: skip it)")
	fs.DurationVar(&c.RegistryWindow, "registry-window", c.RegistryWindow, "each of the registry phase's two CPU windows")
	fs.IntVar(&c.Clusters, "clusters", c.Clusters, "clusters of the propagation and dispatch phases")
	fs.IntVar(&c.PoolChanges, "pool-changes", c.PoolChanges, "global pool changes timed (0: skip)")
	fs.IntVar(&c.Jobs, "jobs", c.Jobs, "federated batch jobs dispatched (0: skip)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "callers creating jobs at once")
	fs.IntVar(&c.HostsPerCluster, "hosts-per-cluster", c.HostsPerCluster, "simulated hosts of each cluster (32 CPUs each)")
	fs.DurationVar(&c.CheckEvery, "check-every", c.CheckEvery, "the federation's health-check period per cluster")
	fs.IntVar(&c.Etcds, "etcds", c.Etcds, "embedded etcds: 1 shared by all; more, the federation on one and the clusters spread over the rest (clusters+1: each its own, as in production)")
	fs.IntVar(&c.Services, "services", c.Services, "instances of one federated service created, rolled out and failed over (0: skip)")
	fs.IntVar(&c.ServiceBudget, "service-budget", c.ServiceBudget, "the service's budget of unavailable instances")
	fs.DurationVar(&c.ServiceToleration, "service-toleration", c.ServiceToleration, "the service's failover toleration")
	fs.DurationVar(&c.FairShareWindow, "fair-share-window", c.FairShareWindow, "how long the fair-share phase samples once the second pool submits (0: skip)")
	fs.DurationVar(&c.FairShareTask, "fair-share-task", c.FairShareTask, "how long each fair-share job's one task runs")
	fs.IntVar(&c.Rebalance, "rebalance", c.Rebalance, "instances of one federated service over 3 clusters that a fourth joins, timed until it is rebalanced (0: skip; needs --clusters 4 or more)")
	fs.IntVar(&c.RebalanceBudget, "rebalance-budget", c.RebalanceBudget, "that service's budget of unavailable instances")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Federation(ctx, env, c) }
}

// agentReportsBenchFlags registers the flags of the agentReports scenario.
func agentReportsBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultAgentReportsConfig()
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts, each with its agent")
	fs.IntVar(&c.RunsPerHost, "runs-per-host", c.RunsPerHost, "runs on each host (their use is in every report)")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "the agents' report interval")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "time before the window")
	fs.DurationVar(&c.Window, "window", c.Window, "the window measured")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) {
		return bench.AgentReports(ctx, env, c)
	}
}

// hostAgentBenchFlags registers the flags of the hostAgent scenario.
func hostAgentBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultHostAgentConfig()
	fs.IntVar(&c.Runs, "runs", c.Runs, "processes carrying task run ids of the agent's host")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "the agent's report interval")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "time before the window")
	fs.DurationVar(&c.Window, "window", c.Window, "the window measured")
	fs.StringVar(&c.AgentBin, "agent-bin", c.AgentBin, "the peloton-hostagent binary measured (default: the one beside this binary)")
	fs.StringVar(&c.FullBin, "full-bin", c.FullBin, "the peloton binary whose serve hostagent is measured too (default: this one)")
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.HostAgent(ctx, env, c) }
}

// colocationBenchFlags registers the flags of the colocation scenario.
func colocationBenchFlags(fs *pflag.FlagSet, _ *benchFlags) (func() error, benchRun) {
	c := bench.DefaultColocationConfig()
	fs.IntVar(&c.HostCores, "host-cores", c.HostCores, "CPUs of every host")
	fs.Float64Var(&c.ServicePeakCores, "service-peak-cores", c.ServicePeakCores, "the services' CPU use at the day's peak")
	fs.Float64Var(&c.TroughFraction, "trough", c.TroughFraction, "the services' use at the trough, as a fraction of the peak")
	fs.Float64Var(&c.BatchCoreHours, "batch-core-hours", c.BatchCoreHours, "the batch backlog to finish in the day")
	fs.Float64Var(&c.BatchUse, "batch-use", c.BatchUse, "the share of its core a batch task uses")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the backlog")
	fs.StringVar(&c.Trace, "trace", c.Trace, "the services' load curve: "+strings.Join(bench.TraceNames(), ", ")+" (production traces, scaled so that their peak is --service-peak-cores; docs/benchmarks.md cites them)")
	fs.StringVar(&c.TraceFile, "trace-file", c.TraceFile, "a CSV of your own load curve instead of --trace: a header line, then one sample per line")
	fs.StringVar(&c.TraceColumn, "trace-column", c.TraceColumn, "the column of --trace-file holding the CPU samples")
	fs.DurationVar(&c.TraceStep, "trace-step", c.TraceStep, "the time between two samples of --trace-file")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write an SVG of the co-located run here")
	drain := int(c.MoveDrain / time.Second)
	fs.IntVar(&drain, "move-drain-seconds", drain, "the advisor's drain window of a move from batch (0: none)")
	fs.DurationVar(&c.Lead, "lead", c.Lead, "how far ahead the advisor reads the services' learnt daily profile (0: off)")
	fs.Float64Var(&c.Headroom, "headroom", c.Headroom, "CPU kept free of revocable work on each host, in multiples of its largest recent rise of its own CPU (0: none)")
	validate := func() error {
		c.MoveDrain = time.Duration(drain) * time.Second
		return c.Validate()
	}
	return validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Colocation(ctx, env, c) }
}

// lifetimeBenchFlags registers the flags of the lifetime scenario.
func lifetimeBenchFlags(fs *pflag.FlagSet, f *benchFlags) (func() error, benchRun) {
	c := bench.DefaultLifetimeConfig()
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "simulated hosts")
	fs.IntSliceVar(&c.Checkpoints, "checkpoints", c.Checkpoints, "numbers of jobs pushed through at which the figures are taken, comma-separated, increasing")
	fs.IntVar(&c.Instances, "instances", c.Instances, "instances of each job")
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "the cluster's --finished-job-ttl")
	fs.IntVar(&c.LiveJobs, "live-jobs", c.LiveJobs, "long-running jobs of --instances present at each restart")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "jobs pushed per second (0: as fast as the cluster takes them, --max-in-flight bounding them)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "most jobs created and not yet archived and removed from etcd")
	fs.IntVar(&c.Samples, "samples", c.Samples, "calls timed for each latency figure at each checkpoint")
	fs.StringVar(&c.PelotonBin, "peloton-bin", c.PelotonBin, "the peloton binary whose up runs the cluster in a process of its own (default: this one)")
	// The size pushes 200,000 jobs through the collector.
	f.timeout = 4 * time.Hour
	fs.Lookup("timeout").DefValue = f.timeout.String()
	return c.Validate, func(ctx context.Context, env bench.Env) (*bench.Result, error) { return bench.Lifetime(ctx, env, c) }
}

// runBench validates everything before starting anything, runs the scenario
// under --timeout (and until SIGINT/SIGTERM), and prints its result.
func (a *app) runBench(ctx context.Context, f *benchFlags, validate func() error, run func(context.Context, bench.Env) (*bench.Result, error)) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	if f.timeout <= 0 {
		return usageErrorf("invalid --timeout %s: must be > 0", f.timeout)
	}
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return err
	}
	if err := validate(); err != nil {
		return usageErrorf("invalid %s", err)
	}
	env := bench.Env{Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))}
	if !f.quiet {
		env.Progress = func(line string) {
			fmt.Fprintf(a.stderr, "%s %s\n", time.Now().Format("15:04:05.000"), line)
		}
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if f.memProfile != "" {
		pf, err := os.Create(f.memProfile)
		if err != nil {
			return usageErrorf("invalid --memprofile: %v", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(pf, 0); err != nil {
				fmt.Fprintf(a.stderr, "--memprofile: %v\n", err)
			}
			pf.Close()
		}()
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, env)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("timed out after %s (--timeout): %w", f.timeout, err)
		}
		return err
	}
	if p.structured() {
		b, err := res.MarshalJSON()
		if err != nil {
			return err
		}
		return p.emit(b, nil, "")
	}
	return res.WriteTable(a.stdout)
}

// startCPUProfile profiles this process's CPU into file (nothing when file
// is empty) until the returned function is called.
func startCPUProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	pf, err := os.Create(file)
	if err != nil {
		return nil, usageErrorf("invalid --cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}
