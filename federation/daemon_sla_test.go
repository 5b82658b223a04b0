package federation_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestGlobalSLADaemon: a federated DAEMON's budget is its own in each
// cluster: the global evaluator refuses a second instance down in one
// cluster, but grants one in another.
func TestGlobalSLADaemon(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	f := startFederation(t, e)
	_, _, withGlobalSLA := serveGlobalSLA(t, f)
	a := startStackWith(t, e.Endpoints(), "a", 2, nil, withGlobalSLA("a"))
	b := startStackWith(t, e.Endpoints(), "b", 2, nil, withGlobalSLA("b"))
	register(t, f, a, nil)
	register(t, f, b, nil)
	spec := serviceSpec("agent", 0, 1)
	spec.Job.Type = pelotonv1.JobType_DAEMON
	svc, err := f.Services().CreateService(ctxT(t), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "4 daemons running", func() error {
		s, _ := f.Services().GetService(svc.Id)
		if s.Running != 4 {
			return fmt.Errorf("%d running", s.Running)
		}
		return nil
	})
	cur, _ := f.Services().GetService(svc.Id)
	aJob, _ := partJob(t, a, cur)
	bJob, _ := partJob(t, b, cur)
	if _, err := a.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: aJob.Id, InstanceId: 0}); err != nil {
		t.Fatalf("the first kill in a: %v", err)
	}
	_, err = a.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: aJob.Id, InstanceId: 1})
	if status.Code(err) != codes.FailedPrecondition || !contains(err, "1 of its budget of 1 instances are unavailable in cluster a") {
		t.Fatalf("a second kill in a: %v", err)
	}
	if _, err := b.cli.Tasks.KillTask(ctxT(t), &pelotonv1.KillTaskRequest{JobId: bJob.Id, InstanceId: 0}); err != nil {
		t.Fatalf("a kill in b, on b's own budget: %v", err)
	}
}
