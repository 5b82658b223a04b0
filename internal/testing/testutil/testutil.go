// Package testutil holds helpers shared by Peloton's tests: golden-file
// comparison, a goroutine-leak check for TestMain, a free loopback
// address for a server a test starts, a log sink safe to share, the one
// wait for a condition (Eventually: tests wait on conditions and events,
// not on sleeps), and what another user of the machine can reach
// (isolation.go). It is imported only
// from _test.go files and imports nothing of Peloton.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Golden compares got with the file at path. With update it first rewrites
// the file, so a deliberate change is one `go test -update` and a reviewed
// diff. what names the content in the failure message ("transition tables").
func Golden(t testing.TB, path, got string, update bool, what string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed; review and run `go test -run Golden -update` in its package.\ngot:\n%s\nwant:\n%s", what, got, want)
	}
}

// LeakCheckMain runs the tests and then fails the run if, within 5 s, some
// goroutine whose stack matches leaked is still alive: every test must stop
// what it started.
func LeakCheckMain(m *testing.M, leaked func(stack string) bool) {
	LeakCheckMainThen(m, leaked, nil)
}

// LeakCheckMainThen is LeakCheckMain with a function run after the tests
// and before the check, for what the package's tests share (a test
// cluster) and os.Exit would otherwise leave behind.
func LeakCheckMainThen(m *testing.M, leaked func(stack string) bool, after func()) {
	code := m.Run()
	if after != nil {
		after()
	}
	if code == 0 {
		if left := waitNoLeaks(5*time.Second, leaked); left != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeaks(timeout time.Duration, leaked func(string) bool) string {
	var left []string
	_ = poll(timeout, func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if leaked(g) {
				left = append(left, g)
			}
		}
		if len(left) > 0 {
			return errNotYet
		}
		return nil
	})
	return strings.Join(left, "\n\n")
}

// FreeAddr is a loopback address (127.0.0.1:port) nothing listens on now,
// for a server a test starts (or restarts) on an address of its choosing.
// The port is chosen at random outside the kernel's ephemeral range
// (32768 and up by default): a port the kernel handed out to a listen on
// :0 is handed out again, to any process's outgoing connection or
// listener, as soon as it is closed, and the test's own server would then
// find it taken; one chosen here is not, until someone asks for it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// SyncBuffer is a log sink that goroutines of the code under test and the
// test itself may write and read at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually calls cond until it holds (returns nil, or true), failing the
// test with what, and cond's last error, once within has passed. It polls
// after 1ms, then twice as long each time up to every 50ms, so a condition
// met early costs little and one met late is seen soon after. A condition
// that has a reason to give returns an error; a plain check returns a bool.
func Eventually[C func() error | func() bool](t testing.TB, within time.Duration, what string, cond C) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		default:
			if c.(func() bool)() {
				return nil
			}
			return errNotYet
		}
	}
	if err := poll(within, check); err != nil {
		t.Fatalf("%s: not within %s: %v", what, within, err)
	}
}

// poll calls check until it returns nil, or until within has passed, and
// returns check's last error. It is the one wait behind every condition a
// test waits on here.
func poll(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	wait := time.Millisecond
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		// The pause between two checks of a condition: what the waits on
		// conditions are made of, so it cannot be one itself.
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

var errNotYet = errors.New("condition still false")
