package federation

import (
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/resources"
)

func cpus(n int64) resources.Resources { return resources.Resources{MilliCPU: n * 1000} }

// shareSpecOf is a global pool spec for the fair share tests: no limit unless
// given, share 1.
func shareSpecOf(path string, reserve int64, limit ...int64) shareSpec {
	s := shareSpec{path: path, res: cpus(reserve), limit: resources.Unlimited,
		share: resources.Resources{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 1000, GPU: 1000}}
	if len(limit) > 0 {
		s.limit = s.limit.Set(resources.CPU, limit[0]*1000)
	}
	return s
}

// loadsOf is n jobs of pool asking cpu each, held or queued.
func loadsOf(pool string, n int, cpu int64, held bool) []shareLoad {
	out := make([]shareLoad, n)
	for i := range out {
		out[i] = shareLoad{pool: pool, req: cpus(cpu), held: held}
	}
	return out
}

// tryAdmit is one job offered to the fair share: its pool, what it asks
// and the reason it waits ("": dispatched).
type tryAdmit struct {
	pool string
	cpu  int64
	why  string
}

func TestFairShareAdmit(t *testing.T) {
	flood := append(loadsOf("/a", 4, 16, true), loadsOf("/a", 10, 16, false)...)
	for _, tc := range []struct {
		name  string
		specs []shareSpec
		loads []shareLoad
		// admits are tried in order.
		admits []tryAdmit
		ent    map[string]int64
	}{
		{name: "alone, a pool takes every cluster (elastic)", specs: []shareSpec{shareSpecOf("/a", 0), shareSpecOf("/b", 0)},
			loads: flood, ent: map[string]int64{"/a": 64, "/b": 0},
			admits: []tryAdmit{{"/a", 16, "global pool /a is at its entitlement and lacks 16 cpu (entitled to 64 of the clusters' 64 cpu, 64 held by its dispatched jobs, this job asks 16)"}}},
		{name: "equal shares: the other pool gets half once it asks, the flooder waits", specs: []shareSpec{shareSpecOf("/a", 0), shareSpecOf("/b", 0)},
			loads: append(flood, loadsOf("/b", 3, 16, false)...), ent: map[string]int64{"/a": 32, "/b": 32},
			admits: []tryAdmit{{"/a", 16, "global pool /a is at its entitlement"}, {"/b", 16, ""}, {"/b", 16, ""}, {"/b", 16, "global pool /b is at its entitlement and lacks 16 cpu"}}},
		{name: "reservation first", specs: []shareSpec{shareSpecOf("/a", 48), shareSpecOf("/b", 0)},
			// 48 reserved, the other 16 split evenly: 56 and 8.
			loads: append(loadsOf("/a", 10, 16, false), loadsOf("/b", 10, 16, false)...), ent: map[string]int64{"/a": 56, "/b": 8},
			admits: []tryAdmit{{"/a", 16, ""}, {"/a", 16, ""}, {"/a", 16, ""}, {"/a", 16, "at its entitlement"}, {"/a", 8, ""}, {"/b", 8, ""}, {"/b", 8, "at its entitlement"}}},
		{name: "limit: the pool's, then an ancestor's, named", specs: []shareSpec{shareSpecOf("/org", 0, 40), shareSpecOf("/org/x", 0, 20), shareSpecOf("/org/y", 0)},
			loads: append(loadsOf("/org/x", 1, 16, true), loadsOf("/org/y", 1, 16, true)...),
			admits: []tryAdmit{{"/org/x", 8, "global pool /org/x would exceed its cpu limit of 20 (16 held by its dispatched jobs, this job asks 8)"},
				{"/org/y", 16, "global pool /org would exceed its cpu limit of 40 (32 held by its dispatched jobs, this job asks 16)"}, {"/org/y", 4, ""}}},
		{name: "an interior pool's or another pool's jobs are not judged", specs: []shareSpec{shareSpecOf("/org", 0, 1), shareSpecOf("/org/x", 0, 1)},
			admits: []tryAdmit{{"/org", 100, ""}, {"/default", 100, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := computeFairShare(cpus(64), tc.specs, tc.loads)
			for path, want := range tc.ent {
				if got := fs.pools[path].ent.MilliCPU; got != want*1000 {
					t.Errorf("entitlement of %s = %d milli-CPU, want %d cpu", path, got, want)
				}
			}
			for i, a := range tc.admits {
				why := fs.admit(a.pool, cpus(a.cpu))
				if (a.why == "") != (why == "") || !strings.Contains(why, a.why) {
					t.Errorf("admit %d (%s, %d cpu) = %q, want %q", i, a.pool, a.cpu, why, a.why)
				}
				if why != "" && !strings.HasPrefix(why, "waiting for global fair share: ") {
					t.Errorf("admit %d: %q does not say it waits for the fair share", i, why)
				}
			}
		})
	}
}

// TestFairShareCounts: held and queued figures and job counts sum up the
// tree, and a job let through moves from queued to held.
func TestFairShareCounts(t *testing.T) {
	fs := computeFairShare(cpus(100), []shareSpec{shareSpecOf("/org", 0), shareSpecOf("/org/x", 0)},
		append(loadsOf("/org/x", 2, 10, true), loadsOf("/org/x", 3, 5, false)...))
	if why := fs.admit("/org/x", cpus(5)); why != "" {
		t.Fatal(why)
	}
	for _, path := range []string{"/org", "/org/x"} {
		v := fs.pools[path].view(fs.capacity)
		if v.Allocation.Cpu != 25 || v.Queued.Cpu != 10 || v.DispatchedJobs != 3 || v.QueuedJobs != 2 || v.Entitlement.Cpu != 100 || v.Capacity.Cpu != 100 {
			t.Errorf("%s: %v", path, v)
		}
	}
}
