package resmgr

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/store/memstore"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzReader hands out the fuzz input a few bytes at a time; past its end
// it hands out zeros, so every input is a whole sequence of operations.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// fuzzPoolNames are the segments fuzzed paths are built from: few, so
// that operations meet the same pools often; one is not a valid segment.
var fuzzPoolNames = []string{"a", "b", "c", "default", "Bad!"}

// path is a path of 0-3 segments ("/" for none).
func (r *fuzzReader) path() string {
	n := int(r.byte() % 4)
	segs := make([]string, n)
	for i := range segs {
		segs[i] = fuzzPoolNames[int(r.byte())%len(fuzzPoolNames)]
	}
	return "/" + strings.Join(segs, "/")
}

// fuzzAmounts are the amounts a fuzzed pool spec is built from.
var fuzzAmounts = []float64{0, 0.5, 1, 2, 4, 8, 1e-9, -1, math.NaN(), math.Inf(1), 1e300, math.MaxInt64}

func (r *fuzzReader) resources() *pelotonv1.Resources {
	if r.byte()%4 == 0 {
		return nil
	}
	a := func() float64 { return fuzzAmounts[int(r.byte())%len(fuzzAmounts)] }
	return &pelotonv1.Resources{Cpu: a(), MemoryMb: a(), DiskMb: a(), Gpu: a()}
}

func (r *fuzzReader) spec() *pelotonv1.PoolSpec {
	if r.byte()%8 == 0 {
		return nil
	}
	return &pelotonv1.PoolSpec{Reservation: r.resources(), Limit: r.resources(), Share: r.resources(), RevocableLimit: r.resources()}
}

// checkPoolTree asserts the pool tree's invariants: every pool reachable
// from / exactly once through parent and child links that agree, paths
// that match the tree, limits >= reservations, children's reservations
// within their parent's (the root's excepted: it is the whole cluster),
// and specs that validate and agree with the integers kept.
func checkPoolTree(t *testing.T, m *Manager) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools[RootPath] != m.root || m.root.parent != nil {
		t.Fatal("the root is not / or has a parent")
	}
	seen := map[*Pool]bool{}
	var walk func(p *Pool, depth int)
	walk = func(p *Pool, depth int) {
		if seen[p] {
			t.Fatalf("pool %s reached twice: a cycle", p.Path)
		}
		seen[p] = true
		if depth > 16 {
			t.Fatalf("pool %s is %d levels deep", p.Path, depth)
		}
		if m.pools[p.Path] != p {
			t.Fatalf("pool %s is not indexed by its path", p.Path)
		}
		var childRes resources.Resources
		for path, c := range p.children {
			if c.Path != path || c.parent != p || parentPath(c.Path) != p.Path {
				t.Fatalf("child %s (keyed %s) of %s does not agree with its parent link", c.Path, path, p.Path)
			}
			childRes = childRes.Add(c.Reservation)
			walk(c, depth+1)
		}
		if p == m.root {
			return
		}
		if _, err := NormalizePath(p.Path, "path"); err != nil {
			t.Fatalf("pool %s: %v", p.Path, err)
		}
		res, limit, share, err := specToNode(p.spec)
		if err != nil {
			t.Fatalf("pool %s holds an invalid spec: %v", p.Path, err)
		}
		if res != p.Reservation || limit != p.Limit || share != p.Share {
			t.Fatalf("pool %s: kept %v/%v/%v, its spec says %v/%v/%v", p.Path, p.Reservation, p.Limit, p.Share, res, limit, share)
		}
		if !p.Reservation.FitsIn(p.Limit) {
			t.Fatalf("pool %s: reservation %s over limit %s", p.Path, p.Reservation, p.Limit)
		}
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			if p.Reservation.Get(k) < 0 || p.Share.Get(k) < 0 {
				t.Fatalf("pool %s: reservation %s, share %s", p.Path, p.Reservation, p.Share)
			}
		}
		if len(p.children) > 0 && !childRes.FitsIn(p.Reservation) {
			t.Fatalf("pool %s: children reserve %s, more than its %s", p.Path, childRes, p.Reservation)
		}
	}
	walk(m.root, 0)
	if len(seen) != len(m.pools) {
		t.Fatalf("%d pools indexed, %d reachable from /", len(m.pools), len(seen))
	}
}

