package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

func escape(s string) string            { return url.QueryEscape(s) }
func unescape(s string) (string, error) { return url.QueryUnescape(s) }

// escapeList forwards a list as its escaped items joined by commas: an
// item's own commas are escaped, so a group "a,b" stays one group.
func escapeList(items []string) string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = escape(s)
	}
	return strings.Join(out, ",")
}

func unescapeList(s string) ([]string, bool) {
	items := strings.Split(s, ",")
	for i, it := range items {
		v, err := unescape(it)
		if err != nil {
			return nil, false
		}
		items[i] = v
	}
	return items, true
}
func httpPeer(r *http.Request) string  { return r.RemoteAddr }
func hasForwardPrefix(key string) bool { return strings.HasPrefix(strings.ToLower(key), "x-peloton-") }
func stripPrefix(key, prefix string) string {
	if len(key) >= len(prefix) && strings.EqualFold(key[:len(prefix)], prefix) {
		return key[len(prefix):]
	}
	return ""
}

type httpIdentityKey struct{}

// HTTPIdentity authenticates an HTTP request as the gRPC side does a call:
// its bearer token, else its verified TLS client certificate, else
// anonymous when authentication is off. The error is the gRPC status to
// answer with.
func (g *Guard) HTTPIdentity(r *http.Request) (Identity, error) {
	peer := httpPeer(r)
	if id, ok, err := g.jobTokenIdentity(r.Context(), r.Header.Values("Authorization"), peer); ok {
		if err != nil {
			return Identity{}, statusErr(codes.Unauthenticated, grpcstatus.Convert(err).Message())
		}
		return id, nil
	}
	if g.tokens != nil {
		if v := r.Header.Values("Authorization"); len(v) > 0 {
			tok, ok := bearerToken(v)
			if !ok {
				return Identity{}, statusErr(codes.Unauthenticated, "the Authorization header must be exactly one \"Bearer <token>\"")
			}
			id, ok := g.tokens.Get().Lookup(tok)
			if !ok {
				return Identity{}, statusErr(codes.Unauthenticated, "the bearer token is not valid")
			}
			id.Peer = peer
			return id, nil
		}
	}
	if g.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		if id, ok := certIdentity(r.TLS.VerifiedChains[0][0]); ok {
			id.Peer = peer
			return id, nil
		}
	}
	if !g.Authenticating() {
		return Identity{Principal: Anonymous, Method: MethodNone, Peer: peer}, nil
	}
	return Identity{}, statusErr(codes.Unauthenticated, errNoCredentials)
}

// GatewayHandler authenticates each request for the REST gateway in next
// and passes its identity on (see GatewayOptions). Headers that would
// forge a forwarded identity are dropped; a request whose credentials do
// not hold is answered 401 here.
func (g *Guard) GatewayHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if hasForwardPrefix(stripPrefix(k, "Grpc-Metadata-")) || hasForwardPrefix(k) {
				delete(r.Header, k) // Del would canonicalize k and miss a key that is not
			}
		}
		id, err := g.HTTPIdentity(r)
		if err != nil {
			g.refuseHTTP(w, r, id, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpIdentityKey{}, id)))
	})
}

// RequireHTTP lets through to next only the requests of callers holding
// role cluster-wide (for /metrics and the UI's event stream when
// authorization is on); when authentication is off, everyone.
func (g *Guard) RequireHTTP(role Role, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := g.HTTPIdentity(r)
		if err != nil {
			g.refuseHTTP(w, r, id, err)
			return
		}
		if g.policy != nil && id.Method != MethodNone && !g.policy.Get().Allows(id, role, "") {
			g.refuseHTTP(w, r, id, statusErr(codes.PermissionDenied, r.URL.Path+" needs the "+role.String()+" role cluster-wide, which "+id.Principal+" does not hold"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// GatewayOptions make the REST gateway forward the identity that
// GatewayHandler established, and the caller's request id, and never
// forward a caller's own x-peloton-* headers.
func GatewayOptions() []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{
		runtime.WithMetadata(func(ctx context.Context, r *http.Request) metadata.MD {
			md := metadata.MD{}
			if id, ok := r.Context().Value(httpIdentityKey{}).(Identity); ok {
				md.Set(fwdMethod, escape(id.Method))
				md.Set(fwdPrincipal, escape(id.Principal))
				md.Set(fwdGroups, escapeList(id.Groups))
				md.Set(fwdPeer, escape(id.Peer))
			}
			if v := r.Header.Get("X-Request-Id"); v != "" {
				md.Set(RequestIDHeader, v)
			}
			return md
		}),
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if hasForwardPrefix(stripPrefix(key, "Grpc-Metadata-")) || hasForwardPrefix(key) {
				return "", false
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		runtime.WithOutgoingHeaderMatcher(func(key string) (string, bool) {
			if key == RequestIDHeader {
				return "X-Request-Id", true
			}
			return "Grpc-Metadata-" + key, true
		}),
	}
}

// InProcess returns the per-call credentials of a component of the daemon
// (principal is one of the Principal* constants) calling the daemon's API
// over its in-memory listener.
func InProcess(principal string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(inProcess(principal))
}

type inProcess string

func (p inProcess) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{fwdMethod: escape(MethodInProcess), fwdPrincipal: escape(string(p)), fwdGroups: "", fwdPeer: "in-process"}, nil
}

func (p inProcess) RequireTransportSecurity() bool { return false }

type statusError struct {
	code codes.Code
	msg  string
}

func (e statusError) Error() string { return e.msg }

func statusErr(c codes.Code, msg string) error { return statusError{c, msg} }

// refuseHTTP answers a request refused before it reached a gRPC method
// and writes its audit line, as the gRPC side does for a refused call:
// the method is the HTTP method and path.
func (g *Guard) refuseHTTP(w http.ResponseWriter, r *http.Request, id Identity, err error) {
	rid := requestID(r.Header.Values("X-Request-Id"))
	w.Header().Set("X-Request-Id", rid)
	writeHTTPError(w, err)
	if g.audit == nil {
		return
	}
	se, _ := err.(statusError)
	e := AuditEntry{Time: time.Now().UTC(), RequestID: rid, Principal: id.Principal, Groups: id.Groups, AuthBy: id.Method,
		Peer: httpPeer(r), Method: r.Method + " " + r.URL.Path, Outcome: se.code.String(), Message: se.msg}
	if werr := g.audit.Write(e); werr != nil {
		g.log.Error("cannot write the audit log", "err", werr)
	}
}

// writeHTTPError answers with the {"code","message","details"} shape of
// the REST gateway's errors.
func writeHTTPError(w http.ResponseWriter, err error) {
	se, _ := err.(statusError)
	httpCode := runtime.HTTPStatusFromCode(se.code)
	if se.code == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="peloton"`)
	}
	b, _ := json.Marshal(map[string]any{"code": int(se.code), "message": se.msg, "details": []any{}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}
