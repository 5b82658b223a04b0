package placement

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/resmgr"
)

// stepClock is resmgr's clock in these tests: one step of the simulated
// stream is one second.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) step() {
	c.mu.Lock()
	c.t = c.t.Add(time.Second)
	c.mu.Unlock()
}

// startReserving starts a real hostmgr with n hosts of 4 CPU and a resmgr
// on a step clock that reserves hosts for gangs waiting longer than after.
func startReserving(ctx context.Context, t *testing.T, n int, after time.Duration) (*hostmgr.Manager, *resmgr.Manager, *stepClock) {
	t.Helper()
	var infos []hostmgr.HostInfo
	for i := range n {
		infos = append(infos, hostmgr.HostInfo{Name: fmt.Sprintf("h%d", i), Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 4096}})
	}
	hm := hostmgr.NewManager(&fixedBackend{infos}, hostmgr.Options{LeaseTTL: time.Hour, Logger: quiet})
	if err := hm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hm.Close() })
	clock := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	rm, err := resmgr.New(ctx, memstore.New(memstore.Options{}), resmgr.Options{Logger: quiet, BackoffBase: time.Millisecond,
		BackoffMax: time.Millisecond, ReservationAfter: after, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	return hm, rm, clock
}

// streamResult is what a run of the stream saw.
type streamResult struct {
	gangStep  int // steps from the gang's arrival to its placement; -1: never
	preempted []string
}

// runStream runs a real resmgr and hostmgr (4 hosts of 4 CPU) with an
// engine, driven step by step: every step, the small tasks (1 CPU, each
// running 4 steps) that ended leave and new ones keep the cluster full
// with a backlog, so hosts have a little room now and then and never a
// whole host free. A gang of 2 members of 4 CPU (a whole host each)
// arrives at step 4, once the cluster is full. Victims are killed at
// once, as jobmgr would.
func runStream(t *testing.T, after time.Duration, steps int, nonPreemptibleEvery int) streamResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	hm, rm, clock := startReserving(ctx, t, 4, after)
	rm.SetCapacity(hm.Capacity())
	// Non-preemptible work runs only inside its pool's reservation.
	if err := rm.ReserveHostsForDefault(ctx, hm.Capacity()); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); rm.Run(ctx) }()
	e := NewEngine(rm, hm, EngineOptions{Logger: quiet})

	type run struct {
		task  *resmgr.Task
		host  string
		endAt int
	}
	running := map[string]*run{}
	queued, next := 0, 0
	gang := resmgr.NewGang(MakeTask("gang", 0).CPU(4).Obj(), MakeTask("gang", 1).CPU(4).Obj())
	for _, task := range gang.Tasks {
		task.Preemptible = true
	}
	res := streamResult{gangStep: -1}
	const gangArrives = 4
	end := func(id string) {
		r := running[id]
		hm.ReleaseTask(id)
		rm.ReleaseRun(r.task.JobID, r.task.Instance, r.task.RunID)
		delete(running, id)
	}
	for step := 0; step < steps && res.gangStep < 0; step++ {
		clock.step()
		for id, r := range running {
			if r.endAt <= step {
				end(id)
			}
		}
		// Ramp up by 4 tasks a step to 16 (the cluster full), then keep 4
		// more queued: 4 end and 4 start every step, so no pass ever
		// has the 8 CPU the gang needs free.
		target := min(4*(step+1), 16)
		if step >= 3 {
			target += 4
		}
		var gs []*resmgr.Gang
		for ; len(running)+queued < target; queued++ {
			b := MakeTask(fmt.Sprintf("s%d", next), 0)
			task := b.Obj()
			task.Preemptible = nonPreemptibleEvery == 0 || next%nonPreemptibleEvery != 0
			next++
			gs = append(gs, resmgr.NewGang(task))
		}
		if step == gangArrives {
			gs = append([]*resmgr.Gang{gang}, gs...)
		}
		if err := rm.Enqueue(gs...); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			reserved := map[string]bool{}
			for _, r := range rm.HostReservations() {
				for _, h := range r.Hosts {
					reserved[h] = true
				}
			}
			if got := rm.DequeueGangs(ctx, 1000, 30*time.Millisecond); len(got) > 0 {
				e.round(got)
			}
			short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
			for _, p := range rm.GetPlacements(short, 1000) {
				rm.MarkRunning(p.Task.JobID, p.Task.Instance)
				if reserved[p.Host] && !p.Task.Preemptible {
					t.Errorf("step %d: non-preemptible %s placed on %s, reserved for the gang", step, p.Task.Key(), p.Host)
				}
				if p.Task.JobID == "gang" {
					res.gangStep = step - gangArrives
					continue
				}
				queued--
				running[p.Task.RunTaskID()] = &run{task: p.Task, host: p.Host, endAt: step + 4}
			}
			stop()
			short, stop = context.WithTimeout(ctx, time.Millisecond)
			for _, v := range rm.GetPreemptions(short) {
				if _, ok := running[v.Task.RunTaskID()]; ok {
					res.preempted = append(res.preempted, fmt.Sprintf("%s:%s", v.Task.Key(), v.Reason))
					if !v.Task.Preemptible {
						t.Errorf("non-preemptible %s preempted", v.Task.Key())
					}
					end(v.Task.RunTaskID())
				}
			}
			stop()
		}
	}
	return res
}

