package etcdtls

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// serve answers TLS handshakes on 127.0.0.1 with a certificate of ca.
func serve(t *testing.T, ca *tlstest.CA, name string, o tlstest.Opts) string {
	t.Helper()
	cert, key := ca.Issue(t, name, "etcd", o)
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return l.Addr().String()
}

// dial connects as gRPC does: the server name is the host dialled.
func dial(cfg *tls.Config, addr string) error {
	c := cfg.Clone()
	c.ServerName, _, _ = net.SplitHostPort(addr)
	conn, err := tls.Dial("tcp", addr, c)
	if err == nil {
		conn.Close()
	}
	return err
}

// TestConfigChecksIPEndpoints: a certificate the CA signed for another
// address is refused at an IP endpoint; one for the address is taken.
func TestConfigChecksIPEndpoints(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "etcd")
	elsewhere := serve(t, ca, "elsewhere", tlstest.Opts{IPs: []net.IP{net.IPv4(10, 9, 8, 7)}})
	here := serve(t, ca, "here", tlstest.Opts{})
	files := tlsfiles.Client{CAFile: ca.File}

	cfg, err := Config(files, []string{"https://" + elsewhere}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(cfg, elsewhere); err == nil || !strings.Contains(err.Error(), "valid for 10.9.8.7, none of 127.0.0.1") {
		t.Errorf("a certificate for 10.9.8.7 at 127.0.0.1: %v, want it refused", err)
	}
	cfg, err = Config(files, []string{"https://" + here, "https://10.1.1.1:2379"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(cfg, here); err != nil {
		t.Errorf("a certificate for 127.0.0.1: %v", err)
	}
	// The CA check itself is still tlsfiles'.
	other := tlstest.NewCA(t, dir, "other")
	cfg, err = Config(tlsfiles.Client{CAFile: other.File}, []string{"https://" + here}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(cfg, here); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("another CA: %v", err)
	}
}

func TestConfigWithoutFiles(t *testing.T) {
	if cfg, err := Config(tlsfiles.Client{}, []string{"https://127.0.0.1:2379"}, nil); cfg != nil || err != nil {
		t.Errorf("no files: %v, %v; want no TLS configuration", cfg, err)
	}
	if _, err := Config(tlsfiles.Client{CAFile: "/nonexistent/ca.pem"}, nil, nil); err == nil {
		t.Error("a CA file that does not exist was taken")
	}
}
