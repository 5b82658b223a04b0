package federation_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// waitWaiting waits until the service's rollout waits for something that
// starts with prefix.
func waitWaiting(t *testing.T, f *federation.Federation, id, prefix string) *pelotonv1.FederatedService {
	t.Helper()
	var got *pelotonv1.FederatedService
	testutil.Eventually(t, 90*time.Second, "the rollout waiting for "+prefix, func() error {
		s, err := f.Services().GetService(id)
		if err != nil {
			return err
		}
		got = s
		if r := s.Rollout; r == nil || !strings.HasPrefix(r.Waiting, prefix) {
			return fmt.Errorf("rollout %v", r)
		}
		return nil
	})
	return got
}

// startREST serves f's gRPC and REST APIs for the test and returns the
// REST base URL.
func startREST(t *testing.T, f *federation.Federation) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := federation.NewServer(f, logger())
	g := srv.GRPCServer()
	go func() { _ = g.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := srv.HTTPHandler(ctx, lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.Close(); cancel(); g.Stop() })
	return hs.URL
}

// post POSTs an empty JSON body and returns the status and body.
func post(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stepStates is the state of each step of a service's rollout, by cluster.
func stepStates(svc *pelotonv1.FederatedService) map[string]pelotonv1.RolloutStepState {
	out := map[string]pelotonv1.RolloutStepState{}
	for _, s := range svc.Rollout.GetSteps() {
		out[s.Cluster] = s.State
	}
	return out
}

// TestFederatedServiceRolloutGates: a service's rollout steps (kept with
// the service) are validated naming the field; an update goes step by
// step: a's step soaks (the next has not started meanwhile), across a
// restart of the federation, then waits for approval; an approval before
// is refused; once approved, b, then c (named in no step) follow. An
// instance lost during a soak fails the step and rolls it back.
func TestFederatedServiceRolloutGates(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	stacks := []*stack{startStack(t, e.Endpoints(), "a", 1), startStack(t, e.Endpoints(), "b", 1), startStack(t, e.Endpoints(), "c", 1)}
	f := startFederation(t, e)
	for _, s := range stacks {
		register(t, f, s, nil)
	}
	spec := serviceSpec("web", 3, 3, &pelotonv1.ClusterShare{Name: "a", Weight: 1}, &pelotonv1.ClusterShare{Name: "b", Weight: 1},
		&pelotonv1.ClusterShare{Name: "c", Weight: 1})
	spec.Rollout = &pelotonv1.RolloutSpec{Steps: []*pelotonv1.RolloutStepSpec{{Clusters: []string{"a"}, SoakSeconds: 3, Approval: true}, {Clusters: []string{"zz"}}}}
	_, err := f.Services().CreateService(ctxT(t), spec, "")
	if status.Code(err) != codes.InvalidArgument || !contains(err, "spec.rollout.steps[1].clusters[0]: cluster zz is not one of the service's clusters (a, b, c)") {
		t.Fatalf("create naming an unknown cluster in a step: %v", err)
	}
	spec.Rollout.Steps[1].Clusters = []string{"b"}
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	id := svc.Id
	testutil.Eventually(t, 30*time.Second, "3 instances healthy", func() error {
		if s, _ := f.Services().GetService(id); s.Healthy != 3 {
			return fmt.Errorf("%d healthy", s.Healthy)
		}
		return nil
	})
	v2 := proto.Clone(spec.Job).(*pelotonv1.JobSpec)
	v2.DefaultSpec.Command = []string{"sleep", "3601"}
	if _, err := f.Services().UpdateService(ctxT(t), id, v2, nil, &pelotonv1.RolloutSpec{Order: []string{"b"}}, 0); status.Code(err) != codes.InvalidArgument ||
		!contains(err, "rollout.order: cannot be given with rollout.steps") {
		t.Fatalf("update giving order against the service's steps: %v", err)
	}
	up, err := f.Services().UpdateService(ctxT(t), id, v2, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{up.Rollout.Steps[0].Cluster, up.Rollout.Steps[1].Cluster, up.Rollout.Steps[2].Cluster}; strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("rollout order %v, want a,b,c", got)
	}

	// a soaks; b and c wait.
	soaking := waitWaiting(t, f, id, "soak of step 1 (clusters a) until ")
	if st := stepStates(soaking); st["a"] != pelotonv1.RolloutStepState_STEP_DONE || st["b"] != pelotonv1.RolloutStepState_STEP_PENDING || st["c"] != pelotonv1.RolloutStepState_STEP_PENDING {
		t.Fatalf("during the soak: %v", st)
	}
	if _, err := f.Services().ControlRollout(ctxT(t), id, federation.RolloutApprove); status.Code(err) != codes.FailedPrecondition || !contains(err, "waits for no approval") {
		t.Fatalf("approve during the soak: %v", err)
	}
	// A restart mid-soak keeps the soak's start.
	soakStart := soaking.Rollout.SoakStart.AsTime()
	f.Close()
	f = startFederation(t, e)
	if s, _ := f.Services().GetService(id); !s.Rollout.SoakStart.AsTime().Equal(soakStart) {
		t.Fatalf("after a restart the soak started %v, not %v", s.Rollout.SoakStart, soakStart)
	}
	waiting := waitWaiting(t, f, id, "approval of step 1 (clusters a)")
	if since := waiting.Rollout.ApprovalSince.AsTime(); since.Sub(soakStart) < 3*time.Second || !waiting.Rollout.WaitingSince.AsTime().Equal(since) {
		t.Fatalf("approval awaited since %v, the soak began %v", since, soakStart)
	}
	// However long it looks, the rollout waits for the approval.
	waitPasses(t, "rollout", f.RolloutPasses, 5)
	if s, _ := f.Services().GetService(id); stepStates(s)["b"] != pelotonv1.RolloutStepState_STEP_PENDING {
		t.Fatalf("b started before the approval: %v", s.Rollout)
	}
	// Approved over REST, as the UI and curl do.
	rest := startREST(t, f)
	if code, body := post(t, rest+"/v1/federation/services/"+id+":approve"); code != http.StatusOK || !strings.Contains(body, "step 1 approved by the user") {
		t.Fatalf("POST :approve: %d %s", code, body)
	}
	done := waitRollout(t, f, id, pelotonv1.RolloutState_ROLLOUT_SUCCEEDED)
	steps := done.Rollout.Steps
	if steps[1].StartTime.AsTime().Before(waiting.Rollout.ApprovalSince.AsTime()) || steps[2].StartTime.AsTime().Before(steps[1].EndTime.AsTime()) {
		t.Errorf("steps out of order: %v", steps)
	}
	if done.Rollout.Waiting != "" || done.Rollout.GatesPassed != 3 {
		t.Errorf("after the rollout: waiting %q, gates passed %d", done.Rollout.Waiting, done.Rollout.GatesPassed)
	}
	if code, body := post(t, rest+"/v1/federation/services/"+id+":approve"); code != http.StatusBadRequest || !strings.Contains(body, "waits for no approval (waiting for: nothing)") {
		t.Errorf("POST :approve of a rollout that ended: %d %s", code, body)
	}

	// v3 overrides the steps: a soaks long; its instance killed meanwhile
	// fails the step, which is rolled back.
	v3 := proto.Clone(v2).(*pelotonv1.JobSpec)
	v3.DefaultSpec.Command = []string{"sleep", "3602"}
	if _, err := f.Services().UpdateService(ctxT(t), id, v3, nil, &pelotonv1.RolloutSpec{RollbackOnFailure: true,
		Steps: []*pelotonv1.RolloutStepSpec{{Clusters: []string{"a"}, SoakSeconds: 600}}}, 0); err != nil {
		t.Fatal(err)
	}
	soaking = waitWaiting(t, f, id, "soak of step 1 (clusters a)")
	aJob, err := partJob(t, stacks[0], soaking)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stacks[0].cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: aJob.Id, InstanceId: 0}); err != nil {
		t.Fatal(err)
	}
	back := waitRollout(t, f, id, pelotonv1.RolloutState_ROLLOUT_ROLLED_BACK)
	if a := back.Rollout.Steps[0]; a.State != pelotonv1.RolloutStepState_STEP_ROLLED_BACK || !strings.Contains(back.Rollout.Message, "healthy during the soak of step 1 (clusters a)") {
		t.Errorf("after the failed soak: step %v, rollout %q", a, back.Rollout.Message)
	}
	if st := stepStates(back); st["b"] != pelotonv1.RolloutStepState_STEP_PENDING || back.SpecVersion != 2 || back.Rollout.Waiting != "" || back.Rollout.SoakStart != nil {
		t.Errorf("after the rollback: %v, version %d, waiting %q", st, back.SpecVersion, back.Rollout.Waiting)
	}
}
