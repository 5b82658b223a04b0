package security

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestAuditRotationBySIGHUP runs the peloton binary's `up` with TLS,
// tokens, a policy and an audit file; moves the audit file away as
// logrotate does and sends SIGHUP: the daemon lives on, and the next
// audited call lands in a new file at the old path.
func TestAuditRotationBySIGHUP(t *testing.T) {
	p := newPKI(t)
	bin := filepath.Join(t.TempDir(), "peloton")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/peloton").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	audit := filepath.Join(p.dir, "audit.log")
	sec := p.security(t, audit)
	cmd := exec.Command(bin, "up", "--data-dir", filepath.Join(t.TempDir(), "data"), "--backend", "sim", "--hosts", "1",
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn",
		"--tls-cert-file", sec.TLS.CertFile, "--tls-key-file", sec.TLS.KeyFile, "--client-ca-file", sec.TLS.ClientCAFile,
		"--auth-token-file", sec.Auth.TokenFile, "--authz-policy-file", sec.Auth.PolicyFile, "--audit-log", audit)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("peloton up did not stop within 30s of SIGTERM")
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "peloton is ready: grpc ") {
				ready <- strings.TrimSuffix(strings.Fields(line)[4], ",")
			}
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-exited:
		t.Fatalf("peloton up exited: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("peloton up did not become ready within 90s")
	}
	root := p.as(t, addr, "root")
	createPool(t, root, "/before")
	if err := os.Rename(audit, audit+".1"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is handled asynchronously: calls go on into the moved
	// file until the daemon reopens the path.
	testutil.Eventually(t, 10*time.Second, "an audit line in a new file after SIGHUP", func() error {
		select {
		case err := <-exited:
			t.Fatalf("peloton up died of SIGHUP: %v", err)
		default:
		}
		if _, err := root.Pools.CreatePool(ctx(t), &pelotonv1.CreatePoolRequest{Path: "/after-" + time.Now().Format("150405.000000"), Spec: &pelotonv1.PoolSpec{}}); err != nil {
			return err
		}
		if _, err := os.Stat(audit); err != nil {
			return err
		}
		return nil
	})
	old := readAudit(t, audit+".1")
	if !slices.ContainsFunc(old, func(e auth.AuditEntry) bool { return e.Object == "pool /before" && e.Outcome == "OK" }) {
		t.Errorf("the rotated file holds %+v; want the call made before the rotation", old)
	}
	for _, e := range readAudit(t, audit) {
		if strings.Contains(e.Object, "/before") {
			t.Errorf("the new file holds a call made before the rotation: %+v", e)
		}
	}
	if fi, err := os.Stat(audit); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the new audit file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
}
