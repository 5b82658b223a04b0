package e2e

import (
	"context"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func okSpec() *pelotonv1.JobSpec {
	return &pelotonv1.JobSpec{Name: "ok", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"/bin/true"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 16}}}
}

func expectStatus(t *testing.T, err error, code codes.Code, prefix string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, prefix) {
		t.Fatalf("message %q does not start with %q", msg, prefix)
	}
}

// TestBadInput: every kind of bad request gets a clear status naming the
// field, and leaves nothing stored.
func TestBadInput(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 2, hostMem: 2048})
	ctx := ctxT(t)
	mod := func(fn func(*pelotonv1.JobSpec)) *pelotonv1.JobSpec { sp := okSpec(); fn(sp); return sp }

	// A non-leaf pool and a pool tree to aim at.
	if _, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/org", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2, MemoryMb: 1024}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/org/team", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1.5}}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		spec   *pelotonv1.JobSpec
		code   codes.Code
		prefix string
	}{
		{"missing command", mod(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Command = nil }), codes.InvalidArgument, "spec.defaultSpec.command:"},
		{"zero instances", mod(func(s *pelotonv1.JobSpec) { s.InstanceCount = 0 }), codes.InvalidArgument, "spec.instanceCount:"},
		{"too many instances", mod(func(s *pelotonv1.JobSpec) { s.InstanceCount = 100001 }), codes.InvalidArgument, "spec.instanceCount:"},
		{"negative memory", mod(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Resources.MemoryMb = -1 }), codes.InvalidArgument, "spec.defaultSpec.resources.memoryMb:"},
		{"bigger than any host", mod(func(s *pelotonv1.JobSpec) { s.DefaultSpec.Resources.Cpu = 3 }), codes.InvalidArgument, "spec.defaultSpec.resources.cpu:"},
		{"unknown pool", mod(func(s *pelotonv1.JobSpec) { s.Pool = "/nope" }), codes.NotFound, "spec.pool:"},
		{"non-leaf pool", mod(func(s *pelotonv1.JobSpec) { s.Pool = "/org" }), codes.FailedPrecondition, "spec.pool:"},
		{"bad pool path", mod(func(s *pelotonv1.JobSpec) { s.Pool = "/Bad Name" }), codes.InvalidArgument, "spec.pool:"},
		{"no type", mod(func(s *pelotonv1.JobSpec) { s.Type = 0 }), codes.InvalidArgument, "spec.type:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: tc.spec})
			expectStatus(t, err, tc.code, tc.prefix)
		})
	}

	t.Run("oversized request", func(t *testing.T) {
		sp := okSpec()
		sp.Description = strings.Repeat("x", 17<<20)
		_, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sp}, grpc.MaxCallSendMsgSize(64<<20))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("got %v, want ResourceExhausted", err)
		}
	})
	t.Run("REST unknown field", func(t *testing.T) {
		code, raw := s.rest("POST", "/v1/jobs", `{"name":"x","type":"BATCH","pool":"/default","instancecount":1}`, nil)
		if code != 400 || !strings.Contains(raw, "instancecount") {
			t.Fatalf("got %d %s, want 400 naming the field", code, raw)
		}
	})
	t.Run("REST bad enum", func(t *testing.T) {
		code, raw := s.rest("POST", "/v1/jobs", `{"name":"x","type":"BATCHY","pool":"/default","instanceCount":1}`, nil)
		if code != 400 || !strings.Contains(raw, "type") {
			t.Fatalf("got %d %s, want 400 naming the field", code, raw)
		}
	})
	if n := s.jobCount(); n != 0 {
		t.Fatalf("bad requests stored %d jobs", n)
	}

	// Pools.
	poolCases := []struct {
		name   string
		call   func() error
		code   codes.Code
		prefix string
	}{
		{"duplicate pool", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/org/team"})
			return err
		}, codes.AlreadyExists, "pool /org/team already exists"},
		{"missing parent", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/a/b"})
			return err
		}, codes.NotFound, "path: parent pool /a does not exist; create /a first"},
		{"children reserve more than parent", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/org/other", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}})
			return err
		}, codes.InvalidArgument, "spec.reservation.cpu:"},
		{"limit below reservation", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/x", Spec: &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2}, Limit: &pelotonv1.Resources{Cpu: 1, MemoryMb: 10}}})
			return err
		}, codes.InvalidArgument, "spec.limit.cpu:"},
		{"negative share", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/y", Spec: &pelotonv1.PoolSpec{Share: &pelotonv1.Resources{Cpu: -1}}})
			return err
		}, codes.InvalidArgument, "spec.share.cpu:"},
		{"bad path", func() error {
			_, err := s.pools.CreatePool(ctx, &pelotonv1.CreatePoolRequest{Path: "/UPPER"})
			return err
		}, codes.InvalidArgument, "path:"},
		{"delete non-leaf", func() error {
			_, err := s.pools.DeletePool(ctx, &pelotonv1.DeletePoolRequest{Path: "/org"})
			return err
		}, codes.FailedPrecondition, "pool /org has child pools"},
		{"delete unknown", func() error {
			_, err := s.pools.DeletePool(ctx, &pelotonv1.DeletePoolRequest{Path: "/zzz"})
			return err
		}, codes.NotFound, "pool /zzz does not exist"},
		{"get unknown job", func() error {
			_, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: "nope"})
			return err
		}, codes.NotFound, "job nope does not exist"},
		{"task of unknown instance", func() error {
			_, err := s.tasks.GetTask(ctx, &pelotonv1.GetTaskRequest{JobId: "nope"})
			return err
		}, codes.NotFound, "job nope"},
	}
	for _, tc := range poolCases {
		t.Run(tc.name, func(t *testing.T) { expectStatus(t, tc.call(), tc.code, tc.prefix) })
	}
	lp, err := s.pools.ListPools(ctx, &pelotonv1.ListPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range lp.Pools {
		paths = append(paths, p.Path)
	}
	if strings.Join(paths, ",") != "/,/default,/org,/org/team" {
		t.Fatalf("failed pool calls changed the tree: %v", paths)
	}

	// A pool with a job cannot be deleted; update with a stale version is refused.
	sp := okSpec()
	sp.Pool = "/org/team"
	if _, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: sp}); err != nil {
		t.Fatal(err)
	}
	_, err = s.pools.DeletePool(ctx, &pelotonv1.DeletePoolRequest{Path: "/org/team"})
	expectStatus(t, err, codes.FailedPrecondition, "pool /org/team has jobs")
	got, _ := s.pools.GetPool(ctx, &pelotonv1.GetPoolRequest{Path: "/org/team"})
	_, err = s.pools.UpdatePool(ctx, &pelotonv1.UpdatePoolRequest{Path: "/org/team", Spec: got.Pool.Spec, Version: got.Pool.Version + 1000})
	expectStatus(t, err, codes.Aborted, "pool /org/team is at version")
	upd := proto.Clone(got.Pool.Spec).(*pelotonv1.PoolSpec)
	upd.Reservation.Cpu = 1
	if _, err := s.pools.UpdatePool(ctx, &pelotonv1.UpdatePoolRequest{Path: "/org/team", Spec: upd, Version: got.Pool.Version}); err != nil {
		t.Fatalf("update at current version: %v", err)
	}
	var viaREST struct {
		Pool struct {
			Path string
			Spec struct{ Reservation struct{ Cpu float64 } }
		}
	}
	if code, raw := s.rest("GET", "/v1/pools/org/team", nil, &viaREST); code != 200 || viaREST.Pool.Spec.Reservation.Cpu != 1 {
		t.Fatalf("GET /v1/pools/org/team: %d %s", code, raw)
	}
	_ = context.Background
}
