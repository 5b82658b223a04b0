package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// stack is the whole Peloton stack run in this test process - embedded etcd
// in a temp dir, the local backend running real processes, gRPC on a free
// loopback port - for the CLI to talk to as it would to `peloton up`.
type stack struct {
	t    *testing.T
	addr string
	// etcd is the endpoints of the etcd the stack embeds.
	etcd []string
	// http is the REST gateway's address.
	http string
}

// startStack starts a stack of two virtual hosts and stops it when the test
// ends. Set PELOTON_TEST_DEBUG to see its logs.
func startStack(t *testing.T, opts ...func(*cluster.Config)) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	logOut, level := io.Discard, slog.LevelWarn
	if os.Getenv("PELOTON_TEST_DEBUG") != "" {
		logOut, level = os.Stderr, slog.LevelDebug
	}
	ready := make(chan cluster.ReadyInfo, 1)
	cfg := cluster.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Backend: "local", Hosts: 2, HostCPU: 2, HostMemoryMB: 2048, HostDiskMB: 10000,
		ShutdownGrace: 5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		OnReady:       func(r cluster.ReadyInfo) { ready <- r },
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cluster.Run(ctx, cfg) }()
	var info cluster.ReadyInfo
	select {
	case info = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatal("stack did not become ready within 90s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack stopped with error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("stack did not stop within 60s")
		}
	})
	return &stack{t: t, addr: info.GRPCAddr, etcd: info.EtcdEndpoints, http: info.HTTPAddr}
}

// run runs one CLI command against the stack.
func (s *stack) run(args ...string) result {
	s.t.Helper()
	return runCLI(s.t, "", append([]string{"--server", s.addr}, args...)...)
}

// ok runs a command that must succeed and returns its stdout.
func (s *stack) ok(args ...string) string {
	s.t.Helper()
	r := s.run(args...)
	if r.code != exitOK {
		s.t.Fatalf("peloton %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs a command that must fail with exit code code and print
// exactly the error line want (a prefix of it when want ends in "...").
func (s *stack) fails(code int, want string, args ...string) result {
	s.t.Helper()
	r := s.run(args...)
	line, _, _ := strings.Cut(r.stderr, "\n")
	match := line == want
	if p, ok := strings.CutSuffix(want, "..."); ok {
		match = strings.HasPrefix(line, p)
	}
	if r.code != code || !match {
		s.t.Errorf("peloton %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), r.code, r.stderr, code, want)
	}
	return r
}

// get runs a command with -o json and decodes its answer into m.
func (s *stack) get(m proto.Message, args ...string) {
	s.t.Helper()
	out := s.ok(append(args, "-o", "json")...)
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		s.t.Fatalf("peloton %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitFor waits until cond holds, failing the test after within with what
// cond last said.
func (s *stack) waitFor(within time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	testutil.Eventually(s.t, within, what, func() error {
		if done, state := cond(); !done {
			return errors.New("last: " + state)
		}
		return nil
	})
}

// writeSpec writes a spec file for the CLI to read and returns its path.
func writeSpec(t *testing.T, name, yamlText string) string {
	t.Helper()
	if _, err := yaml.YAMLToJSON([]byte(yamlText)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
