package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run against a real etcd server embedded in the test process:
// the CAS and paging semantics under test are etcd's, so a fake would only
// test itself.

// startTestEtcd starts an embedded etcd on a fresh temp dir and a free port,
// and returns it with a store connected to it; both stop at test cleanup.
func startTestEtcd(t testing.TB) (*Embedded, *Etcd) {
	t.Helper()
	e := startTestEmbedded(t, t.TempDir())
	return e, connectTestStore(t, e, "")
}

func startTestEmbedded(t testing.TB, dir string) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Logger: quietLogger})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// connectTestStore connects a store through e's socket, or, in the
// subtests of TestEtcdInProcessClient, through the in-process client
// `peloton up` gives its own store.
func connectTestStore(t testing.TB, e *Embedded, prefix string) *Etcd {
	t.Helper()
	cfg := EtcdConfig{Endpoints: e.Endpoints(), Prefix: prefix, MaxTxnOps: e.MaxTxnOps()}
	if strings.HasPrefix(t.Name(), inProcessTest+"/") {
		cfg.Client = e.InProcessClient()
	}
	s, err := NewEtcd(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("NewEtcd: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// quietLogger keeps start/stop chatter out of test output; etcd's warnings
// and errors still show.
var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// testCtx bounds every call a test makes, so a broken server fails the test
// instead of hanging it until the global go test timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustTxn(t testing.TB, s Store, ops ...Op) int64 {
	t.Helper()
	rev, err := s.Txn(testCtx(t), ops...)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	return rev
}

func mustGet(t testing.TB, s Store, key string) KV {
	t.Helper()
	kv, err := s.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return kv
}

// inProcessTest is the test that runs the store's tests again through the
// in-process client.
const inProcessTest = "TestEtcdInProcessClient"

// TestEtcdInProcessClient runs the store's semantics tests (compare and
// swap, conflicts named per op, paging, snapshots, prefixes, watches and
// their ends) through Embedded.InProcessClient, which skips gRPC's
// encoding and the socket: what the errors and answers look like must not
// depend on the way to the server.
func TestEtcdInProcessClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"CompareAndSwap", TestEtcdCompareAndSwap},
		{"TxnRejectsInvalid", TestEtcdTxnRejectsInvalid},
		{"ListPages", TestEtcdListPages},
		{"ListIsSnapshot", TestEtcdListIsSnapshot},
		{"PrefixIsolation", TestEtcdPrefixIsolation},
		{"Watch", TestEtcdWatch},
		{"WatchCompacted", TestEtcdWatchCompacted},
		{"WatchEnds", TestEtcdWatchEnds},
	} {
		t.Run(tc.name, tc.test)
	}
}

func TestEtcdCompareAndSwap(t *testing.T) {
	_, s := startTestEtcd(t)
	ctx := testCtx(t)

	if _, err := s.Get(ctx, "jobs/a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of absent key: got %v, want ErrNotFound", err)
	}

	rev1 := mustTxn(t, s, Put("jobs/a", []byte("v1"), MustNotExist))
	if kv := mustGet(t, s, "jobs/a"); string(kv.Value) != "v1" || kv.Revision != rev1 || kv.Key != "jobs/a" {
		t.Fatalf("Get after create = %+v, want jobs/a=v1 at revision %d", kv, rev1)
	}

	// Creating an existing key conflicts and says why.
	_, err := s.Txn(ctx, Put("jobs/a", []byte("again"), MustNotExist))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("MustNotExist on existing key: got %v, want ErrConflict", err)
	}
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0] != (Conflict{Index: 0, Key: "jobs/a", Expected: MustNotExist, Actual: rev1}) {
		t.Fatalf("conflict details = %+v", ce)
	}
	if want := fmt.Sprintf("jobs/a: expected absent, found revision %d", rev1); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}

	// Updating at the current revision works; at the old one it conflicts.
	rev2 := mustTxn(t, s, Put("jobs/a", []byte("v2"), rev1))
	if rev2 <= rev1 {
		t.Fatalf("update revision %d not after create revision %d", rev2, rev1)
	}
	if _, err := s.Txn(ctx, Put("jobs/a", []byte("stale"), rev1)); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}

	// A conflicting op fails the whole txn: the good ops are not written.
	_, err = s.Txn(ctx,
		Put("jobs/b", []byte("new"), MustNotExist),
		Put("jobs/a", []byte("stale"), rev1),
		Put("jobs/c", []byte("blind"), AnyRevision),
	)
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Index != 1 || ce.Conflicts[0].Actual != rev2 {
		t.Fatalf("mixed txn: got %v, want conflict on ops[1] only", err)
	}
	for _, k := range []string{"jobs/b", "jobs/c"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s written by a failed txn (err %v)", k, err)
		}
	}
	if kv := mustGet(t, s, "jobs/a"); string(kv.Value) != "v2" || kv.Revision != rev2 {
		t.Fatalf("jobs/a changed by a failed txn: %+v", kv)
	}

	// A revision expectation on an absent key conflicts too.
	if _, err := s.Txn(ctx, Put("jobs/none", nil, rev2)); !errors.Is(err, ErrConflict) {
		t.Fatalf("revision expected on absent key: got %v, want ErrConflict", err)
	}

	// Multi-op success: every put gets the txn's revision.
	rev3 := mustTxn(t, s,
		Put("jobs/b", []byte("b"), MustNotExist),
		Put("jobs/c", []byte("c"), AnyRevision),
		Delete("jobs/a", rev2),
	)
	for _, k := range []string{"jobs/b", "jobs/c"} {
		if kv := mustGet(t, s, k); kv.Revision != rev3 {
			t.Fatalf("%s revision %d, want txn revision %d", k, kv.Revision, rev3)
		}
	}
	if _, err := s.Get(ctx, "jobs/a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("jobs/a after conditional delete: %v", err)
	}
	if _, err := s.Txn(ctx, Delete("jobs/b", rev2)); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale delete: got %v, want ErrConflict", err)
	}
}

