// Command peloton-hostagent is the host agent alone: the same command as
// `peloton serve hostagent`, in a binary that links nothing of the control
// plane, so that the agent every machine of a fleet runs stays small
// (docs/benchmarks.md measures it).
package main

import (
	"os"

	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
)

func main() {
	os.Exit(hostagentcmd.Main("peloton-hostagent --server ADDR [--host NAME]", os.Args[1:], os.Stdout, os.Stderr))
}
