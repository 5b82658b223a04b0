package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// authJobs answers GetJob with the authorization metadata the call carried
// as the job's id.
type authJobs struct {
	pelotonv1.UnimplementedJobServiceServer
}

func (authJobs) GetJob(ctx context.Context, _ *pelotonv1.GetJobRequest) (*pelotonv1.GetJobResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := ""
	if v := md.Get("authorization"); len(v) > 0 {
		auth = v[0]
	}
	return &pelotonv1.GetJobResponse{Job: &pelotonv1.Job{Id: auth}}, nil
}

// serveAuth serves authJobs on loopback, over TLS with files of ca when ca
// is not nil.
func serveAuth(t *testing.T, ca *tlstest.CA) string {
	t.Helper()
	var opts []grpc.ServerOption
	if ca != nil {
		cert, key := ca.Issue(t, "server", "server", tlstest.Opts{})
		cfg, err := tlsfiles.ServerConfig(tlsfiles.Server{CertFile: cert, KeyFile: key}, []string{"h2"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	pelotonv1.RegisterJobServiceServer(g, authJobs{})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func authOf(t *testing.T, c *client.Client) string {
	t.Helper()
	resp, err := c.Jobs.GetJob(context.Background(), &pelotonv1.GetJobRequest{JobId: "j"})
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	return resp.GetJob().GetId()
}

func TestTokenSentOverTLS(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "ca")
	addr := serveAuth(t, ca)
	c, err := client.New(addr, client.Options{Timeout: 5 * time.Second, TLS: &client.TLSFiles{CAFile: ca.File}, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := authOf(t, c); got != "Bearer s3cret" {
		t.Fatalf("server got authorization %q, want \"Bearer s3cret\"", got)
	}
}

// TestTokenFileRotates: a token file's new content is sent by the calls
// after it changes, and one that stops loading keeps the last good token.
func TestTokenFileRotates(t *testing.T) {
	old := reload.Interval
	reload.Interval = 0
	t.Cleanup(func() { reload.Interval = old })

	ca := tlstest.NewCA(t, t.TempDir(), "ca")
	addr := serveAuth(t, ca)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(addr, client.Options{Timeout: 5 * time.Second, TLS: &client.TLSFiles{CAFile: ca.File}, TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := authOf(t, c); got != "Bearer first" {
		t.Fatalf("server got %q, want \"Bearer first\" (the file less its newline)", got)
	}
	// A different size, so the change shows even within the file system's
	// modification-time resolution.
	if err := os.WriteFile(file, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := authOf(t, c); got != "Bearer second-token" {
		t.Fatalf("after the file changed the server got %q, want \"Bearer second-token\"", got)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := authOf(t, c); got != "Bearer second-token" {
		t.Fatalf("after the file was emptied the server got %q, want the last good token", got)
	}
}

func TestTokenNeverInPlaintextToOtherHosts(t *testing.T) {
	for _, o := range []client.Options{{Token: "t"}, {TokenFile: "/nonexistent"}} {
		_, err := client.New("10.1.2.3:5391", o)
		if !errors.Is(err, client.ErrPlaintextToken) {
			t.Errorf("New to 10.1.2.3 in plaintext with %+v: %v, want ErrPlaintextToken", o, err)
		}
	}
	// Loopback in plaintext is allowed: nothing on the path to read it.
	addr := serveAuth(t, nil)
	c, err := client.New(addr, client.Options{Timeout: 5 * time.Second, Token: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := authOf(t, c); got != "Bearer local" {
		t.Fatalf("server got %q, want \"Bearer local\"", got)
	}
}

func TestTokenFileMustLoad(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(dir, "missing")} {
		if _, err := client.New("127.0.0.1:1", client.Options{TokenFile: f}); err == nil {
			t.Errorf("TokenFile %s was accepted", f)
		}
		if _, err := client.ReadTokenFile(f); err == nil {
			t.Errorf("ReadTokenFile(%s) succeeded", f)
		}
	}
}
