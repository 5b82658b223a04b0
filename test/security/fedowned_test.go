package security

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
)

// TestFederatedJobChangedOnlyByTheFederation: a job a federated service
// owns (its label) is scaled only by a caller that sends the federation's
// call key and holds admin, as the federation's principal does; a
// submitter who sends the key is refused as if they had not.
func TestFederatedJobChangedOnlyByTheFederation(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	p := newPKI(t)
	s := startStack(t, "c1", e.Endpoints(), p.security(t, ""))
	root, alice := p.as(t, s.info.GRPCAddr, "root"), p.as(t, s.info.GRPCAddr, "alice")
	createPool(t, root, "/a")
	spec := serviceSpec("svc-part", "/a")
	spec.Labels = map[string]string{sla.GroupLabel: "fsvc-1"}
	id := createJob(t, root, spec)

	asFed := metadata.AppendToOutgoingContext(ctx(t), sla.FederationCallKey, "fsvc-1")
	want := "job " + id + " belongs to federated service fsvc-1"
	for _, tc := range []struct {
		who  string
		fed  bool
		code codes.Code
	}{
		{"alice", false, codes.FailedPrecondition},
		{"alice", true, codes.FailedPrecondition}, // the key alone is not believed from a submitter
		{"root", false, codes.FailedPrecondition},
		{"root", true, codes.OK},
	} {
		c := alice
		if tc.who == "root" {
			c = root
		}
		cx := ctx(t)
		if tc.fed {
			cx = asFed
		}
		j, err := c.Jobs.GetJob(ctx(t), &pelotonv1.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Jobs.ScaleJob(cx, &pelotonv1.ScaleJobRequest{JobId: id, InstanceCount: 3, Version: j.Job.Status.SpecVersion})
		if status.Code(err) != tc.code || (tc.code != codes.OK && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s scales (call key %v): %v, want %s %q", tc.who, tc.fed, err, tc.code, want)
		}
	}
}
