package store

import (
	"errors"
	"github.com/peloton-sched/peloton/internal/testutil"
	"log/slog"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	var logs testutil.SyncBuffer
	e, err := StartEmbedded(EmbeddedConfig{
		DataDir:    dir,
		ClientAddr: "127.0.0.1:0",
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		Verbose:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil || strings.HasSuffix(u.Host, ":0") {
		t.Fatalf("endpoint %q does not report the real port (%v)", e.Endpoints()[0], err)
	}

	s := connectTestStore(t, e, "")
	rev := mustTxn(t, s, Put("pools/root", []byte("keep me"), MustNotExist))
	_ = s.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	// etcd's own zap logging went through the slog bridge.
	if out := logs.String(); !strings.Contains(out, "component=etcd") || !strings.Contains(out, "embedded etcd stopped") {
		t.Fatalf("expected etcd's log in the slog handler, got:\n%.2000s", out)
	}

	// Same data dir, new ports.
	e2 := startTestEmbedded(t, dir)
	s2 := connectTestStore(t, e2, "")
	kv := mustGet(t, s2, "pools/root")
	if string(kv.Value) != "keep me" || kv.Revision != rev {
		t.Fatalf("after restart: %+v, want %q at %d", kv, "keep me", rev)
	}
	// And it still takes writes: the cluster re-elected itself.
	mustTxn(t, s2, Put("pools/root", []byte("updated"), rev))

	cli, err := e2.Client(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(testCtx(t), DefaultPrefix+"pools/root")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "updated" {
		t.Fatalf("raw client read = %v, %v", resp, err)
	}
}

func TestEmbeddedPortInUse(t *testing.T) {
	first := startTestEmbedded(t, t.TempDir())
	u, err := url.Parse(first.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		e   *Embedded
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: u.Host, Logger: quietLogger})
		done <- result{e, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			_ = r.e.Close()
			t.Fatal("second server on a used client port started")
		}
		if !errors.Is(r.err, syscall.EADDRINUSE) || !strings.Contains(r.err.Error(), "clientAddr "+u.Host+" already in use") {
			t.Fatalf("unclear error: %v", r.err)
		}
		t.Logf("error: %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("StartEmbedded on a used port hangs")
	}

	// The first server is unharmed.
	mustTxn(t, connectTestStore(t, first, ""), Put("k", nil, MustNotExist))
}

func TestEmbeddedConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  EmbeddedConfig
		want string
	}{
		{"no data dir", EmbeddedConfig{}, "dataDir: must not be empty"},
		{"bad client addr", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "nowhere"}, "clientAddr"},
		{"host name", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "example.com:2379"}, "not an IP address"},
		{"bad peer port", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:99999"}, "peerAddr: bad port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quietLogger
			e, err := StartEmbedded(tc.cfg)
			if err == nil {
				_ = e.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestEmbeddedDataDirInUse: etcd itself would block forever on the database
// file lock; StartEmbedded must fail at once instead.
func TestEmbeddedDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	startTestEmbedded(t, dir)
	done := make(chan error, 1)
	go func() {
		e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, ClientAddr: "127.0.0.1:0", Logger: quietLogger})
		if err == nil {
			_ = e.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "in use by another embedded etcd") {
			t.Fatalf("second server on a data dir in use: got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("StartEmbedded on a data dir in use hangs")
	}
}
