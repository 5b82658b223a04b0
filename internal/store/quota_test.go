package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestPlanQuota(t *testing.T) {
	const q = 1000 << 20
	use := func(db, inUse int64, rev int64, nospace bool) QuotaUse {
		return QuotaUse{DBBytes: db << 20, InUseBytes: inUse << 20, QuotaBytes: q, Revision: rev, NoSpace: nospace}
	}
	for _, c := range []struct {
		name        string
		use         QuotaUse
		embedded    bool
		compactedTo int64
		want        quotaPlan
	}{
		{"empty", QuotaUse{DBBytes: 20 << 10, InUseBytes: 10 << 10, QuotaBytes: q}, true, 0, quotaPlan{}},
		{"warned but accepting", use(900, 890, 50, false), true, 0, quotaPlan{}},
		{"refusing: compact", use(960, 950, 50, false), true, 0, quotaPlan{refuse: true, compact: true}},
		{"refusing, compacted at this revision already", use(960, 950, 50, false), true, 50, quotaPlan{refuse: true}},
		{"refusing, a tenth free: compact and defrag", use(960, 800, 50, false), true, 0, quotaPlan{refuse: true, compact: true, defrag: true}},
		{"refusing, external: only refuse", use(960, 100, 50, false), false, 0, quotaPlan{refuse: true}},
		{"half free: defrag", use(400, 150, 50, false), true, 50, quotaPlan{defrag: true}},
		{"a third free, room: no defrag", use(400, 270, 50, false), true, 50, quotaPlan{}},
		{"half free, tiny: no defrag", QuotaUse{DBBytes: 512 << 10, InUseBytes: 10 << 10, QuotaBytes: q}, true, 0, quotaPlan{}},
		{"NOSPACE past the quota: compact, defrag", use(1700, 990, 70, true), true, 50, quotaPlan{refuse: true, compact: true, defrag: true}},
		{"NOSPACE, fits again though over 95 %: disarm", use(980, 975, 70, true), true, 70, quotaPlan{refuse: true, disarm: true}},
		{"NOSPACE, room again: defrag, disarm", use(100, 90, 70, true), true, 70, quotaPlan{refuse: true, defrag: true, disarm: true}},
		{"NOSPACE, external: refuse only", use(100, 90, 70, true), false, 0, quotaPlan{refuse: true}},
	} {
		if got := planQuota(c.use, c.embedded, c.compactedTo); got != c.want {
			t.Errorf("%s: planQuota(%+v, compacted to %d) = %+v, want %+v", c.name, c.use, c.compactedTo, got, c.want)
		}
	}
}

// TestQuotaGuardOnAFullEmbeddedStore fills an embedded etcd with a small
// quota until the guard refuses creates (before etcd refuses writes:
// deletes still go through), then deletes what was written: the guard
// compacts and defragments, and creates are accepted again.
func TestQuotaGuardOnAFullEmbeddedStore(t *testing.T) {
	// Writes small against the quota (0.2 % each), as in production: a
	// coarser fill can outrun a guard that reads between writes.
	const quota = 64 << 20
	e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), QuotaBackendBytes: quota, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	s := connectTestStore(t, e, "")
	var uses []QuotaUse
	g := NewQuotaGuard(s.Client(), QuotaGuardOptions{QuotaBytes: quota, Embedded: true, Logger: quietLogger,
		OnUse: func(u QuotaUse) { uses = append(uses, u) }})
	ctx := context.Background()
	g.Step(ctx)
	if err := g.Check(); err != nil {
		t.Fatalf("Check on an empty store: %v", err)
	}
	value := []byte(strings.Repeat("x", 128<<10))
	written := 0
	for ; written < 1000; written++ { // 125 MiB would be twice the quota
		if _, err := s.Txn(ctx, Put(fmt.Sprintf("fill/%04d", written), value, AnyRevision)); err != nil {
			t.Fatalf("write %d was refused by etcd before the guard refused creates: %v", written, err)
		}
		g.Step(ctx)
		if g.Check() != nil {
			break
		}
	}
	err = g.Check()
	var qe *QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("after %d writes of 128 KiB into a 64 MiB quota, Check = %v; want a QuotaError", written, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "--etcd-quota-bytes") || !strings.Contains(msg, "64.0 MiB") {
		t.Errorf("the refusal %q does not name the quota and its flag", msg)
	}
	// Deletes still work in the headroom.
	for i := 0; i <= written; i++ {
		// A delete may time out on a disk slowed by other work (etcd's
		// "request timed out": it may or may not have been applied); it is
		// idempotent, so it is tried again, a few times.
		var err error
		for try := 0; try < 3; try++ {
			if _, err = s.Txn(ctx, Delete(fmt.Sprintf("fill/%04d", i), AnyRevision)); err == nil || !strings.Contains(err.Error(), "request timed out") {
				break
			}
		}
		if err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	g.Step(ctx) // compacts (still over the threshold) and defragments
	g.Step(ctx)
	if err := g.Check(); err != nil {
		u, _ := g.Use()
		t.Fatalf("after deleting everything, Check = %v (use %+v)", err, u)
	}
	if u, _ := g.Use(); u.DBBytes >= quota/2 {
		t.Errorf("the database is still %d bytes after the deletes, compaction and defrag", u.DBBytes)
	}
	if len(uses) == 0 || uses[0].QuotaBytes != quota {
		t.Errorf("OnUse got %+v", uses)
	}
}

// TestQuotaGuardKeepsTheStoreCompacted: with CompactLag, each reading
// compacts an embedded store to the revision of the newest reading at
// least that old, so older revisions go without waiting for etcd's own
// compactor.
func TestQuotaGuardKeepsTheStoreCompacted(t *testing.T) {
	e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	s := connectTestStore(t, e, "")
	ctx := context.Background()
	g := NewQuotaGuard(s.Client(), QuotaGuardOptions{Embedded: true, CompactLag: time.Nanosecond, Logger: quietLogger})
	first, err := s.Txn(ctx, Put("k", []byte("1"), AnyRevision))
	if err != nil {
		t.Fatal(err)
	}
	g.Step(ctx) // remembers the revision now
	for i := 0; i < 10; i++ {
		if _, err := s.Txn(ctx, Put("k", []byte(fmt.Sprint(i)), AnyRevision)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client().Get(ctx, "k", clientv3.WithRev(first)); err != nil {
		t.Fatalf("an old revision before the guard compacted: %v", err)
	}
	g.Step(ctx) // compacts to the first reading's revision
	if _, err := s.Client().Get(ctx, "k", clientv3.WithRev(first-1)); !isCompacted(err) {
		t.Fatalf("a revision older than the lag after the guard's reading: %v, want compacted", err)
	}
	if _, err := s.Client().Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}
