package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The center of the tree stays readable: no function of the components or
// the CLI (with every package below them) over maxFuncLines lines, and no
// type of a component's own package with more than maxMethods methods.
// Test files and generated code are not checked. The backends' Backend
// types (the methods of hostmgr.Backend and the optional interfaces each
// implements) and the CLI's app (a method per command) are larger, and
// are not held to the method count.
const (
	maxFuncLines = 120
	maxMethods   = 50
)

var sizeChecked = []string{"jobmgr", "hostmgr", "resmgr", "placement", "federation", "sla", "cmd/peloton/cli"}

// methodsChecked are the packages whose types are held to maxMethods.
var methodsChecked = map[string]bool{"jobmgr": true, "hostmgr": true, "resmgr": true, "placement": true, "federation": true, "sla": true}

func TestFunctionsAndTypesStaySmall(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, dir := range sizeChecked {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			long, big, err := sizesOf(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, f := range long {
				t.Errorf("%s: %s is %d lines, over %d: split it into named steps", rel, f.name, f.n, maxFuncLines)
			}
			for _, ty := range big {
				if !methodsChecked[filepath.ToSlash(rel)] {
					continue
				}
				t.Errorf("%s: %s has %d methods, over %d: split it into parts", rel, ty.name, ty.n, maxMethods)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sized is a function or a type, and its size (lines or methods).
type sized struct {
	name string
	n    int
}

// sizesOf parses the non-test, hand-written Go files of one directory and
// returns its functions over maxFuncLines and its types over maxMethods.
func sizesOf(dir string) (long, big []sized, err error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	methods := map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.Contains(name, ".pb.") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		if ast.IsGenerated(f) {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			label := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) > 0 {
				recv := receiverName(fd.Recv.List[0].Type)
				methods[recv]++
				label = recv + "." + label
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				long = append(long, sized{fmt.Sprintf("%s (%s:%d)", label, name, fset.Position(fd.Pos()).Line), n})
			}
		}
	}
	for name, n := range methods {
		if n > maxMethods {
			big = append(big, sized{name, n})
		}
	}
	sort.Slice(long, func(a, b int) bool { return long[a].name < long[b].name })
	sort.Slice(big, func(a, b int) bool { return big[a].name < big[b].name })
	return long, big, nil
}

// receiverName is the type a method's receiver names, without * or type
// parameters.
func receiverName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverName(x.X)
	case *ast.IndexExpr:
		return receiverName(x.X)
	case *ast.IndexListExpr:
		return receiverName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}

// The check finds what it is for: a function one line too long and a type
// with one method too many.
func TestSizesOfFindsTheLongAndTheBig(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("package p\n\ntype T struct{}\n\nfunc long() {\n")
	for range maxFuncLines - 1 {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n\nfunc justRight() {\n")
	for range maxFuncLines - 2 {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n")
	for i := range maxMethods + 1 {
		fmt.Fprintf(&b, "func (*T) m%d() {}\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	long, big, err := sizesOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 1 || !strings.HasPrefix(long[0].name, "long ") || long[0].n != maxFuncLines+1 {
		t.Errorf("long functions %v; want long, %d lines", long, maxFuncLines+1)
	}
	if len(big) != 1 || big[0].name != "T" || big[0].n != maxMethods+1 {
		t.Errorf("big types %v; want T with %d methods", big, maxMethods+1)
	}
}
