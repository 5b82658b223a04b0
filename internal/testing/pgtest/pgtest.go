// Package pgtest runs a real PostgreSQL server for tests: Debian's
// `postgresql` package, whose binaries live under
// /usr/lib/postgresql/<version>/bin (the newest version there is used).
// Each Server is a fresh cluster (initdb) in a temporary directory,
// listening on 127.0.0.1 at a free port and on a unix socket in that
// directory, with a password only the test knows; it is stopped and
// removed when the test ends. A test can stop and start it again on the
// same data, or crash it, to see what its client does meanwhile.
//
// PostgreSQL refuses to run as root: as root, the server runs as the
// `postgres` system user the Debian package creates.
//
// `make test` installs the package (hack/postgres.sh) and sets
// PELOTON_REQUIRE_POSTGRES=1, so that missing binaries fail the tests
// there; elsewhere (a plain `go test`) the tests that need a server skip
// and say how to get one. PELOTON_SKIP_POSTGRES=1 skips them anywhere.
//
// This package is for tests only: no component may import it. It imports
// nothing of Peloton but internal/testing/testutil.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// Root is where Debian installs PostgreSQL's server binaries, one
// directory per major version.
const Root = "/usr/lib/postgresql"

// superuser is the server's superuser role, the one tests connect as.
const superuser = "peloton"

// BinDir returns the bin directory of the newest PostgreSQL under Root
// that has both initdb and postgres.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(Root, "*", "bin"))
	type cand struct {
		dir     string
		version []int
	}
	var cands []cand
	for _, d := range dirs {
		if !executable(filepath.Join(d, "postgres")) || !executable(filepath.Join(d, "initdb")) {
			continue
		}
		var v []int
		for _, part := range strings.Split(filepath.Base(filepath.Dir(d)), ".") {
			n, err := strconv.Atoi(part)
			if err != nil {
				v = nil
				break
			}
			v = append(v, n)
		}
		if v != nil {
			cands = append(cands, cand{d, v})
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("no PostgreSQL server under %s/<version>/bin (Debian's postgresql package)", Root)
	}
	sort.Slice(cands, func(a, b int) bool {
		va, vb := cands[a].version, cands[b].version
		for i := 0; i < len(va) && i < len(vb); i++ {
			if va[i] != vb[i] {
				return va[i] > vb[i]
			}
		}
		return len(va) > len(vb)
	})
	return cands[0].dir, nil
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Server is one PostgreSQL server of a test.
type Server struct {
	bin      string
	dir      string // data/, sock/, postgres.log
	addr     string // 127.0.0.1:port
	password string
	cred     *syscall.Credential // nil: run as ourselves

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited

	dbs atomic.Int32
}

// New starts a server for t, or skips t when there is no PostgreSQL to
// run (and it is not required); the server is stopped and its files
// removed when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	if os.Getenv("PELOTON_SKIP_POSTGRES") == "1" {
		t.Skip("pgtest: PELOTON_SKIP_POSTGRES=1")
	}
	bin, err := BinDir()
	if err != nil {
		if os.Getenv("PELOTON_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("pgtest: %v; hack/postgres.sh should have installed it", err)
		}
		t.Skipf("pgtest: %v; `make test` installs it (hack/postgres.sh) and runs this test", err)
	}
	s := &Server{bin: bin, addr: testutil.FreeAddr(t)}
	s.password = randomHex(16)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: PostgreSQL will not run as root, and there is no postgres user to run it as (%v): install Debian's postgresql package (make test does)", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	// Not t.TempDir: its parents are private to root, where the postgres
	// user could not reach the data directory.
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop(syscall.SIGINT)
		_ = os.RemoveAll(s.dir)
	})
	if err := s.initdb(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.Start(t)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// own gives a path to the user the server runs as.
func (s *Server) own(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + s.bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	// The server goes when the test binary goes, even if it dies
	// without cleaning up (SIGQUIT: PostgreSQL's immediate shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	return cmd
}

func (s *Server) initdb() error {
	for _, d := range []string{s.dir, filepath.Join(s.dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := s.own(d); err != nil {
			return err
		}
	}
	pw := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pw, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if err := s.own(pw); err != nil {
		return err
	}
	out, err := s.command("initdb", "-D", filepath.Join(s.dir, "data"), "-U", superuser, "--pwfile="+pw,
		"--auth=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput()
	_ = os.Remove(pw)
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// Addr is the server's TCP address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// SocketDir is the directory of the server's unix socket.
func (s *Server) SocketDir() string { return filepath.Join(s.dir, "sock") }

// URL is a connection URL of database db over TCP, as the superuser.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(superuser, s.password), Host: s.addr, Path: "/" + db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// SocketURL is a connection string of database db over the unix socket.
func (s *Server) SocketURL(db string) string {
	_, port, _ := net.SplitHostPort(s.addr)
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable", s.SocketDir(), port, superuser, s.password, db)
}

// NewDatabase creates an empty database and returns its name (URL and
// SocketURL connect to it): tests that share a server each take their own.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name).ReadAll(); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return name
}

// Start starts the server (again, after Stop or Crash, on the same data
// and address) and returns once it takes connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		t.Fatal("pgtest: Start of a running server")
	}
	_, port, _ := net.SplitHostPort(s.addr)
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.mu.Unlock()
		t.Fatal(err)
	}
	cmd := s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-p", port,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.SocketDir(),
		// A test's server: no fsync (a crash of the server process loses
		// nothing the OS has; only the machine's would), small memory.
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB", "-c", "max_connections=60")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		t.Fatalf("pgtest: start postgres: %v", err)
	}
	logf.Close()
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Unlock()

	testutil.Eventually(t, 60*time.Second, "pgtest: postgres takes connections", func() error {
		select {
		case <-done:
			t.Fatalf("pgtest: postgres exited at start:\n%s", s.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
}

// Stop shuts the server down (fast shutdown: sessions are ended, the
// data is consistent) and returns once it has exited.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(syscall.SIGINT); err != nil {
		t.Fatalf("pgtest: stop: %v", err)
	}
}

// Crash stops the server as a crash would (immediate shutdown: no
// checkpoint; the next Start recovers from the write-ahead log) and
// returns once it has exited.
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	if err := s.stop(syscall.SIGQUIT); err != nil {
		t.Fatalf("pgtest: crash: %v", err)
	}
}

func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(60 * time.Second):
	}
	// Immediate shutdown, then the whole process group.
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
		return errors.New("postgres ignored its shutdown signal; ended it with SIGQUIT")
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return errors.New("postgres did not stop; killed")
}

// Log returns what the server has logged.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return string(b)
}
