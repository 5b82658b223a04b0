// Package storetest gives other packages' tests a real etcd-backed store in
// one call, so that tests of code persisting through store.Store exercise
// etcd's actual compare-and-swap and ordering rules instead of a fake's idea
// of them; an etcd that wants TLS and client certificates (tls.go); and
// Conformance (conformance.go), the semantics every store.Store must share
// with the etcd store, so that a fake for fast tests answers as etcd. It
// imports only the store package, etcd's server, tlstest and the standard
// library, and must only be imported from _test.go files.
package storetest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/store"
)

// StartEtcd starts an embedded etcd on a fresh temp dir, answering on its
// unix socket as `peloton up`'s does, and returns it with a store connected
// to it as `peloton up`'s stack is, by in-process calls (prefix
// store.DefaultPrefix, the server's full max-txn-ops). Both are closed by
// t.Cleanup; the server's Endpoints let a test open more clients, e.g. a
// second store under another prefix. Start-up takes well under a second, so
// one server per test keeps tests independent.
func StartEtcd(t testing.TB) (*store.Embedded, *store.Etcd) {
	t.Helper()
	e, err := store.StartEmbedded(store.EmbeddedConfig{
		DataDir: t.TempDir(),
		// Start/stop chatter out of test output; etcd's errors still show.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Through the in-process client, as `peloton up`'s stack reaches its
	// embedded etcd (the store's own tests cover the socket as well).
	s, err := store.NewEtcd(ctx, store.EtcdConfig{Client: e.InProcessClient(), MaxTxnOps: e.MaxTxnOps()})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return e, s
}
