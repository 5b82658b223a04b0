package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrBatcherClosed is returned by Write after Close: the op was not queued.
var ErrBatcherClosed = errors.New("store: batcher closed")

// quietDiv sets the quiet interval that ends a batch early: MaxDelay/8,
// 250µs by default, many times the gap between writers that are all ready.
const quietDiv = 8

// opOverhead approximates what an op costs in an etcd request beyond its key
// and value (the store prefix, the compare, protobuf framing).
const opOverhead = 64

// BatcherOptions tunes group commit. Zero values take the defaults.
type BatcherOptions struct {
	// MaxOps caps ops per txn (default and ceiling: min(256, s.MaxTxnOps())).
	// Beyond a few hundred, a bigger txn mostly delays everyone in it.
	MaxOps int
	// MaxDelay is how long the first op of a batch waits for company before
	// the batch is sent anyway (default 2ms; negative: do not wait). The
	// batch goes earlier when no op arrived for MaxDelay/8, and at once if
	// its first op queued while the previous txn was in flight.
	MaxDelay time.Duration
	// MaxBytes caps keys+values per txn (default 1 MiB), keeping batches
	// under etcd's 1.5 MiB --max-request-bytes. An op bigger than this goes
	// alone (and etcd may reject it on its own).
	MaxBytes int
	// MaxInFlight is how many txns may be on their way at once (default
	// 2; 1 sends each only when the previous one has returned). A second
	// txn lets etcd apply one while it logs and syncs the next, and the
	// process prepare one while etcd works on the other.
	MaxInFlight int
}

// Batcher packs writes from many goroutines into few etcd txns (group
// commit). Each etcd txn costs a raft round and an fsync, so a client issuing
// one txn per write tops out at a few hundred writes a second; a Batcher
// shares that cost across every op waiting at the same moment.
//
// Writes in one batch are independent: the batch is not atomic as a whole,
// and one write's failed compare does not fail the others. Ops on the same
// key are applied in the order their writes were called; a later one waits
// for the next batch, because etcd rejects two writes to one key in one txn.
// WriteTxn is a write of several ops that commit together or not at all
// (a record and its request id, say), group-committed with the others.
//
// One goroutine forms batches and sends each on its own goroutine, with
// at most MaxInFlight txns on their way. An op whose key is in a txn on its
// way waits for that txn's answer, which keeps the order per key; ops on
// other keys are free to go. Throughput comes from batch size, which grows
// by itself while txns are in flight, and from etcd working on one txn
// while it syncs another.
type Batcher struct {
	s           Store
	maxOps      int
	maxBytes    int
	maxDelay    time.Duration
	maxInFlight int

	mu          sync.Mutex
	queue       []*batchReq // submission order
	queuedBytes int
	queuedOps   int
	closed      bool
	// inFlight counts the txns on their way; busy holds the keys of their
	// ops, which no other txn may carry until they are answered.
	inFlight int
	busy     map[string]struct{}
	// stalled: the loop found every queued op waiting on a key in flight;
	// the next op queued may be free to go, so it wakes the loop.
	stalled bool

	kick chan struct{} // cap 1: "the queue changed in a way that matters"
	done chan struct{} // closed when the commit loop has exited
}

type batchReq struct {
	ctx context.Context
	// ops commit together: one op for Write, a group for WriteTxn.
	ops  []Op
	size int
	at   time.Time
	res  chan batchRes // cap 1, so the loop never blocks on a gone writer
}

type batchRes struct {
	rev int64
	err error
}

// NewBatcher starts the commit goroutine; Close stops it.
func NewBatcher(s Store, opts BatcherOptions) *Batcher {
	limit := max(1, min(256, s.MaxTxnOps()))
	if opts.MaxOps <= 0 || opts.MaxOps > s.MaxTxnOps() {
		opts.MaxOps = limit
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = 2 * time.Millisecond
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 20
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 2
	}
	b := &Batcher{
		s:           s,
		maxOps:      opts.MaxOps,
		maxBytes:    opts.MaxBytes,
		maxDelay:    max(opts.MaxDelay, 0),
		maxInFlight: opts.MaxInFlight,
		busy:        map[string]struct{}{},
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	go b.run()
	return b
}

// Write queues op and blocks until it is committed, returning the revision
// of the txn that applied it (shared with the rest of its batch), or fails.
// A failed compare returns a *ConflictError (errors.Is ErrConflict) for this
// op alone.
//
// If ctx ends first, Write returns ctx.Err(), and the op may or may not be
// written: it is dropped if its batch has not been sent yet, but a txn in
// flight cannot be recalled. Callers must re-read before retrying, which CAS
// writes force anyway. Likewise, an etcd error (timeout, unavailable) leaves
// every op of that batch in doubt.
func (b *Batcher) Write(ctx context.Context, op Op) (int64, error) {
	if err := validateOp(op); err != nil {
		return 0, fmt.Errorf("store: batcher: op%v", err)
	}
	return b.write(ctx, []Op{op})
}

// WriteTxn is Write for ops that must commit together: they go in one txn
// (shared with other writes), and all are applied or none. A failed compare
// of any of them fails the group alone, with a *ConflictError whose indexes
// are positions in ops. A group may hold at most MaxOps ops and no two on
// one key.
func (b *Batcher) WriteTxn(ctx context.Context, ops ...Op) (int64, error) {
	if len(ops) == 0 || len(ops) > b.maxOps {
		return 0, fmt.Errorf("%w: the batcher takes 1 to %d ops in one group, got %d", ErrInvalidTxn, b.maxOps, len(ops))
	}
	keys := make(map[string]bool, len(ops))
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return 0, fmt.Errorf("store: batcher: op %d%v", i, err)
		}
		if keys[op.Key] {
			return 0, fmt.Errorf("%w: op %d: key %q appears twice in one group", ErrInvalidTxn, i, op.Key)
		}
		keys[op.Key] = true
	}
	return b.write(ctx, ops)
}

