package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// Starter specs for `job init`: one commented JobSpec per job type, each a
// file `job create -f` takes as it is (cli tests create every one against a
// running stack). Comments say what each field does and what else it can
// be; `peloton explain` has the whole reference.
var starterSpecs = map[string]string{
	"batch": `# A BATCH job: every instance runs to completion. Create it with
#   peloton job create -f FILE
# and see every field's documentation with "peloton explain JobSpec".
name: my-batch            # shown in lists; need not be unique
type: BATCH
pool: /default            # the leaf resource pool it runs in ("peloton pool list")
instanceCount: 2          # instances 0..n-1; PELOTON_INSTANCE_ID tells them apart
sla:
  priority: 0             # higher runs first and may displace lower in the pool
  preemptible: true       # the scheduler may take its tasks back for others
defaultSpec:              # what each instance runs (instanceSpecs overrides one)
  command: ["/bin/sh", "-c", "echo hello from instance $PELOTON_INSTANCE_ID"]
  env: {GREETING: hello}
  resources: {cpu: 0.1, memoryMb: 32, diskMb: 10}   # cpu in cores, memory and disk in MiB
  restartPolicy:
    maxFailures: 2        # a failed instance is started again up to this many times
`,
	"service": `# A SERVICE job: stateless instances kept running, replaced by rolling
# updates ("peloton update start ID -f FILE"). Create it with
#   peloton job create -f FILE
# and see every field's documentation with "peloton explain JobSpec".
name: my-service
type: SERVICE
pool: /default
instanceCount: 2
sla:
  maximumUnavailableInstances: 1   # updates and drains take down at most this many at once
defaultSpec:
  command: ["/bin/sh", "-c", "while true; do echo serving; sleep 30; done"]
  resources: {cpu: 0.1, memoryMb: 32}
  ports:
    - {name: http}        # no value: a free port per run, in PELOTON_PORT_HTTP
  healthCheck:            # until it passes, an instance counts as unavailable
    command: ["/bin/true"]
    intervalSeconds: 10
    failureThreshold: 3   # three failures in a row and the instance is restarted
  restartPolicy: {backoffSeconds: 1, maxBackoffSeconds: 30}
  killGracePeriodSeconds: 5   # time between SIGTERM and SIGKILL
`,
	"stateful": `# A STATEFUL job: each instance keeps a persistent volume on its host and
# stays there; it is never preempted, so it runs only inside its pool's
# reservation: make a pool that reserves resources and put its path in
# pool (see examples/pool.yaml). Create it with
#   peloton job create -f FILE
# and see every field's documentation with "peloton explain JobSpec".
name: my-stateful
type: STATEFUL
pool: /default
instanceCount: 1
sla:
  preemptible: false      # STATEFUL jobs are never preempted
  maximumUnavailableInstances: 1
defaultSpec:
  command: ["/bin/sh", "-c", "date >> \"$PELOTON_VOLUME/starts\"; exec sleep 3600"]
  resources: {cpu: 0.1, memoryMb: 32, diskMb: 10}
  volume:
    sizeMb: 100           # taken from the host's disk; its path is in PELOTON_VOLUME
  restartPolicy: {backoffSeconds: 1}
`,
	"daemon": `# A DAEMON job: one instance on every matching host; a host that joins gets
# one, a host that leaves takes its own along. instanceCount stays unset.
# Create it with
#   peloton job create -f FILE
# and see every field's documentation with "peloton explain JobSpec".
name: my-daemon
type: DAEMON
pool: /default
sla:
  maximumUnavailableInstances: 1
defaultSpec:
  command: ["/bin/sh", "-c", "while true; do echo \"alive on $PELOTON_HOST\"; sleep 30; done"]
  resources: {cpu: 0.05, memoryMb: 16}
  restartPolicy: {backoffSeconds: 1}
  # placement narrows the hosts, e.g.
  # placement: {constraints: [{label: zone, op: EQUALS, values: [a]}]}
`,
}

// starterTypes are the values --type takes, sorted.
func starterTypes() []string {
	ts := make([]string, 0, len(starterSpecs))
	for t := range starterSpecs {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

func (a *app) jobInitCommand() *cobra.Command {
	var typ string
	cmd := &cobra.Command{
		Use:   "init [--type batch|service|stateful|daemon]",
		Short: "Print a commented starter job spec",
		Long: `Print a commented JobSpec of the given type to standard output, to edit and
create with "job create -f". The spec is valid as it is.`,
		Example: `  peloton job init --type service > web.yaml   # then edit it and: peloton job create -f web.yaml
  peloton job init --type batch`,
		Args: argsNamed(),
		RunE: func(_ *cobra.Command, _ []string) error {
			s, ok := starterSpecs[strings.ToLower(typ)]
			if !ok {
				return usageErrorf("invalid --type %q: want one of %s", typ, strings.Join(starterTypes(), ", "))
			}
			_, err := fmt.Fprint(a.stdout, s)
			return err
		},
	}
	cmd.Flags().StringVar(&typ, "type", "batch", "job type: "+strings.Join(starterTypes(), ", "))
	return cmd
}
