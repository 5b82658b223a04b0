package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// queued is how many requests wait in the limiter.
func (l *clientLimiter) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.urgent) + len(l.normal)
}

func waitQueued(t *testing.T, l *clientLimiter, n int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, fmt.Sprintf("%d requests queued", n), func() error {
		if q := l.queued(); q != n {
			return fmt.Errorf("%d queued", q)
		}
		return nil
	})
}

// TestUrgentRequestsGoFirst: a bind queued behind creates is served before
// them, and the rest keep their order.
func TestUrgentRequestsGoFirst(t *testing.T) {
	l := newClientLimiter(10, 1)
	defer l.Stop()
	if err := l.Wait(context.Background()); err != nil { // the burst
		t.Fatal(err)
	}
	order := make(chan string, 8)
	for _, name := range []string{"create-1", "create-2", "create-3", "create-4"} {
		go func() {
			if err := l.Wait(context.Background()); err == nil {
				order <- name
			}
		}()
		waitQueued(t, l, int(name[len(name)-1]-'0'))
	}
	go func() {
		if err := l.Wait(urgent(context.Background())); err == nil {
			order <- "bind"
		}
	}()
	waitQueued(t, l, 5)
	var got []string
	for range 5 {
		select {
		case s := <-order:
			got = append(got, s)
		case <-time.After(10 * time.Second):
			t.Fatalf("served %v, then nothing for 10s", got)
		}
	}
	// A token may have been handed to create-1 before the bind arrived;
	// never to more than that one.
	want1 := []string{"bind", "create-1", "create-2", "create-3", "create-4"}
	want2 := []string{"create-1", "bind", "create-2", "create-3", "create-4"}
	if !slices.Equal(got, want1) && !slices.Equal(got, want2) {
		t.Fatalf("served %v, want %v (or the bind second)", got, want1)
	}
}

// TestLimiterWaitEnds: a waiter whose context ends leaves the queue, and
// after Stop every wait fails.
func TestLimiterWaitEnds(t *testing.T) {
	l := newClientLimiter(0.5, 1) // one token every 2s
	if !l.TryAccept() {
		t.Fatal("the first token is not free")
	}
	if l.TryAccept() {
		t.Fatal("a second token is free at 0.5 QPS, burst 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if n := l.queued(); n != 0 {
		t.Fatalf("%d waiters left queued", n)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background()) }()
	waitQueued(t, l, 1)
	l.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, errLimiterStopped) {
			t.Fatalf("wait ended by Stop: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end a waiter")
	}
	if err := l.Wait(context.Background()); !errors.Is(err, errLimiterStopped) {
		t.Fatalf("wait after Stop: %v", err)
	}
	if l.QPS() != 0.5 {
		t.Fatalf("QPS %v", l.QPS())
	}
}

// TestOrdinaryRequestsLeaveHalfTheBurst: a wave of ordinary requests (pod
// creates) spends at most half the burst at once and then goes at QPS;
// urgent ones (binds) may spend the other half at once.
func TestOrdinaryRequestsLeaveHalfTheBurst(t *testing.T) {
	l := newClientLimiter(0.01, 10) // a token every 100s: none refills during the test
	defer l.Stop()
	for i := range 5 {
		if !l.TryAccept() {
			t.Fatalf("ordinary request %d of the first half of the burst refused", i+1)
		}
	}
	if l.TryAccept() {
		t.Fatal("an ordinary request spent the reserve")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an ordinary wait got a reserved token: %v", err)
	}
	for i := range 5 {
		if err := l.Wait(urgent(context.Background())); err != nil {
			t.Fatalf("urgent request %d of the reserve: %v", i+1, err)
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := l.Wait(urgent(short)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an urgent request beyond the burst: %v", err)
	}
}

// TestOrdinaryRequestsGoOnAtQPS: past its half of the burst, a wave of
// ordinary requests is not stalled; it goes as the bucket refills.
func TestOrdinaryRequestsGoOnAtQPS(t *testing.T) {
	l := newClientLimiter(200, 4)
	defer l.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 12 { // 2 from the burst, then 10 at 200/s
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("ordinary request %d: %v", i+1, err)
		}
	}
}
