package resmgr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// faultStore wraps a real store so a test can make Txn fail: before it
// reaches etcd (nothing written), or after etcd applied it (the reply lost:
// the caller cannot tell), or block until released.
type faultStore struct {
	store.Store
	mu      sync.Mutex
	mode    string // "", "before", "after", "block"
	release chan struct{}
	entered chan struct{}
}

var errInjected = errors.New("injected: connection to etcd lost")

func (f *faultStore) set(mode string) {
	f.mu.Lock()
	f.mode = mode
	f.mu.Unlock()
}

func (f *faultStore) Txn(ctx context.Context, ops ...store.Op) (int64, error) {
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	switch mode {
	case "before":
		return 0, errInjected
	case "after":
		if _, err := f.Store.Txn(ctx, ops...); err != nil {
			return 0, err
		}
		return 0, errInjected
	case "block":
		f.entered <- struct{}{}
		<-f.release
	}
	return f.Store.Txn(ctx, ops...)
}

// treeOf renders a manager's pool tree: every pool with its spec, parent
// links and children checked to agree.
func treeOf(t *testing.T, m *Manager) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var lines []string
	for path, p := range m.pools {
		if p.Path != path {
			t.Errorf("pool indexed as %s has path %s", path, p.Path)
		}
		if p != m.root {
			if p.parent == nil || p.parent.children[path] != p || m.pools[p.parent.Path] != p.parent {
				t.Errorf("pool %s is not its parent's child", path)
			}
			if parentPath(path) != p.parent.Path {
				t.Errorf("pool %s has parent %s", path, p.parent.Path)
			}
		}
		for cp, c := range p.children {
			if c.parent != p || m.pools[cp] != c {
				t.Errorf("child %s of %s is not indexed", cp, path)
			}
		}
		if p.frozen {
			t.Errorf("pool %s still frozen after every change ended", path)
		}
		if p != m.root && p.parent != m.root {
			var sum = p.Reservation
			for _, s := range p.parent.children {
				if s != p {
					sum = sum.Add(s.Reservation)
				}
			}
			if !sum.FitsIn(p.parent.Reservation) {
				t.Errorf("children of %s reserve %s, more than its %s", p.parent.Path, sum, p.parent.Reservation)
			}
		}
		spec := ""
		if p.spec != nil {
			b, _ := proto.Marshal(p.spec)
			spec = fmt.Sprintf("%x", b)
		}
		lines = append(lines, path+" "+spec)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// reload loads a fresh manager from the store: what etcd holds.
func reload(t *testing.T, st store.Store) *Manager {
	t.Helper()
	m, err := New(context.Background(), st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPoolTreeConcurrentChanges runs creates, updates, moves and deletes
// from many goroutines against task traffic, and checks that the tree in
// memory stays well formed and equal to the tree in etcd.
func TestPoolTreeConcurrentChanges(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	m := reload(t, st)
	// jobmgr answers under its own lock; a caller holding that lock while
	// calling into resmgr must not deadlock with a tree change.
	var jobMu sync.Mutex
	m.SetJobChecker(func(pool string) bool {
		jobMu.Lock()
		defer jobMu.Unlock()
		return false
	})
	names := []string{"/a", "/b", "/a/x", "/a/y", "/b/x", "/b/z", "/a/x/q", "/b/x/q"}
	var wg sync.WaitGroup
	var done atomic.Bool
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for range 60 {
				path := names[rng.IntN(len(names))]
				var err error
				switch rng.IntN(4) {
				case 0:
					_, err = m.CreatePool(ctx, path, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: float64(rng.IntN(3))}})
				case 1:
					_, err = m.UpdatePool(ctx, path, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: float64(rng.IntN(8))}}, 0)
				case 2:
					err = m.DeletePool(ctx, path)
				case 3:
					to := []string{"/", "/a", "/b"}[rng.IntN(3)]
					_, err = m.MovePool(ctx, path, to)
				}
				switch status.Code(err) {
				case codes.OK, codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition:
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
		}()
	}
	// Task traffic on /default and readers, all the while.
	var traffic sync.WaitGroup
	traffic.Add(1)
	go func() {
		defer traffic.Done()
		for i := uint32(0); !done.Load(); i++ {
			jobMu.Lock()
			_, _ = m.CheckLeafPool("/a/x", "spec.pool")
			jobMu.Unlock()
			if err := m.Enqueue(NewGang(mkTask("t", i, 0, cpu(1)))); err != nil {
				t.Errorf("enqueue into /default: %v", err)
				return
			}
			m.admitOnce()
			m.Release("t", i)
			_ = m.ListPools()
		}
	}()
	wg.Wait()
	done.Store(true)
	traffic.Wait()
	if got, want := treeOf(t, m), treeOf(t, reload(t, st)); got != want {
		t.Fatalf("memory and etcd disagree:\nmemory:\n%s\netcd:\n%s", got, want)
	}
}

