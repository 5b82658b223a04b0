package jobmgr

import (
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/sla"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestGrantOfAnInstanceNotStartedYet: an update may pick an instance that
// waits to start (a restart backoff). It starts on the new spec with the
// run it already had, so that run becoming available must release the
// grant; a grant waiting for a newer run would hold the job's budget, and
// the update, forever.
func TestGrantOfAnInstanceNotStartedYet(t *testing.T) {
	spec := &pelotonv1.JobSpec{Name: "svc", Type: pelotonv1.JobType_SERVICE, Pool: "/default", InstanceCount: 2,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"server"}, Resources: &pelotonv1.Resources{Cpu: 1, MemoryMb: 64}}}
	for _, tc := range []struct {
		name  string
		state pelotonv1.TaskState
		// run is the run that later becomes available.
		run uint32
	}{
		{"waiting to start", stInitialized, 2},
		{"running, replaced by a new run", stRunning, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jv, err := newJobVersion(1, spec, time.Now(), "created")
			if err != nil {
				t.Fatal(err)
			}
			j := newJob("j", jv, &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_RUNNING}, 1)
			m := &Manager{sla: sla.NewLocal(nil), now: time.Now}
			m.fillTasks(j)
			up := j.task(1)
			up.rt.State, up.rt.RunId, up.availableSince = stRunning, 1, time.Now()
			tk := j.task(0)
			tk.rt.State, tk.rt.RunId = tc.state, 2
			if tc.state == stRunning {
				tk.availableSince = time.Now()
			}
			m.registerSLA(j)
			m.reportAvailability(j)
			if err := m.disrupt(j, 0, "update/u", "test"); err != nil {
				t.Fatal(err)
			}
			if !m.reportAvailability(j) {
				t.Fatal("the grant is gone before the instance ran again")
			}
			// The instance runs (again), on the new spec, and is available.
			tk.mu.Lock()
			tk.rt.State, tk.rt.RunId, tk.availableSince = stRunning, tc.run, time.Now()
			tk.mu.Unlock()
			if m.reportAvailability(j) {
				t.Fatalf("run %d is available but the grant is still held", tc.run)
			}
		})
	}
}
