package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// slowJobs answers GetJob only when the call's context ends, and reports
// whether the call arrived with a deadline.
type slowJobs struct {
	pelotonv1.UnimplementedJobServiceServer
	deadlines chan time.Duration
}

func (s *slowJobs) GetJob(ctx context.Context, _ *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	d, ok := ctx.Deadline()
	if !ok {
		s.deadlines <- -1
		return &pelotonv1.GetJobResponse{}, nil
	}
	s.deadlines <- time.Until(d)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func serve(t *testing.T) (string, *slowJobs) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &slowJobs{deadlines: make(chan time.Duration, 4)}
	g := grpc.NewServer()
	pelotonv1.RegisterJobServiceServer(g, impl)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), impl
}

func TestTimeoutBoundsEveryUnaryCall(t *testing.T) {
	addr, impl := serve(t)
	c, err := client.New(addr, client.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("GetJob with no deadline of its own: %v, want DeadlineExceeded from Options.Timeout", err)
	}
	if d := <-impl.deadlines; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("server saw deadline in %s, want within the 300ms timeout", d)
	}

	// A caller's earlier deadline wins over the option.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _ = c.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "j"})
	if d := <-impl.deadlines; d > 100*time.Millisecond {
		t.Fatalf("server saw deadline in %s, later than the caller's own", d)
	}
}

func TestNoTimeoutAddsNoDeadline(t *testing.T) {
	addr, impl := serve(t)
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"}); err != nil {
		t.Fatal(err)
	}
	if d := <-impl.deadlines; d != -1 {
		t.Fatalf("server saw a deadline (%s); none was asked for", d)
	}
	// gRPC hands the call its ready connection before it publishes the
	// channel's READY state, so for a moment after the first call the
	// state may still read CONNECTING.
	testutil.Eventually(t, 10*time.Second, "Connected() after a successful call", func() error {
		if !c.Connected() {
			return errors.New("Connected() is false")
		}
		return nil
	})
}

func TestUnreachableFailsFast(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	c, err := client.New(addr, client.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"})
	if status.Code(err) != codes.Unavailable || c.Connected() {
		t.Fatalf("GetJob against nothing: %v (connected %v), want Unavailable and not connected", err, c.Connected())
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := client.New("127.0.0.1:1", client.Options{Timeout: -time.Second}); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
}

func TestNewRequestIDIsFreshAndValid(t *testing.T) {
	a, b := client.NewRequestID(), client.NewRequestID()
	if a == b || len(a) != 32 {
		t.Fatalf("NewRequestID: %q, %q", a, b)
	}
}
