// Package hostagentcmd is the host agent's command: `peloton serve
// hostagent` in the full binary, and the whole of the slim
// peloton-hostagent binary that runs on every machine of a fleet (the
// DaemonSet's). It links the agent, gRPC, cobra and the API client
// (cluster/client, for TLS and the token), and nothing of the control
// plane: the full binary's Kubernetes client, embedded etcd and package
// initialisation cost an agent some 50 MiB of resident memory. ConnFlags,
// the flags of a daemon's connection to the stack, are the advisor's too.
package hostagentcmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
	"github.com/peloton-sched/peloton/hostagent"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Run is what the command runs: the agent's config, less what RunAgent
// makes from Server, Conn and Root (the connection, the readers).
type Run struct {
	Config hostagent.Config
	// Server is the cluster stack's gRPC address; Root where the host's
	// /proc and /sys are mounted.
	Server, Root string
	// Conn secures the connection to Server: TLS files, a token file.
	Conn pclient.Options
}

// Options shape the command for the binary that holds it.
type Options struct {
	// Use is the command's use line.
	Use    string
	Stdout io.Writer
	Stderr io.Writer
	// RunAgent runs the agent (nil: RunAgent); tests replace it.
	RunAgent func(context.Context, Run, io.Writer) error
}

// Long is the command's help text.
const long = `Run the host agent of one host: every --interval it reads the host's CPU and
memory use (from cgroup v2, cgroup v1 or /proc, whichever the host has) and
each task run's (the processes that carry its PELOTON_TASK_ID, run by any
backend on this host; from the run's own cgroup where it has one), and
streams them to the cluster stack at --server, which shows them in
"peloton host list" and "task get" and measures the host's slack for
revocable work from them. A lost stream is opened again with backoff;
reports carry a sequence number and are safe to resend.

--host must be the name the cluster knows the host by (a Kubernetes node's
name, a local virtual host's name). With --virtual the host is one of the
local backend's virtual hosts, which share this machine: its usage is the
sum of its runs'. "peloton up" and "serve cluster --backend local" run such
agents themselves (--host-agents).

The same command is the whole of the peloton-hostagent binary, which links
nothing of the control plane and is what a fleet's machines should run.`

// Command builds the host agent's command.
func Command(o Options) *cobra.Command {
	var (
		server, host, root, logLevel string
		interval                     time.Duration
		virtual                      bool
		qos                          QoSFlags
		capCPU                       float64
		capMemMB                     int64
		conn                         ConnFlags
	)
	runAgent := o.RunAgent
	if runAgent == nil {
		runAgent = RunAgent
	}
	cmd := &cobra.Command{
		Use:   o.Use,
		Short: "Run the host agent: report this host's usage and its runs' to the cluster stack",
		Long:  long,
		Args:  cmdutil.ArgsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case server == "":
				return cmdutil.Usagef("missing --server: the gRPC address of the cluster stack to report to")
			case interval < 100*time.Millisecond:
				return cmdutil.Usagef("invalid --interval %s: must be at least 100ms", interval)
			}
			if _, _, err := net.SplitHostPort(server); err != nil {
				return cmdutil.Usagef("invalid --server %q: want host:port", server)
			}
			opts, err := conn.Options()
			if err != nil {
				return err
			}
			if host == "" {
				h, err := os.Hostname()
				if err != nil {
					return cmdutil.Usagef("missing --host, and the host name cannot be read: %v", err)
				}
				host = h
			}
			level, err := cmdutil.ParseLogLevel(logLevel)
			if err != nil {
				return err
			}
			policy, err := qos.Policy()
			if err != nil {
				return err
			}
			switch {
			case capCPU < 0 || capMemMB < 0:
				return cmdutil.Usagef("invalid --capacity-cpu %g / --capacity-memory-mb %d: must be >= 0", capCPU, capMemMB)
			case virtual && policy != nil && (capCPU == 0 || capMemMB == 0):
				return cmdutil.Usagef("missing --capacity-cpu and --capacity-memory-mb: a virtual host runs hot against its declared capacity (or --qos=false)")
			}
			var id [16]byte
			_, _ = rand.Read(id[:])
			run := Run{Server: server, Root: root, Conn: opts, Config: hostagent.Config{Host: host, AgentID: hex.EncodeToString(id[:]),
				Interval: interval, Virtual: virtual, QoS: policy, Capacity: hostagent.Resources{CPU: capCPU, MemoryMB: capMemMB},
				Logger: slog.New(slog.NewTextHandler(o.Stderr, &slog.HandlerOptions{Level: level})).With("component", "hostagent")}}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := runAgent(ctx, run, o.Stdout); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&server, "server", "", "gRPC address of the cluster stack (host:port; required)")
	fs.StringVar(&host, "host", "", "this host's name in the cluster (default: the machine's host name)")
	fs.DurationVar(&interval, "interval", hostagent.DefaultInterval, "time between reports")
	fs.StringVar(&root, "root", "/", "where the host's /proc and /sys are mounted (a container mounts the host's at e.g. /host)")
	fs.BoolVar(&virtual, "virtual", false, "the host is a local backend's virtual host: its usage is the sum of its runs'")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Float64Var(&capCPU, "capacity-cpu", 0, "the host's CPUs for the QoS controller (0: this machine's, within its cgroup; required with --virtual)")
	fs.Int64Var(&capMemMB, "capacity-memory-mb", 0, "the host's memory in MiB for the QoS controller (0: this machine's; required with --virtual)")
	qos.Register(fs)
	conn.Register(fs)
	cmd.SetUsageTemplate(cmdutil.ServerUsage)
	return cmd
}

