package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// countingStore counts the txns a Batcher sends to the real store under it.
type countingStore struct {
	Store
	txns   atomic.Int64
	ops    atomic.Int64 // ops sent, counted at the start of each Txn
	maxOps atomic.Int64 // most ops seen in one Txn
}

func (c *countingStore) Txn(ctx context.Context, ops ...Op) (int64, error) {
	c.txns.Add(1)
	c.ops.Add(int64(len(ops)))
	for n := int64(len(ops)); ; {
		cur := c.maxOps.Load()
		if n <= cur || c.maxOps.CompareAndSwap(cur, n) {
			break
		}
	}
	return c.Store.Txn(ctx, ops...)
}

// vagueStore reports conflicts as a bare ErrConflict, like a Store that cannot
// say which op was stale, to exercise the Batcher's fallback.
type vagueStore struct{ countingStore }

func (v *vagueStore) Txn(ctx context.Context, ops ...Op) (int64, error) {
	rev, err := v.countingStore.Txn(ctx, ops...)
	if errors.Is(err, ErrConflict) {
		return 0, ErrConflict
	}
	return rev, err
}

// neverFlush is a MaxDelay no test outlives: batches then go out only when
// full or on Close, which makes their contents deterministic.
const neverFlush = time.Hour

type writeResult struct {
	rev int64
	err error
}

// goWrite starts a Write and returns where its result will arrive.
func goWrite(ctx context.Context, b *Batcher, op Op) <-chan writeResult {
	ch := make(chan writeResult, 1)
	go func() {
		rev, err := b.Write(ctx, op)
		ch <- writeResult{rev, err}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan writeResult) writeResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Write did not return")
		return writeResult{}
	}
}

func TestBatcherConcurrentWrites(t *testing.T) {
	_, s := startTestEtcd(t)
	cs := &countingStore{Store: s}
	b := NewBatcher(cs, BatcherOptions{})
	defer b.Close()
	ctx := testCtx(t)

	const writers, each = 50, 40
	revs := make([][]int64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		revs[w] = make([]int64, each)
		wg.Go(func() {
			for i := range each {
				rev, err := b.Write(ctx, Put(fmt.Sprintf("tasks/%02d/%02d", w, i), []byte("running"), MustNotExist))
				if err != nil {
					t.Errorf("writer %d op %d: %v", w, i, err)
					return
				}
				revs[w][i] = rev
			}
		})
	}
	wg.Wait()

	kvs, err := s.List(ctx, "tasks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != writers*each {
		t.Fatalf("%d keys landed, want %d", len(kvs), writers*each)
	}
	distinct := map[int64]bool{}
	for _, kv := range kvs {
		var w, i int
		if _, err := fmt.Sscanf(kv.Key, "tasks/%02d/%02d", &w, &i); err != nil {
			t.Fatal(err)
		}
		if kv.Revision != revs[w][i] {
			t.Fatalf("%s at revision %d, Write returned %d", kv.Key, kv.Revision, revs[w][i])
		}
		distinct[kv.Revision] = true
	}
	if len(distinct) >= writers*each {
		t.Fatalf("no batching: %d txns for %d writes", len(distinct), writers*each)
	}
	t.Logf("%d writes in %d txns", writers*each, cs.txns.Load())
}

