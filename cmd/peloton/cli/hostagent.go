package cli

import (
	"github.com/spf13/cobra"

	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
)

// agentRun is what `serve hostagent` runs.
type agentRun = hostagentcmd.Run

// qosFlags are the QoS controller's flags.
type qosFlags = hostagentcmd.QoSFlags

// serveHostagentCommand is `peloton serve hostagent`: the command of the
// slim peloton-hostagent binary, in this one. Here it also inherits the
// root's client flags, which it refuses (the slim binary has none): --token
// given to it would otherwise be ignored without a word.
func (a *app) serveHostagentCommand() *cobra.Command {
	cmd := hostagentcmd.Command(hostagentcmd.Options{Use: "hostagent --server ADDR [--host NAME]",
		Stdout: a.stdout, Stderr: a.stderr, RunAgent: a.runAgent})
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := rejectClientFlags(c); err != nil {
			return err
		}
		return run(c, args)
	}
	return cmd
}
