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
// slim peloton-hostagent binary, in this one.
func (a *app) serveHostagentCommand() *cobra.Command {
	return hostagentcmd.Command(hostagentcmd.Options{Use: "hostagent --server ADDR [--host NAME]",
		Stdout: a.stdout, Stderr: a.stderr, RunAgent: a.runAgent})
}