func TestBatcherConflictFailsOnlyStaleOps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wrap     func(Store) (Store, *atomic.Int64)
		wantTxns int64
		oneTxn   bool // good ops share one txn
	}{
		// The etcd store names the stale ops: one failed txn, one retry.
		{"exact", func(s Store) (Store, *atomic.Int64) {
			c := &countingStore{Store: s}
			return c, &c.txns
		}, 2, true},
		// A store that does not: one failed txn, then one txn per op.
		{"vague", func(s Store) (Store, *atomic.Int64) {
			v := &vagueStore{countingStore{Store: s}}
			return v, &v.txns
		}, 1 + 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := startTestEtcd(t)
			takenRev := mustTxn(t, s, Put("taken", []byte("orig"), MustNotExist))
			staleRev := mustTxn(t, s, Put("moved", []byte("v1"), MustNotExist))
			mustTxn(t, s, Put("moved", []byte("v2"), staleRev))

			st, txns := tc.wrap(s)
			const batch = 6
			b := NewBatcher(st, BatcherOptions{MaxOps: batch, MaxDelay: neverFlush})
			defer b.Close()
			ctx := testCtx(t)

			var good []<-chan writeResult
			for i := range batch - 2 {
				good = append(good, goWrite(ctx, b, Put(fmt.Sprintf("new/%d", i), []byte("x"), MustNotExist)))
			}
			exists := goWrite(ctx, b, Put("taken", []byte("overwrite"), MustNotExist))
			stale := goWrite(ctx, b, Put("moved", []byte("stale"), staleRev))

			var goodRev int64
			for i, ch := range good {
				r := recv(t, ch)
				if r.err != nil {
					t.Fatalf("good op %d failed: %v", i, r.err)
				}
				if tc.oneTxn && goodRev != 0 && r.rev != goodRev {
					t.Fatalf("good ops committed in different txns: %d and %d", goodRev, r.rev)
				}
				goodRev = r.rev
			}
			for name, ch := range map[string]<-chan writeResult{"MustNotExist on existing": exists, "stale revision": stale} {
				if r := recv(t, ch); !errors.Is(r.err, ErrConflict) {
					t.Fatalf("%s: got %v, want ErrConflict", name, r.err)
				}
			}
			if kv := mustGet(t, s, "taken"); string(kv.Value) != "orig" || kv.Revision != takenRev {
				t.Fatalf("conflicting op wrote: %+v", kv)
			}
			if kv := mustGet(t, s, "moved"); string(kv.Value) != "v2" {
				t.Fatalf("stale op wrote: %+v", kv)
			}
			if got := txns.Load(); got != tc.wantTxns {
				t.Fatalf("%d txns, want %d", got, tc.wantTxns)
			}
		})
	}
}

// TestBatcherKeyFreeAfterConflict: the key of an op that failed its
// compare is free again once its batch is answered. (The retry used to
// filter the batch in place, so the batch's end of flight freed the kept
// ops' keys twice and the stale op's never: every later write of that key
// then waited for ever, as two federation workers' writes of one service
// record once did.)
func TestBatcherKeyFreeAfterConflict(t *testing.T) {
	_, s := startTestEtcd(t)
	staleRev := mustTxn(t, s, Put("moved", []byte("v1"), MustNotExist))
	mustTxn(t, s, Put("moved", []byte("v2"), staleRev))
	b := NewBatcher(s, BatcherOptions{MaxOps: 2, MaxDelay: neverFlush})
	defer b.Close()
	ctx := testCtx(t)
	// The stale op first in the batch, the good one after it.
	stale := goWrite(ctx, b, Put("moved", []byte("stale"), staleRev))
	testutil.Eventually(t, 10*time.Second, "the stale op queued", func() error {
		if b.pending() != 1 {
			return fmt.Errorf("%d queued", b.pending())
		}
		return nil
	})
	good := goWrite(ctx, b, Put("other", []byte("x"), MustNotExist))
	if r := recv(t, stale); !errors.Is(r.err, ErrConflict) {
		t.Fatalf("stale op: %v", r.err)
	}
	if r := recv(t, good); r.err != nil {
		t.Fatalf("good op: %v", r.err)
	}
	// Both keys are free: a full batch of one op on each goes out.
	again := goWrite(ctx, b, Put("moved", []byte("v3"), AnyRevision))
	more := goWrite(ctx, b, Put("third", []byte("x"), MustNotExist))
	for name, ch := range map[string]<-chan writeResult{"the stale op's key": again, "another key": more} {
		if r := recv(t, ch); r.err != nil {
			t.Fatalf("a write of %s after the conflict: %v", name, r.err)
		}
	}
}

