package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages a build of this command links, with tags.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list the binary's packages: %v", err)
	}
	args := []string{"list", "-deps"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.Command(goTool, append(args, ".")...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return strings.Fields(string(out))
}

// The release binary links no test code: not the kube test harness, and
// not package testing. `peloton bench kubernetes` needs the harness, so
// only a build with -tags kubebench has it.
func TestBinaryLinksNoTestCode(t *testing.T) {
	const harness = "github.com/peloton-sched/peloton/internal/testing/kubetest"
	got := deps(t, "")
	for _, p := range []string{harness, "github.com/peloton-sched/peloton/bench/kubeharness", "testing"} {
		if slices.Contains(got, p) {
			t.Errorf("peloton links %s", p)
		}
	}
	if !slices.Contains(deps(t, "kubebench"), harness) {
		t.Errorf("peloton built with -tags kubebench does not link %s, so it cannot run bench kubernetes", harness)
	}
}
