// Package layering holds one test: the table "Packages and their one-way
// imports" in docs/architecture.md is the layering of Peloton, and the
// test holds the code to it. Every package of the module with non-test Go
// files has a row; every import of a Peloton package is listed in the
// "may import" column of the importer's row; and every package named there
// is imported by the row's packages, so that the table draws no arrow the
// code no longer has.
//
// The table is read this way: in the package column and the "may import"
// column, a name in backticks is a package path relative to the module
// (`hostmgr`, `internal/store`); a path ending in "/..." stands for that
// package and every package below it. Everything else in those columns
// (third-party libraries, "generated API", the reasons) is for people and
// is not checked.
package layering

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the module path; tableHeading opens the section that holds the
// table.
const (
	module       = "github.com/peloton-sched/peloton"
	tableHeading = "## Packages and their one-way imports"
)

// buildTags are the tags under which the module's optional files build:
// the harnesses linked into a bench build of peloton. Their imports are
// arrows too.
const buildTags = "kubebench,mesosbench"

// row is one row of the table: the packages it describes, the patterns
// they may import, and its line in the document (for messages).
type row struct {
	line     int
	packages []string
	mayUse   []string
}

// backticked finds the names in backticks in a cell.
var backticked = regexp.MustCompile("`([^`]*)`")

// parseTable reads the table under tableHeading from a Markdown document.
func parseTable(r io.Reader) ([]row, error) {
	var rows []row
	in, header := false, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == tableHeading
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		if header < 2 { // the column names and the |---| line
			header++
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("architecture.md:%d: a row has %d cells, want 3 (package | owns | may import)", n, len(cells))
		}
		rw := row{line: n, packages: names(cells[0]), mayUse: names(cells[2])}
		if len(rw.packages) == 0 {
			return nil, fmt.Errorf("architecture.md:%d: no package in backticks in the first cell", n)
		}
		rows = append(rows, rw)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New("no table under " + tableHeading)
	}
	return rows, nil
}

// names lists the backticked names of a cell.
func names(cell string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// matches reports whether the package path p is what pattern names: the
// package itself or, for "x/...", x and everything below it.
func matches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

// check holds the packages (module-relative path to the module-relative
// paths of the Peloton packages it imports) to the table and returns what
// does not hold, one message each: an import the importer's row does not
// allow, a package without a row, a row or a may-import name that is no
// package, and an arrow of the table that no import draws (so that the
// table says no more than is true).
func check(rows []row, imports map[string][]string) []string {
	var problems []string
	byPkg := map[string]row{}
	for _, rw := range rows {
		for _, p := range rw.packages {
			if prev, dup := byPkg[p]; dup {
				problems = append(problems, fmt.Sprintf("architecture.md:%d: %s has a second row (the first is line %d)", rw.line, p, prev.line))
				continue
			}
			byPkg[p] = rw
			if _, ok := imports[p]; !ok {
				problems = append(problems, fmt.Sprintf("architecture.md:%d: %s has a row but is no package of the module (moved or removed?)", rw.line, p))
			}
		}
		for _, pat := range rw.mayUse {
			found, used := false, false
			for p, deps := range imports {
				if matches(pat, p) {
					found = true
				}
				if slices.Contains(rw.packages, p) && slices.ContainsFunc(deps, func(d string) bool { return matches(pat, d) }) {
					used = true
				}
			}
			switch {
			case !found:
				problems = append(problems, fmt.Sprintf("architecture.md:%d: %q in the may-import column names no package of the module", rw.line, pat))
			case !used:
				// An arrow the table draws that the code no longer has:
				// the row says more than is true.
				problems = append(problems, fmt.Sprintf("architecture.md:%d: %s → %s is in the table but not in the code; remove `%s` from that row's may-import column", rw.line, strings.Join(rw.packages, ", "), pat, pat))
			}
		}
	}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		deps := slices.Clone(imports[p])
		slices.Sort(deps)
		rw, ok := byPkg[p]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no row in the table; add this row (and say what it owns): %s", p, rowFor(p, deps)))
			continue
		}
		for _, d := range deps {
			if !slices.ContainsFunc(rw.mayUse, func(pat string) bool { return matches(pat, d) }) {
				problems = append(problems, fmt.Sprintf("%s → %s: not allowed by its row (architecture.md:%d); if the arrow is right, add `%s` to that row's may-import column", p, d, rw.line, d))
			}
		}
	}
	return problems
}

// rowFor is the table row a package p that imports deps needs, with its
// owns cell left for a person to write.
func rowFor(p string, deps []string) string {
	may := "nothing of Peloton"
	if len(deps) > 0 {
		may = "`" + strings.Join(deps, "`, `") + "`"
	}
	return fmt.Sprintf("| `%s` | … | %s |", p, may)
}

// listed is what `go list -json` says of one package, the fields used.
type listed struct {
	ImportPath string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
}