func TestBatcherConflictNamesKey(t *testing.T) {
	_, s := startTestEtcd(t)
	mustTxn(t, s, Put("jobs/j1", nil, MustNotExist))
	b := NewBatcher(s, BatcherOptions{})
	defer b.Close()
	_, err := b.Write(testCtx(t), Put("jobs/j1", nil, MustNotExist))
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Key != "jobs/j1" || ce.Conflicts[0].Index != 0 {
		t.Fatalf("got %v, want a ConflictError for jobs/j1", err)
	}
}

// TestBatcherSameKeyOrder queues ten writes to one key (and others to other
// keys) before anything is sent: each must land in its own txn, in
// submission order, and the last one wins.
func TestBatcherSameKeyOrder(t *testing.T) {
	_, s := startTestEtcd(t)
	b := NewBatcher(s, BatcherOptions{MaxDelay: neverFlush})
	ctx := testCtx(t)

	const n = 10
	var same []<-chan writeResult
	for i := range n {
		same = append(same, goWrite(ctx, b, Put("hot", []byte(fmt.Sprint(i)), AnyRevision)))
		goWrite(ctx, b, Put(fmt.Sprintf("cold/%d", i), nil, MustNotExist))
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("write %d queued", i), func() bool { return b.pending() == 2*(i+1) })
	}
	if err := b.Close(); err != nil { // flushes everything
		t.Fatal(err)
	}

	var last int64
	for i, ch := range same {
		r := recv(t, ch)
		if r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
		if r.rev <= last {
			t.Fatalf("write %d committed at %d, not after write %d at %d", i, r.rev, i-1, last)
		}
		last = r.rev
	}
	if kv := mustGet(t, s, "hot"); string(kv.Value) != fmt.Sprint(n-1) || kv.Revision != last {
		t.Fatalf("hot = %q@%d, want the last write %d@%d", kv.Value, kv.Revision, n-1, last)
	}
	kvs, err := s.List(ctx, "cold/")
	if err != nil || len(kvs) != n {
		t.Fatalf("cold keys: %d, %v", len(kvs), err)
	}
}

func TestBatcherCloseFlushesAndStops(t *testing.T) {
	_, s := startTestEtcd(t)
	ctx := testCtx(t)
	baseline := runtime.NumGoroutine()

	b := NewBatcher(s, BatcherOptions{MaxDelay: neverFlush})
	var chans []<-chan writeResult
	for i := range 5 {
		chans = append(chans, goWrite(ctx, b, Put(fmt.Sprintf("flush/%d", i), []byte("v"), MustNotExist)))
	}
	testutil.Eventually(t, 10*time.Second, "writes queued", func() bool { return b.pending() == 5 })

	closed := make(chan struct{})
	go func() { _ = b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	for i, ch := range chans {
		if r := recv(t, ch); r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
		mustGet(t, s, fmt.Sprintf("flush/%d", i))
	}

	if _, err := b.Write(ctx, Put("late", nil, AnyRevision)); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Write after Close: got %v, want ErrBatcherClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	default:
		t.Fatal("commit loop still running after Close")
	}
	testutil.Eventually(t, 10*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}

func TestBatcherCancelledWrite(t *testing.T) {
	_, s := startTestEtcd(t)
	b := NewBatcher(s, BatcherOptions{MaxDelay: neverFlush})
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := goWrite(ctx, b, Put("cancelled", nil, MustNotExist))
	testutil.Eventually(t, 10*time.Second, "write queued", func() bool { return b.pending() == 1 })
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", r.err)
	}
	_ = b.Close()
	// Cancelled before its batch was sent, so it was dropped.
	if _, err := s.Get(testCtx(t), "cancelled"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancelled write landed: %v", err)
	}
	if _, err := b.Write(ctx, Put("x", nil, AnyRevision)); !errors.Is(err, context.Canceled) && !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Write with done ctx: %v", err)
	}
}