func (b *Batcher) write(ctx context.Context, ops []Op) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	size := 0
	for _, op := range ops {
		size += len(op.Key) + len(op.Value) + opOverhead
	}
	r := &batchReq{ctx: ctx, ops: ops, size: size, at: time.Now(), res: make(chan batchRes, 1)}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrBatcherClosed
	}
	b.queue = append(b.queue, r)
	before, beforeOps := b.queuedBytes, b.queuedOps
	b.queuedBytes += r.size
	b.queuedOps += len(ops)
	// Wake the loop only when its decision can change: the first op starts
	// the MaxDelay clock, a full batch should not wait it out. Waking it on
	// every op would cost a context switch per write.
	wake := len(b.queue) == 1 || (beforeOps < b.maxOps && b.queuedOps >= b.maxOps) || (before < b.maxBytes && b.queuedBytes >= b.maxBytes) || b.stalled
	b.stalled = false
	b.mu.Unlock()
	if wake {
		b.signal()
	}

	select {
	case res := <-r.res:
		return res.rev, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// PipelineOps is how many ops it takes to keep the batcher busy: MaxInFlight
// full txns on their way and a full one forming. Writers that each wait for
// their op's commit before writing again need to be at least this many for
// the txns to stay full; fewer, and the rate is theirs, not etcd's.
func (b *Batcher) PipelineOps() int { return b.maxOps * (b.maxInFlight + 1) }

// Close commits every op queued so far, then stops the commit goroutine. It
// returns once all of them have their answer; later Writes fail with
// ErrBatcherClosed. Calling it again is a no-op.
func (b *Batcher) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.signal()
	<-b.done
	return nil
}

func (b *Batcher) signal() {
	select {
	case b.kick <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// pending is the number of queued, unsent ops; tests use it to know their
// Writes are queued before they act.
func (b *Batcher) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

func (b *Batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		batch, wait, stop := b.next(time.Now())
		switch {
		case stop:
			return
		case len(batch) > 0:
			go func() {
				b.commit(batch)
				b.landed(batch)
			}()
		case wait < 0:
			<-b.kick
		case wait > 0:
			timer.Reset(wait)
			select {
			case <-b.kick:
			case <-timer.C:
			}
			timer.Stop()
		}
	}
}

// landed ends a batch's flight: its keys are free for the ops waiting on
// them, and another txn may go.
func (b *Batcher) landed(batch []*batchReq) {
	b.mu.Lock()
	b.inFlight--
	for _, r := range batch {
		for _, op := range r.ops {
			delete(b.busy, op.Key)
		}
	}
	b.mu.Unlock()
	b.signal()
}

// next takes the next batch off the queue, or says how long to wait for one
// (-1: until kicked), or that the batcher is closed and drained. It marks
// the batch in flight.
func (b *Batcher) next(now time.Time) (batch []*batchReq, wait time.Duration, stop bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		return nil, -1, b.closed && b.inFlight == 0
	}
	if b.inFlight >= b.maxInFlight {
		return nil, -1, false // landed kicks
	}
	if !b.closed && b.queuedOps < b.maxOps && b.queuedBytes < b.maxBytes {
		// Wait for company until MaxDelay after the first op, but stop early
		// once arrivals pause for a quiet interval: then whoever was going
		// to join has joined. Without that, writers that wait for their
		// previous write before the next (the common case) would idle out
		// the whole MaxDelay on every batch.
		untilMax := b.maxDelay - now.Sub(b.queue[0].at)
		untilQuiet := b.maxDelay/quietDiv - now.Sub(b.queue[len(b.queue)-1].at)
		if w := min(untilMax, untilQuiet); w > 0 {
			return nil, w, false
		}
	}

	// Scan in submission order. A key seen once blocks every later op on it
	// from this batch, whether or not the first op got in (it may have been
	// left out for size), and so does a key of a txn in flight: that is
	// what keeps per-key order.
	seen := make(map[string]struct{}, min(b.queuedOps, b.maxOps))
	keep := b.queue[:0] // filtered in place: writes never overtake reads
	bytes, nops := 0, 0
	for _, r := range b.queue {
		full := nops == b.maxOps
		if !full && r.ctx.Err() != nil {
			// Its Write has returned (or is returning) ctx.Err(); not
			// sending it keeps "may or may not be written" rare.
			r.res <- batchRes{err: r.ctx.Err()}
			b.queuedBytes -= r.size
			b.queuedOps -= len(r.ops)
			continue
		}
		if full {
			keep = append(keep, r)
			continue
		}
		blocked := false
		for _, op := range r.ops {
			_, again := seen[op.Key]
			_, flying := b.busy[op.Key]
			blocked = blocked || again || flying
			seen[op.Key] = struct{}{}
		}
		if blocked || nops+len(r.ops) > b.maxOps || (len(batch) > 0 && bytes+r.size > b.maxBytes) {
			keep = append(keep, r)
			continue
		}
		batch = append(batch, r)
		bytes += r.size
		nops += len(r.ops)
		b.queuedBytes -= r.size
		b.queuedOps -= len(r.ops)
	}
	clear(b.queue[len(keep):]) // drop references for the GC
	b.queue = keep
	if len(batch) == 0 {
		// Every op waits on a key in flight (or was cancelled): landed
		// kicks when one comes back, Write when another op comes.
		b.stalled = len(b.queue) > 0
		return nil, -1, b.closed && len(b.queue) == 0 && b.inFlight == 0
	}
	b.inFlight++
	for _, r := range batch {
		for _, op := range r.ops {
			b.busy[op.Key] = struct{}{}
		}
	}
	return batch, 0, false
}

