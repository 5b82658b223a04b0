package store

import (
	"context"
	"testing"
	"time"
)

// nextRev waits for the next revision Watch reports, failing after 10s.
func nextRev(t *testing.T, ch <-chan int64) int64 {
	t.Helper()
	select {
	case rev, ok := <-ch:
		if !ok {
			t.Fatal("the watch channel closed")
		}
		return rev
	case <-time.After(10 * time.Second):
		t.Fatal("no change reported within 10s")
	}
	return 0
}

func TestEtcdWatch(t *testing.T) {
	e, a := startTestEtcd(t)
	other := connectTestStore(t, e, "/other/")
	ctx := testCtx(t)
	ch := a.Watch(ctx, "jobs/")
	// The watch starts asynchronously: write until it reports, so the
	// test does not depend on when etcd registered it.
	var rev int64
	for i := 0; i < 100 && rev == 0; i++ {
		r := mustTxn(t, a, Put("jobs/x", []byte{byte(i)}, AnyRevision))
		select {
		case rev = <-ch:
			if rev < r {
				t.Fatalf("reported revision %d is below the write's %d", rev, r)
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if rev == 0 {
		t.Fatal("no change reported for 100 writes")
	}
	// Writes outside the prefix (or the store) are not reported.
	mustTxn(t, a, Put("pools/x", []byte("p"), AnyRevision))
	mustTxn(t, other, Put("jobs/x", []byte("o"), AnyRevision))
	r := mustTxn(t, a, Delete("jobs/x", AnyRevision))
	if got := nextRev(t, ch); got != r {
		t.Fatalf("reported %d, want the delete's revision %d (writes outside the prefix reported?)", got, r)
	}
}

func TestEtcdWatchCompacted(t *testing.T) {
	_, a := startTestEtcd(t)
	ctx := testCtx(t)
	first := mustTxn(t, a, Put("jobs/a", []byte("1"), AnyRevision))
	mustTxn(t, a, Put("jobs/a", []byte("2"), AnyRevision))
	last := mustTxn(t, a, Put("jobs/a", []byte("3"), AnyRevision))
	if _, err := a.Client().Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	// Watching from a compacted revision reports the compaction, then goes
	// on from the oldest revision kept.
	ch := a.watchFrom(ctx, "jobs/", first)
	if got := nextRev(t, ch); got != last {
		t.Fatalf("reported %d, want the compaction revision %d", got, last)
	}
	next := mustTxn(t, a, Put("jobs/a", []byte("4"), AnyRevision))
	// The write at the compaction revision may be reported again first.
	for got := nextRev(t, ch); got != next; got = nextRev(t, ch) {
		if got > next || got < last {
			t.Fatalf("reported %d, want %d", got, next)
		}
	}
}

func TestEtcdWatchEnds(t *testing.T) {
	_, a := startTestEtcd(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := a.Watch(ctx, "")
	cancel()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch channel did not close within 10s of its context's end")
		}
	}
}
