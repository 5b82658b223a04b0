package kubernetes

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// clientLimiter is the backend's client rate limiter: a token bucket of
// QPS and burst, as client-go's own, except that requests whose context is
// marked urgent (urgent) are served before every ordinary one waiting.
//
// The backend marks the writes that finish what is already started: the
// bind that follows a pod's create, and the bind of a pod someone else
// created. Such a pod exists and its startup clock runs; with hundreds of
// launches queued for the client budget, a bind that waited its turn
// behind all their creates would add their whole queue to that pod's
// startup, where serving it first costs the others one request each.
type clientLimiter struct {
	bucket *rate.Limiter
	wake   chan struct{} // a waiter was queued
	stop   chan struct{}
	once   sync.Once
	// started starts dispatch with the first request that waits, so a
	// limiter that is never used (a backend never started) runs nothing.
	started sync.Once

	mu             sync.Mutex
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

func newClientLimiter(qps float32, burst int) *clientLimiter {
	return &clientLimiter{bucket: rate.NewLimiter(rate.Limit(qps), max(burst, 1)),
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// Wait returns once the request may be sent, or with an error once ctx
// ends or the limiter is stopped first.
func (l *clientLimiter) Wait(ctx context.Context) error {
	select {
	case <-l.stop:
		return errLimiterStopped
	default:
	}
	l.mu.Lock()
	if len(l.urgent)+len(l.normal) == 0 && l.bucket.Allow() {
		l.mu.Unlock()
		return nil
	}
	w := &waiter{granted: make(chan struct{})}
	if isUrgent(ctx) {
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

// dispatch hands out tokens as the bucket makes them, urgent waiters
// first. A waiter is picked only once its token is due, so an urgent one
// queued meanwhile goes ahead.
func (l *clientLimiter) dispatch() {
	for {
		l.mu.Lock()
		queued := len(l.urgent) + len(l.normal)
		l.mu.Unlock()
		if queued == 0 {
			select {
			case <-l.wake:
				continue
			case <-l.stop:
				return
			}
		}
		r := l.bucket.Reserve()
		if d := r.Delay(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.stop:
				t.Stop()
				return
			}
		}
		l.mu.Lock()
		var w *waiter
		switch {
		case len(l.urgent) > 0:
			w, l.urgent = l.urgent[0], l.urgent[1:]
		case len(l.normal) > 0:
			w, l.normal = l.normal[0], l.normal[1:]
		}
		if w != nil {
			close(w.granted)
		} // else its waiters gave up: the token is spent, as on a failed request
		l.mu.Unlock()
	}
}

// Accept waits for a token.
func (l *clientLimiter) Accept() { _ = l.Wait(context.Background()) }

// TryAccept takes a token if one is free and nobody is waiting.
func (l *clientLimiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.urgent)+len(l.normal) == 0 && l.bucket.Allow()
}

// Stop ends the limiter: waiting and later requests fail.
func (l *clientLimiter) Stop() { l.once.Do(func() { close(l.stop) }) }

// QPS is the bucket's rate.
func (l *clientLimiter) QPS() float32 { return float32(l.bucket.Limit()) }
