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
