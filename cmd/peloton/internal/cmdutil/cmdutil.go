// Package cmdutil holds what the peloton command and the slim
// peloton-hostagent command share: usage errors (exit code 2), the log
// level flag's parsing, positional argument checks and the usage text of
// server commands. It imports nothing of Peloton's, so the host agent's
// binary stays small.
package cmdutil

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of Peloton's commands.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// UsageError is a mistake in how a command was invoked: a bad flag value,
// a missing argument, an unknown command. It exits with code 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef makes a usage error.
func Usagef(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}

// IsUsage says whether err is, or wraps, a usage error.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// CodedError is a failure with an exit code of its own (for instance
// `job wait`'s: the state can no longer be reached, or the wait timed out).
type CodedError struct {
	Err  error
	Code int
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// ExitCode maps a command's outcome to its exit code.
func ExitCode(err error) int {
	var coded *CodedError
	switch {
	case err == nil:
		return ExitOK
	case IsUsage(err):
		return ExitUsage
	case errors.As(err, &coded):
		return coded.Code
	default:
		return ExitError
	}
}

// ParseLogLevel accepts exactly the four level names, in any case.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, Usagef("invalid --log-level %q: want debug, info, warn or error", s)
}

// ArgsNamed accepts exactly the named positional arguments and says which
// one is missing or extra.
func ArgsNamed(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return Usagef("missing %s", strings.Join(names[len(args):], " "))
		}
		if len(args) > len(names) {
			return Usagef("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}

// ServerUsage is the usage text of the commands that run a daemon: their
// own flags only. The client flags every other peloton command inherits
// from the root (--server, --output, --timeout) mean nothing to a server.
const ServerUsage = `Usage:
  {{.UseLine}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}
`
