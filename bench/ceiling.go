package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ceilingPrefix is where the store-ceiling probe writes, beside the
// clusters' prefixes: nothing of the stack reads it.
const ceilingPrefix = "/peloton/bench-ceiling/"

// taskRecord returns the record the stack keeps for a finished task of a
// one-instance job (created and waited for here), as stored: the probe
// writes records of its size.
func taskRecord(ctx context.Context, s *stack, cfg BatchConfig) ([]byte, error) {
	id, err := s.createJob(ctx, &pelotonv1.JobSpec{Name: "bench-ceiling-record", Type: pelotonv1.JobType_BATCH, Pool: "/default", InstanceCount: 1,
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"sleep", "0"}, Resources: &pelotonv1.Resources{Cpu: cfg.TaskCPU, MemoryMb: cfg.TaskMemoryMB}}})
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, 20*time.Millisecond, "the record job", func() (bool, string, error) {
		j, err := s.getJob(ctx, id)
		if err != nil {
			return false, "", err
		}
		return j.GetStatus().GetState() == pelotonv1.JobState_JOB_SUCCEEDED, j.GetStatus().GetState().String(), nil
	})
	if err != nil {
		return nil, err
	}
	st, err := s.store(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	kv, err := st.Get(ctx, fmt.Sprintf("tasks/%s/0", id))
	if err != nil {
		return nil, fmt.Errorf("bench: reading a task record: %w", err)
	}
	return kv.Value, nil
}

// storeCeiling measures how many records of record's size a group-commit
// batcher with the stack's options commits per second into the stack's own
// etcd (same server, same fsync settings), from writers goroutines each
// creating a key of the stack's task layout and then replacing it by
// compare-and-swap perKey-1 times, as the stack does a task's record
// through its states. It counts for d after a warm-up of d/4, then deletes
// what it wrote.
func storeCeiling(ctx context.Context, s *stack, record []byte, writers, perKey int, d time.Duration) (float64, error) {
	st, err := s.storeAt(ctx, ceilingPrefix)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	b := store.NewBatcher(st, store.BatcherOptions{})
	var counting atomic.Bool
	var n atomic.Int64
	var firstErr error
	var errOnce sync.Once
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			var rev int64
			for i := 0; runCtx.Err() == nil; i++ {
				if i%perKey == 0 {
					rev = store.MustNotExist
				}
				key := fmt.Sprintf("tasks/ceiling-%d/%d", w, i/perKey)
				r, err := b.Write(runCtx, store.Put(key, record, rev))
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
						stop()
					}
					return
				}
				rev = r
				if counting.Load() {
					n.Add(1)
				}
			}
		})
	}
	warm := time.NewTimer(d / 4)
	select {
	case <-warm.C:
	case <-runCtx.Done():
	}
	counting.Store(true)
	start := time.Now()
	select {
	case <-time.After(d):
	case <-runCtx.Done():
	}
	counted, took := n.Load(), time.Since(start)
	stop()
	wg.Wait()
	_ = b.Close()
	if firstErr != nil {
		return 0, fmt.Errorf("bench: store ceiling: %w", firstErr)
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := st.Client().Delete(dctx, ceilingPrefix, clientv3.WithPrefix()); err != nil {
		return 0, fmt.Errorf("bench: store ceiling: deleting the probe's keys: %w", err)
	}
	return float64(counted) / took.Seconds(), nil
}
