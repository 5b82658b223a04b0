// Package etcdtest runs real etcd server processes for fault tests: a
// member can be paused (SIGSTOP), stopped, killed and restarted on its data,
// which an embedded etcd in the test's own process cannot. The etcd binary
// is built once per machine from the module proxy, at the version go.mod
// pins, into the cache the Kubernetes test tools use
// (<cache>/etcd/<version>/etcd).
//
// This package is for tests only: no component may import it.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/testing/kubetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// serverPkg is etcd's main package; it builds within this module, whose
// go.sum has all it needs.
const serverPkg = "go.etcd.io/etcd/server/v3"

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the etcd server binary, building it the first
// time on a machine (about ten seconds).
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("etcdtest: %v", buildErr)
	}
	return buildPath
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", serverPkg).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", serverPkg, err)
	}
	version := strings.TrimSpace(string(out))
	cache := kubetest.CacheDir()
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	dir := filepath.Join(cache, "etcd", version)
	bin := filepath.Join(dir, "etcd")
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Built beside its final name and renamed: two test binaries building
	// at once each rename a complete file.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, serverPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("go build %s: %w\n%s", serverPkg, err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// Cluster is n etcd members on loopback.
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Member is one etcd server process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string
	args      []string
	bin       string
	wrap      []string // a command the server runs under (ip netns exec NS)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts an n-member cluster (n = 1 for a single server) with data
// under t.TempDir() and waits until it serves. Cleanup kills it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := Binary(t)
	c := &Cluster{t: t}
	base := t.TempDir()
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(base, fmt.Sprintf("m%d", i)), bin: bin,
			ClientURL: "http://" + freeAddr(t), PeerURL: "http://" + freeAddr(t)}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.args = []string{"--name", m.Name, "--data-dir", filepath.Join(m.Dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "peloton-test", "--log-level", "error",
			"--heartbeat-interval", "50", "--election-timeout", "500"}
		if err := os.MkdirAll(m.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			m.Resume()
			m.Kill()
		}
	})
	c.WaitReady(60 * time.Second)
	return c
}

// StartWrapped starts a one-member cluster whose server runs under wrap
// (e.g. ip netns exec NS, to run it in a network namespace), serving
// clients on host:2379 and peers on host:2380: a namespace of its own has
// those ports free. Cleanup kills it.
func StartWrapped(t testing.TB, host string, wrap ...string) *Cluster {
	t.Helper()
	m := &Member{Name: "m0", Dir: filepath.Join(t.TempDir(), "m0"), bin: Binary(t), wrap: wrap,
		ClientURL: "http://" + net.JoinHostPort(host, "2379"), PeerURL: "http://" + net.JoinHostPort(host, "2380")}
	c := &Cluster{t: t, Members: []*Member{m}}
	m.args = []string{"--name", m.Name, "--data-dir", filepath.Join(m.Dir, "data"),
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", m.Name + "=" + m.PeerURL, "--initial-cluster-state", "new",
		"--initial-cluster-token", "peloton-test", "--log-level", "error",
		"--heartbeat-interval", "50", "--election-timeout", "500"}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Resume(); m.Kill() })
	c.WaitReady(60 * time.Second)
	return c
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// WaitReady waits until the cluster answers a linearizable read.
func (c *Cluster) WaitReady(within time.Duration) {
	c.t.Helper()
	testutil.Eventually(c.t, within, "etcdtest: cluster ready", c.probe)
}

func (c *Cluster) probe() error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "etcdtest-probe")
	return err
}

// Leader is the index of the member that leads, or -1 if none answers.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		cli.Close()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(m.Dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	argv := append(append(append([]string{}, m.wrap...), m.bin), m.args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(m.exited)
	return nil
}

func (m *Member) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(sig)
	}
}

// wait waits (at most 30 s) for the process to exit.
func (m *Member) wait() {
	m.mu.Lock()
	done := m.exited
	m.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// Pause stops the process with SIGSTOP: it holds its sockets and answers
// nothing, as a machine that hangs would.
func (m *Member) Pause() { m.signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (m *Member) Resume() { m.signal(syscall.SIGCONT) }

// Stop ends the process with SIGTERM and waits for it.
func (m *Member) Stop() {
	m.Resume()
	m.signal(syscall.SIGTERM)
	m.wait()
}

// Kill ends the process with SIGKILL and waits for it.
func (m *Member) Kill() {
	m.signal(syscall.SIGKILL)
	m.wait()
}

// Restart starts the member again on its data and ports (after Stop or
// Kill).
func (m *Member) Restart() error {
	m.wait()
	return m.start()
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
