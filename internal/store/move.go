package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Move describes moving every key under some directories of one prefix to
// the same place under another prefix, e.g. from the old layout
// "/peloton/jobs/..." to "/peloton/clusters/local/jobs/...".
type Move struct {
	// From and To are absolute prefixes, each ending in "/".
	From, To string
	// Dirs are the directories under From to move, each ending in "/"
	// ("jobs/"). Only these move: anything else under From stays.
	Dirs []string
	// Unless, if set, is an absolute prefix under which no key may exist
	// while a key moves (e.g. an old version's leader election key: while
	// such a leader lives it may still write the old keys). Every
	// transaction checks it, so the move fails with ErrMoveBlocked rather
	// than race that writer.
	Unless string
	// MaxTxnOps is the server's --max-txn-ops (0: DefaultMaxTxnOps).
	MaxTxnOps int
}

// ErrMoveBlocked is returned by MoveKeys when a key exists under
// Move.Unless.
var ErrMoveBlocked = errors.New("store: keys under the guard prefix exist")

// moveAttempts bounds how often in a row a batch may lose a race with a
// writer of the old keys (one changed between the read and the
// transaction) before MoveKeys gives up. Losing to another mover (the key
// is gone: it moved) is progress and does not count.
const moveAttempts = 10

// MoveKeys moves the keys m names and returns how many it moved. Each
// transaction moves a batch of keys atomically: it puts each at its new
// place, which must still be free, and deletes it at the old, which must
// still have the revision that was read; so a crash between transactions
// leaves every key in exactly one place, and running MoveKeys again
// finishes the move. With nothing left to move it writes nothing. A key
// present at both places is an error: nothing overwrites it.
//
// The new keys get new revisions and no lease: it is for records, not for
// keys attached to a session.
func MoveKeys(ctx context.Context, cli *clientv3.Client, m Move) (int, error) {
	if !strings.HasSuffix(m.From, "/") || !strings.HasSuffix(m.To, "/") || m.From == m.To {
		return 0, fmt.Errorf("store: move %q to %q: want two different prefixes ending in /", m.From, m.To)
	}
	maxOps := m.MaxTxnOps
	if maxOps <= 0 {
		maxOps = DefaultMaxTxnOps
	}
	// Per key two compares (old revision, new place free) and two writes;
	// one more compare for the guard. etcd bounds compares and writes
	// separately, each by --max-txn-ops.
	batch := (maxOps - 1) / 2
	if batch < 1 {
		return 0, fmt.Errorf("store: move: max txn ops %d: must be at least 3", maxOps)
	}
	moved := 0
	for _, dir := range m.Dirs {
		if !strings.HasSuffix(dir, "/") || strings.HasPrefix(dir, "/") {
			return moved, fmt.Errorf("store: move: dir %q: want a relative path ending in /", dir)
		}
		failures := 0
		for {
			rctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
			resp, err := cli.Get(rctx, m.From+dir, clientv3.WithPrefix(), clientv3.WithLimit(int64(batch)))
			cancel()
			if err != nil {
				return moved, fmt.Errorf("store: move: list %q: %w", m.From+dir, err)
			}
			if len(resp.Kvs) == 0 {
				break
			}
			n, written, err := moveBatch(ctx, cli, m, resp.Kvs)
			if err != nil {
				return moved, err
			}
			if written {
				// Someone still writes the old keys.
				if failures++; failures >= moveAttempts {
					return moved, fmt.Errorf("store: move %q: %d transactions in a row lost a race with another writer", m.From+dir, failures)
				}
				continue
			}
			failures = 0
			moved += n
		}
	}
	return moved, nil
}

// moveBatch moves kvs in one transaction. If a key changed since it was
// read it moves nothing, and says whether one of them was written (rather
// than moved by someone else); the caller reads again.
func moveBatch(ctx context.Context, cli *clientv3.Client, m Move, kvs []*mvccpb.KeyValue) (moved int, written bool, err error) {
	cmps := make([]clientv3.Cmp, 0, 2*len(kvs)+1)
	ops := make([]clientv3.Op, 0, 2*len(kvs))
	if m.Unless != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.Unless), "=", 0).WithPrefix())
	}
	for _, kv := range kvs {
		old := string(kv.Key)
		to := m.To + strings.TrimPrefix(old, m.From)
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(old), "=", kv.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(to), "=", 0))
		ops = append(ops, clientv3.OpPut(to, string(kv.Value)), clientv3.OpDelete(old))
	}
	tctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	resp, err := cli.Txn(tctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, false, fmt.Errorf("store: move: %w", err)
	}
	if resp.Succeeded {
		return len(kvs), false, nil
	}
	// Find out which compare failed: a guard or a key at both places is
	// final; an old key that changed or went is a race to retry.
	gctx, gcancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer gcancel()
	if m.Unless != "" {
		g, err := cli.Get(gctx, m.Unless, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, false, fmt.Errorf("store: move: %w", err)
		}
		if g.Count > 0 {
			return 0, false, fmt.Errorf("%w: %s", ErrMoveBlocked, m.Unless)
		}
	}
	// A key another mover has just moved is gone from its old place: a
	// race, not a clash.
	for _, kv := range kvs {
		to := m.To + strings.TrimPrefix(string(kv.Key), m.From)
		g, err := cli.Txn(gctx).Then(clientv3.OpGet(string(kv.Key)), clientv3.OpGet(to, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return 0, false, fmt.Errorf("store: move: %w", err)
		}
		cur := g.Responses[0].GetResponseRange().Kvs
		if len(cur) > 0 && g.Responses[1].GetResponseRange().Count > 0 {
			return 0, false, fmt.Errorf("store: move: both %s and %s exist; refusing to overwrite either", kv.Key, to)
		}
		if len(cur) > 0 && cur[0].ModRevision != kv.ModRevision {
			written = true
		}
	}
	return 0, written, nil
}
