package fed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
)

// federation stands for the federation's evaluator: it grants everything
// while up, and answers Unavailable, as a dead connection does, while
// down. The real one is exercised by federation's TestGlobalSLA and the
// end-to-end tests; this one lets the router's own choices be stated.
type federation struct {
	mu      sync.Mutex
	down    bool
	asked   int
	reports int
	// held is the held instances of each job's last report.
	held map[string][]uint32
}

func (f *federation) heldOf(job string) ([]uint32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.held[job]
	return h, ok
}

func (f *federation) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return status.Error(codes.Unavailable, "connection refused")
	}
	return nil
}

func (f *federation) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *federation) RequestDisruption(_ context.Context, in *pelotonv1.RequestDisruptionRequest, _ ...grpc.CallOption) (*pelotonv1.RequestDisruptionResponse, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.asked++
	f.mu.Unlock()
	return &pelotonv1.RequestDisruptionResponse{GrantId: "g1", Instances: in.Instances, Expires: timestamppb.New(time.Now().Add(time.Minute))}, nil
}

func (f *federation) ReleaseDisruption(context.Context, *pelotonv1.ReleaseDisruptionRequest, ...grpc.CallOption) (*pelotonv1.ReleaseDisruptionResponse, error) {
	return &pelotonv1.ReleaseDisruptionResponse{}, f.err()
}

func (f *federation) RenewDisruption(context.Context, *pelotonv1.RenewDisruptionRequest, ...grpc.CallOption) (*pelotonv1.RenewDisruptionResponse, error) {
	return &pelotonv1.RenewDisruptionResponse{}, f.err()
}

func (f *federation) ReportUnavailable(_ context.Context, in *pelotonv1.ReportUnavailableRequest, _ ...grpc.CallOption) (*pelotonv1.ReportUnavailableResponse, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.reports++
	if f.held == nil {
		f.held = map[string][]uint32{}
	}
	f.held[in.JobId] = in.Held
	f.mu.Unlock()
	return &pelotonv1.ReportUnavailableResponse{}, nil
}

var _ pelotonv1.GlobalSlaServiceClient = (*federation)(nil)

