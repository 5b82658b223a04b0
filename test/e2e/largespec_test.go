package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/etcdtest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestLargeSpecOnExternalEtcd creates a job whose spec is 1.9 MiB of data
// that does not compress (just under the 2 MiB bound of a spec), against an
// external etcd with its default limits (1.5 MiB per request): the spec is
// stored in chunks, the job runs, an update to another such spec is stored
// the same way, and a restarted stack reads both versions back whole. A
// 3 MiB spec is refused at create, naming the bound, and leaves nothing.
func TestLargeSpecOnExternalEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	dir := t.TempDir()
	s := startStack(t, dir, stackOpts{backend: "sim", hosts: 2, etcd: etcd.Endpoints()})
	blobOf := func(size int) string {
		b := make([]byte, size*3/4) // size once in base64
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	// Per-instance overrides (each environment is bounded to 128 KiB):
	// 16 instances of 120 KiB each.
	const n = 16
	bulky := func(spec *pelotonv1.JobSpec, per int) *pelotonv1.JobSpec {
		spec.InstanceSpecs = map[uint32]*pelotonv1.TaskSpec{}
		for i := range uint32(spec.InstanceCount) {
			spec.InstanceSpecs[i] = &pelotonv1.TaskSpec{Env: map[string]string{"BLOB": blobOf(per)}}
		}
		return spec
	}
	huge := bulky(batch("huge-spec", 26, "sleep", "0.01"), 120<<10)
	_, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: huge})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "2097152 bytes") {
		t.Fatalf("create of a 3 MiB spec: %v; want InvalidArgument naming the 2 MiB bound", err)
	}
	if l, err := s.jobs.ListJobs(ctxT(t), &pelotonv1.ListJobsRequest{}); err != nil || len(l.Jobs) != 0 {
		t.Fatalf("the refused create left %v (%v)", l, err)
	}
	spec := bulky(batch("large-spec", n, "sleep", "0.01"), 120<<10)
	id := s.createJob(spec)
	s.waitJob(id, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)

	svc := bulky(service("large-service", n, n, "sleep", "3600"), 120<<10)
	svc.DefaultSpec.Resources.Cpu = 0.01
	sid := s.createJob(svc)
	s.waitTasks(sid, "all running", time.Minute, allRunning(n))
	next := bulky(proto.Clone(svc).(*pelotonv1.JobSpec), 120<<10)
	u := s.startUpdate(sid, next, &pelotonv1.UpdateSpec{BatchSize: n})
	s.waitUpdate(u.Id, pelotonv1.UpdateState_UPDATE_SUCCEEDED, 2*time.Minute, nil)

	s.stop()
	s2 := startStack(t, dir, stackOpts{backend: "sim", hosts: 2, etcd: etcd.Endpoints()})
	got, err := s2.jobs.GetJob(ctxT(t), &pelotonv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Job.Spec.InstanceSpecs[7], spec.InstanceSpecs[7]) || got.Job.Status.State != pelotonv1.JobState_JOB_SUCCEEDED {
		t.Errorf("after a restart the job is %v with a spec of %d bytes; want SUCCEEDED with the 3 MiB spec as created",
			got.Job.Status.State, proto.Size(got.Job.Spec))
	}
	vs, err := s2.jobs.ListJobVersions(ctxT(t), &pelotonv1.ListJobVersionsRequest{JobId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Versions) != 2 {
		t.Fatalf("after a restart the service has %d versions; want both large versions back", len(vs.Versions))
	}
	for _, v := range vs.Versions {
		want := svc
		if v.Version == 2 {
			want = next
		}
		if !proto.Equal(v.Spec.InstanceSpecs[3], want.InstanceSpecs[3]) {
			t.Errorf("version %d came back different (%d bytes)", v.Version, proto.Size(v.Spec))
		}
	}
}
