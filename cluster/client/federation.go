package client

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Federation is a connection to the federation's API (`peloton serve
// federation`, or the one `peloton up` runs) with a client per service.
// It is dialled exactly as a cluster's Client is: same Options, same
// per-call deadline, same transport security.
type Federation struct {
	// Addr is the address the client dials (host:port or a gRPC target).
	Addr string
	// Conn is the connection every service client uses.
	Conn *grpc.ClientConn

	// Clusters is the registry of cluster stacks.
	Clusters pelotonv1.ClusterServiceClient
	// Pools is the global pool tree.
	Pools pelotonv1.FederatedPoolServiceClient
	// Jobs dispatches BATCH jobs to clusters.
	Jobs pelotonv1.FederatedJobServiceClient
	// Services runs SERVICE jobs across clusters.
	Services pelotonv1.FederatedServiceServiceClient
	// SLA is the global SLA evaluator cluster stacks ask.
	SLA pelotonv1.GlobalSlaServiceClient
}

// NewFederation prepares a client of the federation's API at addr. Like
// New, it fails only on a malformed address or options; an unreachable
// federation shows on the first call.
func NewFederation(addr string, o Options) (*Federation, error) {
	conn, err := dial(addr, o)
	if err != nil {
		return nil, err
	}
	return &Federation{
		Addr:     addr,
		Conn:     conn,
		Clusters: pelotonv1.NewClusterServiceClient(conn),
		Pools:    pelotonv1.NewFederatedPoolServiceClient(conn),
		Jobs:     pelotonv1.NewFederatedJobServiceClient(conn),
		Services: pelotonv1.NewFederatedServiceServiceClient(conn),
		SLA:      pelotonv1.NewGlobalSlaServiceClient(conn),
	}, nil
}

// Connected reports whether the connection is up now; see Client.Connected.
func (f *Federation) Connected() bool { return f.Conn.GetState() == connectivity.Ready }

// Close closes the connection; calls in flight fail.
func (f *Federation) Close() error { return f.Conn.Close() }
