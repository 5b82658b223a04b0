// Package quarantine moves a stored record that cannot be loaded out of
// the way, so that one bad record cannot keep a component, and with it the
// cluster, from starting. A component that finds, at start, a record it
// cannot decode calls Move: in one etcd transaction the record is put
// under Prefix (the key it had and its revision recorded, with its bytes
// and the error), and deleted where it was, compared on the revision read,
// so a record rewritten meanwhile is left alone. The move is logged at
// error level and counted (metrics.QuarantinedRecords), and the component
// starts without the record; what that means for each kind of record is
// the component's to decide and document (docs/operations.md).
//
// Quarantined records stay until a person looks at them: List tells
// /readyz, which reports the stack degraded while any is there. Nothing
// reads them back automatically: to restore one, put its bytes back at
// its key and delete the quarantine key; to drop it, delete the key.
//
// Keys are relative to the store's prefix, so a cluster stack's quarantine
// is its own (/peloton/clusters/<name>/quarantine/...).
//
// This package imports the store and metrics only.
package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/store"
)

// Prefix is where quarantined records are kept.
const Prefix = "quarantine/"

// Record is the stored form of a quarantined record (JSON, so that etcdctl
// shows it; Value is base64 there).
type Record struct {
	// Key is where the record was, and Revision its etcd revision there.
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
	// Error says why it could not be loaded.
	Error string `json:"error"`
	// Time is when it was moved aside.
	Time time.Time `json:"time"`
	// Value is the record's bytes, as they were.
	Value []byte `json:"value"`
	// Replaced says that the component wrote a record of its own at Key
	// in the same transaction (Replace), which a restore overwrites.
	Replaced bool `json:"replaced,omitempty"`
}

// KeyOf is the quarantine key of the record at key with revision rev. The
// revision keeps apart the records a key had at different times.
func KeyOf(key string, rev int64) string {
	return Prefix + key + "@" + strconv.FormatInt(rev, 10)
}

// Original is the key whose record the quarantine key qkey holds ("" if
// qkey is not one).
func Original(qkey string) string {
	rest, ok := strings.CutPrefix(qkey, Prefix)
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// Move moves kv, which could not be loaded because of cause, aside (see
// the package comment), logs it on log at error level and counts it. It
// returns the quarantine key. The transaction compares kv's revision: if
// the record changed since it was read, nothing is moved and the error
// wraps store.ErrConflict.
func Move(ctx context.Context, st store.Store, log *slog.Logger, kv store.KV, cause error) (string, error) {
	qkey, _, err := move(ctx, st, log, kv, cause, nil)
	return qkey, err
}

// Replace is Move that writes replacement at kv's key in the same
// transaction, for a record the component cannot do without (a pool its
// children and jobs are in, a host's maintenance state): the rest of the
// state stays whole, and the quarantined record says it was replaced. It
// also returns the replacement's revision.
func Replace(ctx context.Context, st store.Store, log *slog.Logger, kv store.KV, cause error, replacement []byte) (string, int64, error) {
	if replacement == nil {
		replacement = []byte{}
	}
	return move(ctx, st, log, kv, cause, replacement)
}

func move(ctx context.Context, st store.Store, log *slog.Logger, kv store.KV, cause error, replacement []byte) (string, int64, error) {
	qkey := KeyOf(kv.Key, kv.Revision)
	b, err := json.Marshal(Record{Key: kv.Key, Revision: kv.Revision, Error: cause.Error(), Time: time.Now().UTC(),
		Value: kv.Value, Replaced: replacement != nil})
	if err != nil {
		return "", 0, fmt.Errorf("quarantine %s: %w", kv.Key, err)
	}
	instead := store.Delete(kv.Key, kv.Revision)
	if replacement != nil {
		instead = store.Put(kv.Key, replacement, kv.Revision)
	}
	rev, err := st.Txn(ctx, store.Put(qkey, b, store.MustNotExist), instead)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Written meanwhile (or moved already, by an attempt whose
			// answer was lost): a new start reads it again.
			return "", 0, fmt.Errorf("quarantine %s: it changed while it was moved aside; start again: %w", kv.Key, err)
		}
		return "", 0, fmt.Errorf("quarantine %s: %w", kv.Key, err)
	}
	metrics.QuarantinedRecords.Inc()
	log.Error("a stored record cannot be loaded; it was moved aside and the stack starts without it (see docs/operations.md, Quarantined records)",
		"key", kv.Key, "revision", kv.Revision, "quarantine", qkey, "replaced", replacement != nil, "err", cause)
	return qkey, rev, nil
}

// List returns the quarantine keys under Prefix+under (under "" for all),
// in key order.
func List(ctx context.Context, st store.Store, under string) ([]string, error) {
	kvs, err := st.List(ctx, Prefix+under)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	return keys, nil
}

// Read decodes the quarantined record at qkey's value.
func Read(value []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(value, &r)
	return r, err
}