// sameTree asserts that a Manager loaded from the store holds the tree a
// running one does: memory follows etcd, and what is stored loads.
func sameTree(t *testing.T, got, want *Manager) {
	t.Helper()
	g, w := got.ListPools(), want.ListPools()
	if len(g) != len(w) {
		t.Fatalf("reloaded %d pools, memory has %d", len(g), len(w))
	}
	for i := range g {
		if g[i].Path != w[i].Path || g[i].Version != w[i].Version || !proto.Equal(g[i].Spec, w[i].Spec) ||
			strings.Join(g[i].Children, ",") != strings.Join(w[i].Children, ",") {
			t.Fatalf("reloaded %v, memory has %v", g[i], w[i])
		}
	}
}

// FuzzPoolTreeOps decodes a sequence of creates, updates, moves and
// deletes of pools, and of jobs submitted to and ended in them, from the
// input and applies them to a pool tree on an in-memory store. No
// operation panics or fails with anything but a user's error, the tree
// keeps its invariants after every one, a pool with jobs stays where it
// is and a leaf, and the tree stored loads again into the same tree.
func FuzzPoolTreeOps(f *testing.F) {
	f.Add([]byte{})
	// Hand-made mixes of creates, updates, moves and deletes with specs
	// both valid and not.
	f.Add([]byte{0, 1, 0, 1, 1, 2, 3, 4, 5, 0, 0, 2, 0, 0, 1, 2, 0, 1, 1, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 2, 0, 1, 0, 2, 1, 0})
	f.Add([]byte{0, 3, 0, 0, 0, 1, 8, 8, 8, 8, 1, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("move everything around and delete it again"))
	// create /a, submit j0 to it, then try to give it a child, move it
	// under /default and delete it; end j0 and delete it.
	f.Add([]byte{0, 1, 0, 0, 5, 0, 1, 0, 0, 2, 0, 1, 0, 2, 1, 0, 1, 3, 3, 1, 0, 6, 0, 3, 1, 0})
	f.Fuzz(runPoolOps)
}

// runPoolOps is FuzzPoolTreeOps' body.
func runPoolOps(t *testing.T, b []byte) {
	if len(b) > 256 {
		return // long sequences only repeat short ones, slowly
	}
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	m, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// jobs is where the fuzzed jobs are, by job: what jobmgr would
	// answer resmgr's "does this pool have jobs?".
	jobs := map[string]string{}
	m.SetJobChecker(func(pool string) bool {
		for _, p := range jobs {
			if p == pool {
				return true
			}
		}
		return false
	})
	r := &fuzzReader{b: b}
	for len(r.b) > 0 {
		var err error
		var op string
		switch r.byte() % 7 {
		case 0:
			path, spec := r.path(), r.spec()
			op = fmt.Sprintf("create %s %v", path, spec)
			_, err = m.CreatePool(ctx, path, spec)
		case 1:
			path, spec, ver := r.path(), r.spec(), uint64(r.byte()%4)
			op = fmt.Sprintf("update %s %v version %d", path, spec, ver)
			_, err = m.UpdatePool(ctx, path, spec, ver)
		case 2:
			path, to := r.path(), r.path()
			op = fmt.Sprintf("move %s to %s", path, to)
			_, err = m.MovePool(ctx, path, to)
		case 3:
			path := r.path()
			op = "delete " + path
			err = m.DeletePool(ctx, path)
		case 4:
			path := r.path()
			op = "check leaf " + path
			_, err = m.CheckLeafPool(path, "spec.pool")
		case 5:
			// A job of one task submitted as jobmgr does: the pool
			// checked, then the task queued.
			job, path := fmt.Sprintf("j%d", r.byte()%4), r.path()
			op = "submit " + job + " to " + path
			if _, ok := jobs[job]; ok {
				continue
			}
			var norm string
			if norm, err = m.CheckLeafPool(path, "spec.pool"); err == nil {
				task := &Task{JobID: job, RunID: 1, Pool: norm, Resources: resources.Resources{MilliCPU: 100, MemoryMB: 1}}
				if err = m.Enqueue(NewGang(task)); err != nil {
					t.Fatalf("%s: a pool CheckLeafPool accepted refused the task: %v", op, err)
				}
				jobs[job] = norm
			}
		case 6:
			job := fmt.Sprintf("j%d", r.byte()%4)
			op = "end " + job
			m.Release(job, 0)
			delete(jobs, job)
		}
		switch apierr.Code(err) {
		case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		default:
			t.Fatalf("%s: %v (%s), not a user's error", op, err, apierr.Code(err))
		}
		checkPoolTree(t, m)
		for job, pool := range jobs {
			if p := m.pools[pool]; p == nil || !p.IsLeaf() {
				t.Fatalf("after %s: job %s's pool %s is gone or has children", op, job, pool)
			}
			if _, _, ok := m.TaskState(job, 0); !ok {
				t.Fatalf("after %s: job %s's task is gone", op, job)
			}
		}
	}
	again, err := New(ctx, st, Options{Logger: quiet})
	if err != nil {
		t.Fatalf("the stored tree does not load: %v", err)
	}
	checkPoolTree(t, again)
	if len(m.ListPools()) == 1 {
		// Every pool was deleted: a resmgr that starts on an empty
		// tree creates /default, as on a fresh cluster.
		if ps := again.ListPools(); len(ps) != 2 || ps[1].Path != DefaultPoolPath {
			t.Fatalf("an empty tree reloads as %v, want / and %s", ps, DefaultPoolPath)
		}
		return
	}
	sameTree(t, again, m)
}

// FuzzValidatePoolSpec: any spec either is refused as InvalidArgument or
// gives finite, non-negative integers with limits >= reservations and
// non-negative shares; the same spec gives the same answer after the store's
// encoding.
func FuzzValidatePoolSpec(f *testing.F) {
	add := func(s *pelotonv1.PoolSpec) {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	add(&pelotonv1.PoolSpec{})
	add(&pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 2, MemoryMb: 1024}, Limit: &pelotonv1.Resources{Cpu: 4}})
	add(&pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: math.NaN()}})
	add(&pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{Gpu: math.Inf(1)}})
	add(&pelotonv1.PoolSpec{Limit: &pelotonv1.Resources{MemoryMb: 1e308}})
	add(&pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: 4}, Limit: &pelotonv1.Resources{Cpu: 2}})
	add(&pelotonv1.PoolSpec{Share: &pelotonv1.Resources{}})
	add(&pelotonv1.PoolSpec{Share: &pelotonv1.Resources{Cpu: 1e6, MemoryMb: 1e-9}})
	add(&pelotonv1.PoolSpec{RevocableLimit: &pelotonv1.Resources{Cpu: -1}})
	add(&pelotonv1.PoolSpec{Reservation: &pelotonv1.Resources{Cpu: math.MaxInt64, MemoryMb: 9.2e15}})
	f.Fuzz(func(t *testing.T, b []byte) {
		spec := &pelotonv1.PoolSpec{}
		if proto.Unmarshal(b, spec) != nil {
			return
		}
		res, limit, share, err := ValidatePoolSpec(spec)
		if err != nil {
			if apierr.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "spec") {
				t.Fatalf("refused with %v, not InvalidArgument naming a spec field", err)
			}
			return
		}
		for k := resources.Kind(0); k < resources.NumKinds; k++ {
			// A share below 0.001 rounds to 0, which entitlement reads as
			// the smallest weight (1): >= 0 is what it relies on.
			if res.Get(k) < 0 || limit.Get(k) < res.Get(k) || share.Get(k) < 0 {
				t.Fatalf("%s: reservation %d, limit %d, share %d accepted", k, res.Get(k), limit.Get(k), share.Get(k))
			}
		}
		enc, _ := proto.Marshal(spec)
		again := &pelotonv1.PoolSpec{}
		if err := proto.Unmarshal(enc, again); err != nil {
			t.Fatal(err)
		}
		res2, limit2, share2, err := ValidatePoolSpec(again)
		if err != nil || res2 != res || limit2 != limit || share2 != share {
			t.Fatalf("stored and loaded, the spec validates to %v %v %v %v", res2, limit2, share2, err)
		}
	})
}
