package mesos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/hostmgr/mesos/mesostest"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// etcdEndpoints is the embedded etcd every test of the package shares,
// each under a key prefix of its own.
var (
	etcdEndpoints []string
	storeSeq      atomic.Int64
)

// TestMain runs one embedded etcd for the package, and fails the run if a
// Backend's goroutine outlives the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "peloton-mesos-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	etcdEndpoints = e.Endpoints()
	testutil.LeakCheckMainThen(m, func(g string) bool { return strings.Contains(g, "hostmgr/mesos.(*Backend)") }, func() {
		_ = e.Close()
		_ = os.RemoveAll(dir)
	})
}

// newStore is a store of the test's own, as a cluster stack's is.
func newStore(t testing.TB) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.NewEtcd(ctx, store.EtcdConfig{Endpoints: etcdEndpoints, Prefix: fmt.Sprintf("/mesostest/%d/", storeSeq.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newMaster starts a test master, closed when the test ends.
func newMaster(t testing.TB, cfg mesostest.Config) *mesostest.Master {
	t.Helper()
	if cfg.Redeliver == 0 {
		cfg.Redeliver = 500 * time.Millisecond
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 200 * time.Millisecond
	}
	m, err := mesostest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// testConfig is a backend's config for tests: short waits, quiet logs.
func testConfig(m *mesostest.Master, st store.Store) Config {
	return Config{Master: m.URL(), Store: st, Role: "peloton", StartTimeout: 20 * time.Second, MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
}
