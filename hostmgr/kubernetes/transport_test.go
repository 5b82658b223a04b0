package kubernetes

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiServer is a TLS test server answering every request with its
// protocol and body after hold, counting the connections made to it.
func apiServer(t testing.TB, h2 bool, streams int, hold time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(hold)
		_, _ = io.WriteString(w, r.Proto+" "+string(body))
	}))
	srv.EnableHTTP2 = h2
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func send(t *testing.T, c *http.Client, url, body string) string {
	t.Helper()
	resp, err := c.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// TestAPITransportDialsOnlyWhatItUses: 1,000 requests at once against a
// server allowing 100 streams a connection (as an apiserver does) open at
// most the 10 connections they need, every one of them used: none dialled and thrown away, as
// net/http's transport does for every request that finds the open ones
// full.
func TestAPITransportDialsOnlyWhatItUses(t *testing.T) {
	srv, conns := apiServer(t, true, 100, 100*time.Millisecond)
	tr := newAPITransport(srv.Client().Transport.(*http.Transport).TLSClientConfig, nil)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			if got, want := send(t, c, srv.URL, "x"), "HTTP/2.0 x"; got != want {
				t.Errorf("request %d: answer %q, want %q", i, got, want)
			}
		})
	}
	wg.Wait()
	if n := conns.Load(); n > 10 || n < 1 {
		t.Errorf("1,000 requests at 100 streams a connection made %d connections, want at most 10", n)
	}
	if d := tr.dials.Load(); d != conns.Load() {
		t.Errorf("transport counted %d dials, the server %d connections", d, conns.Load())
	}
}

// TestAPITransportFallsBackToHTTP1: an apiserver (or a proxy) without
// HTTP/2 is spoken to over HTTP/1.1, the request that found it out
// included, body and all.
func TestAPITransportFallsBackToHTTP1(t *testing.T) {
	srv, _ := apiServer(t, false, 0, 0)
	tr := newAPITransport(srv.Client().Transport.(*http.Transport).TLSClientConfig, nil)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i := range 3 {
		if got, want := send(t, c, srv.URL, "body"), "HTTP/1.1 body"; got != want {
			t.Fatalf("request %d: answer %q, want %q", i, got, want)
		}
	}
	if !tr.noH2.Load() {
		t.Error("the transport did not note that the server has no HTTP/2")
	}
}

// TestAPIHTTPClientOnlyWhereItSeesTheConnections: the backend's own
// transport is used for an HTTPS apiserver, and not where a proxy, an exec
// plugin, the caller's transport or plain HTTP is in the way.
func TestAPIHTTPClientOnlyWhereItSeesTheConnections(t *testing.T) {
	base := func() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:6443", Timeout: time.Second} }
	if c, tr, err := apiHTTPClient(base()); err != nil || c == nil || tr == nil || c.Timeout != time.Second {
		t.Fatalf("https apiserver: client %v, transport %v, err %v; want ours with the config's timeout", c, tr, err)
	}
	for name, change := range map[string]func(*rest.Config){
		"plain http":    func(rc *rest.Config) { rc.Host = "http://127.0.0.1:8080" },
		"own transport": func(rc *rest.Config) { rc.Transport = http.DefaultTransport },
		"proxy":         func(rc *rest.Config) { rc.Proxy = http.ProxyFromEnvironment },
		"http/1.1 only": func(rc *rest.Config) { rc.NextProtos = []string{"http/1.1"} },
		"exec plugin": func(rc *rest.Config) {
			rc.ExecProvider = &clientcmdapi.ExecConfig{Command: "credentials", APIVersion: "client.authentication.k8s.io/v1"}
		},
	} {
		rc := base()
		change(rc)
		if c, _, err := apiHTTPClient(rc); err != nil || c != nil {
			t.Errorf("%s: client %v, err %v; want client-go's own", name, c, err)
		}
	}
}

// BenchmarkAPITransportBurst: connections opened by 1,000 requests at once
// against a server allowing 100 streams a connection, with the backend's
// transport and with net/http's (client-go's default), as connections/op.
// docs/benchmarks.md quotes it.
func BenchmarkAPITransportBurst(b *testing.B) {
	for _, name := range []string{"x-net-pool", "net-http"} {
		b.Run(name, func(b *testing.B) {
			var conns int64
			for range b.N {
				srv, n := apiServer(b, true, 100, 100*time.Millisecond)
				var rt http.RoundTripper = newAPITransport(srv.Client().Transport.(*http.Transport).TLSClientConfig, nil)
				if name == "net-http" {
					h := srv.Client().Transport.(*http.Transport).Clone()
					h.ForceAttemptHTTP2 = true
					rt = h
				}
				c := &http.Client{Transport: rt, Timeout: 30 * time.Second}
				var wg sync.WaitGroup
				for range 1000 {
					wg.Go(func() {
						if resp, err := c.Get(srv.URL); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
						}
					})
				}
				wg.Wait()
				srv.Close()
				conns += n.Load()
			}
			b.ReportMetric(float64(conns)/float64(b.N), "connections/op")
		})
	}
}