func TestEtcdTxnRejectsInvalid(t *testing.T) {
	_, s := startTestEtcd(t)
	small := NewEtcdFromClient(s.Client(), "/small/", 3)
	tooMany := []Op{Put("a", nil, AnyRevision), Put("b", nil, AnyRevision), Put("c", nil, AnyRevision), Put("d", nil, AnyRevision)}

	for _, tc := range []struct {
		name  string
		store *Etcd
		ops   []Op
		want  string
	}{
		{"no ops", s, nil, "no ops"},
		{"too many", small, tooMany, "4 ops, more than max-txn-ops 3"},
		{"duplicate key", s, []Op{Put("x", nil, AnyRevision), Put("y", nil, AnyRevision), Delete("x", AnyRevision)}, `ops[2].key: "x" already written by ops[0]`},
		{"empty key", s, []Op{Put("", nil, AnyRevision)}, "ops[0].key: must not be empty"},
		{"bad kind", s, []Op{{Kind: 7, Key: "x"}}, "ops[0].kind"},
		{"bad revision", s, []Op{Put("x", nil, -5)}, "ops[0].expectRevision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.store.Txn(testCtx(t), tc.ops...)
			if !errors.Is(err, ErrInvalidTxn) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidTxn containing %q", err, tc.want)
			}
		})
	}
	if _, err := s.Get(testCtx(t), "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rejected txn wrote x: %v", err)
	}
}

func TestEtcdListPages(t *testing.T) {
	_, s := startTestEtcd(t)
	ctx := testCtx(t)

	const n = 2500 // three pages of 1000
	var ops []Op
	for i := range n {
		ops = append(ops, Put(fmt.Sprintf("tasks/%05d", i), []byte(fmt.Sprint(i)), MustNotExist))
		if len(ops) == 500 {
			mustTxn(t, s, ops...)
			ops = ops[:0]
		}
	}
	// Neighbours that must not show up in List("tasks/").
	mustTxn(t, s, Put("tasks", []byte("x"), AnyRevision), Put("tasksX/1", []byte("x"), AnyRevision), Put("jobs/1", []byte("x"), AnyRevision))

	kvs, err := s.List(ctx, "tasks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != n {
		t.Fatalf("List returned %d keys, want %d", len(kvs), n)
	}
	for i, kv := range kvs {
		if want := fmt.Sprintf("tasks/%05d", i); kv.Key != want || string(kv.Value) != fmt.Sprint(i) || kv.Revision == 0 {
			t.Fatalf("kvs[%d] = %s=%q@%d, want %s=%d", i, kv.Key, kv.Value, kv.Revision, want, i)
		}
	}

	all, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n+3 {
		t.Fatalf("List(\"\") returned %d keys, want %d", len(all), n+3)
	}
	none, err := s.List(ctx, "nothing/")
	if err != nil || len(none) != 0 {
		t.Fatalf("List of empty range = %v, %v", none, err)
	}
}

