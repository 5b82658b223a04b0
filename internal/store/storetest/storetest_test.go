package storetest_test

import (
	"context"
	"testing"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
)

func TestStartEtcd(t *testing.T) {
	e, s := storetest.StartEtcd(t)
	ctx := context.Background()
	rev, err := s.Txn(ctx, store.Put("jobs/j1", []byte("spec"), store.MustNotExist))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, "jobs/j1")
	if err != nil || kv.Revision != rev || string(kv.Value) != "spec" {
		t.Fatalf("Get = %+v, %v", kv, err)
	}
	if s.MaxTxnOps() != e.MaxTxnOps() {
		t.Fatalf("store MaxTxnOps %d, server %d", s.MaxTxnOps(), e.MaxTxnOps())
	}
}

// TestConformanceEtcd holds the etcd store to the suite the fakes must
// pass: the suite's expectations are etcd's. It connects through the
// server's socket, as a cluster stack on an external etcd does; a store on
// the in-process client keeps answering after Close. It assumes etcd's
// default max-txn-ops, as a store on a cluster it did not configure does,
// which keeps the suite's largest txn quick.
func TestConformanceEtcd(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T) store.Store {
		e, _ := storetest.StartEtcd(t)
		s, err := store.NewEtcd(context.Background(), store.EtcdConfig{Endpoints: e.Endpoints(), MaxTxnOps: store.DefaultMaxTxnOps})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