func TestBatcherRejectsBadOpAlone(t *testing.T) {
	_, s := startTestEtcd(t)
	b := NewBatcher(s, BatcherOptions{})
	defer b.Close()
	ctx := testCtx(t)
	if _, err := b.Write(ctx, Put("", nil, AnyRevision)); err == nil || !strings.Contains(err.Error(), "op.key: must not be empty") {
		t.Fatalf("empty key: got %v", err)
	}
	if _, err := b.Write(ctx, Put("fine", nil, AnyRevision)); err != nil {
		t.Fatal(err)
	}
}

// TestBatcherMaxBytes checks big values are split over several txns instead
// of one that etcd would refuse as larger than its 1.5 MiB request limit.
func TestBatcherMaxBytes(t *testing.T) {
	_, s := startTestEtcd(t)
	cs := &countingStore{Store: s}
	b := NewBatcher(cs, BatcherOptions{MaxDelay: neverFlush})
	ctx := testCtx(t)
	big := bytes.Repeat([]byte("x"), 300<<10) // 300 KiB: 3 fit in 1 MiB, 4 do not
	const n = 7
	var chans []<-chan writeResult
	for i := range n {
		chans = append(chans, goWrite(ctx, b, Put(fmt.Sprintf("big/%d", i), big, MustNotExist)))
		// Queued or already sent (the batcher flushes on its own once 1 MiB
		// is queued): either way, accepted before the next one starts.
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("write %d accepted", i), func() bool { return b.pending()+int(cs.ops.Load()) >= i+1 })
	}
	_ = b.Close()
	for i, ch := range chans {
		if r := recv(t, ch); r.err != nil {
			t.Fatalf("write %d: %v", i, r.err)
		}
	}
	if got := cs.maxOps.Load(); got > 3 {
		t.Fatalf("a txn carried %d x 300 KiB; want at most 3", got)
	}
}

func benchValue() []byte { return bytes.Repeat([]byte("v"), 200) }

// BenchmarkBatcherWrite measures group commit: many goroutines writing
// ~200-byte values through one Batcher. Compare with BenchmarkUnbatchedTxn.
func BenchmarkBatcherWrite(b *testing.B) {
	_, s := startTestEtcd(b)
	cs := &countingStore{Store: s}
	bt := NewBatcher(cs, BatcherOptions{})
	defer bt.Close()
	benchWrites(b, func(ctx context.Context, op Op) error {
		_, err := bt.Write(ctx, op)
		return err
	})
	b.ReportMetric(float64(cs.ops.Load())/float64(cs.txns.Load()), "ops/txn")
}

// slowStore adds a fixed round trip to every Txn, as the network between
// the stack and an external etcd cluster does.
type slowStore struct {
	Store
	rtt time.Duration
}

func (s *slowStore) Txn(ctx context.Context, ops ...Op) (int64, error) {
	time.Sleep(s.rtt) // the simulated network of the benchmarks, not a wait
	return s.Store.Txn(ctx, ops...)
}

// BenchmarkBatcherInFlight compares one txn in flight with two, on the
// embedded etcd and with a 2 ms round trip added (an external etcd one
// network hop away): go test -bench BatcherInFlight ./internal/store.
func BenchmarkBatcherInFlight(b *testing.B) {
	for _, rtt := range []time.Duration{0, 2 * time.Millisecond} {
		for _, n := range []int{1, 2} {
			b.Run(fmt.Sprintf("rtt=%s/inFlight=%d", rtt, n), func(b *testing.B) {
				_, s := startTestEtcd(b)
				cs := &countingStore{Store: &slowStore{Store: s, rtt: rtt}}
				bt := NewBatcher(cs, BatcherOptions{MaxInFlight: n})
				defer bt.Close()
				benchWrites(b, func(ctx context.Context, op Op) error {
					_, err := bt.Write(ctx, op)
					return err
				})
				b.ReportMetric(float64(cs.ops.Load())/float64(cs.txns.Load()), "ops/txn")
			})
		}
	}
}

