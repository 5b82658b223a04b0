// Package fsmtest holds what tests of fsm tables share: reading a table's
// reviewed rendering back from its golden file. Only tests import it.
package fsmtest

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// GoldenEdges reads the rendering of table name from a golden file: each
// from-state's name to its targets.
func GoldenEdges(t testing.TB, file, name string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, in := map[string][]string{}, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			in = line == "# "+name+" transitions"
			continue
		}
		if from, tos, ok := strings.Cut(line, " -> "); in && ok {
			out[from] = nil
			if tos != "(none)" {
				out[from] = strings.Fields(tos)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no %s table", file, name)
	}
	return out
}
