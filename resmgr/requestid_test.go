package resmgr

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestCreatePoolOnce: one create sent many times at once with one request
// id answers every time with the pool; the record outlives a restart; the
// id with another request is AlreadyExists; once the pool is deleted, a
// retry says so instead of creating it again.
func TestCreatePoolOnce(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	m, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	req := &pelotonv1.CreatePoolRequest{Path: "/team", Spec: &pelotonv1.PoolSpec{}, RequestId: "p-1"}
	r, err := requestid.New(requestid.Pool, req.RequestId, req)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			p, err := m.CreatePoolOnce(ctx, req.Path, req.Spec, r)
			if err == nil && p.GetPath() != "/team" {
				err = status.Errorf(codes.Internal, "answered with pool %q", p.GetPath())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}

	m2, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := m2.CreatePoolOnce(ctx, req.Path, req.Spec, r); err != nil || p.GetPath() != "/team" {
		t.Fatalf("after a restart: %v, %v", p, err)
	}
	other := &pelotonv1.CreatePoolRequest{Path: "/other", Spec: &pelotonv1.PoolSpec{}, RequestId: "p-1"}
	r2, _ := requestid.New(requestid.Pool, other.RequestId, other)
	if _, err := m2.CreatePoolOnce(ctx, other.Path, other.Spec, r2); status.Code(err) != codes.AlreadyExists ||
		!strings.HasPrefix(status.Convert(err).Message(), "requestId: ") {
		t.Fatalf("same id, other pool: %v", err)
	}
	if _, err := m2.GetPool("/other"); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused request created /other: %v", err)
	}
	if err := m2.DeletePool(ctx, "/team"); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.CreatePoolOnce(ctx, req.Path, req.Spec, r); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retry after the pool was deleted: %v; want FailedPrecondition", err)
	}
	if _, err := m2.GetPool("/team"); status.Code(err) != codes.NotFound {
		t.Fatalf("the retry created /team again: %v", err)
	}
}
