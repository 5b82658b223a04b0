package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// checkEveryTime makes every handshake look at the files again.
func checkEveryTime(t *testing.T) {
	old := reload.Interval
	reload.Interval = 0
	t.Cleanup(func() { reload.Interval = old })
}

// server is a gRPC server (the health service) on 127.0.0.1 with the
// configuration ServerConfig builds from files; it remembers the common
// name of the last client certificate it verified.
type server struct {
	addr string

	mu       sync.Mutex
	clientCN string
}

func (s *server) lastClient() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientCN
}

func serve(t *testing.T, files tlsfiles.Server) *server {
	t.Helper()
	cfg, err := tlsfiles.ServerConfig(files, []string{"h2"}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: lis.Addr().String()}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
					s.mu.Lock()
					s.clientCN = ti.State.VerifiedChains[0][0].Subject.CommonName
					s.mu.Unlock()
				}
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return s
}

// call makes one call over a new connection (so a new handshake) to
// target with the configuration ClientConfig builds from files.
func call(t *testing.T, target string, files tlsfiles.Client) error {
	t.Helper()
	cfg, err := tlsfiles.ClientConfig(files, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return callWith(t, target, cfg)
}

func callWith(t *testing.T, target string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// refused checks that err is a failed connection whose message holds one
// of why (the reason, not a timeout or a mistake of the test).
func refused(t *testing.T, what string, err error, why ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: the call succeeded, want it refused", what)
		return
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("%s: %v, want Unavailable (a connection refused)", what, err)
		return
	}
	for _, w := range why {
		if strings.Contains(err.Error(), w) {
			return
		}
	}
	t.Errorf("%s: %v, want it to say one of %q", what, err, why)
}

// refusedByServer checks that the server refuses the client files
// describe: a gRPC call fails, and a bare TLS connection reads the
// server's alert, which holds one of why. (In TLS 1.3 the client's
// handshake ends before the server has verified the client's
// certificate, so the gRPC error is only a broken connection.)
func refusedByServer(t *testing.T, what, addr string, files tlsfiles.Client, why ...string) {
	t.Helper()
	if err := call(t, addr, files); status.Code(err) != codes.Unavailable {
		t.Errorf("%s: gRPC call: %v, want Unavailable", what, err)
	}
	cfg, err := tlsfiles.ClientConfig(files, quiet)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
	}
	if err == nil {
		t.Errorf("%s: the server took the connection", what)
		return
	}
	for _, w := range why {
		if strings.Contains(err.Error(), w) {
			return
		}
	}
	t.Errorf("%s: %v, want it to say one of %q", what, err, why)
}

// replace copies src over dst as a rotation does: written aside, renamed
// into place.
func replace(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

func hostPort(addr string) (host, port string) {
	host, port, _ = net.SplitHostPort(addr)
	return host, port
}

func TestHandshake(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	_, port := hostPort(s.addr)

	// By name: the name dialled is verified.
	if err := call(t, "localhost:"+port, tlsfiles.Client{CAFile: ca.File}); err != nil {
		t.Errorf("dialling localhost: %v", err)
	}
	// By IP address, with the address as the server name.
	if err := call(t, s.addr, tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("dialling 127.0.0.1 with ServerName 127.0.0.1: %v", err)
	}
	// A ServerName other than the address dialled is what is verified.
	if err := call(t, s.addr, tlsfiles.Client{CAFile: ca.File, ServerName: "localhost"}); err != nil {
		t.Errorf("dialling 127.0.0.1 with ServerName localhost: %v", err)
	}
}

// The server's certificate must carry the name or address dialled, even
// when the CA signed it. An IP address dialled is not sent as SNI, so the
// verifier needs ServerName: without it the connection fails rather than
// taking any certificate the CA signed (it used to take it).
func TestServerCertificateMustNameTheServer(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "elsewhere", "elsewhere", tlstest.Opts{DNS: []string{"elsewhere.example"}, IPs: []net.IP{net.IPv4(192, 0, 2, 1)}})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	_, port := hostPort(s.addr)

	refused(t, "localhost, certificate for elsewhere.example", call(t, "localhost:"+port, tlsfiles.Client{CAFile: ca.File}), "certificate is valid for")
	refused(t, "127.0.0.1, certificate for 192.0.2.1", call(t, s.addr, tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}), "certificate is valid for")
	refused(t, "127.0.0.1 without ServerName", call(t, s.addr, tlsfiles.Client{CAFile: ca.File}), "no server name")

	good, gkey := ca.Issue(t, "good", "good", tlstest.Opts{})
	s2 := serve(t, tlsfiles.Server{CertFile: good, KeyFile: gkey})
	refused(t, "127.0.0.1 without ServerName, good certificate", call(t, s2.addr, tlsfiles.Client{CAFile: ca.File}), "no server name")
}

func TestServerCertificateFromAnotherCAIsRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	other := tlstest.NewCA(t, dir, "other")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	refused(t, "client trusting another CA", call(t, s.addr, tlsfiles.Client{CAFile: other.File, ServerName: "127.0.0.1"}),
		"certificate signed by unknown authority")
}

func TestExpiredServerCertificateIsRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	refused(t, "expired server certificate", call(t, s.addr, tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}), "expired")
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	other := tlstest.NewCA(t, dir, "other")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.File})
	base := tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}

	alice, aliceKey := ca.Issue(t, "alice", "alice", tlstest.Opts{Groups: []string{"team-a"}})
	c := base
	c.CertFile, c.KeyFile = alice, aliceKey
	if err := call(t, s.addr, c); err != nil {
		t.Fatalf("client with a certificate the client CA signed: %v", err)
	}
	if got := s.lastClient(); got != "alice" {
		t.Errorf("the server verified client %q, want alice", got)
	}

	refusedByServer(t, "client without a certificate", s.addr, base, "certificate required")

	mallory, malloryKey := other.Issue(t, "mallory", "mallory", tlstest.Opts{})
	c.CertFile, c.KeyFile = mallory, malloryKey
	refusedByServer(t, "client certificate from another CA", s.addr, c, "unknown certificate authority")

	old, oldKey := ca.Issue(t, "expired", "bob", tlstest.Opts{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Minute)})
	c.CertFile, c.KeyFile = old, oldKey
	refusedByServer(t, "expired client certificate", s.addr, c, "expired certificate")

	early, earlyKey := ca.Issue(t, "early", "carol", tlstest.Opts{NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})
	c.CertFile, c.KeyFile = early, earlyKey
	refusedByServer(t, "client certificate not valid yet", s.addr, c, "expired certificate")
}

// Every listener speaks TLS 1.2 or later: a TLS 1.1 client is refused by
// the server (the client offers 1.0-1.1 and the handshake reaches it).
func TestOldProtocolVersionsAreRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	dial := func(maxVersion uint16) (uint16, error) {
		cfg, err := tlsfiles.ClientConfig(tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MinVersion, cfg.MaxVersion, cfg.NextProtos = tls.VersionTLS10, maxVersion, []string{"h2"}
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", s.addr, cfg)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		return conn.ConnectionState().Version, nil
	}
	if _, err := dial(tls.VersionTLS11); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 client: %v, want the server's protocol version alert", err)
	}
	if v, err := dial(tls.VersionTLS12); err != nil || v != tls.VersionTLS12 {
		t.Errorf("TLS 1.2 client: version %x, %v; want TLS 1.2", v, err)
	}
	cfg, err := tlsfiles.ClientConfig(tlsfiles.Client{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("client MinVersion %x, want TLS 1.2", cfg.MinVersion)
	}
}

// The server's certificate and key are replaced by ones from a new CA and
// the client's CA file by that CA: the next connection verifies against
// the new files, with nothing restarted, and the old CA no longer
// verifies the server.
func TestServerCertificateRotation(t *testing.T) {
	checkEveryTime(t)
	dir, newDir := t.TempDir(), t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})

	clientCA := filepath.Join(t.TempDir(), "client-ca.pem")
	replace(t, clientCA, ca.File)
	client := tlsfiles.Client{CAFile: clientCA, ServerName: "127.0.0.1"}
	cfg, err := tlsfiles.ClientConfig(client, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := callWith(t, s.addr, cfg); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	newCA := tlstest.NewCA(t, newDir, "new")
	newCert, newKey := newCA.Issue(t, "server", "server", tlstest.Opts{})
	replace(t, cert, newCert)
	replace(t, key, newKey)
	replace(t, clientCA, newCA.File)

	// The same client configuration, on a new connection.
	if err := callWith(t, s.addr, cfg); err != nil {
		t.Errorf("after the rotation, the same client configuration: %v", err)
	}
	if err := call(t, s.addr, tlsfiles.Client{CAFile: newCA.File, ServerName: "127.0.0.1"}); err != nil {
		t.Errorf("after the rotation, a client of the new CA: %v", err)
	}
	refused(t, "after the rotation, a client of the old CA", call(t, s.addr, tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}),
		"certificate signed by unknown authority")
}

