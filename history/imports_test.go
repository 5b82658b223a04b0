package history

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are the components the package doc says history must not
// import: it stores what they produce and must not depend on them, so
// that each of them (and the federation) can use it.
var forbidden = []string{"jobmgr", "resmgr", "hostmgr", "placement", "cluster", "federation"}

// TestImports enforces the package doc on everything history links, not
// only its own import lines.
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list history's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/peloton-sched/peloton/"
	for _, p := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		for _, f := range forbidden {
			if rest == f || strings.HasPrefix(rest, f+"/") {
				t.Errorf("history links %s; it must not import %s", p, strings.Join(forbidden, ", "))
			}
		}
	}
}
