package security

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestRequestLimits: a stack's own bound on instances, the request size
// bound (gRPC after decompression, REST bodies) and the per-principal
// rate limit answer with their codes and say what to do.
func TestRequestLimits(t *testing.T) {
	p := newPKI(t)
	e, _ := storetest.StartEtcd(t)
	sec := p.security(t, "")
	sec.MaxRequestBytes = 64 << 10
	sec.Auth.RatePerSecond, sec.Auth.RateBurst = 2, 40
	s := startStack(t, "limits", e.Endpoints(), sec, func(c *cluster.Config) { c.MaxInstances = 10 })
	root := p.as(t, s.info.GRPCAddr, "root")
	createPool(t, root, "/a")

	spec := batchSpec("wide", "/a")
	spec.InstanceCount = 11
	_, err := root.Jobs.CreateJob(ctx(t), &pelotonv1.CreateJobRequest{Spec: spec})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.instanceCount") || !strings.Contains(err.Error(), "--max-instances") {
		t.Errorf("11 instances on a cluster bounded at 10: %v", err)
	}

	// 100 KiB of one repeated byte: small compressed, over the bound once
	// decompressed.
	big := batchSpec("big", "/a")
	big.DefaultSpec.Env = map[string]string{"PAD": strings.Repeat("x", 100<<10)}
	_, err = root.Jobs.CreateJob(ctx(t), &pelotonv1.CreateJobRequest{Spec: big}, grpc.UseCompressor(gzip.Name))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a compressed request of 100 KiB decompressed, bound 64 KiB: %v, want ResourceExhausted", err)
	}
	_, err = root.Jobs.CreateJob(ctx(t), &pelotonv1.CreateJobRequest{Spec: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request of 100 KiB, bound 64 KiB: %v, want ResourceExhausted", err)
	}
	rest := restClient(t, p, p.cliCert, p.cliKey)
	req, _ := http.NewRequest(http.MethodPost, "https://"+s.info.HTTPAddr+"/v1/jobs", bytes.NewReader(bytes.Repeat([]byte(" "), 100<<10)))
	req.Header.Set("Authorization", "Bearer "+tokens["root"])
	resp, err := rest.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a REST body of 100 KiB, bound 64 KiB: HTTP %d, want 413", resp.StatusCode)
	}

	// Rate: a burst of 40, then 2 a second; bob's calls do not use
	// carol's tokens.
	bob, carol := p.as(t, s.info.GRPCAddr, "bob"), p.as(t, s.info.GRPCAddr, "carol")
	var limited error
	for i := 0; i < 200 && limited == nil; i++ {
		_, err := bob.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			limited = err
		}
	}
	if limited == nil {
		t.Fatal("200 calls at once were never rate limited")
	}
	var retry *errdetails.RetryInfo
	for _, d := range status.Convert(limited).Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > time.Second {
		t.Errorf("rate limited without a useful RetryInfo: %v (details %v)", limited, status.Convert(limited).Details())
	}
	if _, err := carol.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{}); err != nil {
		t.Errorf("carol limited by bob's calls: %v", err)
	}
	// A client does as told: it waits the delay, and then it is served.
	// The wait is what is tested, so it stays a sleep.
	time.Sleep(retry.GetRetryDelay().AsDuration())
	if _, err := bob.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{}); err != nil {
		t.Errorf("bob after waiting the retry delay: %v", err)
	}
}
