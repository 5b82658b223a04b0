package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/requestid"
)

// client is the cluster API client (cluster/client) the CLI's commands use,
// with the CLI's way of reporting errors.
type client struct {
	*pclient.Client
	timeout time.Duration
}

// dial prepares a connection to --server; every unary call is bounded by
// --timeout. It does not connect: the first call does, and fails fast when
// nothing listens, so a missing server never blocks the CLI.
func (a *app) dial() (*client, error) {
	if a.timeout <= 0 {
		return nil, usageErrorf("invalid --timeout %s: must be > 0", a.timeout)
	}
	// Plaintext for now: the server does not serve TLS yet.
	c, err := pclient.New(a.server, pclient.Options{Timeout: a.timeout})
	if err != nil {
		return nil, usageErrorf("invalid --server %q: %v", a.server, err)
	}
	return &client{Client: c, timeout: a.timeout}, nil
}

// wrap turns a failed call into an rpcError. Unavailable or
// DeadlineExceeded while the connection is not up means the server could
// not be reached, which deserves a message of its own; once connected, the
// same codes come from the server and are shown as they are.
func (c *client) wrap(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &rpcError{st: st, addr: c.Addr}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		e.unreachable = !c.Connected()
	}
	return e
}

// call makes one unary call (bounded by --timeout, see dial).
func call[Req, Resp any](ctx context.Context, c *client,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	resp, err := fn(ctx, req)
	if err != nil {
		var zero Resp
		return zero, c.wrap(err)
	}
	return resp, nil
}

// withClient dials --server, runs fn with the client, and closes it.
func (a *app) withClient(fn func(c *client) error) error {
	c, err := a.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// createAttempts is how many times the CLI sends one create whose answer
// did not arrive. Every attempt carries the same request id, so the server
// creates the object at most once and a late retry gets the first answer.
const createAttempts = 3

// requestIDFlag registers --request-id on a create command.
func requestIDFlag(cmd *cobra.Command, id *string) {
	cmd.Flags().StringVar(id, "request-id", "", "id that makes the create safe to retry: the server creates at most one object per id "+
		"(kept 24h) and answers a repeat with the first result; 1-128 of A-Z a-z 0-9 . _ - (default: a fresh random id)")
}

// requestID is the id for one invocation's create: the --request-id given
// (checked here, so a bad one is a usage error), or a fresh one.
func requestID(flag string) (string, error) {
	if flag == "" {
		return pclient.NewRequestID(), nil
	}
	if err := requestid.Check(flag); err != nil {
		return "", usageErrorf("invalid --request-id %q: %v", flag, err)
	}
	return flag, nil
}

// create makes one create call (req carries its request id), sending it
// again when the server could not be reached or its answer was lost
// (Unavailable, DeadlineExceeded), a bounded number of times.
func create[Req, Resp any](ctx context.Context, c *client,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	for attempt := 1; ; attempt++ {
		resp, err := fn(ctx, req)
		if err == nil {
			return resp, nil
		}
		code := status.Code(err)
		if attempt == createAttempts || (code != codes.Unavailable && code != codes.DeadlineExceeded) {
			var zero Resp
			return zero, c.wrap(err)
		}
		select {
		case <-ctx.Done():
			var zero Resp
			return zero, c.wrap(err)
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}
