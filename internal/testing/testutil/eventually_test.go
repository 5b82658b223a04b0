package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test, so a test can see Eventually give up.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	// Like the real Fatalf, end the goroutine that called it.
	runtime.Goexit()
}

// run calls f on a goroutine of its own, as Fatalf ends it, and returns
// what Fatalf was told ("" when it was not called).
func (r *recorder) run(f func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func TestEventuallyErrorCondition(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("called %d times, want 3", n)
	}
}

func TestEventuallyBoolCondition(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("called %d times, want 3", n)
	}
}

func TestEventuallyGivesUpWithWhatAndLastError(t *testing.T) {
	r := &recorder{TB: t}
	got := r.run(func() {
		Eventually(r, 20*time.Millisecond, "the widget", func() error { return errors.New("still broken") })
	})
	if !strings.Contains(got, "the widget") || !strings.Contains(got, "still broken") || !strings.Contains(got, "20ms") {
		t.Fatalf("failure %q, want what, the last error and the bound", got)
	}
}

func TestEventuallyGivesUpOnFalse(t *testing.T) {
	r := &recorder{TB: t}
	got := r.run(func() {
		Eventually(r, 20*time.Millisecond, "the widget", func() bool { return false })
	})
	if !strings.Contains(got, "the widget") || !strings.Contains(got, "20ms") {
		t.Fatalf("failure %q, want what and the bound", got)
	}
}

// waitNoLeaks waits on the same poll as Eventually: it returns "" as soon
// as no goroutine matches, and the matching stacks once its time is up.
func TestWaitNoLeaks(t *testing.T) {
	stop := make(chan struct{})
	go func() { <-stop }()
	isOurs := func(g string) bool { return strings.Contains(g, "TestWaitNoLeaks.func") }
	if left := waitNoLeaks(20*time.Millisecond, isOurs); !strings.Contains(left, "TestWaitNoLeaks") {
		t.Fatalf("a goroutine still running was not reported: %q", left)
	}
	time.AfterFunc(10*time.Millisecond, func() { close(stop) })
	if left := waitNoLeaks(5*time.Second, isOurs); left != "" {
		t.Fatalf("a goroutine that ended was reported:\n%s", left)
	}
}
