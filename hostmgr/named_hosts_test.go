package hostmgr

import (
	"context"
	"slices"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestAcquireNamedHosts: hosts asked for by name come first and whatever
// Max, Partitions and MinFree say, as long as they are up and not leased;
// they are never offered twice and leave the rotation where it was.
func TestAcquireNamedHosts(t *testing.T) {
	m := maintManager(t, nil) // hosts a, b, c of 1 CPU; a holds j-0-1
	names := func(os []HostOffer) (s string) {
		for _, o := range os {
			s += o.Name
		}
		return s
	}
	full := resources.Resources{MilliCPU: 900, MemoryMB: 90}
	if err := m.Commit(mustLease(t, m, HostFilter{Hosts: []string{"c"}}), []Assignment{{TaskID: "k-0-1", JobID: "k", Host: "c", Resources: full}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    HostFilter
		// named are the hosts offered first, in order; others the rest, in
		// any order (where the rotation stands).
		named, others string
	}{
		{"named hosts only, without Max", HostFilter{Hosts: []string{"c", "b"}}, "cb", ""},
		{"named first, then Max others", HostFilter{Max: 1, Hosts: []string{"c"}}, "c", "a"},
		{"a named host is not offered twice", HostFilter{Max: 3, Hosts: []string{"b", "b"}}, "b", "ac"},
		{"named hosts ignore MinFree and partitions", HostFilter{Max: 3, Hosts: []string{"c"}, MinFree: full, Partitions: []string{"none"}}, "c", ""},
		{"unknown names are skipped", HostFilter{Hosts: []string{"gone", "a"}}, "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, o := m.AcquireHosts(tc.f)
			defer m.ReleaseLease(l)
			got := names(o)
			n := min(len(tc.named), len(got))
			rest := []byte(got[n:])
			slices.Sort(rest)
			if got[:n] != tc.named || string(rest) != tc.others {
				t.Fatalf("offered %q, want %q then %q", got, tc.named, tc.others)
			}
		})
	}
	// Leased or in maintenance: not offered.
	l, _ := m.AcquireHosts(HostFilter{Hosts: []string{"b"}})
	if _, err := m.Maintenance().StartMaintenance(context.Background(), []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if _, o := m.AcquireHosts(HostFilter{Hosts: []string{"a", "b", "c"}}); names(o) != "c" {
		t.Fatalf("with a draining and b leased: offered %q, want c", names(o))
	}
	m.ReleaseLease(l)

	st := m.HostStatuses([]string{"a", "c", "gone"})
	if len(st) != 2 || st["a"].State != pelotonv1.HostState_HOST_DRAINING || st["c"].State != pelotonv1.HostState_HOST_UP ||
		st["c"].Capacity != (resources.Resources{MilliCPU: 1000, MemoryMB: 100}) {
		t.Fatalf("statuses: %+v", st)
	}
}

func mustLease(t *testing.T, m *Manager, f HostFilter) string {
	t.Helper()
	l, o := m.AcquireHosts(f)
	if l == "" || len(o) == 0 {
		t.Fatalf("no lease for %+v", f)
	}
	return l
}
