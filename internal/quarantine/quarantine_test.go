package quarantine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
)

func put(t *testing.T, st store.Store, key string, value []byte) store.KV {
	t.Helper()
	rev, err := st.Txn(context.Background(), store.Put(key, value, store.AnyRevision))
	if err != nil {
		t.Fatal(err)
	}
	return store.KV{Key: key, Value: value, Revision: rev}
}

func TestMove(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	kv := put(t, st, "tasks/j1/3", []byte("\xffgarbage"))
	before := promtestutil.ToFloat64(metrics.QuarantinedRecords)
	qkey, err := Move(ctx, st, log, kv, errors.New("proto: cannot parse invalid wire-format data"))
	if err != nil {
		t.Fatal(err)
	}
	if qkey != KeyOf("tasks/j1/3", kv.Revision) || Original(qkey) != "tasks/j1/3" {
		t.Errorf("quarantine key %q (original %q)", qkey, Original(qkey))
	}
	if _, err := st.Get(ctx, kv.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the record is still at its key: %v", err)
	}
	got, err := st.Get(ctx, qkey)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Read(got.Value)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != kv.Key || r.Revision != kv.Revision || !bytes.Equal(r.Value, kv.Value) || !strings.Contains(r.Error, "wire-format") || r.Replaced || r.Time.IsZero() {
		t.Errorf("quarantined record %+v", r)
	}
	if d := promtestutil.ToFloat64(metrics.QuarantinedRecords) - before; d != 1 {
		t.Errorf("the counter went up by %v, want 1", d)
	}
	for _, want := range []string{"level=ERROR", "key=tasks/j1/3", "quarantine=" + qkey, "wire-format"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q: %s", want, logs.String())
		}
	}
	keys, err := List(ctx, st, "tasks/")
	if err != nil || len(keys) != 1 || keys[0] != qkey {
		t.Errorf("List: %v %v", keys, err)
	}
	if keys, _ := List(ctx, st, "jobs/"); len(keys) != 0 {
		t.Errorf("List of jobs/: %v", keys)
	}
}

// TestMoveComparesTheRevision: a record written again after it was read
// is not moved; the caller is told to read again.
func TestMoveComparesTheRevision(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	kv := put(t, st, "jobs/j1/runtime", []byte("bad"))
	put(t, st, "jobs/j1/runtime", []byte("good now"))
	if _, err := Move(ctx, st, slog.New(slog.DiscardHandler), kv, errors.New("bad")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Move of a stale read: %v, want ErrConflict", err)
	}
	if got, err := st.Get(ctx, kv.Key); err != nil || string(got.Value) != "good now" {
		t.Errorf("the record: %q %v", got.Value, err)
	}
	if keys, _ := List(ctx, st, ""); len(keys) != 0 {
		t.Errorf("quarantined anyway: %v", keys)
	}
}

func TestReplace(t *testing.T) {
	_, st := storetest.StartEtcd(t)
	ctx := context.Background()
	kv := put(t, st, "pools/a", []byte("bad"))
	qkey, rev, err := Replace(ctx, st, slog.New(slog.DiscardHandler), kv, errors.New("bad"), []byte{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, kv.Key); err != nil || len(got.Value) != 0 || got.Revision != rev {
		t.Errorf("the replacement: %q %v", got.Value, err)
	}
	got, _ := st.Get(ctx, qkey)
	if r, err := Read(got.Value); err != nil || !r.Replaced || string(r.Value) != "bad" {
		t.Errorf("quarantined record %+v %v", r, err)
	}
}

func TestOriginal(t *testing.T) {
	for qkey, want := range map[string]string{
		KeyOf("jobs/a@b/runtime", 7): "jobs/a@b/runtime",
		"quarantine/x":               "x",
		"tasks/j/1":                  "",
	} {
		if got := Original(qkey); got != want {
			t.Errorf("Original(%q) = %q, want %q", qkey, got, want)
		}
	}
}
