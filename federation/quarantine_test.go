package federation_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/federation"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// TestCorruptRecordsAreQuarantined: federation records that cannot be
// loaded (a cluster, a global pool, an invalid one, a job, a service, an
// SLA grant) do not stop the federation's start. Each is moved under
// quarantine/ and the records that can be loaded are.
func TestCorruptRecordsAreQuarantined(t *testing.T) {
	e, _ := storetest.StartEtcd(t)
	ctx := context.Background()
	st, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: e.Endpoints(), Prefix: federation.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := startFederation(t, e)
	if _, err := f.Pools().CreatePool(ctxT(t), "/good", &pelotonv1.FederatedPoolSpec{}, ""); err != nil {
		t.Fatal(err)
	}
	bad := []string{"clusters/x", "pools/bad", "pools/invalid", "jobs/j", "services/s", "slagrants/g"}
	for _, k := range bad {
		v := []byte("\xff\xfe not a record")
		if k == "pools/invalid" { // decodes; its spec does not validate
			v, err = proto.Marshal(&pelotonv1.FederatedPool{Path: "/invalid",
				Spec: &pelotonv1.FederatedPoolSpec{Reservation: &pelotonv1.Resources{Cpu: -1}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Txn(ctx, store.Put(k, v, store.AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	f2 := startFederation(t, e)
	var paths []string
	for _, p := range f2.Pools().ListPools() {
		paths = append(paths, p.Path)
	}
	if strings.Join(paths, " ") != "/good" {
		t.Errorf("pools after the restart: %v, want /good", paths)
	}
	keys, err := quarantine.List(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	var originals []string
	for _, k := range keys {
		originals = append(originals, quarantine.Original(k))
	}
	sort.Strings(originals)
	sort.Strings(bad)
	if strings.Join(originals, " ") != strings.Join(bad, " ") {
		t.Errorf("quarantined %v, want %v", originals, bad)
	}
}
