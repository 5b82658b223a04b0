package jobmgr

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/requestid"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// TestCreateJobOnceUnderConcurrentRetries sends one create, with one
// request id, from many goroutines at once and again from a second control
// plane on the same store: every answer names the same job, and only one
// job exists.
func TestCreateJobOnceUnderConcurrentRetries(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	p := startProcess(t, e, newSandboxes(2))
	spec := &pelotonv1.JobSpec{Name: "once", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
	req := &pelotonv1.CreateJobRequest{Spec: spec, RequestId: "r-1"}
	r, err := requestid.New(requestid.Job, req.RequestId, req)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i], errs[i] = p.jm.CreateJobOnce(t.Context(), spec, r) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("create %d: %q, %v; want %q like the first", i, ids[i], errs[i], ids[0])
		}
	}
	js, err := p.jm.ListJobs("", nil, "once")
	if err != nil || len(js) != 1 {
		t.Fatalf("jobs named once: %d, %v; want 1", len(js), err)
	}

	p.crash()
	p2 := startProcess(t, e, newSandboxes(2))
	if id, err := p2.jm.CreateJobOnce(t.Context(), spec, r); err != nil || id != ids[0] {
		t.Fatalf("after a restart: %q, %v; want %q", id, err, ids[0])
	}
	other := proto.Clone(spec).(*pelotonv1.JobSpec)
	other.Name = "other"
	r2, _ := requestid.New(requestid.Job, "r-1", &pelotonv1.CreateJobRequest{Spec: other})
	if _, err := p2.jm.CreateJobOnce(t.Context(), other, r2); apierr.Code(err) != codes.AlreadyExists {
		t.Fatalf("same id, other spec: %v; want AlreadyExists", err)
	}
	if js, _ := p2.jm.ListJobs("", nil, ""); len(js) != 1 {
		t.Fatalf("%d jobs, want 1", len(js))
	}
}

// TestCreateJobOnceReplacesAnExpiredID: a request id whose record is past
// retention (and not swept yet) is free again: the create, written first
// as if the id were new, conflicts with the old record, reads it, and
// creates the job over it.
func TestCreateJobOnceReplacesAnExpiredID(t *testing.T) {
	e, st := storetest.StartEtcd(t)
	old := fmt.Sprintf(`{"digest":"other","object":"long-gone","created":%q}`, time.Now().Add(-2*requestid.Retention).UTC().Format(time.RFC3339Nano))
	if _, err := st.Txn(t.Context(), store.Put(requestid.Key(requestid.Job, "r-old"), []byte(old), store.MustNotExist)); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, e, newSandboxes(1))
	spec := &pelotonv1.JobSpec{Name: "anew", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
	r, err := requestid.New(requestid.Job, "r-old", &pelotonv1.CreateJobRequest{Spec: spec, RequestId: "r-old"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.jm.CreateJobOnce(t.Context(), spec, r)
	if err != nil || id == "" || id == "long-gone" {
		t.Fatalf("create over an expired request id: %q, %v; want a new job", id, err)
	}
	if again, err := p.jm.CreateJobOnce(t.Context(), spec, r); err != nil || again != id {
		t.Fatalf("its retry: %q, %v; want %q", again, err, id)
	}
	if js, _ := p.jm.ListJobs("", nil, "anew"); len(js) != 1 {
		t.Fatalf("%d jobs named anew, want 1", len(js))
	}
}