// TestFallbackOnTheShare: a federated part's disruptions go to the
// federation while it answers; while it cannot be reached they are
// decided on the part's own budget (its share, which may be 0), and the
// router says so for that job alone, until a call gets through again.
func TestFallbackOnTheShare(t *testing.T) {
	ctx := context.Background()
	fed := &federation{}
	r := New(sla.NewLocal(nil), fed, "a", nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.SetJob(ctx, sla.JobSLA{JobID: "part0", InstanceCount: 4, MaximumUnavailableInstances: 0, Group: "svc"}))
	must(r.SetJob(ctx, sla.JobSLA{JobID: "part1", InstanceCount: 4, MaximumUnavailableInstances: 1, Group: "svc"}))
	must(r.SetJob(ctx, sla.JobSLA{JobID: "own", InstanceCount: 4, MaximumUnavailableInstances: 1}))
	req := func(job string, inst uint32) (sla.Grant, error) {
		return r.Request(ctx, sla.Request{JobID: job, Instances: []uint32{inst}, Holder: "update/u", TTL: time.Minute})
	}

	// Up: the federation decides for a part, whatever its share.
	g, err := req("part0", 0)
	if err != nil || g.ID != "fed:g1" || r.InFallback("part0") {
		t.Fatalf("with the federation up: grant %+v, err %v, fallback %v", g, err, r.InFallback("part0"))
	}
	must(r.Release(ctx, g.ID))

	// Down: a share of 0 refuses, a share of 1 grants one locally; only
	// the federated jobs say they fall back.
	fed.setDown(true)
	var refused *sla.RefusedError
	if _, err := req("part0", 1); !errors.As(err, &refused) {
		t.Fatalf("a part with a share of 0, the federation down: %v", err)
	}
	if !r.InFallback("part0") || !r.InFallback("part1") || r.InFallback("own") {
		t.Errorf("fallback: part0 %v part1 %v own %v; want the parts only", r.InFallback("part0"), r.InFallback("part1"), r.InFallback("own"))
	}
	g, err = req("part1", 0)
	if err != nil || g.ID == "" || g.ID[:4] == "fed:" {
		t.Fatalf("a part with a share of 1, the federation down: grant %+v, err %v", g, err)
	}
	if _, err := req("part1", 2); !errors.As(err, &refused) {
		t.Errorf("a second instance over the share of 1: %v", err)
	}
	if _, err := req("own", 0); err != nil {
		t.Errorf("a job of the cluster's own, the federation down: %v", err)
	}
	must(r.Release(ctx, g.ID))

	// Falling back, decisions do not wait on the federation: only one
	// call per probe interval goes to it.
	r.probeEvery = time.Hour
	fed.setDown(false)
	g, err = req("part1", 0)
	if err != nil || g.ID[:4] == "fed:" || !r.InFallback("part1") {
		t.Fatalf("between probes: grant %+v, err %v; want a local grant", g, err)
	}
	must(r.Release(ctx, g.ID))
	r.probeEvery = 0
	if g, err := req("part1", 0); err != nil || g.ID != "fed:g1" || r.InFallback("part1") {
		t.Fatalf("a probe to a federation that is back: grant %+v, err %v", g, err)
	}

	// A report that gets through ends the fallback, with no disruption
	// asked for; one that does not starts it again.
	fed.setDown(false)
	must(r.ReportAvailability(ctx, "part1", nil))
	if r.InFallback("part1") {
		t.Error("still falling back after a report the federation answered")
	}
	fed.setDown(true)
	if err := r.ReportAvailability(ctx, "part1", []uint32{3}); err == nil {
		t.Error("a report the federation did not get is an error, so that it is sent again")
	}
	if !r.InFallback("part1") {
		t.Error("not falling back after a report that did not get through")
	}
	// A grant of the federation, with the federation away: released as
	// far as the cluster goes (the federation lets it run out), and not
	// renewable (its holder asks again, here).
	r.probeEvery = time.Hour
	if err := r.Release(ctx, "fed:g1"); err != nil {
		t.Errorf("releasing a federation's grant with the federation away: %v", err)
	}
	if err := r.Renew(ctx, "fed:g1", time.Minute); !errors.Is(err, sla.ErrUnknownGrant) {
		t.Errorf("renewing a federation's grant with the federation away: %v; want it lost", err)
	}
	// A removed job is no part of anything any more.
	must(r.RemoveJob(ctx, "part1"))
	if r.InFallback("part1") {
		t.Error("a removed job falls back")
	}
}

// TestGrantsOnTheShareReportedWhenTheFederationReturns: a disruption this
// cluster granted on its own share while the federation was away is in
// the first report the federation gets when it answers again (sent at
// once, with no report of jobmgr's to wait for), and in every report while
// the grant lasts; once released, reports leave it out.
func TestGrantsOnTheShareReportedWhenTheFederationReturns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fed := &federation{}
	r := New(sla.NewLocal(nil), fed, "a", nil)
	r.probeEvery = 0
	if err := r.SetJob(ctx, sla.JobSLA{JobID: "part", InstanceCount: 4, MaximumUnavailableInstances: 1, Group: "svc"}); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	fed.setDown(true)
	g, err := r.Request(ctx, sla.Request{JobID: "part", Instances: []uint32{2}, Holder: "drain/h", TTL: time.Minute})
	if err != nil || strings.HasPrefix(g.ID, grantPrefix) {
		t.Fatalf("a grant with the federation away: %+v, %v; want a local one", g, err)
	}
	// The federation is back; the next call that reaches it (here a
	// decision for another instance) ends the fallback.
	fed.setDown(false)
	if g2, err := r.Request(ctx, sla.Request{JobID: "part", Instances: []uint32{3}, Holder: "update/u", TTL: time.Minute}); err != nil || !strings.HasPrefix(g2.ID, grantPrefix) {
		t.Fatalf("a grant with the federation back: %+v, %v", g2, err)
	}
	waitHeld := func(want string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, "the federation told "+want+" held", func() error {
			if h, ok := fed.heldOf("part"); !ok || fmt.Sprint(h) != want {
				return fmt.Errorf("told %v held (reported: %v)", h, ok)
			}
			return nil
		})
	}
	waitHeld("[2]")
	if err := r.ReportAvailability(ctx, "part", []uint32{1}); err != nil {
		t.Fatal(err)
	}
	waitHeld("[2]")
	if err := r.Release(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.ReportAvailability(ctx, "part", nil); err != nil {
		t.Fatal(err)
	}
	waitHeld("[]")
}