// commit sends one batch and answers every write in it.
//
// On a conflict, the *ConflictError from the store names the stale ops; the
// writes that hold them (a lone op, or a WriteTxn group) get ErrConflict and
// the rest is sent again. That is the same as committing the good writes in
// the first place, because a failed txn writes nothing. Each retry removes at
// least one write (the store reads the compared keys as of the failed txn's
// revision, which is what its compares saw), so a batch of n writes costs at
// most n+1 txns, and in the common case of stale ops known at once, exactly
// 2. Reading revisions in a separate step instead could race with other
// writers and find nothing to remove; bisecting costs O(k log n) txns for k
// stale ops.
func (b *Batcher) commit(batch []*batchReq) {
	for len(batch) > 0 {
		// owner[i] is the write of the txn's op i, start[w] where write w's
		// ops begin.
		var ops []Op
		owner := make([]int, 0, len(batch))
		start := make([]int, len(batch))
		for w, r := range batch {
			start[w] = len(ops)
			ops = append(ops, r.ops...)
			for range r.ops {
				owner = append(owner, w)
			}
		}
		// Not any writer's ctx: one caller giving up must not abort the
		// others' txn. The store's own request timeout bounds the call.
		rev, err := b.s.Txn(context.Background(), ops...)
		if err == nil {
			for _, r := range batch {
				r.res <- batchRes{rev: rev}
			}
			return
		}
		var ce *ConflictError
		if !errors.As(err, &ce) {
			if errors.Is(err, ErrConflict) {
				// A Store that cannot say which op was stale.
				b.commitEach(batch)
				return
			}
			for _, r := range batch {
				r.res <- batchRes{err: err}
			}
			return
		}
		stale := make(map[int][]Conflict, len(ce.Conflicts))
		for _, c := range ce.Conflicts {
			if c.Index >= 0 && c.Index < len(ops) {
				w := owner[c.Index]
				c.Index -= start[w] // the writer's own numbering
				stale[w] = append(stale[w], c)
			}
		}
		if len(stale) == 0 {
			b.commitEach(batch)
			return
		}
		// A new slice: landed frees the keys of the batch as it was sent,
		// from the caller's slice, which filtering in place would rewrite
		// (freeing a kept op's key twice and a stale op's never).
		keep := make([]*batchReq, 0, len(batch))
		for w, r := range batch {
			if cs, ok := stale[w]; ok {
				r.res <- batchRes{err: &ConflictError{Conflicts: cs}}
				continue
			}
			keep = append(keep, r)
		}
		batch = keep
	}
}

// commitEach is the fallback when the store reports a conflict without
// saying where: one txn per write, in order. O(n) txns, but always right.
func (b *Batcher) commitEach(batch []*batchReq) {
	for _, r := range batch {
		rev, err := b.s.Txn(context.Background(), r.ops...)
		r.res <- batchRes{rev: rev, err: err}
	}
}
