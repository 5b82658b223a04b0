package jobmgr

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// Writers that come while a write is on its way wait, and the first of
// them carries out all of theirs in one flush, in the order they came;
// every write is carried out exactly once.
func TestTurnsBatchTheWritersThatWait(t *testing.T) {
	var q turns[int]
	var mu sync.Mutex
	var flushes [][]int
	release := make(chan struct{})
	flush := func(batch []int) {
		mu.Lock()
		flushes = append(flushes, slices.Clone(batch))
		mu.Unlock()
		if batch[0] == 0 {
			<-release // the first write is slow
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); q.take(0, flush) }()
	testutil.Eventually(t, 10*time.Second, "the first write on its way", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(flushes) == 1
	})
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); q.take(i, flush) }()
		testutil.Eventually(t, 10*time.Second, "the write queued", func() bool { return q.waiting() == i })
	}
	close(release)
	wg.Wait()
	want := [][]int{{0}, {1, 2, 3}}
	if !slices.EqualFunc(flushes, want, slices.Equal) {
		t.Errorf("flushes %v, want %v", flushes, want)
	}
	// With nothing on its way, a write goes at once and alone.
	q.take(4, flush)
	if last := flushes[len(flushes)-1]; !slices.Equal(last, []int{4}) {
		t.Errorf("a lone write flushed as %v", last)
	}
}

// A lone writer's cancel ends its write; a batch is not ended by its
// leader's.
func TestBatchContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if batchContext(ctx, 1).Err() == nil {
		t.Error("a lone write outlives its writer's cancel")
	}
	if err := batchContext(ctx, 2).Err(); err != nil {
		t.Errorf("a batch ends with its leader's cancel: %v", err)
	}
}
