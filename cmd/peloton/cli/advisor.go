package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peloton-sched/peloton/advisor"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
	"github.com/peloton-sched/peloton/internal/metrics"
)

// advisorFlags are the host advisor's flags: of up and serve cluster (which
// run it in-process), and of serve advisor.
type advisorFlags struct {
	mode                      string
	interval                  time.Duration
	batch, stateless          string
	pressureHigh, pressureLow float64
	cooling, holdDown         time.Duration
	maxMoves                  int
	minBatch, minStateless    int
	maxStateless              int
	maxOversub                float64
	oversubWindow             time.Duration
	minDwell                  time.Duration
	thresholds                []string
	moveDrainSeconds          int
	lead                      time.Duration
	headroom, backRise        float64
}

func (f *advisorFlags) register(fs *pflag.FlagSet, inProcess bool) {
	def := advisor.DefaultConfig()
	if inProcess {
		fs.StringVar(&f.mode, "advisor-mode", advisor.ModeObserve, "the host advisor in this process: act (moves hosts between the batch and stateless partitions), observe (only says what it would do) or off")
	} else {
		fs.StringVar(&f.mode, "mode", advisor.ModeAct, "act (move hosts between the batch and stateless partitions) or observe (only say what it would do)")
	}
	fs.DurationVar(&f.interval, "advisor-interval", advisor.DefaultInterval, "time between the advisor's rounds")
	fs.StringVar(&f.batch, "advisor-batch-partition", def.Batch, "the partition batch work runs in")
	fs.StringVar(&f.stateless, "advisor-stateless-partition", def.Stateless, "the partition services run in")
	fs.Float64Var(&f.pressureHigh, "advisor-pressure-high", def.PressureHigh, "stateless pressure (share of its hosts orange or red, or of its services over SLO) at which a batch host moves over")
	fs.Float64Var(&f.pressureLow, "advisor-pressure-low", def.PressureLow, "stateless pressure below which, after --advisor-cooling, a host the advisor moved goes back to batch")
	fs.DurationVar(&f.cooling, "advisor-cooling", def.Cooling, "how long stateless must stay cool before a host goes back to batch (one per cooling period)")
	fs.DurationVar(&f.holdDown, "advisor-hold-down", def.HoldDown, "how long a host the advisor moved stays where it went")
	fs.IntVar(&f.maxMoves, "advisor-max-moves", def.MaxMoves, "the most moves the advisor starts in one round")
	fs.IntVar(&f.minBatch, "advisor-min-batch", def.MinSize["batch"], "the fewest hosts the batch partition keeps")
	fs.IntVar(&f.minStateless, "advisor-min-stateless", def.MinSize["stateless"], "the fewest hosts the stateless partition keeps")
	fs.IntVar(&f.maxStateless, "advisor-max-stateless", 0, "the most hosts the stateless partition grows to (0: no bound)")
	fs.Float64Var(&f.maxOversub, "advisor-max-oversubscription", def.Oversub.MaxFactor, "the largest oversubscription factor of a batch host's CPU for revocable work (1: none)")
	fs.DurationVar(&f.oversubWindow, "advisor-oversubscription-window", def.Oversub.Window, "the window whose p95 CPU use sets a batch host's oversubscription factor")
	fs.DurationVar(&f.minDwell, "advisor-min-dwell", advisor.DefaultThresholds().MinDwell, "the least time a host stays in a zone before it cools to another")
	fs.IntVar(&f.moveDrainSeconds, "advisor-move-drain-seconds", int(def.MoveDrain/time.Second), "drain window of a move from batch, 0 to 3600 s: runs expected to end within it finish, the rest are preempted at its end")
	fs.DurationVar(&f.lead, "advisor-lead", def.Lead, "how far ahead the stateless partition's learnt daily profile is read to move hosts before a rise (0: off)")
	fs.Float64Var(&f.headroom, "advisor-headroom", def.Oversub.Headroom, "a stateless host's headroom for a rise of its services' load, in multiples of its largest rise over the oversubscription window (0: none)")
	fs.Float64Var(&f.backRise, "advisor-back-rise", def.BackRise, "a host goes back to batch only if the stateless hosts left keep this many times their headroom free (0: no such check)")
	fs.StringSliceVar(&f.thresholds, "advisor-thresholds", nil, "zone thresholds per partition, PARTITION:KIND=ORANGE/RED with KIND cpu, memory or latency (P99 over SLO), e.g. stateless:cpu=0.6/0.8")
}

