package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFormatGRPCError(t *testing.T) {
	st := status.Error(codes.InvalidArgument, "spec.instanceCount: must be > 0")
	for _, err := range []error{
		st,
		&rpcError{st: status.Convert(st), addr: "127.0.0.1:5391"},
		fmt.Errorf("create job: %w", st),
	} {
		if got, want := formatError(err), "InvalidArgument: spec.instanceCount: must be > 0"; got != want {
			t.Errorf("formatError(%v) = %q, want %q", err, got, want)
		}
		if got := exitCode(err); got != exitError {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, exitError)
		}
	}

	var stderr bytes.Buffer
	a := newApp(&bytes.Buffer{}, &stderr)
	err := a.report(&cobra.Command{Use: "peloton"}, st)
	if got, want := stderr.String(), "Error: InvalidArgument: spec.instanceCount: must be > 0\n"; got != want {
		t.Errorf("report printed %q, want %q", got, want)
	}
	// Reported once, and the code survives for callers of NewRootCommand.
	a.report(nil, err)
	if strings.Count(stderr.String(), "Error:") != 1 {
		t.Errorf("error printed twice: %q", stderr.String())
	}
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("status code lost: %v", err)
	}
}

func TestUnreachableMessage(t *testing.T) {
	e := &rpcError{st: status.New(codes.Unavailable, "connection refused"), addr: "10.0.0.1:5391", unreachable: true}
	got := formatError(e)
	for _, want := range []string{"10.0.0.1:5391", "peloton up", "--server", "PELOTON_SERVER"} {
		if !strings.Contains(got, want) {
			t.Errorf("unreachable message %q lacks %q", got, want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"version"}, exitOK, ""},
		{[]string{}, exitOK, ""},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus" for "peloton"`},
		{[]string{"jbo"}, exitUsage, `(did you mean "job"?)`},
		{[]string{"job", "bogus"}, exitUsage, `unknown command "bogus" for "peloton job"`},
		{[]string{"job", "get"}, exitUsage, "missing JOBID"},
		{[]string{"job", "get", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"job", "list", "--nope"}, exitUsage, "unknown flag: --nope"},
		{[]string{"job", "create"}, exitUsage, "missing --file"},
		{[]string{"job", "wait", "x"}, exitUsage, "missing --for"},
		{[]string{"job", "wait", "x", "--for", "done"}, exitUsage, `invalid --for: unknown job state "done"`},
		{[]string{"job", "list", "--state", "bogus"}, exitUsage, "invalid --state"},
		{[]string{"job", "restart", "x", "--instances", "0,x"}, exitUsage, `--instances: "x" is not a non-negative integer`},
		{[]string{"task", "get", "j", "-1"}, exitUsage, `"-1" is not a non-negative integer`},
		{[]string{"task", "get", "j", "one"}, exitUsage, `instance: "one" is not a non-negative integer`},
		{[]string{"job", "get", "x", "--timeout", "0s"}, exitUsage, "invalid --timeout"},
		{[]string{"up", "--memory-oversubscription", "0.5"}, exitUsage, "invalid --memory-oversubscription 0.5: must be between 1 and 4"},
		{[]string{"job", "create", "-f", "missing.yaml"}, exitError, "missing.yaml: open missing.yaml"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code {
			t.Errorf("peloton %q: exit %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
		}
		if tc.err != "" && !strings.Contains(r.stderr, tc.err) {
			t.Errorf("peloton %q: stderr %q lacks %q", tc.args, r.stderr, tc.err)
		}
		if tc.err != "" && strings.Count(r.stderr, "Error: ") != 1 {
			t.Errorf("peloton %q: stderr %q should hold exactly one error", tc.args, r.stderr)
		}
	}
}

func TestNewRootCommandReportsErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := NewRootCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"up", "--backend", "nope"})
	err := cmd.Execute()
	if err == nil || exitCode(err) != exitUsage {
		t.Fatalf("err = %v, want a usage error", err)
	}
	if !strings.HasPrefix(stderr.String(), `Error: invalid --backend "nope"`) {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, "", "version")
	if !strings.HasPrefix(r.stdout, "peloton "+Version+"\ngo1.") {
		t.Errorf("version = %q", r.stdout)
	}
	r = runCLI(t, "", "version", "-o", "json")
	if !strings.Contains(r.stdout, `"version": "`+Version+`"`) || !strings.Contains(r.stdout, `"goVersion": "go1.`) {
		t.Errorf("version -o json = %q", r.stdout)
	}
}
