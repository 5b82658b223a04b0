package jobmgr

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
)

// awayView is a sandboxes backend whose substrate can be away. While it
// is, the backend knows no host and no run (as a kubernetes backend whose
// caches have not listed the cluster yet), and says why it is away.
type awayView struct {
	*sandboxView
	mu       sync.Mutex
	away     bool
	since    time.Time
	statuses int // Status calls
	changed  func()
}

var (
	_ hostmgr.Backend           = (*awayView)(nil)
	_ hostmgr.SubstrateReporter = (*awayView)(nil)
	_ hostmgr.HostWatcher       = (*awayView)(nil)
)

func (v *awayView) WatchHosts(changed func()) {
	v.mu.Lock()
	v.changed = changed
	v.mu.Unlock()
}

func (v *awayView) Hosts() []hostmgr.HostInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.away {
		return nil
	}
	return v.sandboxView.Hosts()
}

// awayReason is what the test substrate says while it is away.
const awayReason = "HTTP 404 Not Found: <!DOCTYPE html>"

func (v *awayView) Substrate() hostmgr.SubstrateStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := hostmgr.SubstrateStatus{Name: "test substrate", Reachable: !v.away, Since: v.since}
	if v.away {
		s.Reason = awayReason
	}
	return s
}

func (v *awayView) setAway(away bool) {
	v.mu.Lock()
	v.away, v.since = away, time.Now()
	changed := v.changed
	v.mu.Unlock()
	if changed != nil {
		changed()
	}
}

func (v *awayView) Status(id string) (hostmgr.TaskEvent, error) {
	v.mu.Lock()
	v.statuses++
	away := v.away
	v.mu.Unlock()
	if away {
		return hostmgr.TaskEvent{}, hostmgr.ErrUnknownTask
	}
	return v.sandboxView.Status(id)
}

func (v *awayView) statusCalls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.statuses
}

// TestWorkWaitsForTheSubstrate: a job created while the substrate was
// never reached is taken (no host is known to judge its size by); while
// the substrate is away nothing is placed or launched, and job get and
// task get say that the substrate is not reachable and why; once it
// answers, the job runs.
func TestWorkWaitsForTheSubstrate(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	var view *awayView
	p := startProcessOn(t, e, s, Options{LostBackoff: 10 * time.Millisecond}, procConfig{level: slog.LevelWarn,
		backend: func(v *sandboxView) hostmgr.Backend {
			view = &awayView{sandboxView: v, away: true, since: time.Now()}
			return view
		}})
	id, err := p.jm.CreateJob(context.Background(), &pelotonv1.JobSpec{Name: "w", Type: pelotonv1.JobType_BATCH, Pool: resmgr.DefaultPoolPath,
		InstanceCount: 2, DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 0.5, MemoryMb: 64}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "the test substrate is not reachable (for "
	testutil.Eventually(t, 20*time.Second, "job get and task get say the substrate is away", func() error {
		j, err := p.jm.GetJob(id)
		if err != nil {
			return err
		}
		msg := j.GetStatus().GetMessage()
		tk, err := p.jm.GetTask(id, 1)
		if err != nil {
			return err
		}
		why := tk.GetStatus().GetPendingReason()
		if !strings.HasPrefix(msg, "instance 0 waits: "+want) || !strings.Contains(msg, awayReason) ||
			!strings.HasPrefix(why, want) || !strings.Contains(why, awayReason) {
			return fmt.Errorf("job message %q, task pending reason %q", msg, why)
		}
		return nil
	})
	if n, _ := s.counts(); n != 0 {
		t.Fatalf("%d launches while the substrate is away", n)
	}
	view.setAway(false)
	testutil.Eventually(t, 20*time.Second, "the job runs once the substrate answers", func() error {
		if got := tasksOf(t, p.jm, id); strings.Count(got, ":RUNNING/1@") != 2 {
			return fmt.Errorf("tasks %s", got)
		}
		return nil
	})
	if j, _ := p.jm.GetJob(id); strings.Contains(j.GetStatus().GetMessage(), "not reachable") {
		t.Errorf("job message %q once the substrate is back", j.GetStatus().GetMessage())
	}
}

// TestRecoveryWaitsForTheSubstrate: a control plane that starts while its
// substrate is away does not take the runs it finds unknown for lost (the
// backend cannot know them yet), neither at recovery nor in reconciliation
// passes; once the substrate answers, the same runs go on.
func TestRecoveryWaitsForTheSubstrate(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	s := newSandboxes(2)
	p1 := startProcess(t, e, s)
	id, _ := runningJob(t, p1.jm, patchService("svc", "img:1"))
	before := tasksOf(t, p1.jm, id)
	p1.crash()

	var view *awayView
	p2 := startProcessOn(t, e, s, Options{LostBackoff: 10 * time.Millisecond, ReconcileEvery: 20 * time.Millisecond},
		procConfig{level: slog.LevelWarn, backend: func(v *sandboxView) hostmgr.Backend {
			view = &awayView{sandboxView: v, away: true, since: time.Now()}
			return view
		}})
	// Recovery asks about each of the 2 runs; each reconciliation pass
	// asks again.
	testutil.Eventually(t, 20*time.Second, "reconciliation passes while the substrate is away", func() error {
		if n := view.statusCalls(); n < 2+5*2 {
			return fmt.Errorf("%d Status calls", n)
		}
		return nil
	})
	if got := tasksOf(t, p2.jm, id); got != before {
		t.Fatalf("tasks %s while the substrate is away, want them as they were: %s", got, before)
	}
	view.setAway(false)
	n := view.statusCalls()
	testutil.Eventually(t, 20*time.Second, "reconciliation passes once the substrate answers", func() error {
		if m := view.statusCalls(); m < n+5*2 {
			return fmt.Errorf("%d Status calls", m)
		}
		return nil
	})
	if got := tasksOf(t, p2.jm, id); got != before {
		t.Fatalf("tasks %s once the substrate answers, want the same runs: %s", got, before)
	}
	if launches, _ := s.counts(); launches != 2 {
		t.Fatalf("%d launches, want the 2 of the first process only", launches)
	}
}