// modulePackages lists the module's packages with non-test Go files and,
// for each, the Peloton packages its non-test files import, all paths
// relative to the module.
func modulePackages(t *testing.T, root string) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list the module's imports: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-tags", buildTags, "-json=ImportPath,GoFiles,CgoFiles,Imports", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			continue // tests only: no arrow anyone else can follow
		}
		rel, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		var deps []string
		for _, imp := range p.Imports {
			if d, ok := relative(imp); ok {
				deps = append(deps, d)
			}
		}
		imports[rel] = deps
	}
	return imports
}

// relative cuts the module path off a package path of the module.
func relative(importPath string) (string, bool) {
	return strings.CutPrefix(importPath, module+"/")
}

// TestImportTable holds the module's packages to the table in
// docs/architecture.md.
func TestImportTable(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := parseTable(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(rows, modulePackages(t, root)) {
		t.Error(p)
	}
}

// synthetic is a small table in the document's own format.
const synthetic = `# Architecture

## Packages and their one-way imports

| package | owns | may import |
|---|---|---|
| ` + "`a`" + ` | the core | nothing of Peloton |
| ` + "`b`, `b/sub`" + ` | the middle | ` + "`a`" + `, grpc |
| ` + "`c`" + ` | the top | ` + "`a`, `b/...`" + ` (everything of b) |

## Next section

| not | the | table |
|---|---|---|
| x | y | z |
`

// TestCheck shows the checker catches each kind of drift on a synthetic
// table: a new arrow, a package without a row, a row without a package, a
// may-import name that is no package, and an arrow the code dropped.
func TestCheck(t *testing.T) {
	rows, err := parseTable(strings.NewReader(synthetic))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || !slices.Equal(rows[1].packages, []string{"b", "b/sub"}) || !slices.Equal(rows[2].mayUse, []string{"a", "b/..."}) {
		t.Fatalf("parsed %+v", rows)
	}
	layered := map[string][]string{"a": nil, "b": {"a"}, "b/sub": nil, "c": {"a", "b", "b/sub"}}
	if got := check(rows, layered); len(got) != 0 {
		t.Fatalf("a table that holds: %q", got)
	}
	for _, tc := range []struct {
		name    string
		imports map[string][]string
		want    string
	}{
		{"new arrow", map[string][]string{"a": {"c"}, "b": {"a"}, "b/sub": nil, "c": nil}, "a → c: not allowed by its row (architecture.md:7); if the arrow is right, add `c` to that row's may-import column"},
		{"arrow to a sibling", map[string][]string{"a": nil, "b": {"a", "b/sub"}, "b/sub": nil, "c": nil}, "b → b/sub: not allowed by its row (architecture.md:8); if the arrow is right, add `b/sub` to that row's may-import column"},
		{"package without a row", map[string][]string{"a": nil, "b": nil, "b/sub": nil, "c": nil, "d": {"a"}}, "d has no row in the table; add this row (and say what it owns): | `d` | … | `a` |"},
		{"leaf without a row", map[string][]string{"a": nil, "b": {"a"}, "b/sub": nil, "c": {"a", "b"}, "e": nil}, "e has no row in the table; add this row (and say what it owns): | `e` | … | nothing of Peloton |"},
		{"row without a package", map[string][]string{"a": nil, "b/sub": nil, "c": nil}, "architecture.md:8: b has a row but is no package of the module (moved or removed?)"},
		{"stale may-import", map[string][]string{"b": nil, "b/sub": nil, "c": nil}, `architecture.md:8: "a" in the may-import column names no package of the module`},
		{"arrow the code dropped", map[string][]string{"a": nil, "b": nil, "b/sub": nil, "c": {"a", "b"}}, "architecture.md:8: b, b/sub → a is in the table but not in the code; remove `a` from that row's may-import column"},
		{"pattern the code dropped", map[string][]string{"a": nil, "b": {"a"}, "b/sub": nil, "c": {"a"}}, "architecture.md:9: c → b/... is in the table but not in the code; remove `b/...` from that row's may-import column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := check(rows, tc.imports)
			if !slices.Contains(got, tc.want) {
				t.Errorf("check = %q, want it to contain %q", got, tc.want)
			}
		})
	}
}

// TestParseTableRejectsBadRows: a row that is not three cells or names no
// package is an error, not a row silently skipped.
func TestParseTableRejectsBadRows(t *testing.T) {
	for _, doc := range []string{
		tableHeading + "\n\n| package | owns | may import |\n|---|---|---|\n| `a` | two cells |\n",
		tableHeading + "\n\n| package | owns | may import |\n|---|---|---|\n| a | no backticks | nothing |\n",
		"## Another heading\n\n| package | owns | may import |\n|---|---|---|\n| `a` | x | y |\n",
	} {
		if rows, err := parseTable(strings.NewReader(doc)); err == nil {
			t.Errorf("parseTable(%q) = %+v, want an error", doc, rows)
		}
	}
}
