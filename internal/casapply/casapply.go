// Package casapply is the one shape of a change to state kept both in
// memory, under a mutex, and in a store: check the change against memory
// under the lock, write it without the lock (a compare-and-swap on the
// revision the check saw, and any remote call the change needs), then apply
// what was written under the lock again. No lock is held across the write,
// and no caller writes its own unlock for every way a check can fail.
//
// It imports nothing of Peloton: the federation's registry and global pools
// and resmgr's pool tree use it with their own errors and records.
package casapply

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Change is one change carried out by Do. S is what Check hands Write and
// Apply (typically a copy of the record and the revision it was read at);
// R is what the change answers.
type Change[S, R any] struct {
	// Check runs under the lock. It validates the change against memory
	// and returns the snapshot the write needs. An error ends the change
	// with that error; an error made by Answer ends it with a result and
	// nothing written (the change is in effect already).
	Check func() (S, error)
	// Write runs without the lock: the store write and any remote call. It
	// returns the revision written, or the error the change ends with, in
	// the words the caller's users get. An error made by Answer ends the
	// change with a result and nothing applied (the write found the change
	// made already, by an earlier try of the same request).
	Write func(ctx context.Context, s S) (int64, error)
	// Apply runs under the lock again: it puts what was written in memory
	// and returns the result.
	Apply func(s S, rev int64) (R, error)
}

// Do carries out c: Check under mu, Write without it, Apply under it
// again. A panic in Check or Apply leaves mu unlocked.
func Do[S, R any](ctx context.Context, mu sync.Locker, c Change[S, R]) (R, error) {
	s, err := locked(mu, c.Check)
	if err != nil {
		return answered[R](err)
	}
	rev, err := c.Write(ctx, s)
	if err != nil {
		return answered[R](err)
	}
	mu.Lock()
	defer mu.Unlock()
	return c.Apply(s, rev)
}

// answered is the result an Answer carries, or err itself.
func answered[R any](err error) (R, error) {
	var a answer[R]
	if errors.As(err, &a) {
		return a.r, nil
	}
	var zero R
	return zero, err
}

func locked[S any](mu sync.Locker, fn func() (S, error)) (S, error) {
	mu.Lock()
	defer mu.Unlock()
	return fn()
}

// Answer is what a Check returns when the change needs no write, or a
// Write when the change was made already: Do then returns r and no error. r must be of the Change's result type R.
func Answer[R any](r R) error { return answer[R]{r} }

type answer[R any] struct{ r R }

// Error is only ever seen when Answer was given a value of another type
// than the Change's result: a mistake in the caller, reported as such.
func (a answer[R]) Error() string {
	return fmt.Sprintf("casapply: an answer of type %T from a change with another result type", a.r)
}
