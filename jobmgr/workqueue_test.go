package jobmgr

import (
	"testing"
	"time"
)

// The engine's correctness rests on these properties of its queue (see
// newWorkQueue); they are pinned here so that a change of the library that
// broke one fails this test rather than a scenario far away.
func TestWorkQueueSemantics(t *testing.T) {
	q := newWorkQueue()
	defer q.ShutDown()

	// Adds of a waiting key coalesce.
	q.Add("a")
	q.Add("b")
	q.Add("a")
	if n := q.Len(); n != 2 {
		t.Fatalf("Len after a, b, a = %d, want 2", n)
	}
	k, shutdown := q.Get()
	if shutdown || k != "a" {
		t.Fatalf("Get = %q, %v; want a", k, shutdown)
	}
	// A key being processed is not handed out again; added meanwhile, it
	// comes back after Done.
	q.Add("a")
	if k, _ := q.Get(); k != "b" {
		t.Fatalf("Get = %q, want b (a is being processed)", k)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len while a is processed and re-added = %d, want 0", n)
	}
	q.Done("a")
	if k, _ := q.Get(); k != "a" {
		t.Fatalf("Get after Done(a) = %q, want a again", k)
	}
	q.Done("a")
	q.Done("b")

	// A delayed add arrives (the bound is generous; no timing is asserted).
	q.AddAfter("c", 10*time.Millisecond)
	got := make(chan string, 1)
	go func() { k, _ := q.Get(); got <- k }()
	select {
	case k := <-got:
		if k != "c" {
			t.Fatalf("Get after AddAfter = %q, want c", k)
		}
		q.Done(k)
	case <-time.After(15 * time.Second):
		t.Fatal("AddAfter's key never arrived")
	}

	// After ShutDown, adds (delayed or not) are dropped and Get returns.
	q.ShutDown()
	q.Add("d")
	q.AddAfter("e", time.Millisecond)
	if k, shutdown := q.Get(); !shutdown {
		t.Fatalf("Get after ShutDown = %q, want shutdown", k)
	}
}
