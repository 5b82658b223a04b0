//go:build mesosbench

package main

// A binary built with -tags mesosbench can run `peloton bench mesos`: it
// links the Mesos test master (hostmgr/mesos/mesostest, through
// bench/mesosharness), which the release binary must not.
import _ "github.com/peloton-sched/peloton/bench/mesosharness"
