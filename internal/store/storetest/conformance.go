package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
)

// MinTxnOps is the smallest MaxTxnOps Conformance can test with: its
// largest txn, apart from the one that tests MaxTxnOps, has 7 ops.
const MinTxnOps = 7

// Watcher is the optional part of a store that reports changes, as
// (*store.Etcd).Watch does; Conformance tests it when the store has it.
type Watcher interface {
	Watch(ctx context.Context, prefix string) <-chan int64
}

// Conformance runs the semantics every store.Store must share with the
// etcd store, each as a subtest on a fresh store from newStore (which also
// arranges its Close at the test's end): reads and their order, revisions,
// every kind of compare, conflicts naming the stale ops, all-or-nothing
// txns, MaxTxnOps and the other txns refused as a whole, ended contexts,
// concurrent txns, a store.Batcher on top, use after Close, and Watch if
// the store has it. The expectations are etcd's observed behaviour: the
// suite runs against the etcd store in storetest's own tests, so a fake
// that passes it answers as etcd would. Its txns need a MaxTxnOps of at
// least MinTxnOps.
func Conformance(t *testing.T, newStore func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, store.Store)
	}{
		{"GetAbsent", testGetAbsent},
		{"PutThenGet", testPutThenGet},
		{"ValuesAreCopied", testValuesAreCopied},
		{"Revisions", testRevisions},
		{"Compares", testCompares},
		{"ConflictNamesStaleOps", testConflictNamesStaleOps},
		{"AllOrNothing", testAllOrNothing},
		{"ListOrderAndPrefix", testListOrderAndPrefix},
		{"ListIsSnapshot", testListIsSnapshot},
		{"MaxTxnOps", testMaxTxnOps},
		{"InvalidTxn", testInvalidTxn},
		{"ContextEnded", testContextEnded},
		{"ConcurrentTxns", testConcurrentTxns},
		{"Batcher", testBatcher},
		{"UseAfterClose", testUseAfterClose},
		{"Watch", testWatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if s.MaxTxnOps() < MinTxnOps {
				t.Fatalf("MaxTxnOps %d: the suite needs at least %d", s.MaxTxnOps(), MinTxnOps)
			}
			tc.test(t, s)
		})
	}
}

// ctxFor bounds every call a test makes, so a broken store fails the test
// instead of hanging it.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustTxn(t *testing.T, s store.Store, ops ...store.Op) int64 {
	t.Helper()
	rev, err := s.Txn(ctxFor(t), ops...)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	return rev
}

func mustGet(t *testing.T, s store.Store, key string) store.KV {
	t.Helper()
	kv, err := s.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return kv
}

func mustList(t *testing.T, s store.Store, prefix string) []store.KV {
	t.Helper()
	kvs, err := s.List(ctxFor(t), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return kvs
}

func wantAbsent(t *testing.T, s store.Store, key string) {
	t.Helper()
	if kv, err := s.Get(ctxFor(t), key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%q) = %+v, %v; want ErrNotFound", key, kv, err)
	}
}

func keysOf(kvs []store.KV) []string {
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	return keys
}

func testGetAbsent(t *testing.T, s store.Store) {
	_, err := s.Get(ctxFor(t), "jobs/none")
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("Get of an absent key: %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), `"jobs/none"`) {
		t.Fatalf("error %q does not name the key", err)
	}
}

func testPutThenGet(t *testing.T, s store.Store) {
	rev := mustTxn(t, s, store.Put("jobs/a", []byte("spec"), store.MustNotExist))
	if kv := mustGet(t, s, "jobs/a"); kv.Key != "jobs/a" || string(kv.Value) != "spec" || kv.Revision != rev {
		t.Fatalf("Get = %+v, want jobs/a=spec at revision %d", kv, rev)
	}
	// An empty value is a value: the key exists. etcd answers it as nil
	// whether it was written as nil or as an empty slice.
	for _, v := range [][]byte{nil, {}} {
		rev := mustTxn(t, s, store.Put("jobs/empty", v, store.AnyRevision))
		if kv := mustGet(t, s, "jobs/empty"); kv.Value != nil || kv.Revision != rev {
			t.Fatalf("Get of a key written with %#v = %#v, want a nil value at revision %d", v, kv, rev)
		}
	}
}

