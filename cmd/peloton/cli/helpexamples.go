package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// helpExamples are the Example sections of the commands that do not set
// their own, by command path without the leading "peloton ". Every leaf
// command has one (TestEveryCommandHasExamples), and each line that starts
// with "peloton" must parse against its command
// (TestExamplesParse), so they cannot drift from the flags. A <job-id> and
// the like stand for a value the reader has.
var helpExamples = map[string]string{
	"job create": `  peloton job create -f examples/hello.yaml
  peloton job create -f examples/service.yaml -o name
  cat spec.yaml | peloton job create -f -`,
	"job get": `  peloton job get a2f9                 # a unique prefix of the id will do
  peloton job get a2f9 -o yaml
  peloton job get a2f9 -o jsonpath='{.status.state}'`,
	"job cancel":   `  peloton job cancel a2f9`,
	"job delete":   `  peloton job delete a2f9 -o name`,
	"job restart":  `  peloton job restart a2f9 --instances 0,3`,
	"job scale":    `  peloton job scale a2f9 5 --version 2`,
	"job versions": `  peloton job versions a2f9 -o custom-columns=VERSION:.version,CAUSE:.cause`,
	"job wait": `  peloton job wait a2f9 --for SUCCEEDED
  peloton job wait a2f9 --for RUNNING --timeout 2m`,

	"task list": `  peloton task list a2f9
  peloton task list a2f9 --state RUNNING -o custom-columns=INSTANCE:.instanceId,HOST:.status.host`,
	"task get":  `  peloton task get a2f9 0 -o yaml`,
	"task kill": `  peloton task kill a2f9 2`,
	"task logs": `  peloton task logs a2f9 0
  peloton task logs a2f9 0 --stderr --run 2
  peloton task logs a2f9 0 --follow`,

	"pool create": `  peloton pool create /team -f examples/pool.yaml
  peloton pool create /org/team -f examples/pool.yaml --parents`,
	"pool get":    `  peloton pool get /team -o yaml`,
	"pool update": `  peloton pool update /team -f examples/pool.yaml --version 3`,
	"pool delete": `  peloton pool delete /team`,
	"pool list": `  peloton pool list
  peloton pool list -o jsonpath='{range .pools[*]}{.path}{"\n"}{end}'`,
	"pool move": `  peloton pool move /org/team --to /other`,

	"host list": `  peloton host list
  peloton host list -l zone=a -o name`,
	"host drain":                `  peloton host drain local-0 local-1`,
	"host maintenance start":    `  peloton host maintenance start local-0`,
	"host maintenance complete": `  peloton host maintenance complete local-0`,
	"host move": `  peloton host move local-1 --partition batch
  peloton host move local-1 --partition batch --no-wait`,

	"partition list":  `  peloton partition list -o wide`,
	"partition moves": `  peloton partition moves --host local-1 --limit 20`,

	"update start": `  peloton update start a2f9 -f examples/service.yaml --batch-size 1
  peloton update start a2f9 -f examples/service.yaml --start-paused --rollback-on-failure`,
	"update get":      `  peloton update get 7c1e -o yaml`,
	"update list":     `  peloton update list --job a2f9`,
	"update watch":    `  peloton update watch 7c1e --timeout 30m`,
	"update pause":    `  peloton update pause 7c1e`,
	"update resume":   `  peloton update resume 7c1e`,
	"update rollback": `  peloton update rollback 7c1e`,
	"update abort":    `  peloton update abort 7c1e`,

	"cluster list": `  peloton cluster list
  peloton cluster list -l region=west -o name`,
	"cluster get":        `  peloton cluster get east -o yaml`,
	"cluster register":   `  peloton cluster register east --endpoint 10.0.0.5:5391 --labels region=east,zone=a`,
	"cluster deregister": `  peloton cluster deregister east`,
	"cluster cordon":     `  peloton cluster cordon east`,
	"cluster uncordon":   `  peloton cluster uncordon east`,

	"fed job create": `  peloton fed job create -f examples/hello.yaml
  peloton fed job create -f examples/hello.yaml --cluster-selector region=west`,
	"fed job get":  `  peloton fed job get 5b1d -o yaml`,
	"fed job kill": `  peloton fed job kill 5b1d`,
	"fed job list": `  peloton fed job list --in-cluster east
  peloton fed job list -l team=data -o name`,
	"fed pool create":    `  peloton fed pool create /team -f examples/fed-pool.yaml`,
	"fed pool get":       `  peloton fed pool get /team -o yaml`,
	"fed pool update":    `  peloton fed pool update /team -f examples/fed-pool.yaml --version 2`,
	"fed pool delete":    `  peloton fed pool delete /team`,
	"fed pool list":      `  peloton fed pool list`,
	"fed service create": `  peloton fed service create -f examples/fed-service.yaml`,
	"fed service update": `  peloton fed service update 9e4a -f examples/fed-service.yaml --batch-size 1 --parallel-clusters 1`,
	"fed service get":    `  peloton fed service get 9e4a -o yaml`,
	"fed service list": `  peloton fed service list
  peloton fed service list -l tier=web --no-headers`,
	"fed service delete":    `  peloton fed service delete 9e4a`,
	"fed service pause":     `  peloton fed service pause 9e4a`,
	"fed service resume":    `  peloton fed service resume 9e4a`,
	"fed service rollback":  `  peloton fed service rollback 9e4a`,
	"fed service approve":   `  peloton fed service approve 9e4a   # the rollout waits for approval of a step (rollout steps with approval: true)`,
	"fed service abort":     `  peloton fed service abort 9e4a`,
	"fed service rebalance": `  peloton fed service rebalance 9e4a   # a MANUAL service: move to the split its clusters call for now`,

	"config view":         `  peloton config view -o json`,
	"config get-contexts": `  peloton config get-contexts -o wide`,
	"config use-context":  `  peloton config use-context prod`,
	"config set-context": `  peloton config set-context prod --server peloton.example.com:5391 --ca-file ca.pem --token-file token
  peloton config set-context local --server 127.0.0.1:5391`,
	"config delete-context": `  peloton config delete-context prod`,

	"up": `  peloton up
  peloton up --hosts 4 --data-dir ./peloton-data`,
	"version": `  peloton version -o json`,

	"serve cluster":    `  peloton serve cluster --etcd-endpoints http://10.0.0.1:2379 --listen :5391`,
	"serve federation": `  peloton serve federation --etcd-endpoints http://10.0.0.1:2379`,
	"serve advisor":    `  peloton serve advisor --server 10.0.0.1:5391`,
	"serve hostagent":  `  peloton serve hostagent --server 10.0.0.1:5391 --host worker-1`,
}

// benchExample is the Example of a bench scenario named name.
func benchExample(name string) string {
	return "  peloton bench " + name + "\n  peloton bench " + name + " -o json > " + name + ".json"
}

// addExamples sets the Example of every command under cmd that has none
// and is listed in helpExamples (or is a bench scenario).
func addExamples(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		addExamples(sub)
	}
	if cmd.Example != "" {
		return
	}
	path := strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()), " ")
	if ex, ok := helpExamples[path]; ok {
		cmd.Example = ex
		return
	}
	if cmd.Parent() != nil && cmd.Parent().Name() == "bench" && !cmd.HasSubCommands() {
		cmd.Example = benchExample(cmd.Name())
	}
}