// config checks the flags; every error names its flag. The mode "off"
// (in-process only) gives the empty mode.
func (f *advisorFlags) config(inProcess bool) (string, advisor.Config, error) {
	modeFlag := "--mode"
	if inProcess {
		modeFlag = "--advisor-mode"
	}
	mode := strings.TrimSpace(f.mode)
	switch {
	case inProcess && mode == "off":
		return "", advisor.Config{}, nil
	case mode != advisor.ModeAct && mode != advisor.ModeObserve:
		want := "act or observe"
		if inProcess {
			want = "act, observe or off"
		}
		return "", advisor.Config{}, usageErrorf("invalid %s %q: want %s", modeFlag, f.mode, want)
	case f.interval < 100*time.Millisecond:
		return "", advisor.Config{}, usageErrorf("invalid --advisor-interval %s: must be at least 100ms", f.interval)
	case f.minBatch < 0 || f.minStateless < 0 || f.maxStateless < 0:
		return "", advisor.Config{}, usageErrorf("invalid --advisor-min-batch/--advisor-min-stateless/--advisor-max-stateless: must be >= 0")
	case f.maxStateless > 0 && f.maxStateless < f.minStateless:
		return "", advisor.Config{}, usageErrorf("invalid --advisor-max-stateless %d: below --advisor-min-stateless %d", f.maxStateless, f.minStateless)
	case f.moveDrainSeconds < 0 || time.Duration(f.moveDrainSeconds)*time.Second > advisor.MaxMoveDrain:
		return "", advisor.Config{}, usageErrorf("invalid --advisor-move-drain-seconds %d: must be 0 to %d", f.moveDrainSeconds, int(advisor.MaxMoveDrain/time.Second))
	case f.lead < 0 || f.lead > 24*time.Hour:
		return "", advisor.Config{}, usageErrorf("invalid --advisor-lead %s: must be 0 to 24h", f.lead)
	}
	c := advisor.DefaultConfig()
	c.Batch, c.Stateless = strings.TrimSpace(f.batch), strings.TrimSpace(f.stateless)
	c.PressureHigh, c.PressureLow = f.pressureHigh, f.pressureLow
	c.Cooling, c.HoldDown, c.MaxMoves = f.cooling, f.holdDown, f.maxMoves
	c.MinSize = map[string]int{c.Batch: f.minBatch, c.Stateless: f.minStateless}
	c.MaxSize = map[string]int{c.Stateless: f.maxStateless}
	c.Oversub.MaxFactor, c.Oversub.Window = f.maxOversub, f.oversubWindow
	c.MoveDrain, c.Lead = time.Duration(f.moveDrainSeconds)*time.Second, f.lead
	c.Oversub.Headroom, c.BackRise = f.headroom, f.backRise
	c.Thresholds = map[string]advisor.Thresholds{}
	base := advisor.DefaultThresholds()
	base.MinDwell = f.minDwell
	for _, p := range []string{c.Batch, c.Stateless} {
		c.Thresholds[p] = base
	}
	for _, e := range f.thresholds {
		if err := setThreshold(c.Thresholds, base, strings.TrimSpace(e)); err != nil {
			return "", advisor.Config{}, usageErrorf("invalid --advisor-thresholds entry %q: %v", e, err)
		}
	}
	if err := c.Validate(); err != nil {
		return "", advisor.Config{}, usageErrorf("invalid --advisor-* flags: %v", err)
	}
	return mode, c, nil
}

