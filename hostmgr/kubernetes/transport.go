//lint:file-ignore SA1019 x/net's http2.Transport is deprecated in favour of net/http's, whose HTTP/2 still dials a connection per waiting request (TestAPITransportDialsOnlyWhatItUses guards the difference).

package kubernetes

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
)

// The API client's transport. client-go's own is net/http's Transport with
// HTTP/2 configured onto it, and net/http dials a connection for every
// request that finds no free stream: a burst of launches larger than what
// the open connections carry (an apiserver allows 100 or 250 streams on
// one) starts as many TLS handshakes as there are requests waiting, keeps
// one of the new connections and closes the rest. At 1,000 launches a
// second those handshakes were an eighth of Peloton's CPU per pod
// (docs/benchmarks.md, "Where Peloton's CPU per pod goes"). apiTransport
// uses golang.org/x/net/http2's own connection pool instead, which dials one
// connection at a time per apiserver and shares it among the requests that
// wait: a connection is only opened when every open one is full, and never
// wasted. TLS sessions are cached, so a connection the apiserver closed is
// resumed without verifying its certificate chain again.

const (
	// apiHandshakeTimeout bounds one TLS handshake with the apiserver, as
	// client-go's transport does.
	apiHandshakeTimeout = 10 * time.Second
	// apiReadIdle and apiPingTimeout: a connection silent for apiReadIdle
	// is pinged, and closed if the ping is not answered in apiPingTimeout
	// (client-go's defaults), so a dead apiserver connection is noticed.
	apiReadIdle    = 30 * time.Second
	apiPingTimeout = 15 * time.Second
)

// errNoHTTP2 is a handshake with an apiserver (or a proxy in front of it)
// that did not agree to HTTP/2.
var errNoHTTP2 = errors.New("kubernetes: the apiserver did not negotiate HTTP/2")

// apiTransport is an http.RoundTripper to one apiserver over TLS: HTTP/2
// with one dial at a time, or HTTP/1.1 from the first handshake that does
// not agree to HTTP/2.
type apiTransport struct {
	h2   *http2.Transport
	h1   *http.Transport
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// noH2 is set by the first handshake that did not agree to HTTP/2.
	noH2 atomic.Bool
	// dials counts the TLS connections made (tests read it).
	dials atomic.Int64
}

// apiHTTPClient is the http.Client for the backend's API client: with
// apiTransport under client-go's wrappers (authentication, user agent,
// impersonation) where rc allows it, else nil and client-go builds its own.
// It does not where Peloton cannot see every connection's setup: a proxy,
// an exec credential plugin (which closes connections when it rotates
// client certificates), a transport of the caller's, plain HTTP, or a TLS
// configuration that rules HTTP/2 out.
func apiHTTPClient(rc *rest.Config) (*http.Client, *apiTransport, error) {
	if rc.Transport != nil || rc.ExecProvider != nil || rc.Proxy != nil {
		return nil, nil, nil
	}
	if protos := rc.TLSClientConfig.NextProtos; len(protos) > 0 && !slices.Contains(protos, http2.NextProtoTLS) {
		return nil, nil, nil
	}
	u, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, nil, err
	}
	if u.Scheme != "https" {
		return nil, nil, nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil, nil, nil
	}
	tlsCfg, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, nil, err
	}
	t := newAPITransport(tlsCfg, rc.Dial)
	rt, err := rest.HTTPWrappersForConfig(rc, t)
	if err != nil {
		return nil, nil, err
	}
	return &http.Client{Transport: rt, Timeout: rc.Timeout}, t, nil
}

// newAPITransport makes an apiTransport with TLS configuration tlsCfg (nil:
// the system's roots) and, if dial is not nil, dial for its TCP connections.
func newAPITransport(tlsCfg *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *apiTransport {
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsCfg = tlsCfg.Clone()
	if tlsCfg.ClientSessionCache == nil {
		tlsCfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t := &apiTransport{dial: dial}
	t.h2 = &http2.Transport{TLSClientConfig: tlsCfg, DialTLSContext: t.dialTLS,
		ReadIdleTimeout: apiReadIdle, PingTimeout: apiPingTimeout}
	h1TLS := tlsCfg.Clone()
	h1TLS.NextProtos = []string{"http/1.1"}
	t.h1 = &http.Transport{TLSClientConfig: h1TLS, DialContext: dial, TLSHandshakeTimeout: apiHandshakeTimeout,
		MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second}
	return t
}

// dialTLS is the HTTP/2 transport's dial: a TCP connection and its TLS
// handshake, which offers HTTP/1.1 too, so that an apiserver without
// HTTP/2 completes it and the transport learns to use HTTP/1.1.
func (t *apiTransport) dialTLS(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	if !slices.Contains(cfg.NextProtos, "http/1.1") {
		cfg.NextProtos = append(cfg.NextProtos, "http/1.1")
	}
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	conn := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, apiHandshakeTimeout)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	if conn.ConnectionState().NegotiatedProtocol != http2.NextProtoTLS {
		_ = conn.Close()
		t.noH2.Store(true)
		return nil, errNoHTTP2
	}
	t.dials.Add(1)
	return conn, nil
}

// RoundTrip sends req over HTTP/2, or over HTTP/1.1 once the apiserver has
// refused HTTP/2 (the request that learnt it is sent again, if its body can
// be read again).
func (t *apiTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.noH2.Load() {
		resp, err := t.h2.RoundTrip(req)
		if !errors.Is(err, errNoHTTP2) {
			return resp, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
	return t.h1.RoundTrip(req)
}

// CancelRequest does nothing: a request is cancelled through its context,
// which http.Client and client-go set. client-go's wrappers look for this
// method when a request times out, and log a warning where it is missing.
func (t *apiTransport) CancelRequest(*http.Request) {}

// CloseIdleConnections closes both transports' idle connections (client-go
// calls it when it gives a client up).
func (t *apiTransport) CloseIdleConnections() {
	t.h2.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}
