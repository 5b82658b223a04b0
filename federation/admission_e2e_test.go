package federation_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestSubmissionsJudgedUpFront: a federated job or service that no
// eligible cluster could ever run (a task larger than every largest host,
// a pool no cluster has) is refused at create naming the field, as a
// cluster's job create is; one that only waits is accepted, and its
// federated job says why it waits in the cluster.
func TestSubmissionsJudgedUpFront(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	a := startStack(t, e.Endpoints(), "a", 1) // one host of 32 CPUs
	f := startFederation(t, e)
	register(t, f, a, map[string]string{"region": "east"})

	job := func(pool string, cpu float64, n uint32) *pelotonv1.FederatedJobSpec {
		return &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: "j", Type: pelotonv1.JobType_BATCH, Pool: pool, InstanceCount: n,
			DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "600"}, Resources: &pelotonv1.Resources{Cpu: cpu, MemoryMb: 64}}}}
	}
	for _, tc := range []struct {
		spec *pelotonv1.FederatedJobSpec
		want string
	}{
		{job("/default", 64, 1), "spec.job.defaultSpec.resources.cpu: asks for 64 CPUs but the largest host in any eligible cluster has 32 (a: cpu 32)"},
		{job("/nope", 1, 1), "spec.job.pool: /nope is not a leaf pool in any eligible cluster (a)"},
	} {
		_, err := f.Jobs().CreateJob(ctxT(t), tc.spec, "")
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("create: %v, want InvalidArgument %q", err, tc.want)
		}
	}
	if l, _, _ := f.Jobs().ListJobs("", 0, ""); len(l) != 0 {
		t.Fatalf("refused creates left %d jobs", len(l))
	}

	svc := serviceSpec("web", 2, 1)
	svc.Job.DefaultSpec.Resources.Cpu = 64
	_, err := f.Services().CreateService(ctxT(t), svc, "")
	if want := "spec.job.defaultSpec.resources.cpu: asks for 64 CPUs but the largest host in cluster a has 32"; status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("service create: %v, want InvalidArgument %q", err, want)
	}
	ok, err := f.Services().CreateService(ctxT(t), serviceSpec("web", 2, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	bigger := serviceSpec("web", 2, 1).Job
	bigger.DefaultSpec.Resources.Cpu = 64
	_, err = f.Services().UpdateService(ctxT(t), ok.Id, bigger, nil, nil, 0)
	if want := "job.defaultSpec.resources.cpu: asks for 64 CPUs but the largest host in cluster a has 32"; status.Code(err) != codes.InvalidArgument ||
		!strings.HasPrefix(status.Convert(err).Message(), want) {
		t.Errorf("service update: %v, want InvalidArgument %q", err, want)
	}

	// Two tasks of 20 CPUs on one host of 32: one runs, the other waits,
	// and the federated job says why, in the cluster's words.
	id, err := f.Jobs().CreateJob(ctxT(t), job("/default", 20, 2), "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the federated job says why it waits", func() error {
		j, err := f.Jobs().GetJob(id)
		if err != nil {
			return err
		}
		if j.DispatchState != pelotonv1.DispatchState_DISPATCHED || !strings.HasPrefix(j.Message, "in cluster a: instance ") ||
			!strings.Contains(j.Message, " waits: ") {
			return fmt.Errorf("%s %q (job message %q)", j.DispatchState, j.Message, j.GetStatus().GetMessage())
		}
		return nil
	})
}
