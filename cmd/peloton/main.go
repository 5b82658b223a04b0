// Command peloton is the Peloton command-line tool: it runs a cluster
// (`peloton up`, `peloton serve cluster`) and talks to one over gRPC (jobs,
// tasks, pools, hosts). All of the work lives in package cli so that tests
// can run the CLI in-process.
package main

import (
	"os"

	"github.com/peloton-sched/peloton/cmd/peloton/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
