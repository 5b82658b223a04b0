package replica

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFollowerForwards: a follower answers /healthz itself, refuses while
// no leader serves, then forwards HTTP and raw gRPC bytes to the leader's
// addresses, and cuts everything when it closes.
func TestFollowerForwards(t *testing.T) {
	var leader atomic.Pointer[leaderInfo]
	f, err := startFollower(Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"}, slog.New(slog.DiscardHandler), leader.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	base := "http://" + f.http.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// closedAtOnce reports whether the gRPC side hangs up on a new
	// connection, as it does without a leader to forward to.
	closedAtOnce := func() bool {
		t.Helper()
		c, err := net.DialTimeout("tcp", f.grpc.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		return err == io.EOF
	}

	if code, body := get("/healthz"); code != 200 || body != "ok (following; no leader known yet)\n" {
		t.Fatalf("/healthz without a leader: %d %q", code, body)
	}
	if code, _ := get("/v1/jobs"); code != http.StatusServiceUnavailable {
		t.Fatalf("/v1/jobs without a leader: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader is known") {
		t.Fatalf("/readyz without a leader: %d %q", code, body)
	}
	if !closedAtOnce() {
		t.Fatal("gRPC connection without a leader was not closed")
	}
	// Elected but not serving yet: still refused.
	leader.Store(&leaderInfo{ID: "other/1"})
	if code, _ := get("/v1/jobs"); code != http.StatusServiceUnavailable {
		t.Fatalf("/v1/jobs while the leader starts: %d", code)
	}

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "leader saw "+r.URL.Path+"?"+r.URL.RawQuery)
	}))
	defer api.Close()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	leader.Store(&leaderInfo{ID: "other/1", GRPC: echo.Addr().String(), HTTP: api.Listener.Addr().String()})

	if code, body := get("/healthz"); code != 200 || body != "ok (following other/1)\n" {
		t.Fatalf("/healthz with a leader: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || body != "ok (following other/1)\n" {
		t.Fatalf("/readyz with a leader: %d %q", code, body)
	}
	if code, body := get("/v1/jobs?x=1"); code != 200 || body != "leader saw /v1/jobs?x=1" {
		t.Fatalf("/v1/jobs through the follower: %d %q", code, body)
	}
	c, err := net.DialTimeout("tcp", f.grpc.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("bytes through the follower: %q, %v", line, err)
	}

	// Closing cuts the forwarded connection and frees both addresses.
	f.close()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("forwarded connection still open after close")
	}
	for _, a := range []string{f.grpc.Addr().String(), f.http.Addr().String()} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("address %s not freed: %v", a, err)
		}
		l.Close()
	}
}
