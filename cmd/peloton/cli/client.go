package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/requestid"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// client is the cluster API client (cluster/client) the CLI's commands use,
// with the CLI's way of reporting errors.
type client struct {
	*pclient.Client
	timeout time.Duration
	// cluster is the federation's record of the cluster --cluster named,
	// nil when the client dials --server.
	cluster *pelotonv1.Cluster
	// sec explains failures caused by the connection's security.
	sec *connSettings
}

// caller is a client whose failed calls call and create report: the
// cluster's (client) or the federation's (fedClient).
type caller interface {
	wrap(error) error
}

// dial prepares a connection to --server, or, with --cluster, to that
// cluster's endpoint as the federation knows it, each possibly set by the
// config file's context (see conn); every unary call is bounded by
// --timeout. It does not connect to the cluster: the first call does, and
// fails fast when nothing listens, so a missing server never blocks the
// CLI.
func (a *app) dial() (*client, error) {
	if a.timeout <= 0 {
		return nil, usageErrorf("invalid --timeout %s: must be > 0", a.timeout)
	}
	s, err := a.conn()
	if err != nil {
		return nil, err
	}
	addr, flag := s.server.val, s.server.name("--server")
	var rec *pelotonv1.Cluster
	if s.cluster.val != "" {
		if s.cluster.from == "--cluster" && s.server.from == "--server" {
			return nil, usageErrorf("--cluster and --server both name where to send the command; give one")
		}
		if rec, err = a.resolveCluster(s); err != nil {
			return nil, err
		}
		addr, flag = rec.GetEndpoint(), "endpoint of cluster "+rec.GetName()
	}
	opts, err := s.options(a.timeout)
	if err != nil {
		return nil, err
	}
	c, err := pclient.New(addr, opts)
	if err != nil {
		return nil, s.dialError(flag, addr, err)
	}
	return &client{Client: c, timeout: a.timeout, cluster: rec, sec: s}, nil
}

// resolveCluster asks the federation (--federation) for the cluster named
// by --cluster (or the context's cluster). Every command dials once
// (withClient), so an invocation asks once.
func (a *app) resolveCluster(s *connSettings) (*pelotonv1.Cluster, error) {
	name, flag := s.cluster.val, s.cluster.name("--cluster")
	if err := cluster.ValidateClusterName(name); err != nil {
		return nil, usageErrorf("invalid %s %q: must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", flag, name)
	}
	f, err := a.dialFederation(false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	resp, err := f.Clusters.GetCluster(context.Background(), &pelotonv1.GetClusterRequest{Name: name})
	if err != nil {
		st := status.Convert(err)
		if e := s.explain(st, f.Connected(), "the federation at "+f.Addr); e != nil {
			return nil, e
		}
		switch {
		case st.Code() == codes.NotFound:
			// The federation's own words: "cluster b is not registered".
			return nil, errors.New(st.Message())
		case f.unreachable(st):
			return nil, &unreachableError{what: "the federation", addr: f.Addr, purpose: " to look up " + flag + " " + name,
				st: st, hint: fedHint}
		}
		return nil, fmt.Errorf("look up %s %s in the federation at %s: %s: %s", flag, name, f.Addr, st.Code(), st.Message())
	}
	rec := resp.GetCluster()
	if rec.GetEndpoint() == "" {
		return nil, fmt.Errorf("cluster %s has no endpoint in the federation at %s", name, f.Addr)
	}
	return rec, nil
}

// wrap turns a failed call into an rpcError. Unavailable or
// DeadlineExceeded while the connection is not up means the server could
// not be reached, which deserves a message of its own; once connected, the
// same codes come from the server and are shown as they are. A cluster
// reached through --cluster is named with what the federation last saw of
// it, since --server has nothing to do with it.
func (c *client) wrap(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	what := "the peloton server at " + c.Addr
	if c.cluster != nil {
		what = "cluster " + c.cluster.GetName() + " at " + c.Addr
	}
	if e := c.sec.explain(st, c.Connected(), what); e != nil {
		return e
	}
	e := &rpcError{st: st, addr: c.Addr}
	if c.sec != nil && c.cluster == nil {
		e.from = c.sec.server.from
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		e.unreachable = !c.Connected()
	}
	if e.unreachable && c.cluster != nil {
		hint := "the federation sees it " + c.cluster.GetState().String()
		if m := c.cluster.GetMessage(); m != "" {
			hint += " (" + m + ")"
		}
		return &unreachableError{what: "cluster " + c.cluster.GetName(), addr: c.Addr, st: st, hint: hint}
	}
	return e
}

// call makes one unary call (bounded by --timeout, see dial).
func call[Req, Resp any](ctx context.Context, c caller,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	resp, err := fn(ctx, req)
	if err != nil {
		var zero Resp
		return zero, c.wrap(err)
	}
	return resp, nil
}

// withClient dials --server (or the endpoint of --cluster), runs fn with
// the client, and closes it.
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
func create[Req, Resp any](ctx context.Context, c caller,
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