// A replacement that does not load (a key that does not match, a
// half-written file) leaves the server serving the pair it had.
func TestBrokenReplacementKeepsServing(t *testing.T) {
	checkEveryTime(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key})
	client := tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1"}

	other, _ := ca.Issue(t, "other", "other", tlstest.Opts{})
	replace(t, cert, other) // a certificate that does not match the key
	if err := call(t, s.addr, client); err != nil {
		t.Errorf("with a certificate that does not match its key: %v, want the old pair served", err)
	}
	if err := os.WriteFile(cert, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := call(t, s.addr, client); err != nil {
		t.Errorf("with a half-written certificate: %v, want the old pair served", err)
	}
}

// The client CA file and the client's own certificate rotate too: a
// server that now trusts only the new CA takes the client whose
// certificate files were replaced, on its next connection, and refuses
// one still holding the old certificate.
func TestClientCertificateRotation(t *testing.T) {
	checkEveryTime(t)
	dir, newDir, clientDir := t.TempDir(), t.TempDir(), t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	trusted := filepath.Join(t.TempDir(), "client-ca.pem")
	replace(t, trusted, ca.File)
	s := serve(t, tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: trusted})

	alice, aliceKey := ca.Issue(t, "alice", "alice", tlstest.Opts{})
	clientCert, clientKey := filepath.Join(clientDir, "client.pem"), filepath.Join(clientDir, "client-key.pem")
	replace(t, clientCert, alice)
	replace(t, clientKey, aliceKey)
	client := tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1", CertFile: clientCert, KeyFile: clientKey}
	cfg, err := tlsfiles.ClientConfig(client, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := callWith(t, s.addr, cfg); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	newCA := tlstest.NewCA(t, newDir, "new")
	replace(t, trusted, newCA.File)
	refusedByServer(t, "old client certificate, server trusting only the new CA", s.addr, client, "unknown certificate authority")

	alice2, alice2Key := newCA.Issue(t, "alice2", "alice2", tlstest.Opts{})
	replace(t, clientCert, alice2)
	replace(t, clientKey, alice2Key)
	if err := callWith(t, s.addr, cfg); err != nil {
		t.Errorf("after the client's files were replaced: %v", err)
	}
	if got := s.lastClient(); got != "alice2" {
		t.Errorf("the server verified client %q, want alice2", got)
	}
}

func TestConfigsFailWhenFilesDoNotLoad(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	other, otherKey := ca.Issue(t, "other", "other", tlstest.Opts{})
	missing := filepath.Join(dir, "missing.pem")
	for _, s := range []tlsfiles.Server{
		{},
		{CertFile: cert},
		{CertFile: cert, KeyFile: otherKey},
		{CertFile: missing, KeyFile: key},
		{CertFile: cert, KeyFile: key, ClientCAFile: missing},
		{CertFile: cert, KeyFile: key, ClientCAFile: key}, // no certificate in it
	} {
		if _, err := tlsfiles.ServerConfig(s, nil, quiet); err == nil {
			t.Errorf("ServerConfig(%+v): no error", s)
		}
	}
	for _, c := range []tlsfiles.Client{
		{CAFile: missing},
		{CAFile: key},
		{CertFile: other},
		{CertFile: other, KeyFile: key},
	} {
		if _, err := tlsfiles.ClientConfig(c, quiet); err == nil {
			t.Errorf("ClientConfig(%+v): no error", c)
		}
	}
}

