package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStoreQuotaGuard runs a stack whose embedded etcd has a 32 MiB quota
// and fills the store as history would (bulk keys under the cluster's
// prefix): before etcd would stop every write, creates are refused with
// ResourceExhausted naming the quota and its flag; a cancel and a delete
// still work; once the bulk is deleted the guard compacts and defragments
// the store and creates are accepted again. The metrics say how full the
// store is throughout.
func TestStoreQuotaGuard(t *testing.T) {
	const quota = 32 << 20
	s := startStack(t, t.TempDir(), stackOpts{backend: "sim", hosts: 4,
		configure: func(c *cluster.Config) {
			c.EtcdQuotaBytes = quota
			c.StoreQuotaInterval = 100 * time.Millisecond
		}})
	long := s.createJob(batch("long", 20, "sleep", "3600"))
	done := s.createJob(batch("done", 20, "sleep", "0.01"))
	s.waitJob(done, pelotonv1.JobState_JOB_SUCCEEDED, time.Minute)

	cli, err := clientv3.New(clientv3.Config{Endpoints: s.ready.EtcdEndpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	bulk := strings.Repeat("h", 256<<10)
	var refusal error
	puts := 0
	probe := func() error {
		_, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: batch(fmt.Sprintf("probe-%d", puts), 1, "sleep", "0.01")})
		switch {
		case status.Code(err) == codes.ResourceExhausted:
			refusal = err
			return nil
		case err != nil:
			t.Fatalf("create after %d bulk puts: %v", puts, err)
		}
		return errors.New("a create was accepted")
	}
	for ; puts < 200 && refusal == nil; puts++ { // 50 MiB: far past the quota
		if _, err := cli.Put(ctxT(t), fmt.Sprintf("%sbulk/%04d", cluster.ClusterPrefix("local"), puts), bulk); err != nil {
			t.Fatalf("bulk put %d refused by etcd before Peloton refused creates: %v", puts, err)
		}
		st, err := cli.Status(ctxT(t), s.ready.EtcdEndpoints[0])
		if err != nil {
			t.Fatal(err)
		}
		if float64(st.DbSize) < store.RefuseFraction*quota {
			_ = probe() // below the guard's line: a refusal now is early, not wrong
			continue
		}
		// Past the guard's line, as etcd says: creates are refused once the
		// guard has read the size (every StoreQuotaInterval).
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("a create refused at %d MiB of %d", st.DbSize>>20, quota>>20), probe)
	}
	if refusal == nil {
		t.Fatalf("%d bulk puts of 256 KiB into a %d MiB store and no create refused", puts, quota>>20)
	}
	if msg := status.Convert(refusal).Message(); !strings.Contains(msg, "--etcd-quota-bytes") || !strings.Contains(msg, "32.0 MiB") {
		t.Errorf("the refusal %q does not name the quota and its flag", msg)
	}
	if m := scrapeText(t, s); !strings.Contains(m, `peloton_store_quota_bytes{cluster="local"} 3.3554432e+07`) || !strings.Contains(m, `peloton_store_db_bytes{cluster="local"}`) {
		t.Errorf("/metrics lacks the store's size and quota:\n%s", grepLines(m, "peloton_store_"))
	}
	// Cancels and deletes go on in the headroom. One that meets the
	// guard's compaction of the store (which can grow the file past the
	// quota until the defragmentation right after it) is Unavailable, as
	// any write during an etcd hiccup, and goes through when retried.
	retried := func(what string, call func() error) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what+" while creates are refused", func() error {
			err := call()
			if err != nil && status.Code(err) != codes.Unavailable {
				t.Fatalf("%s while creates are refused: %v\n%s", what, err, grepLines(scrapeText(t, s), "peloton_store_"))
			}
			return err
		})
	}
	retried("cancel", func() error {
		_, err := s.jobs.CancelJob(ctxT(t), &pelotonv1.CancelJobRequest{JobId: long})
		return err
	})
	s.waitJob(long, pelotonv1.JobState_JOB_KILLED, time.Minute)
	retried("delete", func() error {
		_, err := s.jobs.DeleteJob(ctxT(t), &pelotonv1.DeleteJobRequest{JobId: done})
		return err
	})
	if _, err := cli.Delete(ctxT(t), cluster.ClusterPrefix("local")+"bulk/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "creates accepted again after the deletes", func() error {
		_, err := s.jobs.CreateJob(ctxT(t), &pelotonv1.CreateJobRequest{Spec: batch("after", 1, "sleep", "0.01")})
		return err
	})
}

func scrapeText(t *testing.T, s *stack) string {
	t.Helper()
	resp, err := http.Get("http://" + s.ready.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(text, sub string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