func testValuesAreCopied(t *testing.T, s store.Store) {
	v := []byte("one")
	mustTxn(t, s, store.Put("k", v, store.MustNotExist))
	v[0] = 'X' // the caller reuses its buffer
	got := mustGet(t, s, "k")
	got.Value[0] = 'Y' // and scribbles on what it read
	listed := mustList(t, s, "k")
	listed[0].Value[1] = 'Z'
	if kv := mustGet(t, s, "k"); string(kv.Value) != "one" {
		t.Fatalf("value %q, want %q: the store shares memory with its callers", kv.Value, "one")
	}
}

func testRevisions(t *testing.T, s store.Store) {
	r1 := mustTxn(t, s, store.Put("a", []byte("1"), store.MustNotExist))
	// Every txn that changes something advances the store's revision by
	// one; every key it puts gets that revision.
	r2 := mustTxn(t, s, store.Put("b", []byte("2"), store.MustNotExist), store.Put("c", []byte("3"), store.MustNotExist))
	if r2 != r1+1 {
		t.Fatalf("second txn at revision %d, want %d", r2, r1+1)
	}
	for key, want := range map[string]int64{"a": r1, "b": r2, "c": r2} {
		if kv := mustGet(t, s, key); kv.Revision != want {
			t.Fatalf("%s at revision %d, want %d", key, kv.Revision, want)
		}
	}
	// A txn that changes nothing (deletes of absent keys) leaves it and
	// answers the current one.
	if rev := mustTxn(t, s, store.Delete("none", store.AnyRevision), store.Delete("gone", store.MustNotExist)); rev != r2 {
		t.Fatalf("txn of deletes of absent keys answered revision %d, want the current %d", rev, r2)
	}
	// A delete advances it; a failed or refused txn does not.
	r3 := mustTxn(t, s, store.Delete("c", r2))
	if r3 != r2+1 {
		t.Fatalf("delete at revision %d, want %d", r3, r2+1)
	}
	if _, err := s.Txn(ctxFor(t), store.Put("a", []byte("stale"), r2)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale put: %v, want ErrConflict", err)
	}
	if _, err := s.Txn(ctxFor(t), store.Put("", nil, store.AnyRevision)); !errors.Is(err, store.ErrInvalidTxn) {
		t.Fatalf("empty key: %v, want ErrInvalidTxn", err)
	}
	// A put and a delete of an absent key change something.
	r4 := mustTxn(t, s, store.Put("a", []byte("4"), r1), store.Delete("none", store.AnyRevision))
	if r4 != r3+1 {
		t.Fatalf("txn after a failed and a refused one at revision %d, want %d", r4, r3+1)
	}
	// A key deleted and created again starts afresh: its old revision no
	// longer matches.
	mustTxn(t, s, store.Delete("b", r2))
	r5 := mustTxn(t, s, store.Put("b", []byte("again"), store.MustNotExist))
	if kv := mustGet(t, s, "b"); kv.Revision != r5 {
		t.Fatalf("re-created key at revision %d, want %d", kv.Revision, r5)
	}
}