// Check names the flag of the file at fault, so the daemon's usage error
// says what to fix.
func TestCheckNamesTheFlags(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	_, otherKey := ca.Issue(t, "other", "other", tlstest.Opts{})
	missing := filepath.Join(dir, "missing.pem")
	sflags := [3]string{"--tls-cert-file", "--tls-key-file", "--client-ca-file"}
	for _, tc := range []struct {
		s    tlsfiles.Server
		want []string // in the error; none: no error
	}{
		{tlsfiles.Server{}, nil},
		{tlsfiles.Server{CertFile: cert, KeyFile: key}, nil},
		{tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.File}, nil},
		{tlsfiles.Server{KeyFile: key}, []string{"--tls-key-file is set but --tls-cert-file is not"}},
		{tlsfiles.Server{CertFile: cert}, []string{"--tls-cert-file is set but --tls-key-file is not"}},
		{tlsfiles.Server{ClientCAFile: ca.File}, []string{"--client-ca-file needs --tls-cert-file and --tls-key-file"}},
		{tlsfiles.Server{CertFile: cert, KeyFile: otherKey}, []string{"--tls-cert-file / --tls-key-file", "private key does not match"}},
		{tlsfiles.Server{CertFile: missing, KeyFile: key}, []string{"--tls-cert-file / --tls-key-file", "missing.pem"}},
		{tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: missing}, []string{"--client-ca-file:", "missing.pem"}},
		{tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: key}, []string{"--client-ca-file:", "holds no PEM certificate"}},
	} {
		checkErr(t, "Server.Check", tc.s.Check(sflags), tc.want)
	}
	cflags := [3]string{"--peer-ca-file", "--peer-cert-file", "--peer-key-file"}
	for _, tc := range []struct {
		c    tlsfiles.Client
		want []string
	}{
		{tlsfiles.Client{}, nil},
		{tlsfiles.Client{CAFile: ca.File, CertFile: cert, KeyFile: key}, nil},
		{tlsfiles.Client{KeyFile: key}, []string{"--peer-key-file is set but --peer-cert-file is not"}},
		{tlsfiles.Client{CertFile: cert}, []string{"--peer-cert-file is set but --peer-key-file is not"}},
		{tlsfiles.Client{CAFile: missing}, []string{"--peer-ca-file:", "missing.pem"}},
		{tlsfiles.Client{CAFile: key}, []string{"--peer-ca-file:", "holds no PEM certificate"}},
		{tlsfiles.Client{CertFile: cert, KeyFile: otherKey}, []string{"--peer-cert-file / --peer-key-file", "private key does not match"}},
	} {
		checkErr(t, "Client.Check", tc.c.Check(cflags), tc.want)
	}
}

func checkErr(t *testing.T, what string, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("%s: %v, want nil", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: nil, want an error saying %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// A client that resumes a TLS session is held to the client CA of the
// moment, as a new one is: once the CA file no longer trusts its
// certificate's issuer, resuming the session it had does not let it in.
func TestResumedSessionFollowsClientCARotation(t *testing.T) {
	checkEveryTime(t)
	dir, newDir := t.TempDir(), t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
	trusted := filepath.Join(t.TempDir(), "client-ca.pem")
	replace(t, trusted, ca.File)
	cfg, err := tlsfiles.ServerConfig(tlsfiles.Server{CertFile: cert, KeyFile: key, ClientCAFile: trusted}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if tc.Handshake() == nil {
					_, _ = tc.Write([]byte("hi"))
					_, _ = tc.Read(make([]byte, 1)) // until the client closes
				}
			}()
		}
	}()
	alice, aliceKey := ca.Issue(t, "alice", "alice", tlstest.Opts{})
	ccfg, err := tlsfiles.ClientConfig(tlsfiles.Client{CAFile: ca.File, ServerName: "127.0.0.1", CertFile: alice, KeyFile: aliceKey}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	connect := func() (resumed bool, err error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), ccfg)
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		// Reading takes in the session ticket, and the server's alert if
		// it refuses the client.
		if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
			return false, err
		}
		return c.ConnectionState().DidResume, nil
	}
	if _, err := connect(); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if resumed, err := connect(); err != nil || !resumed {
		t.Fatalf("second connection: resumed %v, %v; want a resumed session (else this test shows nothing)", resumed, err)
	}
	newCA := tlstest.NewCA(t, newDir, "new")
	replace(t, trusted, newCA.File)
	if resumed, err := connect(); err == nil {
		t.Errorf("after the client CA rotated, a client of the old CA got in (resumed: %v)", resumed)
	}
}
