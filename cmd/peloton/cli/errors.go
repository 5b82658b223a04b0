package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
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

// parseNonNegative reads s, the value of what name names (a flag as
// "--run", an argument as "instance"), as an integer of bits bits from 0
// up, with a usage error in words, not strconv's.
func parseNonNegative(name, s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, bits)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, usageErrorf("%s: %q is more than %d", name, s, uint64(1)<<bits-1)
	case err != nil:
		return 0, usageErrorf("%s: %q is not a non-negative integer", name, s)
	}
	return v, nil
}

// negativeArg is pflag's word for an argument such as -1, which it reads as
// shorthand flags.
var negativeArg = regexp.MustCompile(`^unknown shorthand flag: '\d' in (-\d+)$`)

// flagError says what is wrong with a flag's value in words: pflag's own
// message ends in the Go error of the parse (strconv.ParseUint: parsing
// "-1": invalid syntax), which is of no use to a user.
func flagError(err error) error {
	if m := negativeArg.FindStringSubmatch(err.Error()); m != nil {
		return usageErrorf("%q is not a non-negative integer", m[1])
	}
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return usageErrorf("%s", err.Error())
	}
	name, v := "--"+bad.GetFlag().Name, bad.GetValue()
	switch typ := bad.GetFlag().Value.Type(); typ {
	case "uint", "uint8", "uint16", "uint32", "uint64":
		bits := 64
		if n, err := strconv.Atoi(strings.TrimPrefix(typ, "uint")); err == nil {
			bits = n
		}
		_, err := parseNonNegative(name, v, bits)
		if err != nil {
			return err
		}
		return usageErrorf("%s: %q is not a non-negative integer", name, v)
	case "int", "int8", "int16", "int32", "int64":
		return usageErrorf("%s: %q is not an integer", name, v)
	case "float32", "float64":
		return usageErrorf("%s: %q is not a number", name, v)
	case "duration":
		return usageErrorf("%s: %q is not a duration (e.g. 30s, 5m, 1h)", name, v)
	case "bool":
		return usageErrorf("%s: %q is not true or false", name, v)
	}
	return usageErrorf("%s", err.Error())
}

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