func testCompares(t *testing.T, s store.Store) {
	// Each case works on its own key. present: the key is written twice
	// before the op, at revisions old and cur.
	type revs struct{ old, cur int64 }
	for i, tc := range []struct {
		name    string
		present bool
		op      func(key string, r revs) store.Op
		// conflict: the op must fail, with the key's actual revision.
		conflict bool
		// after: whether the key exists after the op.
		after bool
	}{
		{"put MustNotExist, absent", false, func(k string, _ revs) store.Op { return store.Put(k, []byte("v"), store.MustNotExist) }, false, true},
		{"put MustNotExist, present", true, func(k string, _ revs) store.Op { return store.Put(k, []byte("v"), store.MustNotExist) }, true, true},
		{"put at current revision", true, func(k string, r revs) store.Op { return store.Put(k, []byte("v"), r.cur) }, false, true},
		{"put at stale revision", true, func(k string, r revs) store.Op { return store.Put(k, []byte("v"), r.old) }, true, true},
		{"put at a revision, absent", false, func(k string, _ revs) store.Op { return store.Put(k, []byte("v"), 1) }, true, false},
		{"put AnyRevision, absent", false, func(k string, _ revs) store.Op { return store.Put(k, []byte("v"), store.AnyRevision) }, false, true},
		{"put AnyRevision, present", true, func(k string, _ revs) store.Op { return store.Put(k, []byte("v"), store.AnyRevision) }, false, true},
		{"delete MustNotExist, absent", false, func(k string, _ revs) store.Op { return store.Delete(k, store.MustNotExist) }, false, false},
		{"delete MustNotExist, present", true, func(k string, _ revs) store.Op { return store.Delete(k, store.MustNotExist) }, true, true},
		{"delete at current revision", true, func(k string, r revs) store.Op { return store.Delete(k, r.cur) }, false, false},
		{"delete at stale revision", true, func(k string, r revs) store.Op { return store.Delete(k, r.old) }, true, true},
		{"delete at a revision, absent", false, func(k string, _ revs) store.Op { return store.Delete(k, 1) }, true, false},
		{"delete AnyRevision, present", true, func(k string, _ revs) store.Op { return store.Delete(k, store.AnyRevision) }, false, false},
		{"delete AnyRevision, absent", false, func(k string, _ revs) store.Op { return store.Delete(k, store.AnyRevision) }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("cmp/%02d", i)
			var r revs
			if tc.present {
				r.old = mustTxn(t, s, store.Put(key, []byte("old"), store.MustNotExist))
				r.cur = mustTxn(t, s, store.Put(key, []byte("cur"), r.old))
			}
			op := tc.op(key, r)
			_, err := s.Txn(ctxFor(t), op)
			if !tc.conflict && err != nil {
				t.Fatalf("Txn(%+v): %v", op, err)
			}
			if tc.conflict {
				var ce *store.ConflictError
				want := store.Conflict{Index: 0, Key: key, Expected: op.ExpectRevision, Actual: r.cur}
				if !errors.Is(err, store.ErrConflict) || !errors.As(err, &ce) || !slices.Equal(ce.Conflicts, []store.Conflict{want}) {
					t.Fatalf("Txn(%+v): %v, want a *ConflictError naming %+v", op, err, want)
				}
			}
			kv, err := s.Get(ctxFor(t), key)
			switch {
			case tc.after && err != nil:
				t.Fatalf("Get after the op: %v, want the key", err)
			case !tc.after && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("Get after the op = %+v, %v; want ErrNotFound", kv, err)
			case tc.conflict && tc.present && (kv.Revision != r.cur || string(kv.Value) != "cur"):
				t.Fatalf("a failed op changed the key: %+v", kv)
			}
		})
	}
}

func testConflictNamesStaleOps(t *testing.T, s store.Store) {
	var keys []string
	revs := map[string]int64{}
	for i := range 6 {
		k := fmt.Sprintf("tasks/%d", i)
		keys = append(keys, k)
		revs[k] = mustTxn(t, s, store.Put(k, []byte("v"), store.MustNotExist))
	}
	_, err := s.Txn(ctxFor(t),
		store.Put(keys[0], []byte("w"), revs[keys[0]]),      // fresh
		store.Put(keys[1], []byte("w"), store.MustNotExist), // exists
		store.Put("tasks/new", []byte("w"), store.MustNotExist),
		store.Delete(keys[3], revs[keys[3]]-1),             // stale
		store.Put(keys[4], []byte("w"), store.AnyRevision), // no compare
		store.Put("tasks/absent", []byte("w"), 7),          // absent
		store.Put(keys[5], []byte("w"), revs[keys[5]]+100), // from the future
	)
	want := []store.Conflict{
		{Index: 1, Key: keys[1], Expected: store.MustNotExist, Actual: revs[keys[1]]},
		{Index: 3, Key: keys[3], Expected: revs[keys[3]] - 1, Actual: revs[keys[3]]},
		{Index: 5, Key: "tasks/absent", Expected: 7, Actual: 0},
		{Index: 6, Key: keys[5], Expected: revs[keys[5]] + 100, Actual: revs[keys[5]]},
	}
	var ce *store.ConflictError
	if !errors.Is(err, store.ErrConflict) || !errors.As(err, &ce) || !slices.Equal(ce.Conflicts, want) {
		t.Fatalf("got %v (%+v), want the conflicts %+v", err, ce, want)
	}
	msg := fmt.Sprintf("store: revision conflict; %s: expected absent, found revision %d; %s: expected revision %d, found revision %d; tasks/absent: expected revision 7, found absent; and 1 more",
		keys[1], revs[keys[1]], keys[3], revs[keys[3]]-1, revs[keys[3]])
	if err.Error() != msg {
		t.Fatalf("error %q, want %q", err, msg)
	}
}

