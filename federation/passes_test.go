package federation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestLoopsCountTheirPasses: the dispatcher, the rollout loop, the archive
// collector and each cluster's worker count the passes they finish, none
// before Start, each on its own pace; a worker's passes count also when
// its cluster does not answer.
func TestLoopsCountTheirPasses(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	f := New(st, Options{History: openBoltHistory(t), CheckEvery: 10 * time.Millisecond, ArchiveEvery: 10 * time.Millisecond,
		CallTimeout: 100 * time.Millisecond})
	if d, r, a := f.passes.dispatch.Load(), f.passes.rollout.Load(), f.passes.archive.Load(); d+r+a != 0 {
		t.Fatalf("passes before Start: dispatch %d, rollout %d, archive %d", d, r, a)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := f.workerPasses("gone"); n != 0 {
		t.Fatalf("%d passes of the worker of a cluster not registered", n)
	}
	if _, err := f.Register(context.Background(), &pelotonv1.RegisterClusterRequest{Name: "gone", Endpoint: testutil.FreeAddr(t)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "three passes of every loop", func() error {
		if d, r, a := f.passes.dispatch.Load(), f.passes.rollout.Load(), f.passes.archive.Load(); d < 3 || r < 3 || a < 3 || f.workerPasses("gone") < 3 {
			return fmt.Errorf("dispatch %d, rollout %d, archive %d, worker of gone %d", d, r, a, f.workerPasses("gone"))
		}
		return nil
	})
}
