//go:build kubebench

package main

// A binary built with -tags kubebench can run `peloton bench kubernetes`:
// it links the kube test harness (internal/testing/kubetest, through
// bench/kubeharness), which the release binary must not.
import _ "github.com/peloton-sched/peloton/bench/kubeharness"
