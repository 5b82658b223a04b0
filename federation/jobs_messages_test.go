package federation

import (
	"strings"
	"testing"

	"google.golang.org/grpc/status"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestFederatedJobOfAnotherTypeSaysWhereItGoes: the federation dispatches
// BATCH jobs; a SERVICE job is told of federated services, the others of
// a cluster of their own.
func TestFederatedJobOfAnotherTypeSaysWhereItGoes(t *testing.T) {
	for typ, want := range map[pelotonv1.JobType]string{
		pelotonv1.JobType_SERVICE:  "spec.job.type: the federation dispatches BATCH jobs; a SERVICE job runs across clusters as a federated service (peloton fed service create -f FILE, the spec under job:) or in one cluster (peloton --cluster NAME job create)",
		pelotonv1.JobType_STATEFUL: "spec.job.type: the federation dispatches BATCH jobs; a STATEFUL job runs in one cluster (peloton --cluster NAME job create)",
		pelotonv1.JobType_DAEMON:   "spec.job.type: the federation dispatches BATCH jobs; a DAEMON job runs in one cluster (peloton --cluster NAME job create)",
	} {
		err := validateJobSpec(&pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: "x", Type: typ, InstanceCount: 1}})
		if got := status.Convert(err).Message(); got != want {
			t.Errorf("%s:\n got %q\nwant %q", typ, got, want)
		}
		if strings.Contains(status.Convert(err).Message(), "until") {
			t.Errorf("%s: says federated services do not exist yet", typ)
		}
	}
}
