package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Helpers for tests of what another user of the machine can reach: they
// run the test binary itself as that user, to dial an address, so they
// need no tool that a machine may lack.

// dialHelperEnv, set to "<network> <address>", turns the test binary into
// the helper of DialAs: it dials once, prints "connected" or the error,
// and exits.
const dialHelperEnv = "PELOTON_TESTUTIL_DIAL"

// DialHelperMain makes the test binary the helper of DialAs and
// DialHelperCommand when the environment asks for it; it returns otherwise.
// A package whose tests use them calls it first in its TestMain.
func DialHelperMain() {
	v, ok := os.LookupEnv(dialHelperEnv)
	if !ok {
		return
	}
	network, addr, _ := strings.Cut(v, " ")
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	c.Close()
	fmt.Println("connected")
	os.Exit(0)
}

// DialHelperCommand returns a command line and an environment variable
// that, run by any user (a task of the local backend, say), dial network
// addr once and print "connected" or why not. It copies the test binary
// where every user may run it (the go tool builds it in a directory only
// its user may enter); the copy is removed at the test's end.
func DialHelperCommand(t testing.TB, network, addr string) (argv []string, env string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "peloton-dial-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{bin}, dialHelperEnv + "=" + network + " " + addr
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// DialAs dials network addr from a process running as the named user (its
// uid and primary gid, no other groups) and returns what the dial printed:
// "connected", or the error. The test must run as root.
func DialAs(t testing.TB, username, network, addr string) string {
	t.Helper()
	u, err := user.Lookup(username)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	argv, env := DialHelperCommand(t, network, addr)
	cmd := exec.Command(argv[0])
	cmd.Env = []string{env}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) {
		t.Fatalf("dial helper as %s: %v (%s)", username, err, out)
	}
	return strings.TrimSpace(string(out))
}

// ListeningTCPPorts lists the TCP ports this process listens on, read from
// /proc (the sockets of its descriptors that /proc/net/tcp and tcp6 list in
// state LISTEN). It skips the test where /proc does not tell.
func ListeningTCPPorts(t testing.TB) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
		f.Close()
	}
	return ports
}
