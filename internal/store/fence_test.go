package store

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdFence: a fenced store writes while its leader key is the one it
// was given, and nothing at all once that key is gone or was made again,
// however its ops' own compares would have gone.
func TestEtcdFence(t *testing.T) {
	e, plain := startTestEtcd(t)
	ctx := testCtx(t)
	const leaderKey = "/peloton/leader/cluster/1"
	lease, err := plain.Client().Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	put, err := plain.Client().Put(ctx, leaderKey, "me", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewEtcd(ctx, EtcdConfig{Endpoints: e.Endpoints(), Fence: &Fence{Key: leaderKey, Revision: put.Header.Revision}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	rev := mustTxn(t, s, Put("jobs/1", []byte("a"), MustNotExist))
	// A stale op of a fenced store is still a ConflictError naming it.
	_, err = s.Txn(ctx, Put("jobs/1", []byte("b"), MustNotExist))
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Key != "jobs/1" || errors.Is(err, ErrFenced) {
		t.Fatalf("stale op under a held fence: %v", err)
	}

	// The leadership ends: its lease is revoked and the key goes with it.
	if _, err := plain.Client().Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	for _, ops := range [][]Op{
		{Put("jobs/1", []byte("c"), rev)},
		{Put("jobs/2", []byte("c"), MustNotExist), Delete("jobs/1", AnyRevision)},
		{Put("jobs/1", []byte("c"), MustNotExist)}, // stale too: fenced wins
	} {
		if _, err := s.Txn(ctx, ops...); !errors.Is(err, ErrFenced) || errors.Is(err, ErrConflict) {
			t.Fatalf("Txn(%v) after the leader key went: %v, want ErrFenced", ops, err)
		}
	}
	// A Batcher write fails the same way.
	b := NewBatcher(s, BatcherOptions{})
	if _, err := b.Write(ctx, Put("jobs/3", []byte("c"), MustNotExist)); !errors.Is(err, ErrFenced) {
		t.Fatalf("batched write after the leader key went: %v", err)
	}
	b.Close()
	// Someone else's key of the same name is not this leadership either.
	if _, err := plain.Client().Put(ctx, leaderKey, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, Put("jobs/4", []byte("c"), MustNotExist)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Txn with the leader key made again: %v", err)
	}
	if kv := mustGet(t, plain, "jobs/1"); string(kv.Value) != "a" || kv.Revision != rev {
		t.Fatalf("jobs/1 = %q at %d; a fenced store wrote", kv.Value, kv.Revision)
	}
	for _, k := range []string{"jobs/2", "jobs/3", "jobs/4"} {
		if _, err := plain.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v; a fenced store wrote", k, err)
		}
	}
}