// BenchmarkUnbatchedTxn is the baseline: the same writers, one Txn each.
func BenchmarkUnbatchedTxn(b *testing.B) {
	_, s := startTestEtcd(b)
	benchWrites(b, func(ctx context.Context, op Op) error {
		_, err := s.Txn(ctx, op)
		return err
	})
}

func benchWrites(b *testing.B, write func(context.Context, Op) error) {
	ctx := context.Background()
	val := benchValue()
	var seq atomic.Int64
	b.SetParallelism(32) // 32 writers per core: a busy scheduler
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := write(ctx, Put(fmt.Sprintf("bench/%08d", seq.Add(1)), val, MustNotExist)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// gatedStore holds every Txn until the test releases it, telling the test
// the ops of each as it starts.
type gatedStore struct {
	Store
	started chan gatedTxn
}

type gatedTxn struct {
	keys    string
	release chan struct{}
}

func (g *gatedStore) Txn(ctx context.Context, ops ...Op) (int64, error) {
	var ks []string
	for _, op := range ops {
		ks = append(ks, op.Key)
	}
	release := make(chan struct{})
	g.started <- gatedTxn{keys: strings.Join(ks, ","), release: release}
	<-release
	return g.Store.Txn(ctx, ops...)
}

// TestBatcherPipelinesTxns: txns go while others are in flight, up to
// MaxInFlight, but an op whose key is in a txn in flight waits for that
// txn's answer, so writes of one key still land in order.
func TestBatcherPipelinesTxns(t *testing.T) {
	_, s := startTestEtcd(t)
	g := &gatedStore{Store: s, started: make(chan gatedTxn)}
	b := NewBatcher(g, BatcherOptions{MaxDelay: -1, MaxInFlight: 3})
	defer b.Close()
	ctx := testCtx(t)
	next := func(want string) gatedTxn {
		t.Helper()
		select {
		case tx := <-g.started:
			if tx.keys != want {
				t.Fatalf("txn started with %s, want %s", tx.keys, want)
			}
			return tx
		case <-ctx.Done():
			t.Fatalf("no txn started; want one with %s", want)
		}
		return gatedTxn{}
	}

	a1 := goWrite(ctx, b, Put("a", []byte("1"), AnyRevision))
	ta1 := next("a")
	bw := goWrite(ctx, b, Put("b", nil, AnyRevision))
	tb := next("b") // while a's txn is in flight
	a2 := goWrite(ctx, b, Put("a", []byte("2"), AnyRevision))
	testutil.Eventually(t, 10*time.Second, "the second write of a queued", func() bool { return b.pending() == 1 })
	cw := goWrite(ctx, b, Put("c", nil, AnyRevision))
	tc := next("c") // the third txn leaves a's second write behind

	close(ta1.release)
	r1 := recv(t, a1)
	ta2 := next("a") // only once the first has answered
	close(ta2.release)
	close(tb.release)
	close(tc.release)
	r2 := recv(t, a2)
	for _, r := range []writeResult{r1, r2, recv(t, bw), recv(t, cw)} {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if r2.rev <= r1.rev {
		t.Fatalf("a's second write at revision %d, not after its first at %d", r2.rev, r1.rev)
	}
	if kv := mustGet(t, s, "a"); string(kv.Value) != "2" {
		t.Fatalf("a = %q, want the second write", kv.Value)
	}
}

// goWriteTxn starts a WriteTxn and returns where its result will arrive.
func goWriteTxn(ctx context.Context, b *Batcher, ops ...Op) <-chan writeResult {
	ch := make(chan writeResult, 1)
	go func() {
		rev, err := b.WriteTxn(ctx, ops...)
		ch <- writeResult{rev, err}
	}()
	return ch
}

// TestBatcherWriteTxnAllOrNothing: a group commits whole in a txn shared
// with other writes; a stale op fails its group alone (nothing of the group
// is written, the conflict numbered within the group), and the other
// writes of the batch still commit together.
func TestBatcherWriteTxnAllOrNothing(t *testing.T) {
	_, s := startTestEtcd(t)
	staleRev := mustTxn(t, s, Put("moved", []byte("v1"), MustNotExist))
	mustTxn(t, s, Put("moved", []byte("v2"), staleRev))
	cs := &countingStore{Store: s}
	// 2 + 3 + 1 = 6 ops: the batch goes when the last write arrives.
	b := NewBatcher(cs, BatcherOptions{MaxOps: 6, MaxDelay: neverFlush})
	defer b.Close()
	ctx := testCtx(t)

	good := goWriteTxn(ctx, b, Put("job/a", []byte("a"), MustNotExist), Put("request/a", []byte("a"), MustNotExist))
	waitPending(t, b, 1)
	bad := goWriteTxn(ctx, b, Put("job/b", []byte("b"), MustNotExist), Put("moved", []byte("stale"), staleRev), Put("request/b", []byte("b"), MustNotExist))
	waitPending(t, b, 2)
	lone := goWrite(ctx, b, Put("task/c", []byte("c"), MustNotExist))

	g, l := recv(t, good), recv(t, lone)
	if g.err != nil || l.err != nil {
		t.Fatalf("good group: %v; lone op: %v", g.err, l.err)
	}
	if g.rev != l.rev {
		t.Errorf("the good group (rev %d) and the lone op (rev %d) were not committed in one txn", g.rev, l.rev)
	}
	r := recv(t, bad)
	var ce *ConflictError
	if !errors.As(r.err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Index != 1 || ce.Conflicts[0].Key != "moved" {
		t.Fatalf("stale group: %v, want a ConflictError naming its op 1 (moved)", r.err)
	}
	for _, k := range []string{"job/b", "request/b"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of the failed group: %v, want ErrNotFound (nothing of it written)", k, err)
		}
	}
	if kv := mustGet(t, s, "moved"); string(kv.Value) != "v2" {
		t.Errorf("stale op wrote: %+v", kv)
	}
	for _, k := range []string{"job/a", "request/a", "task/c"} {
		if kv := mustGet(t, s, k); kv.Revision != g.rev {
			t.Errorf("%s at revision %d, want %d", k, kv.Revision, g.rev)
		}
	}
	if got := cs.txns.Load(); got != 2 {
		t.Errorf("%d txns, want 2 (the failed one, the retry without the stale group)", got)
	}
}

// TestBatcherWriteTxnRefusesBadGroups: a group the batcher cannot send
// whole is refused up front, naming why, and nothing is queued.
func TestBatcherWriteTxnRefusesBadGroups(t *testing.T) {
	_, s := startTestEtcd(t)
	b := NewBatcher(s, BatcherOptions{MaxOps: 3})
	defer b.Close()
	ctx := testCtx(t)
	for name, ops := range map[string][]Op{
		"empty":     nil,
		"too many":  {Put("a", nil, AnyRevision), Put("b", nil, AnyRevision), Put("c", nil, AnyRevision), Put("d", nil, AnyRevision)},
		"same key":  {Put("a", nil, AnyRevision), Put("a", nil, AnyRevision)},
		"empty key": {Put("a", nil, AnyRevision), Put("", nil, AnyRevision)},
	} {
		if _, err := b.WriteTxn(ctx, ops...); err == nil {
			t.Errorf("%s: WriteTxn accepted it", name)
		}
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused group wrote a: %v", err)
	}
	if n := b.pending(); n != 0 {
		t.Errorf("%d writes queued after refusals", n)
	}
}

// waitPending waits until n writes are queued in b, so that a test's
// writes join the queue in a known order.
func waitPending(t *testing.T, b *Batcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after 10s, want %d", b.pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
