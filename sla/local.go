package sla

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Local is the evaluator of one cluster stack: the pure core behind a mutex,
// with time from a clock. It is safe for concurrent use. Its calls never
// block on anything but its own short lock, so they fail only when the
// context is already done.
type Local struct {
	clock func() time.Time

	// mu serialises every call. Decisions must be taken against the state
	// left by the previous decision (two requests that each fit alone may
	// not fit together), and the core is cheap (microseconds), so one lock
	// is both correct and fast enough.
	mu   sync.Mutex
	core *core
	// observe, if set, runs under mu after every call; tests use it to check
	// invariants at every linearisation point.
	observe func(op string, jobID string, err error)
}

var _ Evaluator = (*Local)(nil)

// NewLocal returns an empty evaluator reading time from clock (time.Now if
// nil).
func NewLocal(clock func() time.Time) *Local {
	if clock == nil {
		clock = time.Now
	}
	return &Local{clock: clock, core: newCore(nil)}
}

// now reads the clock. It is called with mu held so the core sees time move
// forward only: two callers that read the clock before locking could apply
// their times out of order.
func (l *Local) now() time.Time { return l.clock() }

func (l *Local) done(op, jobID string, err error) {
	if l.observe != nil {
		l.observe(op, jobID, err)
	}
}

// Request implements Evaluator.
func (l *Local) Request(ctx context.Context, req Request) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g, err := l.core.request(l.now(), req)
	l.done("request", req.JobID, err)
	return g, err
}

// Release implements Evaluator.
func (l *Local) Release(ctx context.Context, grantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.core.release(l.now(), grantID)
	l.done("release", "", err)
	return err
}

// Renew implements Evaluator.
func (l *Local) Renew(ctx context.Context, grantID string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.core.renew(l.now(), grantID, ttl)
	l.done("renew", "", err)
	return err
}

// SetJob implements Evaluator.
func (l *Local) SetJob(ctx context.Context, job JobSLA) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.core.setJob(l.now(), job)
	l.done("setjob", job.JobID, nil)
	return nil
}

// RemoveJob implements Evaluator.
func (l *Local) RemoveJob(ctx context.Context, jobID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.core.removeJob(l.now(), jobID)
	l.done("removejob", jobID, nil)
	return nil
}

// ReportAvailability implements Evaluator.
func (l *Local) ReportAvailability(ctx context.Context, jobID string, unavailable []uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.core.report(l.now(), jobID, unavailable)
	l.done("report", jobID, nil)
	return nil
}

// Status implements Evaluator.
func (l *Local) Status(ctx context.Context, jobID string) (JobStatus, error) {
	if err := ctx.Err(); err != nil {
		return JobStatus{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.core.status(l.now(), jobID)
	l.done("status", jobID, nil)
	if !ok {
		return JobStatus{}, fmt.Errorf("job %s: %w", jobID, ErrUnknownJob)
	}
	return st, nil
}

// Expire drops the grants that are due and returns every grant that expired
// since the previous call (up to 1024 of them), so the caller can log which
// holders stopped renewing. Grants also expire lazily on every other call;
// calling Expire is needed only for the log.
func (l *Local) Expire() []Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	gs := l.core.expire(l.now())
	l.done("expire", "", nil)
	return gs
}