func testAllOrNothing(t *testing.T, s store.Store) {
	ra := mustTxn(t, s, store.Put("a", []byte("a"), store.MustNotExist))
	mustTxn(t, s, store.Put("b", []byte("b"), store.MustNotExist))
	before := mustList(t, s, "")
	_, err := s.Txn(ctxFor(t),
		store.Put("new", []byte("n"), store.MustNotExist),
		store.Put("a", []byte("changed"), ra),
		store.Delete("b", store.AnyRevision),
		store.Put("blind", []byte("x"), store.AnyRevision),
		store.Put("a2", nil, ra-1), // the one stale op
	)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("txn with a stale op: %v, want ErrConflict", err)
	}
	after := mustList(t, s, "")
	if !slices.EqualFunc(before, after, func(x, y store.KV) bool {
		return x.Key == y.Key && x.Revision == y.Revision && bytes.Equal(x.Value, y.Value)
	}) {
		t.Fatalf("a failed txn changed the store:\nbefore %+v\nafter  %+v", before, after)
	}
}

func testListOrderAndPrefix(t *testing.T, s store.Store) {
	// Written out of order, in several txns; byte order is key order.
	written := []string{"jobs/b", "jobs/a/1", "pools/x", "jobs/a", "jobsx", "jobs/a0", "jobs/", "jobs/A", "jobs/\u00e9t\u00e9", "jobs/a/2"}
	revs := map[string]int64{}
	for i := 0; i < len(written); i += 3 {
		var ops []store.Op
		for _, k := range written[i:min(i+3, len(written))] {
			ops = append(ops, store.Put(k, []byte("v:"+k), store.MustNotExist))
		}
		rev := mustTxn(t, s, ops...)
		for _, op := range ops {
			revs[op.Key] = rev
		}
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"jobs/", "jobs/A", "jobs/a", "jobs/a/1", "jobs/a/2", "jobs/a0", "jobs/b", "jobs/\u00e9t\u00e9", "jobsx", "pools/x"}},
		{"jobs/", []string{"jobs/", "jobs/A", "jobs/a", "jobs/a/1", "jobs/a/2", "jobs/a0", "jobs/b", "jobs/\u00e9t\u00e9"}},
		{"jobs/a", []string{"jobs/a", "jobs/a/1", "jobs/a/2", "jobs/a0"}},
		{"jobs/a/", []string{"jobs/a/1", "jobs/a/2"}},
		{"jobs", []string{"jobs/", "jobs/A", "jobs/a", "jobs/a/1", "jobs/a/2", "jobs/a0", "jobs/b", "jobs/\u00e9t\u00e9", "jobsx"}},
		{"pools/x", []string{"pools/x"}},
		{"nothing/", []string{}},
	} {
		kvs := mustList(t, s, tc.prefix)
		if got := keysOf(kvs); !slices.Equal(got, tc.want) {
			t.Fatalf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
		for _, kv := range kvs {
			if string(kv.Value) != "v:"+kv.Key || kv.Revision != revs[kv.Key] {
				t.Fatalf("List(%q): %+v, want value %q at revision %d", tc.prefix, kv, "v:"+kv.Key, revs[kv.Key])
			}
		}
	}
	// A deleted key is no longer listed.
	mustTxn(t, s, store.Delete("jobs/a0", revs["jobs/a0"]))
	if got := keysOf(mustList(t, s, "jobs/a")); !slices.Equal(got, []string{"jobs/a", "jobs/a/1", "jobs/a/2"}) {
		t.Fatalf("List after a delete = %q", got)
	}
}

func testListIsSnapshot(t *testing.T, s store.Store) {
	// A writer keeps moving two keys together; every listing must see them
	// equal, never half a txn.
	ctx, cancel := context.WithCancel(ctxFor(t))
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			v := []byte(fmt.Sprint(i))
			if _, err := s.Txn(ctx, store.Put("pair/a", v, store.AnyRevision), store.Put("pair/b", v, store.AnyRevision)); err != nil && ctx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	})
	defer wg.Wait()
	defer cancel()
	for range 200 {
		kvs := mustList(t, s, "pair/")
		if len(kvs) == 2 && (!bytes.Equal(kvs[0].Value, kvs[1].Value) || kvs[0].Revision != kvs[1].Revision) {
			t.Fatalf("List saw half a txn: %+v", kvs)
		}
	}
}

