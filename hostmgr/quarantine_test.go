package hostmgr

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
)

// TestCorruptHostRecordsAreQuarantined: host records that cannot be read
// do not stop the start. A maintenance record is replaced by HOST_DRAINING
// (the host held a record, so it was out of service; it stays out until an
// operator brings it back), a partition record is dropped (the host is in
// the partition its backend reports), a move history record is dropped.
// Each is moved under quarantine/, and the next start finds nothing more
// to move.
func TestCorruptHostRecordsAreQuarantined(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx := context.Background()
	bad := map[string]string{
		maintenanceKey("a"):                "HOST_ON_FIRE",
		partitionKey("b"):                  "{not json",
		moveKey(time.Unix(1, 0), "b"):      "\xff",
		partitionKey("c"):                  `{"partition":"Not A Name!","state":"PARTITION_SETTLED"}`,
		partitionKey("d"):                  `{"partition":"batch","state":"PARTITION_SIDEWAYS"}`,
		"hosts/c/something-else-we-ignore": "x",
		maintenanceKey("gone"):             "HOST_DRAINED by=",
	}
	for k, v := range bad {
		if _, err := st.Txn(ctx, store.Put(k, []byte(v), store.AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	hosts := []HostInfo{
		{Name: "a", Partition: "default", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}},
		{Name: "b", Partition: "default", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}},
		{Name: "c", Partition: "default", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}},
	}
	for i := 0; i < 2; i++ {
		m := NewManager(&fixedHosts{hosts}, Options{Store: st})
		if err := m.Start(ctx); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		m.Recovered()
		if s := states(m); s != "a=HOST_DRAINED b=HOST_UP c=HOST_UP" && s != "a=HOST_DRAINING b=HOST_UP c=HOST_UP" {
			t.Errorf("start %d: states %s, want a out of service", i, s)
		}
		for _, h := range m.ListHosts() {
			if h.Partition != "default" {
				t.Errorf("start %d: host %s in %q", i, h.Name, h.Partition)
			}
		}
		if moves, err := m.Maintenance().ListPartitionMoves("", 0); err != nil || len(moves) != 0 {
			t.Errorf("start %d: history %v %v", i, moves, err)
		}
		_ = m.Close()
		keys, err := quarantine.List(ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		var originals []string
		for _, k := range keys {
			originals = append(originals, quarantine.Original(k))
		}
		sort.Strings(originals)
		want := []string{maintenanceKey("a"), partitionKey("b"), partitionKey("c"), partitionKey("d"), maintenanceKey("gone"), moveKey(time.Unix(1, 0), "b")}
		sort.Strings(want)
		if strings.Join(originals, " ") != strings.Join(want, " ") {
			t.Errorf("start %d: quarantined %v, want %v", i, originals, want)
		}
	}
	// Written HOST_DRAINING in the bad record's place, then HOST_DRAINED
	// once found empty.
	if kv, err := st.Get(ctx, maintenanceKey("a")); err != nil || string(kv.Value) != "HOST_DRAINING" && string(kv.Value) != "HOST_DRAINED" {
		t.Errorf("a's maintenance record: %q %v", kv.Value, err)
	}
}
