package mesostest

import (
	"path"
	"strconv"
	"strings"
	"time"
)

// behaviour is what a task's command does on a test agent.
type behaviour struct {
	runFor time.Duration
	exit   int
}

// behave reads argv in the small language the project's simulated hosts
// understand: "sleep S" (seconds, with an optional s/m/h suffix) runs S
// and exits 0, "true" exits 0, "false" exits 1, "exit N" exits N; a shell
// wrapper (sh -c "...") is unwrapped first. Any other command exits 0 at
// once: a test agent runs no real programs.
func behave(argv []string) behaviour {
	if len(argv) >= 3 && (path.Base(argv[0]) == "sh" || path.Base(argv[0]) == "bash") && argv[1] == "-c" {
		argv = strings.Fields(argv[2])
	}
	if len(argv) == 0 {
		return behaviour{}
	}
	switch path.Base(argv[0]) {
	case "false":
		return behaviour{exit: 1}
	case "exit":
		if len(argv) == 2 {
			if n, err := strconv.Atoi(argv[1]); err == nil && n >= 0 && n < 256 {
				return behaviour{exit: n}
			}
		}
	case "sleep":
		if len(argv) == 2 {
			s, unit := argv[1], time.Second
			switch {
			case strings.HasSuffix(s, "s"):
				s = strings.TrimSuffix(s, "s")
			case strings.HasSuffix(s, "m"):
				s, unit = strings.TrimSuffix(s, "m"), time.Minute
			case strings.HasSuffix(s, "h"):
				s, unit = strings.TrimSuffix(s, "h"), time.Hour
			}
			if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f < 1e6 {
				return behaviour{runFor: time.Duration(f * float64(unit))}
			}
		}
	}
	return behaviour{}
}
