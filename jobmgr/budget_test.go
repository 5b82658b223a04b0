package jobmgr

import (
	"context"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// A service's runs carry its disruption budget to the backend (the
// kubernetes backend makes a PodDisruptionBudget of it), a batch job's
// none; when an update changes only the SLA, no run is launched, and the
// hosts are told the new budget.
func TestHarnessRunsCarryTheJobsDisruptionBudget(t *testing.T) {
	h := newHarness(t)
	spec := serviceSpec(3, "img:1")
	spec.Sla = &pelotonv1.SlaSpec{MaximumUnavailableInstances: 1}
	id := h.create(spec)
	var runs []string
	for inst := range uint32(3) {
		runs = append(runs, h.placeRun(id, inst, 1, "h1"))
	}
	batch := h.create(batchSpec(1, 0))
	batchRun := h.placeRun(batch, 0, 1, "h1")
	h.hosts.mu.Lock()
	got := h.hosts.runs[runs[0]].spec.Budget
	none := h.hosts.runs[batchRun].spec.Budget
	h.hosts.mu.Unlock()
	if got == nil || *got != (hostmgr.DisruptionBudget{Instances: 3, MaxUnavailable: 1}) {
		t.Fatalf("the service's run carries budget %+v; want 1 unavailable of 3", got)
	}
	if none != nil {
		t.Fatalf("a batch run carries budget %+v; want none", none)
	}
	for _, r := range runs {
		h.hosts.emit(r, taskRunning, 0, "")
	}
	h.waitTask(id, 2, taskRunning)

	next := serviceSpec(3, "img:1")
	next.Sla = &pelotonv1.SlaSpec{MaximumUnavailableInstances: 2}
	if _, err := h.jm.Updates().CreateUpdate(context.Background(), id, next, &pelotonv1.UpdateSpec{}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the hosts are told the new budget", func() bool {
		b, ok := h.hosts.budget(id)
		return ok && b == hostmgr.DisruptionBudget{Instances: 3, MaxUnavailable: 2}
	})
	if n := len(h.hosts.called("launch ")); n != 4 {
		t.Errorf("%d launches; an update of the SLA alone launches nothing: %v", n, h.hosts.called("launch "))
	}
	if _, ok := h.hosts.budget(batch); ok {
		t.Error("the hosts were told a batch job's budget")
	}
}

// A run the backend reports evicted (PREEMPTED, reason evicted: a kubelet
// under node pressure, or kubectl drain through the Eviction API) runs
// again, placed anew, with no failure counted: a batch job with no
// failures to spare still succeeds, and a service's instance keeps its
// clean record. The history shows the run's end PREEMPTED with the reason,
// and peloton_preemptions_total{reason="evicted"} counts it.
func TestHarnessEvictedRunRunsAgainWithoutAFailure(t *testing.T) {
	h := newHarness(t)
	before := promtestutil.ToFloat64(metrics.Preemptions.WithLabelValues(metrics.PreemptEvicted))
	batch := h.create(batchSpec(1, 0))
	svc := h.create(serviceSpec(1, "img:1"))
	b1 := h.placeRun(batch, 0, 1, "h1")
	s1 := h.placeRun(svc, 0, 1, "h1")
	for _, r := range []string{b1, s1} {
		h.hosts.emit(r, taskRunning, 0, "")
	}
	h.waitTask(svc, 0, taskRunning)
	for _, r := range []string{b1, s1} {
		h.hosts.emit(r, taskPreempted, 0, "evicted")
	}
	for _, id := range []string{batch, svc} {
		testutil.Eventually(t, 10*time.Second, "run 2 of job "+id+" queued", func() bool {
			h.advance(time.Minute) // past any restart backoff
			return h.res.queuedRun(id, 0) == 2
		})
	}
	b2 := h.placeRun(batch, 0, 2, "h2")
	s2 := h.placeRun(svc, 0, 2, "h2")
	h.hosts.emit(b2, taskSucceeded, 0, "")
	h.waitJob(batch, pelotonv1.JobState_JOB_SUCCEEDED)
	h.hosts.emit(s2, taskRunning, 0, "")
	for _, id := range []string{batch, svc} {
		st := h.storedTask(id, 0)
		if st.FailureCount != 0 || st.RunId != 2 {
			t.Errorf("job %s after an eviction: failureCount %d, run %d; want 0 and 2", id, st.FailureCount, st.RunId)
		}
		ended := false
		for _, tr := range st.History {
			if tr.State == taskPreempted && tr.RunId == 1 && tr.Reason == "evicted" {
				ended = true
			}
			if tr.State == taskLost || tr.State == taskFailed {
				t.Errorf("job %s: the evicted run was recorded %s", id, tr.State)
			}
		}
		if !ended {
			t.Errorf("job %s: history %v has no PREEMPTED end of run 1 with reason evicted", id, st.History)
		}
	}
	if got := promtestutil.ToFloat64(metrics.Preemptions.WithLabelValues(metrics.PreemptEvicted)) - before; got != 2 {
		t.Errorf("peloton_preemptions_total{reason=evicted} rose by %v; want 2", got)
	}
}
