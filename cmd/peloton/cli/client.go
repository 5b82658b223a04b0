package cli

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
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
