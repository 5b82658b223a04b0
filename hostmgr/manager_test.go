package hostmgr

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
)

// fixedHosts is a Backend with a fixed set of hosts and no tasks, enough to
// exercise leasing and commits.
type fixedHosts struct{ hosts []HostInfo }

func (f *fixedHosts) Name() string                                      { return "fixed" }
func (f *fixedHosts) Start(context.Context, func(TaskEvent)) error      { return nil }
func (f *fixedHosts) Hosts() []HostInfo                                 { return f.hosts }
func (f *fixedHosts) Launch(context.Context, LaunchSpec) error          { return nil }
func (f *fixedHosts) Kill(context.Context, string, time.Duration) error { return ErrUnknownTask }
func (f *fixedHosts) Status(string) (TaskEvent, error)                  { return TaskEvent{}, ErrUnknownTask }
func (f *fixedHosts) Logs(context.Context, string, LogOptions) (io.ReadCloser, error) {
	return nil, ErrUnknownTask
}
func (f *fixedHosts) Close() error { return nil }

var _ Backend = (*fixedHosts)(nil)

func newTestManager(t *testing.T, n int, capacity resources.Resources) *Manager {
	t.Helper()
	var hs []HostInfo
	for i := 0; i < n; i++ {
		hs = append(hs, HostInfo{Name: string(rune('a' + i)), Capacity: capacity})
	}
	m := NewManager(&fixedHosts{hs}, Options{LeaseTTL: time.Minute})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLeasesAreExclusive(t *testing.T) {
	m := newTestManager(t, 3, resources.Resources{MilliCPU: 1000, MemoryMB: 100})
	l1, o1 := m.AcquireHosts(HostFilter{Max: 2})
	l2, o2 := m.AcquireHosts(HostFilter{Max: 10})
	if len(o1) != 2 || len(o2) != 1 || o2[0].Name == o1[0].Name || o2[0].Name == o1[1].Name {
		t.Fatalf("leases overlap: %v %v", o1, o2)
	}
	if _, o3 := m.AcquireHosts(HostFilter{Max: 10}); len(o3) != 0 {
		t.Fatalf("all hosts are leased, got %v", o3)
	}
	m.ReleaseLease(l1)
	if _, o4 := m.AcquireHosts(HostFilter{Max: 10}); len(o4) != 2 {
		t.Fatalf("released hosts not offered again: %v", o4)
	}
	m.ReleaseLease(l2)
}

func TestCommitRechecksFit(t *testing.T) {
	m := newTestManager(t, 1, resources.Resources{MilliCPU: 1000, MemoryMB: 100})
	id, offers := m.AcquireHosts(HostFilter{Max: 1})
	r := resources.Resources{MilliCPU: 600, MemoryMB: 10}
	err := m.Commit(id, []Assignment{{TaskID: "t1", Host: offers[0].Name, Resources: r}, {TaskID: "t2", Host: offers[0].Name, Resources: r}})
	if !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("two 0.6 CPU tasks on a 1 CPU host: %v", err)
	}
	if hs := m.ListHosts(); hs[0].Allocated.Cpu != 0 {
		t.Fatalf("a refused commit reserved something: %v", hs[0].Allocated)
	}
	if err := m.Commit(id, nil); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("a lease ends with its first commit: %v", err)
	}
	id, offers = m.AcquireHosts(HostFilter{Max: 1})
	if err := m.Commit(id, []Assignment{{TaskID: "t1", Host: offers[0].Name, Resources: r}}); err != nil {
		t.Fatal(err)
	}
	if _, o := m.AcquireHosts(HostFilter{Max: 1}); len(o) != 1 || o[0].Free.MilliCPU != 400 {
		t.Fatalf("free after commit: %v", o)
	}
	m.ReleaseTask("t1")
	m.ReleaseTask("t1") // idempotent
	if hs := m.ListHosts(); hs[0].Allocated.Cpu != 0 || hs[0].TaskCount != 0 {
		t.Fatalf("release: %v", hs[0])
	}
}

// TestConcurrentEnginesNeverDoubleBook: many goroutines lease and commit at
// once; no host is ever given more than its capacity.
func TestConcurrentEnginesNeverDoubleBook(t *testing.T) {
	capacity := resources.Resources{MilliCPU: 4000, MemoryMB: 4000}
	m := newTestManager(t, 8, capacity)
	r := resources.Resources{MilliCPU: 1000, MemoryMB: 1000}
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := 0
	for e := 0; e < 8; e++ {
		wg.Add(1)
		go func(e int) {
			defer wg.Done()
			for round := 0; round < 50; round++ {
				id, offers := m.AcquireHosts(HostFilter{Max: 3})
				if len(offers) == 0 {
					continue
				}
				var as []Assignment
				for i, o := range offers {
					// Decide on the offer's view: fill it.
					for k := int64(0); k < o.Free.MilliCPU/1000; k++ {
						as = append(as, Assignment{TaskID: taskName(e, round, i, int(k)), Host: o.Name, Resources: r})
					}
				}
				if err := m.Commit(id, as); err == nil {
					mu.Lock()
					committed += len(as)
					mu.Unlock()
				}
			}
		}(e)
	}
	wg.Wait()
	for _, h := range m.ListHosts() {
		if h.Allocated.Cpu > 4 {
			t.Fatalf("host %s double-booked: %v", h.Name, h.Allocated)
		}
	}
	if committed != 32 {
		t.Fatalf("committed %d tasks, want exactly the 32 slots", committed)
	}
}

