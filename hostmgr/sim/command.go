package sim

import (
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// maxSleep caps a simulated sleep so that huge arguments ("sleep 1e300")
// cannot overflow a time.Duration; a century is forever for a test.
const maxSleep = 100 * 365 * 24 * time.Hour

// outcome is what a simulated command does: run for Duration, then end in
// State with ExitCode. Only a sleep has a non-zero Duration, and it always
// succeeds.
type outcome struct {
	Duration time.Duration
	State    pelotonv1.TaskState
	ExitCode int32
}

var (
	instantSuccess = outcome{State: pelotonv1.TaskState_SUCCEEDED}
	instantFailure = outcome{State: pelotonv1.TaskState_FAILED, ExitCode: 1}
)

// interpret reads a command in the tiny language the simulator understands.
// The command is the argv, unless it is a shell wrapper (sh -c X, also as
// /bin/sh or bash), in which case X is split on whitespace and read instead.
// The first word is matched by its base name, so /bin/sleep is sleep:
//
//	sleep S   runs S seconds (decimal, optionally suffixed s, m, h or d as
//	          GNU sleep allows), then succeeds
//	true      succeeds at once
//	false     fails at once with exit code 1
//	exit N    ends at once with exit code N (succeeds when N is 0)
//
// Anything else, including a malformed form of the above, succeeds at once:
// the simulator runs real job specs whose commands it cannot execute, and a
// scale test wants them to finish rather than fail.
func interpret(argv []string) outcome {
	if len(argv) >= 3 && argv[1] == "-c" {
		switch path.Base(argv[0]) {
		case "sh", "bash":
			argv = strings.Fields(argv[2])
		}
	}
	if len(argv) == 0 {
		return instantSuccess
	}
	switch path.Base(argv[0]) {
	case "sleep":
		if len(argv) == 2 {
			if d, ok := parseSleep(argv[1]); ok {
				return outcome{Duration: d, State: pelotonv1.TaskState_SUCCEEDED}
			}
		}
	case "true":
		return instantSuccess
	case "false":
		return instantFailure
	case "exit":
		if len(argv) == 2 {
			if n, err := strconv.ParseInt(argv[1], 10, 32); err == nil {
				if n == 0 {
					return instantSuccess
				}
				return outcome{State: pelotonv1.TaskState_FAILED, ExitCode: int32(n)}
			}
		}
	}
	return instantSuccess
}

// parseSleep parses a sleep argument: a non-negative decimal number of
// seconds with an optional unit suffix.
func parseSleep(s string) (time.Duration, bool) {
	unit := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 's':
			s = s[:n-1]
		case 'm':
			unit, s = 60, s[:n-1]
		case 'h':
			unit, s = 3600, s[:n-1]
		case 'd':
			unit, s = 86400, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	secs := f * unit
	if secs >= maxSleep.Seconds() {
		return maxSleep, true
	}
	return time.Duration(secs * float64(time.Second)), true
}
