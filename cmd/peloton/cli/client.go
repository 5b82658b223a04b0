package cli

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// client holds one connection to the server and the API clients over it.
type client struct {
	addr    string
	timeout time.Duration
	conn    *grpc.ClientConn

	jobs    pelotonv1.JobServiceClient
	tasks   pelotonv1.TaskServiceClient
	pools   pelotonv1.PoolServiceClient
	hosts   pelotonv1.HostServiceClient
	updates pelotonv1.UpdateServiceClient
}

// dial prepares a connection to --server. grpc.NewClient does not connect;
// the first call does, and fails fast (it is not wait-for-ready) when
// nothing listens, so a missing server never blocks the CLI.
func (a *app) dial() (*client, error) {
	if a.timeout <= 0 {
		return nil, usageErrorf("invalid --timeout %s: must be > 0", a.timeout)
	}
	// Plaintext for now: the server does not serve TLS yet.
	conn, err := grpc.NewClient(a.server, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, usageErrorf("invalid --server %q: %v", a.server, err)
	}
	return &client{
		addr:    a.server,
		timeout: a.timeout,
		conn:    conn,
		jobs:    pelotonv1.NewJobServiceClient(conn),
		tasks:   pelotonv1.NewTaskServiceClient(conn),
		pools:   pelotonv1.NewPoolServiceClient(conn),
		hosts:   pelotonv1.NewHostServiceClient(conn),
		updates: pelotonv1.NewUpdateServiceClient(conn),
	}, nil
}

func (c *client) Close() error { return c.conn.Close() }

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
	e := &rpcError{st: st, addr: c.addr}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		e.unreachable = c.conn.GetState() != connectivity.Ready
	}
	return e
}

// call makes one unary call bounded by --timeout.
func call[Req, Resp any](ctx context.Context, c *client,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
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