func taskName(e, round, i, k int) string {
	return string(rune('A'+e)) + "-" + itoa(round) + "-" + itoa(i) + "-" + itoa(k)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}

func TestAcquireHostsRotatesAndFilters(t *testing.T) {
	hs := []HostInfo{
		{Name: "a", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}, Partition: "p1"},
		{Name: "b", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}, Partition: "p1"},
		{Name: "c", Capacity: resources.Resources{MilliCPU: 4000, MemoryMB: 100}, Partition: "p2"},
		{Name: "d", Capacity: resources.Resources{MilliCPU: 1000, MemoryMB: 100}, Partition: "p2"},
	}
	m := NewManager(&fixedHosts{hs}, Options{LeaseTTL: time.Minute})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	names := func(os []HostOffer) (s string) {
		for _, o := range os {
			s += o.Name
		}
		return s
	}
	// Successive leases start where the last one stopped.
	l1, o1 := m.AcquireHosts(HostFilter{Max: 1})
	m.ReleaseLease(l1)
	l2, o2 := m.AcquireHosts(HostFilter{Max: 1})
	m.ReleaseLease(l2)
	if names(o1) != "a" || names(o2) != "b" {
		t.Fatalf("leases do not rotate: %s then %s", names(o1), names(o2))
	}
	l, o := m.AcquireHosts(HostFilter{Max: 10, Partitions: []string{"p2"}})
	if names(o) != "cd" {
		t.Fatalf("partition p2: got %s", names(o))
	}
	m.ReleaseLease(l)
	l, o = m.AcquireHosts(HostFilter{Max: 10, MinFree: resources.Resources{MilliCPU: 2000}})
	if names(o) != "c" {
		t.Fatalf("min free 2 CPUs: got %s", names(o))
	}
	// A host without free memory has nothing free for any task.
	if err := m.Commit(l, []Assignment{{TaskID: "j-0-1", JobID: "j", Host: "c", Resources: resources.Resources{MilliCPU: 1, MemoryMB: 100}}}); err != nil {
		t.Fatal(err)
	}
	l, o = m.AcquireHosts(HostFilter{Max: 10, Jobs: map[string]bool{"j": true}})
	if len(o) != 3 || strings.Contains(names(o), "c") {
		t.Fatalf("full host offered: %s", names(o))
	}
	m.ReleaseLease(l)
	// a and b look the same to placement.
	if cl := m.HostClasses(); len(cl) != 3 || cl[0].Count != 2 {
		t.Fatalf("host classes: %+v", cl)
	}
}

func TestJobCountsAndMaxPerHost(t *testing.T) {
	m := newTestManager(t, 2, resources.Resources{MilliCPU: 4000, MemoryMB: 400})
	r := resources.Resources{MilliCPU: 100, MemoryMB: 10}
	m.Recover("0a-b-c-0-1", "a", r) // job IDs contain dashes
	id, offers := m.AcquireHosts(HostFilter{Max: 2, Jobs: map[string]bool{"0a-b-c": true, "other": true}})
	if offers[0].JobCounts["0a-b-c"] != 1 || offers[1].JobCounts != nil {
		t.Fatalf("job counts: %v %v", offers[0].JobCounts, offers[1].JobCounts)
	}
	// Max 2 per host: the recovered run and one more fit on a, a third does not.
	as := []Assignment{
		{TaskID: "0a-b-c-1-1", JobID: "0a-b-c", Host: "a", Resources: r, MaxPerHost: 2},
		{TaskID: "0a-b-c-2-1", JobID: "0a-b-c", Host: "a", Resources: r, MaxPerHost: 2},
	}
	if err := m.Commit(id, as); !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("third run of a job capped at 2 per host: %v", err)
	}
	id, _ = m.AcquireHosts(HostFilter{Max: 2})
	as[1].Host = "b"
	if err := m.Commit(id, as); err != nil {
		t.Fatal(err)
	}
	m.ReleaseTask("0a-b-c-0-1")
	_, offers = m.AcquireHosts(HostFilter{Max: 2, Jobs: map[string]bool{"0a-b-c": true}})
	for _, o := range offers {
		if o.JobCounts["0a-b-c"] != 1 {
			t.Fatalf("%s: counts after release %v", o.Name, o.JobCounts)
		}
	}
}

func TestFits(t *testing.T) {
	free := resources.Resources{MilliCPU: 1000, MemoryMB: 100}
	for _, tc := range []struct {
		need resources.Resources
		max  uint32
		n    int
		want bool
	}{
		{resources.Resources{MilliCPU: 1000, MemoryMB: 100}, 0, 50, true},
		{resources.Resources{MilliCPU: 1001, MemoryMB: 1}, 0, 0, false},
		{resources.Resources{MilliCPU: 1, MemoryMB: 1, GPU: 1}, 0, 0, false},
		{resources.Resources{MilliCPU: 1, MemoryMB: 1}, 2, 1, true},
		{resources.Resources{MilliCPU: 1, MemoryMB: 1}, 2, 2, false},
	} {
		if got := Fits(tc.need, tc.max, free, tc.n); got != tc.want {
			t.Errorf("Fits(%v, max %d, %v, %d) = %v", tc.need, tc.max, free, tc.n, got)
		}
	}
}
