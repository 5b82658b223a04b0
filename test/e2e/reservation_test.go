package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestBigGangStartsBehindStreamOfSmallWork: on the local backend (real
// processes), two hosts of 1 CPU kept full by a stream of 0.5 CPU jobs
// arriving faster than they end, and a gang of two 1-CPU members, which
// needs both hosts empty at once and which the stream, small work passing
// it, would starve. With --reservation-after 2s the gang gets a
// reservation that job get shows, its hosts are set aside as they free up
// (the stream's preemptible work backfills them and is preempted), and the
// whole gang runs within the bound: the wait, the 2 s the work already on
// the hosts runs, a kill, launch.
func TestBigGangStartsBehindStreamOfSmallWork(t *testing.T) {
	s := startStack(t, t.TempDir(), stackOpts{hosts: 2, hostCPU: 1, hostMem: 1024,
		configure: func(c *cluster.Config) { c.ReservationAfter = 2 * time.Second }})
	ctx := ctxT(t)
	small := func(i int) *pelotonv1.JobSpec {
		spec := sleeper(fmt.Sprintf("small-%d", i), "/default", 1, 0.5)
		spec.DefaultSpec.Command = []string{"sleep", "2"}
		return spec
	}
	// Fill the cluster before the gang arrives.
	for i := range 4 {
		if _, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: small(i)}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for i := 4; i < 200; i++ { // at most a minute of stream
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: small(i)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(time.Second)

	gang := sleeper("gang", "/default", 2, 1)
	gang.Sla = &pelotonv1.SlaSpec{MinimumRunningInstances: 2}
	g, err := s.jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: gang})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	var reservation *pelotonv1.GangReservation
	for deadline := created.Add(25 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		j, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: g.JobId})
		if err != nil {
			t.Fatal(err)
		}
		if r := j.GetJob().GetStatus().GetReservation(); r != nil && len(r.Hosts) > 0 {
			reservation = r
		}
		if j.GetJob().GetStatus().GetTaskCounts()["RUNNING"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gang did not run within 25 s behind the stream: %v, reservation %v", j.GetJob().GetStatus(), reservation)
		}
	}
	t.Logf("the gang ran %s after it was created", time.Since(created).Round(100*time.Millisecond))
	if reservation == nil || reservation.Pool != "/default" || reservation.Members != 2 {
		t.Fatalf("job get never showed the gang's reservation with its hosts: %v", reservation)
	}
	j, err := s.jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: g.JobId})
	if err != nil {
		t.Fatal(err)
	}
	if r := j.GetJob().GetStatus().GetReservation(); r != nil {
		t.Fatalf("a running gang still holds a reservation: %v", r)
	}
}
