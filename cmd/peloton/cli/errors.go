package cli

import (
	"errors"
	"fmt"
	"regexp"

	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
)

// Exit codes of the CLI.
const (
	exitOK    = cmdutil.ExitOK
	exitError = cmdutil.ExitError
	exitUsage = cmdutil.ExitUsage
)

var usageErrorf = cmdutil.Usagef

// asUsage marks err as a usage error unless it already is one.
func asUsage(err error) error {
	if err == nil || isUsage(err) {
		return err
	}
	return cmdutil.Usagef("%s", err.Error())
}

var isUsage = cmdutil.IsUsage

// reportedError wraps an error that has already been printed to stderr, so
// that the layers above do not print it again.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

func isReported(err error) bool {
	var r *reportedError
	return errors.As(err, &r)
}

// rpcError is a failed API call as users see it: "<Code>: <message>", or,
// when the server could not be reached at all, a message that names the
// address and says how to start one.
type rpcError struct {
	st   *status.Status
	addr string
	// from says where addr came from when the user did not type it
	// ("$PELOTON_SERVER", "server of context prod"), or "".
	from        string
	unreachable bool
}

func (e *rpcError) Error() string {
	if e.unreachable {
		addr := e.addr
		if e.from != "" && e.from != "--server" {
			addr += " (" + e.from + ")"
		}
		return fmt.Sprintf("cannot reach the peloton server at %s (%s: %s); is it running? "+
			"Start one with \"peloton up\", or point --server or $%s at it",
			addr, e.st.Code(), dialNoise.ReplaceAllString(e.st.Message(), "$1"), serverEnv)
	}
	return fmt.Sprintf("%s: %s", e.st.Code(), e.st.Message())
}

// dialNoise is grpc's wrapping around why a connection failed; the reason
// inside ("dial tcp ...: connection refused") is what users need.
var dialNoise = regexp.MustCompile(`^connection error: desc = "transport: Error while dialing: (.*)"$`)

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// formatError renders err for the "Error: ..." line: a gRPC status as
// "<Code>: <message>" (e.g. "InvalidArgument: spec.instanceCount: must be
// > 0"), anything else as its message.
func formatError(err error) string {
	var re *rpcError
	if errors.As(err, &re) {
		return re.Error()
	}
	var se *securityError
	if errors.As(err, &se) {
		return se.Error()
	}
	// Not status.FromError: for a wrapped status it replaces the message
	// with the wrapper's text, which repeats "rpc error: code = ...".
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		if st := gs.GRPCStatus(); st != nil {
			return fmt.Sprintf("%s: %s", st.Code(), st.Message())
		}
	}
	return err.Error()
}

// exitCode maps the outcome of a command to the process exit code.
func exitCode(err error) int { return cmdutil.ExitCode(err) }