func testMaxTxnOps(t *testing.T, s store.Store) {
	n := s.MaxTxnOps()
	if n < 1 {
		t.Fatalf("MaxTxnOps = %d", n)
	}
	ops := make([]store.Op, n+1)
	for i := range ops {
		ops[i] = store.Put(fmt.Sprintf("many/%05d", i), []byte("v"), store.MustNotExist)
	}
	_, err := s.Txn(ctxFor(t), ops...)
	if want := fmt.Sprintf("%d ops, more than max-txn-ops %d", n+1, n); !errors.Is(err, store.ErrInvalidTxn) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Txn of MaxTxnOps+1 ops: %v, want ErrInvalidTxn saying %q", err, want)
	}
	if kvs := mustList(t, s, "many/"); len(kvs) != 0 {
		t.Fatalf("a refused txn wrote %d keys", len(kvs))
	}
	rev := mustTxn(t, s, ops[:n]...)
	kvs := mustList(t, s, "many/")
	if len(kvs) != n || kvs[0].Revision != rev || kvs[n-1].Revision != rev {
		t.Fatalf("Txn of MaxTxnOps ops: %d keys listed, want %d at revision %d", len(kvs), n, rev)
	}
}

func testInvalidTxn(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name string
		ops  []store.Op
		want string
	}{
		{"no ops", nil, "store: invalid txn: no ops"},
		{"duplicate key", []store.Op{store.Put("x", nil, store.AnyRevision), store.Put("y", nil, store.AnyRevision), store.Delete("x", store.AnyRevision)},
			`store: invalid txn: ops[2].key: "x" already written by ops[0]; etcd allows one write per key per txn`},
		{"empty key", []store.Op{store.Put("y", nil, store.AnyRevision), store.Put("", nil, store.AnyRevision)}, "store: invalid txn: ops[1].key: must not be empty"},
		{"bad kind", []store.Op{{Kind: 7, Key: "x"}}, "store: invalid txn: ops[0].kind: unknown OpKind 7"},
		{"bad revision", []store.Op{store.Put("x", nil, -5)}, "store: invalid txn: ops[0].expectRevision: -5 is not AnyRevision, MustNotExist or a revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Txn(ctxFor(t), tc.ops...)
			if !errors.Is(err, store.ErrInvalidTxn) || err.Error() != tc.want {
				t.Fatalf("got %v, want ErrInvalidTxn %q", err, tc.want)
			}
		})
	}
	wantAbsent(t, s, "x")
	wantAbsent(t, s, "y")
}

func testContextEnded(t *testing.T, s store.Store) {
	mustTxn(t, s, store.Put("a", []byte("a"), store.MustNotExist))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		if _, err := s.Get(c.ctx, "a"); !errors.Is(err, c.want) {
			t.Fatalf("Get: %v, want %v", err, c.want)
		}
		if _, err := s.List(c.ctx, ""); !errors.Is(err, c.want) {
			t.Fatalf("List: %v, want %v", err, c.want)
		}
		if _, err := s.Txn(c.ctx, store.Put("b", []byte("b"), store.MustNotExist)); !errors.Is(err, c.want) {
			t.Fatalf("Txn: %v, want %v", err, c.want)
		}
		wantAbsent(t, s, "b")
	}
}

func testConcurrentTxns(t *testing.T, s store.Store) {
	// Writers increment one counter by compare-and-swap, retrying on
	// conflicts, and each also writes keys of its own: no increment may be
	// lost, and no two txns may share a revision.
	const writers, each = 8, 15
	mustTxn(t, s, store.Put("counter", []byte("0"), store.MustNotExist))
	ctx := ctxFor(t)
	var (
		mu   sync.Mutex
		seen = map[int64]string{}
		wg   sync.WaitGroup
	)
	record := func(rev int64, what string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[rev]; dup {
			t.Errorf("revision %d answered to both %s and %s", rev, prev, what)
		}
		seen[rev] = what
	}
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < each; {
				kv, err := s.Get(ctx, "counter")
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				var n int
				fmt.Sscan(string(kv.Value), &n)
				rev, err := s.Txn(ctx, store.Put("counter", []byte(fmt.Sprint(n+1)), kv.Revision))
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				record(rev, fmt.Sprintf("increment %d of writer %d", i, w))
				rev, err = s.Txn(ctx, store.Put(fmt.Sprintf("own/%d/%d", w, i), nil, store.MustNotExist))
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				record(rev, fmt.Sprintf("key %d of writer %d", i, w))
				i++
			}
		})
	}
	wg.Wait()
	if kv := mustGet(t, s, "counter"); string(kv.Value) != fmt.Sprint(writers*each) {
		t.Fatalf("counter %s, want %d", kv.Value, writers*each)
	}
	if n := len(mustList(t, s, "own/")); n != writers*each {
		t.Fatalf("%d own keys, want %d", n, writers*each)
	}
}

