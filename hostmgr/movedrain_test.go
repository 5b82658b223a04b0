package hostmgr

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/memstore"
)

// TestMoveDrainWindow: a move with a drain window drains nothing while the
// window is open; a run that ends in it is not preempted, and the one still
// running when it closes is drained then, alone. The window's end is in the
// store.
func TestMoveDrainWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := memstore.New(memstore.Options{})
	m := partManager(t, newPartHosts(), st)
	m.Recover("long-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	const window = 1500 * time.Millisecond
	start := time.Now()
	h, err := m.Maintenance().MoveHostDrain(ctx, "a", "stateless", "advisor", window, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.PartitionMessage, "2 tasks may finish until") {
		t.Fatalf("message %q", h.PartitionMessage)
	}
	if kv, err := st.Get(ctx, "hosts/a/partition"); err != nil || !strings.Contains(string(kv.Value), `"drain_by_ms":`) {
		t.Fatalf("record %s, %v: want the window's end", kv.Value, err)
	}
	// Offered to no one during the window.
	if _, offers := m.AcquireHosts(HostFilter{Max: 3}); slices.ContainsFunc(offers, func(o HostOffer) bool { return o.Name == "a" }) {
		t.Fatal("a host in its drain window was offered")
	}
	// The short run ends within the window: no drain asked for it.
	early, stop := context.WithTimeout(ctx, window/3)
	ds := m.Drains(early)
	stop()
	if len(ds) != 0 {
		t.Fatalf("drains during the window: %+v", ds)
	}
	m.ReleaseTask("j-0-1")
	ds = m.Drains(ctx)
	if len(ds) != 1 || ds[0].Host != "a" || !slices.Equal(ds[0].TaskIDs, []string{"long-0-1"}) {
		t.Fatalf("drain at the window's end: %+v", ds)
	}
	if waited := time.Since(start); waited < window-50*time.Millisecond {
		t.Fatalf("drained after %s, inside the %s window", waited, window)
	}
	if msg := m.ListHosts()[0].PartitionMessage; msg != "moving to partition stateless: draining 1 task" {
		t.Fatalf("message after the window %q", msg)
	}
	m.ReleaseTask("long-0-1")
	waitPartitions(t, m, "a=stateless b=batch c=batch")
}

// TestMoveDrainWindowAllEnd: when every run ends within the window the host
// moves then, not at the window's end, and nothing is drained.
func TestMoveDrainWindowAllEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := partManager(t, newPartHosts(), nil)
	if _, err := m.Maintenance().MoveHostDrain(ctx, "a", "stateless", "", time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	m.ReleaseTask("j-0-1")
	waitPartitions(t, m, "a=stateless b=batch c=batch")
	early, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if ds := m.Drains(early); len(ds) != 0 {
		t.Fatalf("drains: %+v", ds)
	}
	for _, w := range []time.Duration{-time.Second, MaxMoveDrain + time.Second} {
		_, err := m.Maintenance().MoveHostDrain(ctx, "b", "stateless", "", w, nil)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "drain_seconds") {
			t.Errorf("window %s: %v, want InvalidArgument naming drain_seconds", w, err)
		}
	}
}

// TestMoveDrainWindowFinishList: runs not named to finish are drained at
// once, in the window; the one named finishes, and the host moves; a
// restart in the window drains again only the runs not named.
func TestMoveDrainWindowFinishList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := memstore.New(memstore.Options{})
	b := newPartHosts()
	m := partManager(t, b, st)
	m.Recover("long-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	h, err := m.Maintenance().MoveHostDrain(ctx, "a", "stateless", "", time.Hour, []string{"j-0-1", "not-on-a"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.PartitionMessage, ": 1 tasks may finish until") {
		t.Fatalf("message %q", h.PartitionMessage)
	}
	ds := m.Drains(ctx)
	if len(ds) != 1 || !slices.Equal(ds[0].TaskIDs, []string{"long-0-1"}) {
		t.Fatalf("drains at the start: %+v; want long-0-1 alone", ds)
	}
	_ = m.Close()

	m2 := NewManager(b, Options{Store: st})
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	m2.Recover("j-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m2.Recover("long-0-1", "a", resources.Resources{MilliCPU: 100, MemoryMB: 10})
	m2.Recovered()
	if ds := m2.Drains(ctx); len(ds) != 1 || !slices.Equal(ds[0].TaskIDs, []string{"long-0-1"}) {
		t.Fatalf("drains after a restart: %+v; want long-0-1 alone", ds)
	}
	m2.ReleaseTask("long-0-1")
	m2.ReleaseTask("j-0-1")
	waitPartitions(t, m2, "a=stateless b=batch c=batch")
	if _, err := m2.Maintenance().MoveHostDrain(ctx, "b", "stateless", "", 0, []string{"x"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "finish_task_ids") {
		t.Errorf("runs to finish without a window: %v", err)
	}
}
