package resmgr

import (
	"context"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestRunCountsAdmissionRounds: every round of Run counts in
// peloton_admission_rounds_total, the ticks' with nothing to do too, and
// none before Run.
func TestRunCountsAdmissionRounds(t *testing.T) {
	m := newTestManager(t)
	before := promtest.ToFloat64(metrics.AdmissionRounds)
	m.admitOnce()
	if got := promtest.ToFloat64(metrics.AdmissionRounds); got != before {
		t.Fatalf("an admission pass outside Run counted %v rounds", got-before)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 10*time.Second, "three rounds of an idle manager", func() bool {
		return promtest.ToFloat64(metrics.AdmissionRounds)-before >= 3
	})
}
