package jobmgr

import (
	"context"
	"testing"
	"time"
)

// TestSpawnedWorkIsWaitedFor: a goroutine the Manager spawns sees the
// engine's context end, Wait does not return before it has, and nothing is
// spawned once the Manager has stopped.
func TestSpawnedWorkIsWaitedFor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{runCtx: ctx}
	started, finished := make(chan struct{}), make(chan struct{})
	if !m.spawn(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(finished)
	}) {
		t.Fatal("spawn refused while the engine runs")
	}
	<-started
	cancel()
	m.Wait()
	select {
	case <-finished:
	default:
		t.Fatal("Wait returned before the spawned goroutine ended")
	}
	if m.spawn(func(context.Context) { t.Error("spawned after Wait") }) {
		t.Error("spawn accepted work after Wait")
	}
}

// TestAfterRunsLaterOrNotAtAll: work scheduled with after runs once its
// delay has passed, and not at all if the engine stops first; Wait does
// not wait out the delay.
func TestAfterRunsLaterOrNotAtAll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{runCtx: ctx}
	ran := make(chan struct{})
	m.after(time.Millisecond, func(context.Context) { close(ran) })
	<-ran
	m.after(time.Hour, func(context.Context) { t.Error("ran after the engine stopped") })
	cancel()
	m.Wait() // returns at once: the hour is not waited out

	idle := &Manager{}
	idle.after(0, func(context.Context) { t.Error("ran on a Manager never started") })
	idle.Wait()
}
