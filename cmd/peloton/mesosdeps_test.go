package main

import (
	"slices"
	"testing"
)

// The release binary does not link the Mesos test master; a build with
// -tags mesosbench does, for `peloton bench mesos`.
func TestBinaryLinksNoMesosTestMaster(t *testing.T) {
	const master = "github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	if got := deps(t, ""); slices.Contains(got, master) || slices.Contains(got, "github.com/peloton-sched/peloton/bench/mesosharness") {
		t.Errorf("peloton links the Mesos test master")
	}
	if !slices.Contains(deps(t, "mesosbench"), master) {
		t.Errorf("peloton built with -tags mesosbench does not link %s, so it cannot run bench mesos", master)
	}
}
