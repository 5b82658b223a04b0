package hostagent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/peloton-sched/peloton/"

// allowedImport is the package doc's rule: of Peloton, only internal/
// plumbing and the generated API the agent reports through.
func allowedImport(path string) bool {
	rest, ok := strings.CutPrefix(path, module)
	if !ok {
		return true // not Peloton
	}
	return strings.HasPrefix(rest, "internal/") || rest == "proto/peloton/api/v1"
}

// TestImports enforces the package doc, so the agent never links the
// control plane.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowedImport(path) {
				t.Errorf("%s imports %s: hostagent may import only internal/ and proto/peloton/api/v1 of Peloton", f, path)
			}
		}
	}
}

func TestAllowedImport(t *testing.T) {
	for path, want := range map[string]bool{
		"context":                            true,
		"google.golang.org/grpc":             true,
		module + "internal/testing/testutil": true,
		module + "proto/peloton/api/v1":      true,
		module + "proto/peloton/api/v1x":     false,
		module + "proto/peloton/private":     false,
		module + "jobmgr":                    false,
		module + "resmgr":                    false,
		module + "hostmgr":                   false,
		module + "hostmgr/local":             false,
		module + "placement":                 false,
		module + "federation":                false,
		module + "cluster":                   false,
	} {
		if got := allowedImport(path); got != want {
			t.Errorf("allowedImport(%q) = %v, want %v", path, got, want)
		}
	}
}