// TestPoolChangeDoesNotHoldTheLockAcrossTxn: while a tree change waits for
// etcd, scheduling (enqueue, admission, reads) goes on.
func TestPoolChangeDoesNotHoldTheLockAcrossTxn(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	fs := &faultStore{Store: st, release: make(chan struct{}), entered: make(chan struct{}, 1)}
	m := reload(t, fs)
	m.SetCapacity(capCPU(10_000))
	fs.set("block")
	created := make(chan error, 1)
	go func() {
		_, err := m.CreatePool(context.Background(), "/slow", &pelotonv1.PoolSpec{})
		created <- err
	}()
	<-fs.entered
	fine := make(chan struct{})
	go func() {
		defer close(fine)
		if err := m.Enqueue(NewGang(mkTask("j", 0, 0, cpu(100)))); err != nil {
			t.Error(err)
		}
		m.admitOnce()
		if st, _, _ := m.TaskState("j", 0); st != pelotonv1.TaskState_READY {
			t.Errorf("task not admitted while a pool change waited for etcd: %s", st)
		}
		_ = m.ListPools()
	}()
	select {
	case <-fine:
	case <-time.After(30 * time.Second):
		t.Fatal("scheduling blocked while a pool change waited for etcd")
	}
	fs.set("")
	close(fs.release)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
}

// TestFailedTxnKeepsMemoryAndEtcdConsistent fails every kind of tree change
// in etcd, both before etcd applied it and after (the reply lost), and checks
// that memory then matches what etcd holds.
func TestFailedTxnKeepsMemoryAndEtcdConsistent(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	fs := &faultStore{Store: st}
	ctx := context.Background()
	m := reload(t, fs)
	for _, p := range []string{"/a", "/a/x", "/b", "/c"} {
		if _, err := m.CreatePool(ctx, p, &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() error { _, err := m.CreatePool(ctx, "/n", &pelotonv1.PoolSpec{}); return err }},
		{"update", func() error {
			_, err := m.UpdatePool(ctx, "/b", &pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 7}}, 0)
			return err
		}},
		{"delete", func() error { return m.DeletePool(ctx, "/c") }},
		{"move", func() error { _, err := m.MovePool(ctx, "/a/x", "/b"); return err }},
	}
	for _, s := range steps {
		for _, mode := range []string{"before", "after"} {
			fs.set(mode)
			err := s.do()
			fs.set("")
			// Before: the change is refused and nothing moved. After: etcd
			// has it, the read-back finds it, and memory follows.
			if mode == "before" && status.Code(err) != codes.Unavailable {
				t.Fatalf("%s failing %s etcd: %v, want Unavailable", s.name, mode, err)
			}
			if mode == "after" && err != nil {
				t.Fatalf("%s applied by etcd with the reply lost: %v, want success", s.name, err)
			}
			if got, want := treeOf(t, m), treeOf(t, reload(t, st)); got != want {
				t.Fatalf("%s failing %s etcd: memory and etcd disagree:\nmemory:\n%s\netcd:\n%s", s.name, mode, got, want)
			}
			// The tree is still usable: the pool of a failed delete or
			// create takes jobs.
			if _, err := m.CheckLeafPool("/default", "spec.pool"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
