// Command gen writes Peloton's Grafana dashboards into deploy/grafana
// (its working directory under go generate, or the one given as its only
// argument).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/peloton-sched/peloton/deploy/grafana"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, err := grafana.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
