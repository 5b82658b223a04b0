// Package memstore is a store.Store held in memory, for tests that persist
// through a store without testing etcd: a whole stack's lifecycle, update
// or drain test then runs in milliseconds instead of starting an etcd.
//
// It keeps etcd's semantics as storetest.Conformance pins them, and runs
// that suite in its own tests next to the real etcd store, so the two
// cannot drift apart: one revision counter for the whole store, advanced
// by one per txn that changes something (a txn of deletes of absent keys
// changes nothing and answers the current revision); a key's Revision is
// its last write's (etcd's ModRevision); compares as in store.Op, failed
// ones named in a *store.ConflictError; the same store.ValidateTxn checks
// and words; values copied in and out. Watch reports changes as
// (*store.Etcd).Watch does.
//
// What it does not have: a Fence (no leader key exists; use the etcd store
// to test fenced writes), leases, compaction, persistence across New, or a
// raw etcd client (store.MoveKeys, elections).
//
// It imports only the store package and the standard library. Production
// code must not use it: nothing here survives the process.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/peloton-sched/peloton/internal/store"
)

// ErrClosed is returned (wrapped) by every call after Close.
var ErrClosed = errors.New("memstore: closed")

// Options configures New. The zero value is what `peloton up`'s embedded
// etcd offers.
type Options struct {
	// MaxTxnOps is the most ops one Txn accepts (default
	// store.DefaultEmbeddedMaxTxnOps, the embedded etcd's).
	MaxTxnOps int
}

// Store is the in-memory store.Store. Its zero value is not usable; call New.
type Store struct {
	maxTxnOps int

	// mu guards everything below. Txn holds it for the whole compare and
	// apply, which is what makes a txn atomic; readers share it.
	mu       sync.RWMutex
	rev      int64
	kvs      map[string]record
	closed   bool
	watchers map[*watcher]struct{}
}

type record struct {
	value []byte // never aliased by a caller; nil when empty, as etcd answers
	mod   int64
}

type watcher struct {
	prefix string
	ch     chan int64 // cap 1: only the latest revision waits
}

var _ store.Store = (*Store)(nil)

// New returns an empty store. Like a fresh etcd it is at revision 1, so
// the first write gets revision 2.
func New(opts Options) *Store {
	if opts.MaxTxnOps <= 0 {
		opts.MaxTxnOps = store.DefaultEmbeddedMaxTxnOps
	}
	return &Store{
		maxTxnOps: opts.MaxTxnOps,
		rev:       1,
		kvs:       map[string]record{},
		watchers:  map[*watcher]struct{}{},
	}
}

// MaxTxnOps implements store.Store.
func (s *Store) MaxTxnOps() int { return s.maxTxnOps }

// Close implements store.Store: later calls fail with ErrClosed. Calling it
// again is a no-op. Watches end with their context, as the etcd store's do.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// usable says why a call must not go on: its context ended or the store
// is closed. Callers hold mu.
func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.KV, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return store.KV{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	r, ok := s.kvs[key]
	if !ok {
		return store.KV{}, fmt.Errorf("%w: %q", store.ErrNotFound, key)
	}
	return store.KV{Key: key, Value: clone(r.value), Revision: r.mod}, nil
}

// List implements store.Store. It is one snapshot: no txn is half seen.
func (s *Store) List(ctx context.Context, prefix string) ([]store.KV, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	out := make([]store.KV, 0)
	for k, r := range s.kvs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, store.KV{Key: k, Value: clone(r.value), Revision: r.mod})
		}
	}
	slices.SortFunc(out, func(a, b store.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Txn implements store.Store. A failed compare returns a
// *store.ConflictError naming every stale op, and nothing is written.
func (s *Store) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	if err := store.ValidateTxn(ops, s.maxTxnOps); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx); err != nil {
		return 0, fmt.Errorf("store: txn: %w", err)
	}
	var ce store.ConflictError
	for i, op := range ops {
		if op.ExpectRevision == store.AnyRevision {
			continue
		}
		actual := s.kvs[op.Key].mod // 0 when absent
		if actual != op.ExpectRevision {
			ce.Conflicts = append(ce.Conflicts, store.Conflict{Index: i, Key: op.Key, Expected: op.ExpectRevision, Actual: actual})
		}
	}
	if len(ce.Conflicts) > 0 {
		return 0, &ce
	}

	// etcd advances the revision only for a txn that changes a key.
	changed := make([]string, 0, len(ops))
	for _, op := range ops {
		if _, ok := s.kvs[op.Key]; op.Kind == store.OpPut || ok {
			changed = append(changed, op.Key)
		}
	}
	if len(changed) == 0 {
		return s.rev, nil
	}
	s.rev++
	for _, op := range ops {
		switch op.Kind {
		case store.OpPut:
			s.kvs[op.Key] = record{value: clone(op.Value), mod: s.rev}
		case store.OpDelete:
			delete(s.kvs, op.Key)
		}
	}
	s.notify(changed)
	return s.rev, nil
}

// Watch reports every change under prefix from now on, as the revision it
// happened at, with the contract of (*store.Etcd).Watch: a hint to read
// again, not a log (the channel holds only the latest revision not yet
// received), closed when ctx ends. It starts at once: a change after Watch
// returns is reported.
func (s *Store) Watch(ctx context.Context, prefix string) <-chan int64 {
	w := &watcher{prefix: prefix, ch: make(chan int64, 1)}
	s.mu.Lock()
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	// No goroutine of ours waits for ctx: the context runs this when it ends.
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.watchers, w)
		close(w.ch)
		s.mu.Unlock()
	})
	return w.ch
}

// notify tells every watcher of a changed key about the current revision.
// Callers hold mu for writing, so it is the only sender on each channel and
// the send after draining cannot block.
func (s *Store) notify(keys []string) {
	for w := range s.watchers {
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, w.prefix) }) {
			continue
		}
		select {
		case w.ch <- s.rev:
		default:
			select {
			case <-w.ch:
			default:
			}
			w.ch <- s.rev
		}
	}
}

// clone copies b, answering nil for an empty value as etcd does.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}
