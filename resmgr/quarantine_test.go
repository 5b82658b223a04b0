package resmgr

import (
	"context"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"

	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
)

// TestCorruptPoolIsQuarantined: a pool record that cannot be decoded does
// not stop the start. It is moved aside and the pool stays in the tree,
// with an empty spec written in its place, so that its children and the
// jobs in it still have their pool; the next start finds the tree whole.
func TestCorruptPoolIsQuarantined(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	m, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/org", "/org/a"} {
		if _, err := m.CreatePool(ctx, path, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Txn(ctx, store.Put(poolKeyPrefix+"/org", []byte("\xff\xfe not a pool"), store.AnyRevision)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		m, err := New(ctx, st, Options{Logger: quiet})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		org, err := m.GetPool("/org")
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if org.Spec.GetReservation().GetCpu() != 0 {
			t.Errorf("start %d: /org's spec %v, want the empty one", i, org.Spec)
		}
		if a, err := m.CheckLeafPool("/org/a", "spec.pool"); err != nil || a != "/org/a" {
			t.Errorf("start %d: the child pool: %q %v", i, a, err)
		}
		keys, err := quarantine.List(ctx, st, "")
		if err != nil || len(keys) != 1 || quarantine.Original(keys[0]) != poolKeyPrefix+"/org" {
			t.Errorf("start %d: quarantined %v %v", i, keys, err)
		}
	}
}