// TestEtcdListIsSnapshot checks List's pages come from one revision: a writer
// keeps updating the first and the last key in one txn, and no listing may
// see them differ.
func TestEtcdListIsSnapshot(t *testing.T) {
	_, s := startTestEtcd(t)
	s.pageSize = 50 // many pages, many chances for a write in between
	ctx := testCtx(t)

	const n = 500
	var ops []Op
	for i := range n {
		ops = append(ops, Put(fmt.Sprintf("t/%04d", i), []byte("0"), AnyRevision))
	}
	mustTxn(t, s, ops...)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop) // before Wait, also when the test fails early
	wg.Go(func() {
		for gen := 1; ; gen++ {
			select {
			case <-stop:
				return
			default:
			}
			v := []byte(fmt.Sprint(gen))
			if _, err := s.Txn(ctx, Put("t/0000", v, AnyRevision), Put(fmt.Sprintf("t/%04d", n-1), v, AnyRevision)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	})
	for range 20 {
		kvs, err := s.List(ctx, "t/")
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) != n || string(kvs[0].Value) != string(kvs[n-1].Value) {
			t.Fatalf("torn listing: %d keys, first=%q last=%q", len(kvs), kvs[0].Value, kvs[len(kvs)-1].Value)
		}
	}
}

func TestEtcdPrefixIsolation(t *testing.T) {
	e, a := startTestEtcd(t)
	b := connectTestStore(t, e, "/other") // trailing "/" is added
	if b.Prefix() != "/other/" || a.Prefix() != DefaultPrefix {
		t.Fatalf("prefixes %q, %q", a.Prefix(), b.Prefix())
	}
	ctx := testCtx(t)

	mustTxn(t, a, Put("jobs/1", []byte("a"), MustNotExist))
	mustTxn(t, b, Put("jobs/1", []byte("b"), MustNotExist)) // same relative key, no conflict
	mustTxn(t, b, Put("jobs/2", []byte("b"), MustNotExist))

	if kv := mustGet(t, a, "jobs/1"); string(kv.Value) != "a" {
		t.Fatalf("a sees %q", kv.Value)
	}
	if _, err := a.Get(ctx, "jobs/2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a sees b's key: %v", err)
	}
	for _, tc := range []struct {
		s    *Etcd
		want int
	}{{a, 1}, {b, 2}} {
		kvs, err := tc.s.List(ctx, "")
		if err != nil || len(kvs) != tc.want {
			t.Fatalf("List under %s = %v, %v; want %d keys", tc.s.Prefix(), kvs, err, tc.want)
		}
	}

	// A store built on a shared client leaves the client open on Close.
	c := NewEtcdFromClient(a.Client(), "/third/", 0)
	if c.MaxTxnOps() != DefaultMaxTxnOps {
		t.Fatalf("default MaxTxnOps = %d", c.MaxTxnOps())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, a, "jobs/1")
}

func TestNewEtcdUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now

	start := time.Now()
	_, err = NewEtcd(testCtx(t), EtcdConfig{Endpoints: []string{"http://" + addr}, DialTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("NewEtcd to a closed port: got %v, want a 'no answer' error", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// TestEtcdWhyFailedAfterCompaction: the reasons of a failed txn are read at
// its revision; when etcd compacted that away before the read, they are
// read at the current one, where a conflicting key still conflicts, and a
// key deleted since is still a conflict, without details.
func TestEtcdWhyFailedAfterCompaction(t *testing.T) {
	_, s := startTestEtcd(t)
	ctx := testCtx(t)
	r1 := mustTxn(t, s, Put("jobs/a", []byte("1"), MustNotExist), Put("jobs/b", []byte("1"), MustNotExist))
	r2 := mustTxn(t, s, Put("jobs/a", []byte("2"), r1))
	// A txn expecting jobs/a at r1 and jobs/b absent fails at r2.
	ops := []Op{Put("jobs/a", []byte("x"), r1), Put("jobs/b", []byte("x"), MustNotExist), Put("jobs/c", []byte("x"), AnyRevision)}
	if _, err := s.Txn(ctx, ops...); !errors.Is(err, ErrConflict) {
		t.Fatalf("txn: got %v, want a conflict", err)
	}
	r3 := mustTxn(t, s, Delete("jobs/b", AnyRevision))
	if _, err := s.Client().Compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	err := s.whyFailed(ctx, ops, r2)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0] != (Conflict{Index: 0, Key: "jobs/a", Expected: r1, Actual: r2}) {
		t.Fatalf("after compaction: got %v, want jobs/a's conflict at its current revision %d", err, r2)
	}
	// Only jobs/b, deleted since: no key shows the conflict any more.
	err = s.whyFailed(ctx, ops[1:2], r2)
	if !errors.Is(err, ErrConflict) || errors.As(err, &ce) {
		t.Fatalf("deleted since: got %v, want a plain ErrConflict", err)
	}
}
