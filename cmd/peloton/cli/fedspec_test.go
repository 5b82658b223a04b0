package cli

import (
	"strings"
	"testing"
)

// TestFedSpecKindsNotConfused: a federated service's file given to fed job
// create, and a federated job's to fed service create, are told which
// command takes them, not only which field is unknown.
func TestFedSpecKindsNotConfused(t *testing.T) {
	service := "job: {name: web, type: SERVICE, instanceCount: 2}\nplacement: {clusters: [{name: a, weight: 1}]}\n"
	r := runCLI(t, service, "--federation", closedAddr(t), "fed", "job", "create", "-f", "-")
	want := "this file is a federated service (placement.clusters), not a batch job: run it with peloton fed service create -f -"
	if r.code != exitError || !strings.Contains(r.stderr, want) {
		t.Errorf("fed job create of a service: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
	job := "job: {name: batch, instanceCount: 2}\nplacement: {clusterSelector: {region: east}}\n"
	r = runCLI(t, job, "--federation", closedAddr(t), "fed", "service", "create", "-f", "-")
	want = "this file is a federated job (placement.clusterSelector), not a service: run it with peloton fed job create -f -"
	if r.code != exitError || !strings.Contains(r.stderr, want) {
		t.Errorf("fed service create of a job: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
	// A misspelt field is still named as such.
	r = runCLI(t, "job: {name: x}\nplacement: {clusterz: []}\n", "--federation", closedAddr(t), "fed", "job", "create", "-f", "-")
	if r.code != exitError || !strings.Contains(r.stderr, `unknown field "clusterz"`) {
		t.Errorf("misspelt field: exit %d, stderr %q", r.code, r.stderr)
	}
}
