package hostmgr

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/resources"
)

// changingHosts is a Backend whose hosts change while it runs and that tells
// hostmgr so, as the Kubernetes backend does.
type changingHosts struct {
	fixedHosts
	mu      sync.Mutex
	changed func()
}

func (c *changingHosts) WatchHosts(changed func()) { c.changed = changed }

func (c *changingHosts) Hosts() []HostInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]HostInfo(nil), c.hosts...)
}

func (c *changingHosts) set(hs ...HostInfo) {
	c.mu.Lock()
	c.hosts = hs
	c.mu.Unlock()
	c.changed()
}

var _ HostWatcher = (*changingHosts)(nil)

func TestHostsFollowTheBackend(t *testing.T) {
	capa := resources.Resources{MilliCPU: 1000, MemoryMB: 100}
	b := &changingHosts{fixedHosts: fixedHosts{hosts: []HostInfo{{Name: "a", Capacity: capa}}}}
	var seen []resources.Resources
	m := NewManager(b, Options{LeaseTTL: time.Minute, OnCapacity: func(r resources.ByPartition) { seen = append(seen, r.Total()) }})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b.changed == nil {
		t.Fatal("hostmgr did not watch the backend's hosts")
	}
	var told atomic.Int32
	m.OnHostsChanged(func() { told.Add(1) })
	b.set(HostInfo{Name: "a", Capacity: capa}, HostInfo{Name: "b", Capacity: capa})
	if got := m.Capacity(); got != capa.Scale(2) {
		t.Fatalf("a new host is not counted: %v", got)
	}

	// A run on b, then b is cordoned: it takes no new work and leaves the
	// capacity admission divides, but keeps its run.
	id, offers := m.AcquireHosts(HostFilter{Max: 2})
	var onB []Assignment
	for _, o := range offers {
		if o.Name == "b" {
			onB = append(onB, Assignment{TaskID: "t1", Host: "b", Resources: resources.Resources{MilliCPU: 100, MemoryMB: 10}})
		}
	}
	if err := m.Commit(id, onB); err != nil || len(onB) != 1 {
		t.Fatalf("commit on b: %v (%d)", err, len(onB))
	}
	b.set(HostInfo{Name: "a", Capacity: capa}, HostInfo{Name: "b", Capacity: capa, Unschedulable: true})
	if got := m.Capacity(); got != capa {
		t.Fatalf("a cordoned host still counts: %v", got)
	}
	id, offers = m.AcquireHosts(HostFilter{Max: 2})
	if len(offers) != 1 || offers[0].Name != "a" {
		t.Fatalf("a cordoned host was offered: %v", offers)
	}
	m.ReleaseLease(id)
	if got := m.ListHosts(); len(got) != 2 || got[1].TaskCount != 1 {
		t.Fatalf("the cordoned host lost its run: %v", got)
	}

	// b goes away while it holds t1: it stays until t1 is released.
	b.set(HostInfo{Name: "a", Capacity: capa})
	if got := m.ListHosts(); len(got) != 2 {
		t.Fatalf("a host holding a run vanished: %v", got)
	}
	m.ReleaseTask("t1")
	if got := m.ListHosts(); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("a gone host stayed after its last run: %v", got)
	}
	if len(seen) == 0 || seen[len(seen)-1] != capa {
		t.Fatalf("resmgr was not told the capacity: %v", seen)
	}
	if told.Load() != 3 {
		t.Fatalf("jobmgr was told of %d host changes, want 3", told.Load())
	}
}

func TestCommitRefusesUnschedulableHost(t *testing.T) {
	capa := resources.Resources{MilliCPU: 1000, MemoryMB: 100}
	b := &changingHosts{fixedHosts: fixedHosts{hosts: []HostInfo{{Name: "a", Capacity: capa}}}}
	m := NewManager(b, Options{LeaseTTL: time.Minute})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id, _ := m.AcquireHosts(HostFilter{Max: 1})
	b.set(HostInfo{Name: "a", Capacity: capa, Unschedulable: true})
	err := m.Commit(id, []Assignment{{TaskID: "t", Host: "a", Resources: resources.Resources{MilliCPU: 1, MemoryMB: 1}}})
	if !errors.Is(err, ErrHostNotUp) {
		t.Fatalf("commit to a host cordoned after its lease: %v", err)
	}
}
