package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/internal/testing/apitest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestPoolReservationBeyondCapacityWarns: a pool reserving more than the
// cluster's hosts hold is created, and the answer warns that the
// reservation waits for hosts; one within capacity has no warning.
func TestPoolReservationBeyondCapacityWarns(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st := apitest.Start(t, apitest.Options{Logger: log, Hosts: 1})
	conn, err := grpc.NewClient(st.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pools := pelotonv1.NewPoolServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var capacity float64
	testutil.Eventually(t, 10*time.Second, "the root's entitlement is the host's capacity", func() error {
		root, err := pools.GetPool(ctx, &pelotonv1.GetPoolRequest{Path: "/"})
		if err != nil {
			return err
		}
		if capacity = root.Pool.GetStatus().GetEntitlement().GetCpu(); capacity == 0 {
			return fmt.Errorf("no capacity yet")
		}
		return nil
	})

	resp, err := pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/big", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: capacity * 2}}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("reservation cpu %g exceeds the cluster's capacity %g; it will be honoured only when hosts join", capacity*2, capacity)
	if len(resp.Warnings) != 1 || resp.Warnings[0] != want || resp.Pool.GetPath() != "/big" {
		t.Errorf("warnings %q, want [%q]", resp.Warnings, want)
	}
	resp, err = pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/small", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}})
	if err != nil || len(resp.Warnings) != 0 {
		t.Errorf("a pool within capacity: %v, warnings %q", err, resp.GetWarnings())
	}
}
