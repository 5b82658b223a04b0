package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/apierr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// MaxCreateJobs bounds the items of one CreateJobs call: a federation
// sends a cluster at most this many creates at once.
const MaxCreateJobs = 1000

// createJobsConcurrency bounds the items of one call being carried out at
// once. Each waits mostly on its request id's read and on the group
// commit its job's transaction joins, so many at once fill a commit.
const createJobsConcurrency = 128

// createJobsTimeout bounds a CreateJobs call's work once taken.
const createJobsTimeout = time.Minute

// CreateJobs carries out many CreateJob requests in one call, each on its
// own: an item refused (a bad spec, a request id reused for another job,
// the store failing it) is answered with its code and a message naming it
// ("requests[3].spec.instanceCount: ..."), and the others go ahead. Each
// job is stored whole or not at all, in a transaction shared with the
// other items (jobmgr's creates are group-committed), so a batch costs the
// store a few transactions instead of one per job.
func (s *Server) CreateJobs(ctx context.Context, req *pelotonv1.CreateJobsRequest) (*pelotonv1.CreateJobsResponse, error) {
	items := req.GetRequests()
	if len(items) == 0 {
		return nil, apierr.Invalid("requests", "required: at least one CreateJobRequest")
	}
	if len(items) > MaxCreateJobs {
		return nil, apierr.Invalid("requests", "at most %d in one call, got %d; send the rest in another call", MaxCreateJobs, len(items))
	}
	// Once taken, the items are carried out whether or not the caller
	// waits for the answer: a create cut off half-way leaves the store in
	// doubt (jobmgr settles it a little later), and a caller that gave
	// up, say a federation restarting, sends the batch again under the
	// same request ids, which should find the jobs, not creates in doubt.
	// The store's own timeouts bound the work.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createJobsTimeout)
	defer cancel()
	results := make([]*pelotonv1.CreateJobsResult, len(items))
	sem := make(chan struct{}, createJobsConcurrency)
	var wg sync.WaitGroup
	for i, item := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = s.createJobsItem(ctx, i, item)
		})
	}
	wg.Wait()
	return &pelotonv1.CreateJobsResponse{Results: results}, nil
}

// createJobsItem carries out item i of a CreateJobs call as CreateJob
// would, and answers it.
func (s *Server) createJobsItem(ctx context.Context, i int, item *pelotonv1.CreateJobRequest) *pelotonv1.CreateJobsResult {
	var (
		resp *pelotonv1.CreateJobResponse
		err  error
	)
	if item.GetDryRun() {
		err = apierr.Invalid("dryRun", "not taken by CreateJobs; check a spec with CreateJob's dryRun")
	} else {
		resp, err = s.CreateJob(ctx, item)
	}
	if err != nil {
		st := status.Convert(err)
		return &pelotonv1.CreateJobsResult{Code: int32(st.Code()), Message: itemMessage(i, st.Message())}
	}
	return &pelotonv1.CreateJobsResult{JobId: resp.GetJobId()}
}

// itemMessage names item i in msg: its field path is made the item's
// ("requests[3].spec.pool: ..."), and a message that names no field gets
// the item before it ("requests[3]: the store ...").
func itemMessage(i int, msg string) string {
	if field, _, ok := strings.Cut(msg, ": "); ok && field != "" && !strings.ContainsAny(field, " \t") {
		return fmt.Sprintf("requests[%d].%s", i, msg)
	}
	return fmt.Sprintf("requests[%d]: %s", i, msg)
}