// RunAgent connects to the stack, reads the host under run.Root and runs
// the agent until ctx ends; its first line on out says what it does.
func RunAgent(ctx context.Context, run Run, out io.Writer) error {
	cfg := run.Config
	src := hostagent.SourceRuns
	if !cfg.Virtual {
		r, err := hostagent.NewHostReader(run.Root)
		if err != nil {
			return fmt.Errorf("cannot read this host's usage under %s: %w", run.Root, err)
		}
		cfg.Source, src = r, r.Source()
	}
	// The stream lasts as long as the agent: no per-call timeout.
	opts := run.Conn
	opts.Timeout = 0
	opts.DialOptions = append(append([]grpc.DialOption(nil), opts.DialOptions...),
		// A stack gone without closing the connection is noticed within a
		// minute, not the kernel's many.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}))
	c, err := pclient.New(run.Server, opts)
	if err != nil {
		return DialError(run.Server, err)
	}
	defer c.Close()
	cfg.Client = pelotonv1.NewHostAgentServiceClient(c.Conn)
	cfg.Runs = &hostagent.EnvRuns{ProcRoot: filepath.Join(run.Root, "proc"), Host: cfg.Host,
		CgroupRoot: filepath.Join(run.Root, "sys", "fs", "cgroup")}
	agent, err := hostagent.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "peloton hostagent is reporting: host %s, to %s, every %s, usage from %s, agent %s\n",
		cfg.Host, run.Server, cfg.Interval, src, cfg.AgentID)
	return agent.Run(ctx)
}

// Main runs the command as the whole of a binary (peloton-hostagent):
// errors go to stderr, usage errors exit with code 2.
func Main(use string, args []string, stdout, stderr io.Writer) int {
	cmd := Command(Options{Use: use, Stdout: stdout, Stderr: stderr})
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdutil.Usagef("%s", err.Error()) })
	if args == nil {
		args = []string{}
	}
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err != nil {
		fmt.Fprintf(stderr, "Error: %s\n", err)
		if cmdutil.IsUsage(err) {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.Name())
		}
	}
	return cmdutil.ExitCode(err)
}

// QoSFlags are the QoS controller's flags, of the agent's command and of
// the in-process agents of up and serve cluster.
type QoSFlags struct {
	on              bool
	cpuHigh, cpuLow float64
	memHigh, memLow float64
}

// Register adds the flags to fs.
func (q *QoSFlags) Register(fs *pflag.FlagSet) {
	fs.BoolVar(&q.on, "qos", true, "the host agents' QoS controller: kill revocable runs at once when a host runs hot")
	fs.Float64Var(&q.cpuHigh, "qos-cpu-high", 0.9, "a host is hot at or above this fraction of its CPU (for two readings in a row)")
	fs.Float64Var(&q.cpuLow, "qos-cpu-low", 0.75, "revocable runs are killed until the projected CPU use is below this fraction")
	fs.Float64Var(&q.memHigh, "qos-memory-high", 0.9, "a host is hot at or above this fraction of its memory")
	fs.Float64Var(&q.memLow, "qos-memory-low", 0.8, "revocable runs are killed, of equal priority the largest user of memory first, until the projected memory use is below this fraction")
}

// Policy is the QoS policy the flags give, nil when off; a bad pair of
// thresholds is a usage error naming the flags.
func (q *QoSFlags) Policy() (*hostagent.QoSPolicy, error) {
	if !q.on {
		return nil, nil
	}
	p := &hostagent.QoSPolicy{CPUHigh: q.cpuHigh, CPULow: q.cpuLow, MemHigh: q.memHigh, MemLow: q.memLow, Samples: hostagent.DefaultQoSSamples}
	switch {
	case !(q.cpuHigh > 0 && q.cpuHigh <= 1 && q.cpuLow >= 0 && q.cpuLow < q.cpuHigh):
		return nil, cmdutil.Usagef("invalid --qos-cpu-high %g / --qos-cpu-low %g: want 0 <= low < high <= 1", q.cpuHigh, q.cpuLow)
	case !(q.memHigh > 0 && q.memHigh <= 1 && q.memLow >= 0 && q.memLow < q.memHigh):
		return nil, cmdutil.Usagef("invalid --qos-memory-high %g / --qos-memory-low %g: want 0 <= low < high <= 1", q.memHigh, q.memLow)
	}
	if err := p.Validate(); err != nil {
		return nil, cmdutil.Usagef("invalid --qos-*: %v", err)
	}
	return p, nil
}
