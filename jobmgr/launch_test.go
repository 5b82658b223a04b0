package jobmgr

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// TestLaunchersShareOneBatchOfPlacements: the placement engine hands over
// placements in large batches, and each launch waits on the backend (a pod
// create). Every launcher must get work from such a batch, so that as many
// launches as there are launchers wait at once; a launcher that took a
// batch for itself would launch it one by one while the others idle.
func TestLaunchersShareOneBatchOfPlacements(t *testing.T) {
	const launchers, instances = 24, 96
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(4)
	hold := make(chan struct{})
	s.hold = hold
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	p := startProcessWith(t, e, s, Options{Launchers: launchers})
	spec := &pelotonv1.JobSpec{Name: "wide", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: instances,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
	id, err := p.jm.CreateJob(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every launcher waiting on a launch", 20*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFlight == launchers, fmt.Sprintf("%d launches waiting (at most %d so far)", s.inFlight, s.maxInFlight)
	})
	release()
	waitFor(t, "every instance running", 20*time.Second, func() (bool, string) {
		ts, err := p.jm.ListTasks(id, nil)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, tk := range ts {
			if tk.Status.State == pelotonv1.TaskState_RUNNING {
				n++
			}
		}
		return n == instances, fmt.Sprintf("%d of %d running", n, instances)
	})
	if s.maxInFlight != launchers {
		t.Errorf("at most %d launches waited at once, want %d (the launchers)", s.maxInFlight, launchers)
	}
}

// TestLaunchSpecNamesGang: the runs of a job's gang (its first
// minimumRunningInstances instances, placed together) reach the backend
// with the gang's name in LaunchSpec.Gang, so that a backend can start
// co-located members as one unit; the job's other instances, placed alone,
// carry none.
func TestLaunchSpecNamesGang(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	p := startProcess(t, e, s)
	spec := &pelotonv1.JobSpec{Name: "gang", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath, InstanceCount: 5,
		Sla:         &pelotonv1.SlaSpec{MinimumRunningInstances: 3},
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"work"}, Resources: &pelotonv1.Resources{Cpu: 0.1, MemoryMb: 8}}}
	id, err := p.jm.CreateJob(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every instance launched", 20*time.Second, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.runs) == 5, fmt.Sprintf("%d of 5 launched", len(s.runs))
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for inst := range uint32(5) {
		want := ""
		if inst < 3 {
			want = id + "/gang-0"
		}
		r := s.runs[resmgr.RunTaskID(id, inst, 1)]
		if r == nil || r.gang != want {
			t.Errorf("instance %d launched as %+v, want Gang %q", inst, r, want)
		}
	}
}

// TestDefaultLaunchersKeepTheBatcherFull: each launcher waits for its
// launch record's group commit, so by default there are enough of them to
// fill every txn the batcher can have on its way and forming, and more for
// the backend's own waits; an explicit count is kept as given.
func TestDefaultLaunchersKeepTheBatcherFull(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	ctx := context.Background()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), MaxTxnOps: e.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	quiet := slog.New(slog.DiscardHandler)
	rm, err := resmgr.New(ctx, st, resmgr.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hm := hostmgr.NewManager(&sandboxView{s: newSandboxes(1)}, hostmgr.Options{Logger: quiet, Store: st})
	for _, c := range []struct {
		name      string
		batcher   store.BatcherOptions
		launchers int
		want      int
	}{
		{"defaults", store.BatcherOptions{}, 0, 256 + 256*3},
		{"small txns, one in flight", store.BatcherOptions{MaxOps: 8, MaxInFlight: 1}, 0, 256 + 8*2},
		{"explicit", store.BatcherOptions{}, 5, 5},
	} {
		b := store.NewBatcher(st, c.batcher)
		m := New(st, b, rm, hm, Options{Logger: quiet, Launchers: c.launchers})
		b.Close()
		if m.launchers != c.want {
			t.Errorf("%s: %d launchers, want %d", c.name, m.launchers, c.want)
		}
	}
}
