package testutil

import (
	"regexp"
	"strings"
)

// RunsCodeOf returns a leak check (for LeakCheckMain) that reports a
// goroutine whose stack, above the line it was created from, has a frame
// of package pkg's own code: a function of pkg (its import path below the
// module, as "hostmgr" or "internal/store") in a non-test file of pkg's
// directory. A goroutine a test started in another package, or a test's
// own fake running in another package's goroutine, does not count: those
// packages' checks cover them.
func RunsCodeOf(pkg string) func(stack string) bool {
	fn := "/peloton/" + pkg + "."
	file := regexp.MustCompile(`/` + regexp.QuoteMeta(pkg) + `/[^/]+\.go:`)
	return func(stack string) bool {
		lines := strings.Split(stack, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "created by ") {
				break
			}
			if i+1 < len(lines) && strings.Contains(l, fn) {
				f := lines[i+1]
				if file.MatchString(f) && !strings.Contains(f, "_test.go:") {
					return true
				}
			}
		}
		return false
	}
}