func testBatcher(t *testing.T, s store.Store) {
	b := store.NewBatcher(s, store.BatcherOptions{})
	defer b.Close()
	ctx := ctxFor(t)
	stale := mustTxn(t, s, store.Put("stale", []byte("1"), store.MustNotExist))
	mustTxn(t, s, store.Put("stale", []byte("2"), stale))

	const writers, each = 10, 10
	revs := make([][]int64, writers)
	var wg sync.WaitGroup
	for w := range writers {
		revs[w] = make([]int64, each)
		wg.Go(func() {
			for i := range each {
				rev, err := b.Write(ctx, store.Put(fmt.Sprintf("tasks/%02d/%02d", w, i), []byte("running"), store.MustNotExist))
				if err != nil {
					t.Errorf("writer %d op %d: %v", w, i, err)
					return
				}
				revs[w][i] = rev
			}
		})
	}
	// A stale op among them fails alone, named.
	_, err := b.Write(ctx, store.Put("stale", []byte("3"), stale))
	var ce *store.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Key != "stale" || ce.Conflicts[0].Index != 0 {
		t.Errorf("stale Write: %v, want a conflict naming the key", err)
	}
	wg.Wait()
	kvs := mustList(t, s, "tasks/")
	if len(kvs) != writers*each {
		t.Fatalf("%d keys landed, want %d", len(kvs), writers*each)
	}
	for _, kv := range kvs {
		var w, i int
		if _, err := fmt.Sscanf(kv.Key, "tasks/%02d/%02d", &w, &i); err != nil {
			t.Fatal(err)
		}
		if kv.Revision != revs[w][i] {
			t.Fatalf("%s at revision %d, Write answered %d", kv.Key, kv.Revision, revs[w][i])
		}
	}
	if kv := mustGet(t, s, "stale"); string(kv.Value) != "2" {
		t.Fatalf("the stale write landed: %+v", kv)
	}
}

func testUseAfterClose(t *testing.T, s store.Store) {
	mustTxn(t, s, store.Put("a", []byte("a"), store.MustNotExist))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Every call fails; not with an answer about the data. A closed etcd
	// client retries a while before it gives up, hence the short bound.
	bounded := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	notAnAnswer := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			t.Fatalf("%s after Close: %v, want a failure", what, err)
		}
	}
	_, err := s.Get(bounded(), "a")
	notAnAnswer("Get", err)
	_, err = s.List(bounded(), "")
	notAnAnswer("List", err)
	_, err = s.Txn(bounded(), store.Put("a", nil, store.MustNotExist))
	notAnAnswer("Txn", err)
}

func testWatch(t *testing.T, s store.Store) {
	w, ok := s.(Watcher)
	if !ok {
		t.Skipf("%T has no Watch", s)
	}
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	ch := w.Watch(ctx, "jobs/")
	next := func() int64 {
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
	// etcd's watch starts asynchronously: write until it reports.
	var rev int64
	for i := 0; i < 100 && rev == 0; i++ {
		r := mustTxn(t, s, store.Put("jobs/x", []byte{byte(i)}, store.AnyRevision))
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
	// Changes outside the prefix are not reported; a delete is; when the
	// reader is slow only the latest revision waits.
	mustTxn(t, s, store.Put("pools/x", []byte("p"), store.AnyRevision))
	r := mustTxn(t, s, store.Delete("jobs/x", store.AnyRevision))
	if got := next(); got != r {
		t.Fatalf("reported %d, want the delete's revision %d", got, r)
	}
	mustTxn(t, s, store.Put("jobs/y", []byte("1"), store.MustNotExist))
	last := mustTxn(t, s, store.Put("jobs/z", []byte("1"), store.MustNotExist))
	deadline := time.After(10 * time.Second)
	for got := next(); got != last; got = next() {
		select {
		case <-deadline:
			t.Fatalf("latest revision %d never reported", last)
		default:
		}
	}
	cancel()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the watch channel stayed open after its context ended")
		}
	}
}