// TestEngineBigGangStartsBehindSmallWork: without reservations a gang of
// two whole hosts never starts behind a stream of 1-CPU work that keeps
// the cluster full (the behaviour TestBigGangDoesNotBlockSmallWork
// describes at admission); with them it starts within ReservationAfter
// plus the time the small work on its hosts takes to end (4 steps), plus
// a step for the victims' kill, whether the stream's work is preemptible
// (backfill, preempted) or partly not (kept off the reserved hosts).
func TestEngineBigGangStartsBehindSmallWork(t *testing.T) {
	if got := runStream(t, -1, 30, 0); got.gangStep >= 0 {
		t.Fatalf("without reservations the gang started at step %d; the stream should starve it", got.gangStep)
	}
	for _, every := range []int{0, 2} {
		t.Run(fmt.Sprintf("non-preemptible every %d", every), func(t *testing.T) {
			got := runStream(t, 5*time.Second, 30, every)
			if got.gangStep < 0 || got.gangStep > 5+4+2 {
				t.Fatalf("gang placed %d steps after it arrived, want within 11 (reservation after 5 s, small tasks run 4)", got.gangStep)
			}
			for _, p := range got.preempted {
				if p[len(p)-len(resmgr.ReasonReservation):] != resmgr.ReasonReservation {
					t.Fatalf("victim %s, only backfill for the reservation may be preempted", p)
				}
			}
			t.Logf("gang placed %d steps after it arrived; %d backfill tasks preempted", got.gangStep, len(got.preempted))
		})
	}
}

// TestEngineReservationLetsGoneHostsGo: a reserved host that goes into
// maintenance leaves the reservation, which takes another as it frees up.
func TestEngineReservationLetsGoneHostsGo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hm, rm, clock := startReserving(ctx, t, 3, time.Second)
	// Each host runs 3 CPU of other work; a gang of two 4-CPU members waits.
	for i := range 3 {
		hm.Recover(fmt.Sprintf("w-%d-1", i), fmt.Sprintf("h%d", i), resources.Resources{MilliCPU: 3000, MemoryMB: 128})
	}
	rm.SetCapacity(resources.Resources{MilliCPU: 3000, MemoryMB: 1 << 20})
	gang := resmgr.NewGang(MakeTask("gang", 0).CPU(4).Obj(), MakeTask("gang", 1).CPU(4).Obj())
	for _, task := range gang.Tasks {
		task.Preemptible = true
	}
	if err := rm.Enqueue(gang); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rm.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	e := NewEngine(rm, hm, EngineOptions{Logger: quiet})
	hosts := func() string {
		rs := rm.HostReservations()
		if len(rs) != 1 {
			return fmt.Sprint(rs)
		}
		return fmt.Sprint(rs[0].Hosts)
	}
	clock.step()
	clock.step()
	for i := 0; rm.HostReservations() == nil; i++ { // admission runs at least every 250 ms
		if i == 100 {
			t.Fatal("no reservation for the gang after it waited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The gang is not admitted (the cluster is full), so a round of other
	// work drives the engine: it sets aside the two hosts with the most
	// room, and places its own task (not preemptible) elsewhere.
	round := func() { e.round([]*resmgr.Gang{resmgr.NewGang(MakeTask("probe", 0).CPU(0.5).Obj())}) }
	round()
	if got := hosts(); got != "[h0 h1]" {
		t.Fatalf("reserved %s, want [h0 h1]", got)
	}
	if _, err := hm.Maintenance().StartMaintenance(ctx, []string{"h0"}); err != nil {
		t.Fatal(err)
	}
	round()
	if got := hosts(); got != "[h1 h2]" {
		t.Fatalf("after h0 went into maintenance the reservation holds %s, want [h1 h2]", got)
	}
}
