package store

import (
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
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
	if eps := e.Endpoints(); len(eps) != 2 || eps[0] != "unix://"+filepath.Join(dir, EmbeddedSocket) {
		t.Fatalf("endpoints %q, want the socket's, then the TCP one", eps)
	}
	u, err := url.Parse(e.Endpoints()[1])
	if err != nil || strings.HasSuffix(u.Host, ":0") {
		t.Fatalf("endpoint %q does not report the real port (%v)", e.Endpoints()[1], err)
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

	// Same data dir, new ports; the data of a server that had a TCP
	// listener is served on the socket alone.
	e2, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e2.Close() })
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
	first, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	u, err := url.Parse(first.Endpoints()[1])
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
		{"bad port", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:99999"}, "clientAddr: bad port"},
		{"every address", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "0.0.0.0:0"}, "0.0.0.0 is not a loopback address"},
		{"another machine's", EmbeddedConfig{DataDir: t.TempDir(), ClientAddr: "[2001:db8::1]:2379"}, "2001:db8::1 is not a loopback address"},
		{"socket path too long", EmbeddedConfig{DataDir: filepath.Join(t.TempDir(), strings.Repeat("d", 100))}, "at most 107"},
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

// TestEmbeddedSocketOnly: by default the server listens on no TCP port at
// all, clients reach it on its socket, and the data directory and the
// socket are its user's alone.
func TestEmbeddedSocketOnly(t *testing.T) {
	before := testutil.ListeningTCPPorts(t)
	dir := filepath.Join(t.TempDir(), "etcd")
	// A data dir left open by someone is closed again.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := startSocketEmbedded(t, dir)
	for p := range testutil.ListeningTCPPorts(t) {
		if !before[p] {
			t.Errorf("the embedded etcd listens on TCP port %d", p)
		}
	}
	sock := filepath.Join(dir, EmbeddedSocket)
	if eps := e.Endpoints(); len(eps) != 1 || eps[0] != "unix://"+sock || e.SocketPath() != sock {
		t.Fatalf("endpoints %q, socket %q; want only unix://%s", eps, e.SocketPath(), sock)
	}
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, sock: os.ModeSocket | 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	mustTxn(t, connectTestStore(t, e, ""), Put("k", []byte("v"), MustNotExist))
}

// TestEmbeddedSocketRefusesOtherUsers: a process of another user (nobody)
// cannot connect to the socket, while it can connect to a TCP listener
// asked for with ClientAddr - which is why that is only opt-in.
func TestEmbeddedSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a process as nobody needs root")
	}
	e, err := StartEmbedded(EmbeddedConfig{DataDir: filepath.Join(t.TempDir(), "etcd"), ClientAddr: "127.0.0.1:0", Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if got := testutil.DialAs(t, "nobody", "unix", e.SocketPath()); !strings.Contains(got, "permission denied") {
		t.Errorf("nobody dialling the socket: %q, want permission denied", got)
	}
	u, _ := url.Parse(e.Endpoints()[1])
	if got := testutil.DialAs(t, "nobody", "tcp", u.Host); got != "connected" {
		t.Errorf("nobody dialling the TCP listener: %q, want connected (the helper works)", got)
	}
}

// TestEmbeddedDataDirOfAnotherUser: a data dir another user owns could
// hand that user the socket; it is refused.
func TestEmbeddedDataDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Logger: quietLogger})
	if err == nil {
		_ = e.Close()
		t.Fatal("started in a directory of another user")
	}
	if !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("error %v, want it to name the owner", err)
	}
}

func startSocketEmbedded(t *testing.T, dir string) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
