package hostmgr

import (
	"context"
	"errors"
	"flag"
	"fmt"
	peltest "github.com/peloton-sched/peloton/internal/testing/testutil"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMaintenanceTableGolden(t *testing.T) {
	got := maintenanceTransitions.Render()
	peltest.Golden(t, "testdata/maintenance.golden", got, *update, "maintenance table")
	for v := range pelotonv1.HostState_name {
		if s := hostState(v); s != pelotonv1.HostState_HOST_STATE_UNSPECIFIED {
			if !maintenanceTransitions.Has(s) {
				t.Errorf("host state %s has no row in the maintenance table", s)
			}
		}
	}
}

// maintManager is a Manager on hosts a, b and c (1 CPU each) where a holds
// one run, "j-0-1", so that draining it takes a while. Recovery is done.
func maintManager(t *testing.T, st store.Store) *Manager {
	t.Helper()
	var hs []HostInfo
	for _, n := range []string{"a", "b", "c"} {
		hs = append(hs, HostInfo{Name: n, Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}})
	}
	m := NewManager(&fixedHosts{hs}, Options{LeaseTTL: time.Minute, Store: st})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	m.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m.Recovered()
	return m
}

// states renders every host's state, e.g. "a=HOST_UP b=HOST_DRAINED c=HOST_UP".
func states(m *Manager) string {
	var parts []string
	for _, h := range m.ListHosts() {
		parts = append(parts, h.Name+"="+h.State.String())
	}
	return strings.Join(parts, " ")
}

// waitStates polls until the hosts' states are want, or fails.
func waitStates(t *testing.T, m *Manager, want string) {
	t.Helper()
	peltest.Eventually(t, 10*time.Second, "host states "+want, func() error {
		if s := states(m); s != want {
			return fmt.Errorf("host states: %s", s)
		}
		return nil
	})
}

