package memstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	"github.com/peloton-sched/peloton/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T) store.Store {
		s := memstore.New(memstore.Options{})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// The smallest MaxTxnOps the suite takes runs its MaxTxnOps test at another
// size, and a Batcher whose batches it cuts short.
func TestConformanceSmallTxns(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T) store.Store {
		return memstore.New(memstore.Options{MaxTxnOps: storetest.MinTxnOps})
	})
}

func TestOptions(t *testing.T) {
	if got := memstore.New(memstore.Options{}).MaxTxnOps(); got != store.DefaultEmbeddedMaxTxnOps {
		t.Fatalf("default MaxTxnOps %d, want the embedded etcd's %d", got, store.DefaultEmbeddedMaxTxnOps)
	}
	if got := memstore.New(memstore.Options{MaxTxnOps: 7}).MaxTxnOps(); got != 7 {
		t.Fatalf("MaxTxnOps %d, want 7", got)
	}
}

func TestErrClosed(t *testing.T) {
	s := memstore.New(memstore.Options{})
	_ = s.Close()
	if _, err := s.Get(context.Background(), "a"); !errors.Is(err, memstore.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}
