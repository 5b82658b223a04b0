package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// dump returns every key under prefix with its value.
func dump(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func put(t *testing.T, cli *clientv3.Client, kvs map[string]string) {
	t.Helper()
	for k, v := range kvs {
		if _, err := cli.Put(testCtx(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

var legacyMove = Move{From: "/p/", To: "/p/clusters/local/", Dirs: []string{"jobs/", "pools/"}, Unless: "/p/leader/"}

// TestMoveKeys: only the named directories move, values intact, and a
// second run finds nothing to do and writes nothing.
func TestMoveKeys(t *testing.T) {
	_, s := startTestEtcd(t)
	cli := s.Client()
	put(t, cli, map[string]string{
		"/p/jobs/a/runtime": "ra", "/p/jobs/a/spec/1": "sa", "/p/pools/org": "po",
		// Not ours to move: another directory, another cluster's keys, a
		// sibling prefix.
		"/p/federation/x": "f", "/p/clusters/b/jobs/a/runtime": "rb", "/p2/jobs/z": "z",
	})
	n, err := MoveKeys(testCtx(t), cli, legacyMove)
	if err != nil || n != 3 {
		t.Fatalf("MoveKeys = %d, %v; want 3 moved", n, err)
	}
	want := map[string]string{
		"/p/clusters/local/jobs/a/runtime": "ra", "/p/clusters/local/jobs/a/spec/1": "sa", "/p/clusters/local/pools/org": "po",
		"/p/federation/x": "f", "/p/clusters/b/jobs/a/runtime": "rb",
	}
	if got := dump(t, cli, "/p/"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the move:\n got %v\nwant %v", got, want)
	}
	head, err := cli.Get(testCtx(t), "/")
	if err != nil {
		t.Fatal(err)
	}
	n, err = MoveKeys(testCtx(t), cli, legacyMove)
	if err != nil || n != 0 {
		t.Fatalf("second MoveKeys = %d, %v; want nothing to do", n, err)
	}
	again, err := cli.Get(testCtx(t), "/")
	if err != nil {
		t.Fatal(err)
	}
	if again.Header.Revision != head.Header.Revision {
		t.Fatalf("a move with nothing to do wrote: revision %d -> %d", head.Header.Revision, again.Header.Revision)
	}
}

// TestMoveKeysResumes: a move cut short between transactions (some keys
// at the new place, the rest at the old) finishes on the next run, in
// batches of one key (the smallest max-txn-ops), with movers racing.
func TestMoveKeysResumes(t *testing.T) {
	_, s := startTestEtcd(t)
	cli := s.Client()
	old := map[string]string{}
	for i := 0; i < 40; i++ {
		old[fmt.Sprintf("/p/jobs/j%02d/runtime", i)] = fmt.Sprint(i)
	}
	put(t, cli, old)
	// The first 15 were moved before the "crash".
	for _, k := range sortedKeys(old)[:15] {
		if _, err := cli.Txn(testCtx(t)).Then(clientv3.OpPut(strings.Replace(k, "/p/", "/p/clusters/local/", 1), old[k]), clientv3.OpDelete(k)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	m := legacyMove
	m.MaxTxnOps = 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := MoveKeys(context.Background(), cli, m)
			if err != nil {
				t.Errorf("MoveKeys: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 25 {
		t.Errorf("the movers moved %d keys in all, want the 25 left", total)
	}
	got := dump(t, cli, "/p/")
	if len(got) != len(old) {
		t.Fatalf("%d keys after the move, want %d: %v", len(got), len(old), sortedKeys(got))
	}
	for k, v := range old {
		if nk := strings.Replace(k, "/p/", "/p/clusters/local/", 1); got[nk] != v {
			t.Errorf("%s = %q, want %q", nk, got[nk], v)
		}
	}
}

// TestMoveKeysRefuses: a key at both places, or a live key under the
// guard, stops the move and changes nothing.
func TestMoveKeysRefuses(t *testing.T) {
	_, s := startTestEtcd(t)
	cli := s.Client()
	put(t, cli, map[string]string{"/p/jobs/a": "old", "/p/clusters/local/jobs/a": "new"})
	before := dump(t, cli, "/p/")
	if _, err := MoveKeys(testCtx(t), cli, legacyMove); err == nil || !strings.Contains(err.Error(), "both /p/jobs/a and /p/clusters/local/jobs/a exist") {
		t.Fatalf("MoveKeys with a key at both places = %v", err)
	}
	if got := dump(t, cli, "/p/"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a refused move changed %v to %v", before, got)
	}

	if _, err := cli.Delete(testCtx(t), "/p/clusters/local/jobs/a"); err != nil {
		t.Fatal(err)
	}
	put(t, cli, map[string]string{"/p/leader/x": "an old leader"})
	if _, err := MoveKeys(testCtx(t), cli, legacyMove); !errors.Is(err, ErrMoveBlocked) {
		t.Fatalf("MoveKeys under a live guard = %v, want ErrMoveBlocked", err)
	}
	if got := dump(t, cli, "/p/jobs/"); got["/p/jobs/a"] != "old" {
		t.Fatalf("a blocked move moved: %v", got)
	}

	for _, bad := range []Move{{From: "/p", To: "/q/", Dirs: []string{"jobs/"}}, {From: "/p/", To: "/p/", Dirs: []string{"jobs/"}}, {From: "/p/", To: "/q/", Dirs: []string{"jobs"}}} {
		if _, err := MoveKeys(testCtx(t), cli, bad); err == nil {
			t.Errorf("MoveKeys(%+v) accepted", bad)
		}
	}
}
