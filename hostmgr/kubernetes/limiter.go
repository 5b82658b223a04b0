package kubernetes

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// clientLimiter is the backend's client rate limiter: a token bucket of
// QPS and burst, as client-go's own, with two differences for requests
// whose context is marked urgent (urgent).
//
// Urgent requests are served before every ordinary one waiting. The backend
// marks the writes that finish what is already started: the bind that
// follows a pod's create, and the bind of a pod someone else created. Such
// a pod exists and its startup clock runs; with hundreds of launches queued
// for the client budget, a bind that waited its turn behind all their
// creates would add their whole queue to that pod's startup, where serving
// it first costs the others one request each.
//
// And ordinary requests leave half the burst in the bucket (reserve): only
// urgent ones may spend it. A wave of launches (a large job placed at once)
// then reaches the apiserver and the nodes at most burst/2 at once and then
// at QPS, rather than as one spike of the whole burst. The nodes start pods
// at a finite rate: a spike queues there, and the first pods of a large job
// started slowest (bench kubernetes at QPS 200, burst 400: startup p99 1.6-2.1
// s with the whole burst spent on creates, 0.54 s with half of it; see
// docs/benchmarks.md). The long-run rate of either kind is QPS.
type clientLimiter struct {
	qps     float64
	burst   float64
	reserve float64
	wake    chan struct{} // a waiter was queued
	stop    chan struct{}
	once    sync.Once
	// started starts dispatch with the first request that waits, so a
	// limiter that is never used (a backend never started) runs nothing.
	started sync.Once

	mu             sync.Mutex
	tokens         float64
	last           time.Time // when tokens was last brought up to date
	urgent, normal []*waiter
}

// waiter is one Wait in a queue; granted is closed when it may go.
type waiter struct {
	granted chan struct{}
}

var _ flowcontrol.RateLimiter = (*clientLimiter)(nil)

type urgentKey struct{}

// urgent marks ctx: its requests go before ordinary ones.
func urgent(ctx context.Context) context.Context { return context.WithValue(ctx, urgentKey{}, true) }

func isUrgent(ctx context.Context) bool { v, _ := ctx.Value(urgentKey{}).(bool); return v }

var errLimiterStopped = errors.New("kubernetes: client rate limiter stopped")

// idleWait is how long dispatch sleeps before looking again when the
// bucket never refills (QPS 0).
const idleWait = time.Second

func newClientLimiter(qps float32, burst int) *clientLimiter {
	burst = max(burst, 1)
	return &clientLimiter{qps: float64(qps), burst: float64(burst), reserve: float64(burst / 2), tokens: float64(burst),
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// takeLocked takes a token for a request of the kind given if the bucket
// holds what that kind needs (1, or 1 beyond the reserve for an ordinary
// one); otherwise it says how long until it will.
func (l *clientLimiter) takeLocked(now time.Time, urgent bool) (time.Duration, bool) {
	if !l.last.IsZero() && l.qps > 0 {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.qps)
	}
	l.last = now
	need := 1.0
	if !urgent {
		need += l.reserve
	}
	if l.tokens >= need {
		l.tokens--
		return 0, true
	}
	if l.qps <= 0 {
		return idleWait, false
	}
	return max(time.Duration((need-l.tokens)/l.qps*float64(time.Second)), time.Microsecond), false
}

// Wait returns once the request may be sent, or with an error once ctx
// ends or the limiter is stopped first.
func (l *clientLimiter) Wait(ctx context.Context) error {
	select {
	case <-l.stop:
		return errLimiterStopped
	default:
	}
	u := isUrgent(ctx)
	l.mu.Lock()
	ahead := len(l.urgent)
	if !u {
		ahead += len(l.normal)
	}
	if ahead == 0 {
		if _, ok := l.takeLocked(time.Now(), u); ok {
			l.mu.Unlock()
			return nil
		}
	}
	w := &waiter{granted: make(chan struct{})}
	if u {
		l.urgent = append(l.urgent, w)
	} else {
		l.normal = append(l.normal, w)
	}
	l.mu.Unlock()
	l.started.Do(func() { go l.dispatch() })
	select {
	case l.wake <- struct{}{}:
	default:
	}
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
	case <-l.stop:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.granted: // granted meanwhile: the token is this request's
		return nil
	default:
	}
	l.urgent, l.normal = without(l.urgent, w), without(l.normal, w)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errLimiterStopped
}

func without(ws []*waiter, w *waiter) []*waiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

// dispatch grants the first waiter, urgent ones first, as soon as the
// bucket holds what it needs. A waiter queued meanwhile wakes it, so an
// urgent one does not wait out an ordinary one's longer wait.
func (l *clientLimiter) dispatch() {
	for {
		l.mu.Lock()
		var q *[]*waiter
		switch {
		case len(l.urgent) > 0:
			q = &l.urgent
		case len(l.normal) > 0:
			q = &l.normal
		}
		var d time.Duration
		if q != nil {
			var ok bool
			if d, ok = l.takeLocked(time.Now(), q == &l.urgent); ok {
				close((*q)[0].granted)
				*q = (*q)[1:]
				l.mu.Unlock()
				continue
			}
		}
		l.mu.Unlock()
		if q == nil {
			select {
			case <-l.wake:
				continue
			case <-l.stop:
				return
			}
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.wake:
			t.Stop()
		case <-l.stop:
			t.Stop()
			return
		}
	}
}

// Accept waits for a token.
func (l *clientLimiter) Accept() { _ = l.Wait(context.Background()) }

// TryAccept takes a token if an ordinary request may have one now and
// nobody is waiting.
func (l *clientLimiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.urgent)+len(l.normal) > 0 {
		return false
	}
	_, ok := l.takeLocked(time.Now(), false)
	return ok
}

// Stop ends the limiter: waiting and later requests fail.
func (l *clientLimiter) Stop() { l.once.Do(func() { close(l.stop) }) }

// QPS is the bucket's rate.
func (l *clientLimiter) QPS() float32 { return float32(l.qps) }
