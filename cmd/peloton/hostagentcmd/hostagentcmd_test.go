package hostagentcmd_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cmd/peloton/hostagentcmd"
	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/testing/tlstest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// stream is what the stack saw of one usage stream: the token and the
// client certificate it was opened with, and the host of its first report.
type stream struct {
	auth, client, host string
}

// recordingStack is the stack's end of the host agents' streams: it
// records each stream, acknowledges its reports, and ends the first one so
// that the agent opens another.
type recordingStack struct {
	pelotonv1.UnimplementedHostAgentServiceServer
	streams chan stream
	opened  atomic.Int32
}

func (s *recordingStack) ReportUsage(st grpc.BidiStreamingServer[pelotonv1.UsageReport, pelotonv1.UsageAck]) error {
	var got stream
	if md, ok := metadata.FromIncomingContext(st.Context()); ok && len(md.Get("authorization")) > 0 {
		got.auth = md.Get("authorization")[0]
	}
	if p, ok := peer.FromContext(st.Context()); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			got.client = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	rep, err := st.Recv()
	if err != nil {
		return err
	}
	got.host = rep.GetHost()
	s.streams <- got
	if s.opened.Add(1) == 1 {
		return status.Error(codes.Unavailable, "the stack restarts")
	}
	for {
		if err := st.Send(&pelotonv1.UsageAck{Sequence: rep.GetSequence()}); err != nil {
			return err
		}
		if rep, err = st.Recv(); err != nil {
			return err
		}
	}
}

// TestAgentConnectsWithTLSAndToken runs the agent's command against a
// stack that requires client certificates: it verifies the stack with
// --ca-file, presents --cert-file, sends the token in --token-file, and
// sends the file's new token when it reconnects after the file changed.
func TestAgentConnectsWithTLSAndToken(t *testing.T) {
	old := reload.Interval
	reload.Interval = 0
	t.Cleanup(func() { reload.Interval = old })

	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, "stack", "peloton", tlstest.Opts{})
	agentCert, agentKey := ca.Issue(t, "agent", "hostagent-node-7", tlstest.Opts{})
	cfg, err := tlsfiles.ServerConfig(tlsfiles.Server{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: ca.File}, []string{"h2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stack := &recordingStack{streams: make(chan stream, 16)}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	pelotonv1.RegisterHostAgentServiceServer(g, stack)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	cmd := hostagentcmd.Command(hostagentcmd.Options{Use: "peloton-hostagent", Stdout: &out, Stderr: &errb})
	cmd.SetArgs([]string{"--server", lis.Addr().String(), "--host", "node-7", "--virtual", "--capacity-cpu", "1", "--capacity-memory-mb", "256",
		"--interval", "100ms", "--ca-file", ca.File, "--cert-file", agentCert, "--key-file", agentKey, "--token-file", tokenFile})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the agent's command: %v\n%s", err, errb.String())
		}
	}()

	next := func() stream {
		t.Helper()
		select {
		case s := <-stack.streams:
			return s
		case err := <-done:
			t.Fatalf("the agent's command ended: %v\n%s", err, errb.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("no stream from the agent within 30s\n%s", errb.String())
		}
		return stream{}
	}
	if got, want := next(), (stream{auth: "Bearer first", client: "hostagent-node-7", host: "node-7"}); got != want {
		t.Fatalf("first stream %+v, want %+v", got, want)
	}
	// The stack ended that stream; the agent opens another, with the
	// token the file holds by then.
	if err := os.WriteFile(tokenFile, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := next(), (stream{auth: "Bearer second-token", client: "hostagent-node-7", host: "node-7"}); got != want {
		t.Fatalf("stream after the token changed %+v, want %+v", got, want)
	}
	if !strings.Contains(out.String(), "peloton hostagent is reporting: host node-7, to "+lis.Addr().String()) {
		t.Errorf("stdout %q", out.String())
	}
}

// TestConnUsageErrors: the connection's flags are checked before the agent
// starts, each error naming its flag.
func TestConnUsageErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, "agent", "agent", tlstest.Opts{})
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	virtual := []string{"--virtual", "--capacity-cpu", "1", "--capacity-memory-mb", "256"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "127.0.0.1:1", "--cert-file", cert}, "--cert-file is set but --key-file is not: a client certificate needs both"},
		{[]string{"--server", "127.0.0.1:1", "--key-file", key}, "--key-file is set but --cert-file is not"},
		{[]string{"--server", "127.0.0.1:1", "--ca-file", key}, "--ca-file: " + key + " holds no PEM certificate"},
		{[]string{"--server", "127.0.0.1:1", "--token-file", filepath.Join(dir, "nope")}, "invalid --token-file: open " + filepath.Join(dir, "nope")},
		// A token in plaintext to another host is refused, not sent.
		{append([]string{"--server", "10.0.0.1:5391", "--token-file", tokenFile}, virtual...),
			"--token-file: the token is sent only over TLS or to a loopback address, and --server 10.0.0.1:5391 is neither: give --ca-file"},
	} {
		var out, errb bytes.Buffer
		if code := hostagentcmd.Main("peloton-hostagent", tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
