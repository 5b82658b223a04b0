package jobmgr

import "testing"

// A watch gets the changes of its jobs only, in order; one whose buffer is
// full is marked lost and the writer goes on without waiting; a closed
// watch gets nothing more.
func TestWatchesNeverWaitForAWatcher(t *testing.T) {
	var w Watches
	w.jobChanged("a") // nobody watches: nothing to do
	mine := w.Subscribe([]string{"a"}, 2)
	every := w.Subscribe(nil, 16)
	if w.Watchers() != 2 {
		t.Fatalf("watchers %d, want 2", w.Watchers())
	}
	w.taskChanged("a", 3)
	w.jobChanged("b")
	w.jobGone("a")
	want := []Change{{Job: "a", Instance: 3}, {Job: "a", Instance: -1, Gone: true}}
	for i, c := range want {
		if got := <-mine.Changes(); got != c {
			t.Fatalf("change %d: %+v, want %+v", i, got, c)
		}
	}
	select {
	case <-mine.Lost():
		t.Fatal("a watch that kept up was marked lost")
	default:
	}
	if n := len(every.Changes()); n != 3 {
		t.Fatalf("the watch of every job holds %d changes, want 3", n)
	}
	// Three changes into a buffer of two: the third finds it full.
	for i := uint32(0); i < 3; i++ {
		w.taskChanged("a", i)
	}
	select {
	case <-mine.Lost():
	default:
		t.Fatal("a watch whose buffer overflowed is not marked lost")
	}
	w.taskChanged("a", 9) // lost already: still no wait, no second close
	mine.Close()
	every.Close()
	if w.Watchers() != 0 {
		t.Fatalf("watchers %d after Close, want 0", w.Watchers())
	}
}
