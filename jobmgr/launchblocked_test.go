package jobmgr

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/placement"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// blockingView is a sandboxes backend whose launches can be refused with
// hostmgr.ErrLaunchBlocked, as the kubernetes backend refuses them when the
// namespace is missing.
type blockingView struct {
	*sandboxView
	mu      sync.Mutex
	blocked bool
	refused int
}

var _ hostmgr.Backend = (*blockingView)(nil)

func (v *blockingView) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	v.mu.Lock()
	if v.blocked {
		v.refused++
		v.mu.Unlock()
		return fmt.Errorf("launch %s: %w: namespace \"peloton\" does not exist; create it, or change --kube-namespace", spec.TaskID, hostmgr.ErrLaunchBlocked)
	}
	v.mu.Unlock()
	return v.sandboxView.Launch(ctx, spec)
}

func (v *blockingView) set(blocked bool) {
	v.mu.Lock()
	v.blocked = blocked
	v.mu.Unlock()
}

func (v *blockingView) refusals() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refused
}

// TestLaunchBlockedIsNotAFailure: launches the backend refuses for a reason
// the user must fix are not charged to the task (a batch job with
// maxFailures 0 does not fail), are retried with a backoff, and job get says
// why the job waits; once fixed, the job runs.
func TestLaunchBlockedIsNotAFailure(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), MaxTxnOps: e.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	batch := store.NewBatcher(st, store.BatcherOptions{})
	defer batch.Close()
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s := newSandboxes(2)
	bv := &blockingView{sandboxView: &sandboxView{s: s}, blocked: true}
	hm := hostmgr.NewManager(bv, hostmgr.Options{Logger: log, Store: st, OnCapacity: rm.SetPartitionCapacity})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rm.SetPartitionCapacity(hm.CapacityByPartition())
	jm := New(st, batch, rm, hm, Options{Logger: log, LostBackoff: 5 * time.Millisecond})
	if err := jm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go rm.Run(ctx)
	go placement.NewEngine(rm, hm, placement.EngineOptions{Logger: log}).Run(ctx)

	id, err := jm.CreateJob(ctx, &pelotonv1.JobSpec{Name: "b", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64},
			RestartPolicy: &pelotonv1.RestartPolicy{MaxFailures: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "several refused launches and job get saying why", 30*time.Second, func() (bool, string) {
		j, err := jm.GetJob(id)
		if err != nil {
			return false, err.Error()
		}
		msg := j.GetStatus().GetMessage()
		return bv.refusals() >= 6 && strings.Contains(msg, "cannot launch: launch ") && strings.Contains(msg, `namespace "peloton" does not exist`),
			fmt.Sprintf("refusals %d, message %q", bv.refusals(), msg)
	})
	for inst := uint32(0); inst < 2; inst++ {
		tk, err := jm.GetTask(id, inst)
		if err != nil {
			t.Fatal(err)
		}
		if st := tk.GetStatus(); st.GetFailureCount() != 0 || st.GetState() == pelotonv1.TaskState_FAILED {
			t.Fatalf("instance %d charged for a blocked launch: %v", inst, st)
		}
	}
	if j, _ := jm.GetJob(id); j.GetStatus().GetState() == pelotonv1.JobState_JOB_FAILED {
		t.Fatalf("job failed on blocked launches: %v", j.GetStatus())
	}
	bv.set(false)
	waitFor(t, "both instances running once the namespace exists", 30*time.Second, func() (bool, string) {
		n := 0
		var states []string
		for inst := uint32(0); inst < 2; inst++ {
			tk, _ := jm.GetTask(id, inst)
			states = append(states, tk.GetStatus().GetState().String()+"/"+tk.GetStatus().GetMessage()+"/"+tk.GetStatus().GetPendingReason())
			if tk.GetStatus().GetState() == pelotonv1.TaskState_RUNNING {
				n++
			}
		}
		return n == 2, strings.Join(states, ", ")
	})
}
