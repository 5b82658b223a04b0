package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster/client"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// slowClusters answers GetCluster only when the call's context ends, and
// reports the deadline the call arrived with.
type slowClusters struct {
	pelotonv1.UnimplementedClusterServiceServer
	deadlines chan time.Duration
}

func (s *slowClusters) GetCluster(ctx context.Context, _ *pelotonv1.GetClusterRequest) (*pelotonv1.GetClusterResponse, error) {
	d, ok := ctx.Deadline()
	if !ok {
		s.deadlines <- -1
		return &pelotonv1.GetClusterResponse{}, nil
	}
	s.deadlines <- time.Until(d)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestFederationDialsLikeAClient: the federation's client gets the same
// per-call deadline, fails fast on nothing listening, and refuses the same
// bad options as a cluster's.
func TestFederationDialsLikeAClient(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &slowClusters{deadlines: make(chan time.Duration, 2)}
	g := grpc.NewServer()
	pelotonv1.RegisterClusterServiceServer(g, impl)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	f, err := client.NewFederation(lis.Addr().String(), client.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Clusters.GetCluster(context.Background(), &pelotonv1.GetClusterRequest{Name: "a"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("GetCluster with no deadline of its own: %v, want DeadlineExceeded from Options.Timeout", err)
	}
	if d := <-impl.deadlines; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("server saw deadline in %s, want within the 300ms timeout", d)
	}
	if !f.Connected() || f.Addr != lis.Addr().String() {
		t.Fatalf("Connected() %v, Addr %q after a call that reached the server", f.Connected(), f.Addr)
	}

	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := gone.Addr().String()
	gone.Close()
	d, err := client.NewFederation(addr, client.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.Pools.ListFederatedPools(context.Background(), &pelotonv1.ListFederatedPoolsRequest{})
	if status.Code(err) != codes.Unavailable || d.Connected() {
		t.Fatalf("ListFederatedPools against nothing: %v (connected %v), want Unavailable and not connected", err, d.Connected())
	}

	if _, err := client.NewFederation("127.0.0.1:1", client.Options{Timeout: -time.Second}); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
}
