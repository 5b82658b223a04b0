package security

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// TestTransportAndAudit: a stack with TLS, mutual TLS, tokens, a policy
// and an audit log refuses plaintext, a client that does not trust its CA,
// a client certificate of another CA or an expired one; serves REST over
// HTTPS to a token holder; writes audit lines for allowed and refused
// calls; and takes a rotated server certificate and client CA without a
// restart.
func TestTransportAndAudit(t *testing.T) {
	reload.Interval = 10 * time.Millisecond
	t.Cleanup(func() { reload.Interval = time.Second })
	p := newPKI(t)
	e, _ := storetest.StartEtcd(t)
	audit := filepath.Join(p.dir, "audit.log")
	s := startStack(t, "transport", e.Endpoints(), p.security(t, audit))
	addr := s.info.GRPCAddr
	if !s.info.TLS {
		t.Fatal("the stack says its listeners do not serve TLS")
	}
	root := p.as(t, addr, "root")
	createPool(t, root, "/a")
	createPool(t, root, "/a/x")
	createPool(t, root, "/b")
	jobB := createJob(t, root, batchSpec("b", "/b"))

	ping := func(o pclient.Options) error {
		o.Timeout = 5 * time.Second
		c, err := pclient.New(addr, o)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Jobs.ListJobs(ctx(t), &pelotonv1.ListJobsRequest{})
		return err
	}
	other := tlstest.NewCA(t, p.dir, "other")
	strangerCert, strangerKey := other.Issue(t, "stranger", "root", tlstest.Opts{})
	expiredCert, expiredKey := p.ca.Issue(t, "expired", "ops-bot", tlstest.Opts{Groups: []string{"ops"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, c := range []struct {
		name string
		o    pclient.Options
	}{
		{"plaintext", pclient.Options{}},
		{"server CA not trusted", pclient.Options{TLS: &pclient.TLSFiles{CAFile: other.File, CertFile: p.cliCert, KeyFile: p.cliKey}}},
		{"no client certificate", pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File}, Token: tokens["root"]}},
		{"client certificate of another CA", pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: strangerCert, KeyFile: strangerKey}}},
		{"expired client certificate", pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: expiredCert, KeyFile: expiredKey}}},
	} {
		if err := ping(c.o); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want the connection refused (Unavailable)", c.name, err)
		}
	}
	// A valid certificate without a token and without grants is someone
	// (cli), and is refused what the policy does not give it.
	if err := ping(pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: p.cliCert, KeyFile: p.cliKey}}); err != nil {
		t.Errorf("listing with the cli certificate: %v (lists answer everyone, filtered)", err)
	}
	// A bad token is not a fallback to the certificate.
	if err := ping(pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: p.opsCert, KeyFile: p.opsKey}, Token: "not-a-token-of-the-file"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a bad token with a good certificate: %v, want Unauthenticated", err)
	}

	// REST over HTTPS with the same rules.
	rest := restClient(t, p, p.cliCert, p.cliKey)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+s.info.HTTPAddr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Grpc-Metadata-X-Peloton-Principal", "root") // forging an identity gets nothing
		req.Header.Set("X-Peloton-Auth", "in-process")
		resp, err := rest.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/jobs/"+jobB, tokens["root"]); code != http.StatusOK {
		t.Errorf("root GET job over HTTPS: %d %s", code, body)
	}
	if code, body := get("/v1/jobs/"+jobB, tokens["alice"]); code != http.StatusForbidden || !strings.Contains(body, "pool /b") {
		t.Errorf("alice GET a job of /b over HTTPS: %d %s, want 403 naming the pool", code, body)
	}
	if code, body := get("/v1/jobs/"+jobB, "wrong-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token over HTTPS: %d %s, want 401", code, body)
	}
	if code, _ := get("/metrics", tokens["bob"]); code != http.StatusForbidden {
		t.Errorf("bob (viewer of /a only) GET /metrics: %d, want 403", code)
	}
	if code, _ := get("/metrics", tokens["carol"]); code != http.StatusOK {
		t.Errorf("carol GET /metrics: %d, want 200", code)
	}
	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without credentials: %d, want 200", code)
	}
	// The certificate identifies a REST caller without a token.
	ops := restClient(t, p, p.opsCert, p.opsKey)
	if resp, err := ops.Get("https://" + s.info.HTTPAddr + "/v1/hosts"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("ops-bot's certificate GET /v1/hosts: %v %v", resp, err)
	}

	// Audit: alice's refused cancel and root's create are both there.
	alice := p.as(t, addr, "alice")
	if _, err := alice.Jobs.CancelJob(ctx(t), &pelotonv1.CancelJobRequest{JobId: jobB}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice cancelling /b's job: %v", err)
	}
	entries := readAudit(t, audit)
	var sawDenied, sawCreate bool
	for _, en := range entries {
		if en.Principal == "alice" && en.Method == "/peloton.api.v1.JobService/CancelJob" && en.Outcome == "PermissionDenied" && en.Object == "job "+jobB {
			sawDenied = true
		}
		if en.Principal == "root" && en.Method == "/peloton.api.v1.JobService/CreateJob" && en.Outcome == "OK" && en.AuthBy == auth.MethodToken && en.RequestID != "" {
			sawCreate = true
		}
	}
	if !sawDenied || !sawCreate {
		t.Errorf("audit log: alice's denied cancel found=%v, root's create found=%v; entries: %+v", sawDenied, sawCreate, entries)
	}

	// Rotation: a new server certificate is served by the next connection;
	// a client certificate of a new CA is taken once the client CA file
	// holds that CA too. Nothing restarts.
	before := servedSerial(t, addr, p)
	p.serverCert, p.server = p.ca.Issue(t, "server", "peloton-server", tlstest.Opts{})
	newCA := tlstest.NewCA(t, filepath.Join(p.dir), "next")
	nextCert, nextKey := newCA.Issue(t, "next-client", "ops-bot", tlstest.Opts{Groups: []string{"ops"}})
	nextOpts := pclient.Options{TLS: &pclient.TLSFiles{CAFile: p.ca.File, CertFile: nextCert, KeyFile: nextKey}}
	if err := ping(nextOpts); status.Code(err) != codes.Unavailable {
		t.Errorf("a client certificate of a CA not yet trusted: %v, want refused", err)
	}
	bundle := append(readFile(t, p.ca.File), readFile(t, newCA.File)...)
	if err := os.WriteFile(p.ca.File+".tmp", bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p.ca.File+".tmp", p.ca.File); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the rotated certificate and CA taken", func() error {
		after := servedSerial(t, addr, p)
		if err := ping(nextOpts); after == before || err != nil {
			return fmt.Errorf("served serial %s (was %s), new CA's client: %v", after, before, err)
		}
		return nil
	})
}

func restClient(t *testing.T, p *pki, cert, key string) *http.Client {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(readFile(t, p.ca.File))
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}}}
}

// servedSerial is the serial number of the certificate the gRPC listener
// serves to a new connection.
func servedSerial(t *testing.T, addr string, p *pki) string {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(p.cliCert, p.cliKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2"}}) //nolint:gosec // only reads the served certificate
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAudit(t *testing.T, path string) []auth.AuditEntry {
	t.Helper()
	var out []auth.AuditEntry
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for sc.Scan() {
		var e auth.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}
