// Package store is Peloton's durable state: a small key-value interface with
// compare-and-swap on every write, implemented on etcd (an external cluster or
// an embedded server). Everything that must survive a crash - pools, jobs,
// task runtimes - goes through it.
//
// Keys are plain strings relative to the store's prefix; values are opaque
// bytes (callers store protobuf, compressed where large). Every record has a
// revision (etcd's ModRevision); writers pass the revision they read, so a
// stale writer gets ErrConflict instead of overwriting newer state.
//
// This package must not import any other Peloton package.
package store

import (
	"context"
	"errors"
)

// ErrNotFound is returned when a key does not exist.
var ErrNotFound = errors.New("store: key not found")

// ErrConflict is returned when a compare-and-swap fails: the key's revision
// was not the one the writer expected (including "expected absent, but exists").
var ErrConflict = errors.New("store: revision conflict")

// KV is one record.
type KV struct {
	Key      string
	Value    []byte
	Revision int64 // etcd ModRevision of the last write of this key
}

// OpKind says what an Op does.
type OpKind int

const (
	// OpPut writes Value at Key.
	OpPut OpKind = iota
	// OpDelete removes Key.
	OpDelete
)

// Revision expectations for Op.ExpectRevision.
const (
	// AnyRevision skips the compare: a blind write. Use only for keys a single
	// writer owns by construction (e.g. under a leader lease).
	AnyRevision int64 = -1
	// MustNotExist makes the write succeed only if the key is absent.
	MustNotExist int64 = 0
)

// Op is one write in a transaction.
type Op struct {
	Kind  OpKind
	Key   string
	Value []byte
	// ExpectRevision: AnyRevision, MustNotExist, or the revision the key must
	// still have for the write to apply.
	ExpectRevision int64
}

// Put is a conditional put.
func Put(key string, value []byte, expect int64) Op {
	return Op{Kind: OpPut, Key: key, Value: value, ExpectRevision: expect}
}

// Delete is a conditional delete.
func Delete(key string, expect int64) Op {
	return Op{Kind: OpDelete, Key: key, ExpectRevision: expect}
}

// Store is the durable key-value state.
type Store interface {
	// Get returns the record at key, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every record whose key starts with prefix, in key order.
	// Large ranges are read in pages internally.
	List(ctx context.Context, prefix string) ([]KV, error)
	// Txn applies ops atomically: all of them or none. If any compare fails it
	// returns ErrConflict and writes nothing. On success it returns the new
	// revision, which is the Revision of every key the txn put.
	// len(ops) must not exceed MaxTxnOps().
	//
	// Test for ErrConflict with errors.Is: implementations may return a
	// *ConflictError that names the stale ops, which the Batcher relies on to
	// fail only those.
	Txn(ctx context.Context, ops ...Op) (int64, error)
	// MaxTxnOps is the most ops one Txn accepts (etcd's --max-txn-ops).
	MaxTxnOps() int
	// Close releases the client.
	Close() error
}