func TestMaintenanceTransitions(t *testing.T) {
	type step struct {
		op    string // start | complete
		hosts []string
		code  codes.Code
		msg   string // the whole error message, when code is not OK
	}
	const up = "a=HOST_UP b=HOST_UP c=HOST_UP"
	for _, tc := range []struct {
		name  string
		steps []step
		want  string // states after the last step
	}{
		{"an empty host is drained at once", []step{{op: "start", hosts: []string{"b"}}},
			"a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
		{"a busy host drains", []step{{op: "start", hosts: []string{"a", "c"}}},
			"a=HOST_DRAINING b=HOST_UP c=HOST_DRAINED"},
		{"complete a drain early", []step{{op: "start", hosts: []string{"a"}}, {op: "complete", hosts: []string{"a"}}}, up},
		{"complete a drained host", []step{{op: "start", hosts: []string{"b"}}, {op: "complete", hosts: []string{"b"}}}, up},
		{"complete an up host", []step{{op: "complete", hosts: []string{"a"}, code: codes.FailedPrecondition,
			msg: "hosts[0]: host a is HOST_UP; completing maintenance needs HOST_DRAINING or HOST_DRAINED"}}, up},
		{"start a draining host", []step{{op: "start", hosts: []string{"a"}}, {op: "start", hosts: []string{"a"}, code: codes.FailedPrecondition,
			msg: "hosts[0]: host a is HOST_DRAINING; starting maintenance needs HOST_UP"}},
			"a=HOST_DRAINING b=HOST_UP c=HOST_UP"},
		{"an unknown host changes nothing", []step{{op: "start", hosts: []string{"b", "zz"}, code: codes.NotFound,
			msg: "hosts[1]: host zz does not exist"}}, up},
		{"one illegal host changes nothing", []step{{op: "start", hosts: []string{"b"}}, {op: "complete", hosts: []string{"b", "c"}, code: codes.FailedPrecondition,
			msg: "hosts[1]: host c is HOST_UP; completing maintenance needs HOST_DRAINING or HOST_DRAINED"}},
			"a=HOST_UP b=HOST_DRAINED c=HOST_UP"},
		{"a host listed twice", []step{{op: "start", hosts: []string{"c", "c"}, code: codes.InvalidArgument,
			msg: "hosts[1]: host c is already hosts[0]"}}, up},
		{"no host", []step{{op: "start", code: codes.InvalidArgument, msg: "hosts: name at least one host"}}, up},
		{"an empty name", []step{{op: "complete", hosts: []string{""}, code: codes.InvalidArgument, msg: "hosts[0]: required"}}, up},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := maintManager(t, nil)
			for i, s := range tc.steps {
				change := m.Maintenance().StartMaintenance
				if s.op == "complete" {
					change = m.Maintenance().CompleteMaintenance
				}
				got, err := change(context.Background(), s.hosts)
				st, _ := status.FromError(err)
				if st.Code() != s.code || (s.code != codes.OK && st.Message() != s.msg) {
					t.Fatalf("step %d: %s %v: err %v, want %s %q", i, s.op, s.hosts, err, s.code, s.msg)
				}
				if err == nil && len(got) != len(s.hosts) {
					t.Fatalf("step %d: answer names %d hosts, want %d", i, len(got), len(s.hosts))
				}
			}
			if got := states(m); got != tc.want {
				t.Fatalf("states %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDrainingHostBecomesDrainedWhenEmpty(t *testing.T) {
	m := maintManager(t, nil)
	r := resources.Resources{MilliCPU: 100, MemoryMB: 10}
	m.Recover("j-1-1", "a", r)
	got, err := m.Maintenance().StartMaintenance(context.Background(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != hostDraining || got[0].MaintenanceMessage != "draining: 2 tasks left" {
		t.Fatalf("after start: %s %q", got[0].State, got[0].MaintenanceMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds := m.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "a" || !slices.Equal(ds[0].TaskIDs, []string{"j-0-1", "j-1-1"}) {
		t.Fatalf("drain requests: %+v", ds)
	}
	m.ReleaseTask("j-0-1")
	if h := m.ListHosts()[0]; h.State != hostDraining || h.MaintenanceMessage != "draining: 1 task left" {
		t.Fatalf("one run left: %s %q", h.State, h.MaintenanceMessage)
	}
	m.ReleaseTask("j-1-1")
	waitStates(t, m, "a=HOST_DRAINED b=HOST_UP c=HOST_UP")
	if h := m.ListHosts()[0]; !strings.HasPrefix(h.MaintenanceMessage, "drained: ") {
		t.Fatalf("drained message %q", h.MaintenanceMessage)
	}
	if n := testutil.ToFloat64(metrics.Hosts.WithLabelValues("HOST_DRAINED")); n != 1 {
		t.Fatalf("peloton_hosts{state=HOST_DRAINED} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(metrics.Hosts.WithLabelValues("HOST_UP")); n != 2 {
		t.Fatalf("peloton_hosts{state=HOST_UP} = %v, want 2", n)
	}
}

func TestHostsInMaintenanceTakeNoWork(t *testing.T) {
	m := maintManager(t, nil)
	r := resources.Resources{MilliCPU: 100, MemoryMB: 10}
	// A lease taken before the drain cannot commit to the draining host.
	lease, offers := m.AcquireHosts(HostFilter{Max: 3})
	if len(offers) != 3 {
		t.Fatalf("offers before maintenance: %v", offers)
	}
	if _, err := m.Maintenance().StartMaintenance(context.Background(), []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(lease, []Assignment{{TaskID: "k-0-1", JobID: "k", Host: "a", Resources: r}}); !errors.Is(err, ErrHostNotUp) {
		t.Fatalf("commit to a draining host: %v", err)
	}
	if hs := m.ListHosts(); hs[0].TaskCount != 1 {
		t.Fatalf("a refused commit reserved something: %v", hs[0])
	}
	for range 3 { // every rotation of the lease start
		l, offers := m.AcquireHosts(HostFilter{Max: 3})
		if len(offers) != 1 || offers[0].Name != "c" {
			t.Fatalf("offers with a draining and b drained: %v", offers)
		}
		m.ReleaseLease(l)
	}
	if _, err := m.Maintenance().CompleteMaintenance(context.Background(), []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if _, offers := m.AcquireHosts(HostFilter{Max: 3}); len(offers) != 3 {
		t.Fatalf("offers after maintenance: %v", offers)
	}
}

func TestLaunchOnDrainingHostAsksForDrain(t *testing.T) {
	m := maintManager(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.Maintenance().StartMaintenance(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	m.Drains(ctx) // the request of the start
	// j-0-1 was placed before the drain and is launched only now.
	if err := m.Launch(ctx, LaunchSpec{TaskID: "j-0-1", Host: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Launch(ctx, LaunchSpec{TaskID: "x-0-1", Host: "b"}); err != nil {
		t.Fatal(err)
	}
	ds := m.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "a" || !slices.Equal(ds[0].TaskIDs, []string{"j-0-1"}) {
		t.Fatalf("drain requests after launches: %+v", ds)
	}
	if !m.Draining("a") || m.Draining("b") || m.Draining("zz") {
		t.Fatal("Draining disagrees with the states")
	}
}

// TestMaintenancePersists: the state survives a new Manager on the same
// store; a draining host is not declared drained before recovery has
// re-reserved its runs, and its drain is asked for again after it.
func TestMaintenancePersists(t *testing.T) {
	st := memstore.New(memstore.Options{})
	ctx := context.Background()
	m1 := maintManager(t, st)
	if _, err := m1.Maintenance().StartMaintenance(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if s := states(m1); s != "a=HOST_DRAINING b=HOST_DRAINED c=HOST_UP" {
		t.Fatalf("states %s", s)
	}
	kvs, err := st.List(ctx, "hosts/")
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for _, kv := range kvs {
		recs = append(recs, kv.Key+"="+string(kv.Value))
	}
	if got := strings.Join(recs, " "); got != "hosts/a/maintenance=HOST_DRAINING hosts/b/maintenance=HOST_DRAINED" {
		t.Fatalf("store records: %s", got)
	}
	_ = m1.Close()

	// A restart: the run on a is not re-reserved yet when hostmgr starts.
	m2 := NewManager(&fixedHosts{m1.backend.Hosts()}, Options{Store: st})
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if s := states(m2); s != "a=HOST_DRAINING b=HOST_DRAINED c=HOST_UP" {
		t.Fatalf("states after restart: %s", s)
	}
	m2.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m2.Recovered()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ds := m2.Drains(dctx); len(ds) != 1 || ds[0].Host != "a" || !slices.Equal(ds[0].TaskIDs, []string{"j-0-1"}) {
		t.Fatalf("drain requests after restart: %+v", ds)
	}
	if s := states(m2); s != "a=HOST_DRAINING b=HOST_DRAINED c=HOST_UP" {
		t.Fatalf("a holds a run and must still drain: %s", s)
	}
	m2.ReleaseTask("j-0-1")
	waitStates(t, m2, "a=HOST_DRAINED b=HOST_DRAINED c=HOST_UP")

	m3 := NewManager(&fixedHosts{m1.backend.Hosts()}, Options{Store: st})
	if err := m3.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	m3.Recovered()
	if s := states(m3); s != "a=HOST_DRAINED b=HOST_DRAINED c=HOST_UP" {
		t.Fatalf("states after the second restart: %s", s)
	}
	// Compare-and-swap: m2 completes a behind m3's back; m3's own write
	// then conflicts, changes nothing, and m3 learns the store's state.
	if _, err := m2.Maintenance().CompleteMaintenance(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	_, err = m3.Maintenance().CompleteMaintenance(ctx, []string{"b", "a"})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("a stale write: %v", err)
	}
	if s := states(m3); s != "a=HOST_UP b=HOST_DRAINED c=HOST_UP" {
		t.Fatalf("states after the conflict: %s", s)
	}
	if _, err := m3.Maintenance().CompleteMaintenance(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if kvs, _ := st.List(ctx, "hosts/"); len(kvs) != 0 {
		t.Fatalf("records left after every host is up: %v", kvs)
	}
}