// setThreshold applies one PARTITION:KIND=ORANGE/RED entry.
func setThreshold(ts map[string]advisor.Thresholds, base advisor.Thresholds, e string) error {
	part, rest, ok := strings.Cut(e, ":")
	kind, levels, ok2 := strings.Cut(rest, "=")
	o, r, ok3 := strings.Cut(levels, "/")
	if !ok || !ok2 || !ok3 || part == "" {
		return errors.New("want PARTITION:KIND=ORANGE/RED")
	}
	orange, err1 := strconv.ParseFloat(o, 64)
	red, err2 := strconv.ParseFloat(r, 64)
	if err1 != nil || err2 != nil {
		return errors.New("ORANGE and RED must be numbers")
	}
	t, ok := ts[part]
	if !ok {
		t = base
	}
	switch kind {
	case "cpu":
		t.CPUOrange, t.CPURed = orange, red
	case "memory":
		t.MemOrange, t.MemRed = orange, red
	case "latency":
		t.LatencyOrange, t.LatencyRed = orange, red
	default:
		return fmt.Errorf("unknown kind %q: want cpu, memory or latency", kind)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	ts[part] = t
	return nil
}

// serveAdvisorCommand is `peloton serve advisor`.
func (a *app) serveAdvisorCommand() *cobra.Command {
	var f advisorFlags
	var server, metricsListen, logLevel string
	var staleAfter time.Duration
	var conn hostagentcmd.ConnFlags
	cmd := &cobra.Command{
		Use:   "advisor --server ADDR",
		Short: "Run the host advisor: move hosts between the batch and stateless partitions as load shifts",
		Long: `Run the host advisor against the cluster stack at --server (its gRPC API):
every --advisor-interval it reads the hosts' usage as their agents reported
it and the latency-sensitive services' P99 against their SLO, classifies
every host green, orange or red, and, when the stateless partition runs hot,
moves the cheapest batch host over (hostmgr drains it, asking the SLA
evaluator before any service instance goes down); when stateless has been
cool for --advisor-cooling, hosts go back. It publishes its advice (zones,
pressure, batch hosts' oversubscription factors) to the stack, which shows
it in "peloton partition list" and "host list". With --mode observe it only
says what it would do ("peloton partition moves" shows those as OBSERVED).
"peloton up" and "serve cluster" run one in-process (--advisor-mode).

A stack that serves TLS is reached with --ca-file (and --cert-file and
--key-file if it wants client certificates); one that wants a token gets
the one in --token-file, read again when the file changes.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rejectClientFlags(cmd); err != nil {
				return err
			}
			if server == "" {
				return usageErrorf("missing --server: the gRPC address of the cluster stack to advise")
			}
			if _, _, err := net.SplitHostPort(server); err != nil {
				return usageErrorf("invalid --server %q: want host:port", server)
			}
			if staleAfter <= 0 {
				return usageErrorf("invalid --usage-stale-after %s: must be > 0", staleAfter)
			}
			mode, cfg, err := f.config(false)
			if err != nil {
				return err
			}
			opts, err := conn.Options()
			if err != nil {
				return err
			}
			level, err := parseLogLevel(logLevel)
			if err != nil {
				return err
			}
			var lis net.Listener
			if metricsListen != "" {
				if lis, err = net.Listen("tcp", metricsListen); err != nil {
					return usageErrorf("invalid --metrics-listen %q: %v", metricsListen, err)
				}
				defer lis.Close()
			}
			// Every call of a round is bounded: a stack that stops answering
			// costs a round, not the advisor.
			opts.Timeout = 10 * time.Second
			c, err := pclient.New(server, opts)
			if err != nil {
				return hostagentcmd.DialError(server, err)
			}
			defer c.Close()
			log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level})).With("component", "advisor")
			adv, err := advisor.New(advisor.Options{Mode: mode, Config: cfg, Interval: f.interval, Logger: log,
				Cluster: &advisor.APICluster{StaleAfter: staleAfter, API: advisor.APIClients{Hosts: c.Hosts, Jobs: c.Jobs, Partitions: c.Partitions}}})
			if err != nil {
				return usageErrorf("%v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if lis != nil {
				hs := &http.Server{Handler: promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
				go func() { _ = hs.Serve(lis) }()
				defer hs.Close()
			}
			metricsAt := ""
			if lis != nil {
				metricsAt = ", metrics on http://" + lis.Addr().String() + "/metrics"
			}
			fmt.Fprintf(a.stdout, "peloton advisor is advising: %s, %s mode, every %s%s\n", server, mode, f.interval, metricsAt)
			if err := adv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&server, "server", "", "gRPC address of the cluster stack (host:port; required)")
	fs.StringVar(&metricsListen, "metrics-listen", "", "serve the advisor's Prometheus metrics at http://ADDR/metrics (empty: not served)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&staleAfter, "usage-stale-after", 15*time.Second, "how old a host's last usage report may be and still count as a reading")
	f.register(fs, false)
	conn.Register(fs)
	cmd.SetUsageTemplate(serverUsage)
	return cmd
}
