package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
	"github.com/peloton-sched/peloton/federation"
)

// Version is the peloton release this binary was built from. Release builds
// set it with
//
//	-ldflags "-X github.com/peloton-sched/peloton/cmd/peloton/cli.Version=v1.2.3"
var Version = "dev"

const (
	// serverEnv names the environment variable that overrides the default
	// of --server.
	serverEnv     = "PELOTON_SERVER"
	defaultServer = "127.0.0.1:5391"
	// federationEnv names the environment variable that overrides the
	// default of --federation, the address `peloton up` serves it on.
	federationEnv     = "PELOTON_FEDERATION"
	defaultFederation = federation.DefaultListen
	// defaultPoll is how often `job wait` asks for the job's state.
	defaultPoll = 300 * time.Millisecond
	// defaultUpdatePoll is how often `update watch` asks for the update:
	// updates move a batch at a time, so once a second shows every step
	// without loading the server.
	defaultUpdatePoll = time.Second
)

// app is the state of one CLI invocation: the writers, the values of the
// global flags and the seams tests replace. NewRootCommand makes a fresh one
// every time, so in-process callers never share flag values.
type app struct {
	stdout, stderr io.Writer

	// Global persistent flags.
	server string
	output string
	// noHeaders is --no-headers.
	noHeaders bool
	timeout   time.Duration
	// fedAddr is --federation; clusterName is --cluster, the cluster that
	// cluster commands go to (its endpoint asked of the federation once per
	// invocation, see dial).
	fedAddr     string
	clusterName string
	// The TLS files and token (--ca-file, --cert-file, --key-file,
	// --tls-server-name, --token), and --context and --config: see conn
	// for how they combine with the environment and the config file.
	caFile, certFile, keyFile, tlsServerName string
	token                                    string
	contextName, configFlag                  string
	// settings are the connection settings once conn resolved them.
	settings *connSettings
	// globals are the root's persistent flags, to tell a flag given from
	// its default.
	globals *pflag.FlagSet

	getenv     func(string) string
	runCluster func(context.Context, cluster.Config) error
	// runFederation runs the federation (serve federation, up).
	runFederation func(context.Context, federation.Config) error
	// runAgent runs a host agent (serve hostagent).
	runAgent   func(context.Context, agentRun, io.Writer) error
	poll       time.Duration
	updatePoll time.Duration
	// progress is how often a long wait prints where it is (wait.go).
	progress time.Duration
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{
		stdout:        stdout,
		stderr:        stderr,
		getenv:        os.Getenv,
		runCluster:    cluster.Run,
		runFederation: federation.Run,
		runAgent:      hostagentcmd.RunAgent,
		poll:          defaultPoll,
		updatePoll:    defaultUpdatePoll,
		progress:      defaultProgress,
	}
}

// NewRootCommand builds a fresh peloton command tree that writes its output
// to stdout and its errors and logs to stderr. Errors are printed to stderr
// as "Error: ..." by the tree itself and also returned from Execute; use Main
// to also get the process exit code.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	return newApp(stdout, stderr).rootCommand()
}

// Main runs the CLI with args (without the program name) on the process's
// standard streams and returns the exit code: 0 on success, 1 on failure,
// 2 on a usage error. It never calls os.Exit.
func Main(args []string) int {
	return execute(newApp(os.Stdout, os.Stderr), args, os.Stdin)
}

// execute runs one invocation and maps its outcome to an exit code.
func execute(a *app, args []string, stdin io.Reader) int {
	root := a.rootCommand()
	if args == nil {
		// cobra reads os.Args when given nil; an in-process caller with no
		// arguments means none.
		args = []string{}
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	cmd, err := root.ExecuteC()
	if err != nil && !isReported(err) {
		// Errors cobra raises before any hook of ours runs (for instance in
		// its own help and completion commands).
		a.report(cmd, err)
	}
	return exitCode(err)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "peloton",
		Short: "Peloton runs batch jobs, services and stateful workloads on a shared cluster",
		Long: `Peloton is a resource scheduler for batch jobs, services and stateful workloads.

Start a single-machine cluster with "peloton up", then submit work to it:

  peloton job create -f examples/hello.yaml
  peloton job wait <id> --for SUCCEEDED
  peloton task logs <id> 0`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)

	server := a.getenv(serverEnv)
	if server == "" {
		server = defaultServer
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.server, "server", server, "gRPC address of the peloton server; $"+serverEnv+", else the context's server, sets the default")
	pf.StringVarP(&a.output, "output", "o", formatTable, "output format: "+validOutputFormats)
	pf.BoolVar(&a.noHeaders, "no-headers", false, "print tables (and -o custom-columns) without their header row")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "timeout of each API call")
	fed := a.getenv(federationEnv)
	if fed == "" {
		fed = defaultFederation
	}
	pf.StringVar(&a.fedAddr, "federation", fed, "gRPC address of the federation (cluster and fed commands, --cluster); $"+federationEnv+", else the context's federation, sets the default")
	pf.StringVar(&a.clusterName, "cluster", "", "send job, task, pool, host and update commands to this cluster of the federation (its endpoint, asked of --federation) instead of --server (default: the context's cluster)")
	pf.StringVar(&a.caFile, "ca-file", "", "PEM file of the CA that signed the server's certificate; connects over TLS (as do --cert-file and --tls-server-name)")
	pf.StringVar(&a.certFile, "cert-file", "", "PEM certificate to present to a server that requires client certificates (mutual TLS), with --key-file")
	pf.StringVar(&a.keyFile, "key-file", "", "PEM private key of --cert-file")
	pf.StringVar(&a.tlsServerName, "tls-server-name", "", "name the server's certificate must carry, if not the host of the address dialled")
	pf.StringVar(&a.token, "token", "", "bearer token sent with every call, only over TLS or to a loopback address (default: $"+tokenEnv+")")
	pf.StringVar(&a.contextName, "context", "", `context of the config file to use (default: its currentContext; "" for none)`)
	pf.StringVar(&a.configFlag, "config", "", "config file (default: $"+configEnv+", else $XDG_CONFIG_HOME/peloton/config.yaml or ~/.config/peloton/config.yaml)")
	a.globals = pf

	a.group(root)
	root.AddCommand(
		a.upCommand(),
		a.serveCommand(),
		a.jobCommand(),
		a.taskCommand(),
		a.poolCommand(),
		a.hostCommand(),
		a.partitionCommand(),
		a.updateCommand(),
		a.clusterCommand(),
		a.fedCommand(),
		a.configCommand(),
		a.versionCommand(),
		a.benchCommand(),
		a.explainCommand(),
	)
	// Inherited by every subcommand: bad flags are usage errors.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return a.report(cmd, flagError(err))
	})
	// -o is checked before any command runs, whether or not it prints
	// through it: a typo is named with the valid values, at no cost.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		_, err := a.printer()
		return a.report(cmd, err)
	}
	a.resolveIDPrefixes(root)
	a.registerCompletions(root)
	addExamples(root)
	a.reportErrors(root)
	return root
}

// group makes cmd a command that only holds subcommands: alone it prints its
// help; with an argument that names no subcommand it is a usage error (cobra
// would otherwise print help and succeed).
func (a *app) group(cmd *cobra.Command) {
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usageErrorf("%s", msg)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return cmd.Help()
	}
}

// reportErrors wraps the argument validators and run functions of cmd and
// its subcommands so that every error is printed exactly once, by the tree
// itself, whether it runs through Main or through NewRootCommand.
func (a *app) reportErrors(cmd *cobra.Command) {
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, in []string) error {
			if err := args(c, in); err != nil {
				return a.report(c, asUsage(err))
			}
			return nil
		}
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, in []string) error {
			return a.report(c, run(c, in))
		}
	}
	for _, sub := range cmd.Commands() {
		a.reportErrors(sub)
	}
}

// report prints err to stderr (once) and returns it marked as reported.
func (a *app) report(cmd *cobra.Command, err error) error {
	if err == nil || isReported(err) {
		return err
	}
	fmt.Fprintf(a.stderr, "Error: %s\n", formatError(err))
	if isUsage(err) && cmd != nil {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return &reportedError{err: err}
}

var argsNamed = cmdutil.ArgsNamed
