// Package restgw serves a gRPC API over REST the way every Peloton daemon
// does: grpc-gateway through a loopback gRPC connection (so REST and gRPC
// share every interceptor and limit), JSON with every field and no unknown
// ones, 413 for a body over the limit, 405 with Allow for a wrong method,
// the OpenAPI document, /metrics, /healthz and /readyz. The cluster API and
// the federation API both use it.
//
// It knows grpc-gateway and the metrics registry, no Peloton domain package.
package restgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/metrics"
)

// RegisterFunc is a generated Register<Service>HandlerFromEndpoint.
type RegisterFunc func(ctx context.Context, mux *runtime.ServeMux, endpoint string, opts []grpc.DialOption) error

// Options says what one daemon's HTTP listener serves.
type Options struct {
	// GRPCAddr is the daemon's own gRPC address, which REST calls go through.
	GRPCAddr string
	// Dial, if set, is how the gateway reaches GRPCAddr: the daemon's
	// in-memory listener, whose server takes the identity Guard
	// established for each request.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Guard, if set, authenticates REST requests (and forwards who made
	// them over Dial) and keeps /metrics and /v1/events to viewers of the
	// cluster; /healthz, /readyz, /openapi.json and Extra stay open.
	Guard *auth.Guard
	// Register are the services served over REST.
	Register []RegisterFunc
	// OpenAPI is served at /openapi.json.
	OpenAPI []byte
	// MaxRequestBytes bounds a request body (413 above it).
	MaxRequestBytes int
	// Ready, if set, is the check behind /readyz: nil when the daemon can
	// do its work now, a *Degraded when it can but a person must look,
	// else why not.
	Ready func(context.Context) error
	// Extra, if set, serves every other path (the web UI).
	Extra http.Handler
	// Events, if set, serves GET /v1/events (the UI's live updates),
	// beside the gateway's routes.
	Events http.Handler
}

// Option changes Options; a daemon's HTTPHandler takes them from the code
// that serves it (internal/serving), which decides how REST reaches gRPC.
type Option func(*Options)

// Handler serves REST for o.Register under /v1/, /v1/events (if
// o.Events), /openapi.json, /metrics, /healthz and /readyz.
func Handler(ctx context.Context, o Options) (http.Handler, error) {
	maxBytes := o.MaxRequestBytes
	// Unknown fields in a REST body are errors, as they are in spec files.
	// Answers carry every field, zero values included (instanceId: 0), as
	// the CLI's -o json does.
	marshaler := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
	var gw *runtime.ServeMux
	muxOpts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithErrorHandler(errorHandler(maxBytes)),
		runtime.WithMiddlewares(probeMiddleware),
		runtime.WithRoutingErrorHandler(func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
			if r.Context().Value(probeKey{}) != nil {
				return // a probe whose method has no route either
			}
			if code == http.StatusMethodNotAllowed {
				methodNotAllowed(gw, w, r)
				return
			}
			runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, code)
		}),
	}
	if o.Guard != nil {
		muxOpts = append(muxOpts, auth.GatewayOptions()...)
	}
	gw = runtime.NewServeMux(muxOpts...)
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxBytes), grpc.MaxCallRecvMsgSize(64<<20)),
	}
	target := o.GRPCAddr
	if o.Dial != nil {
		dialOpts = append(dialOpts, grpc.WithContextDialer(o.Dial))
		target = "passthrough:///" + o.GRPCAddr
	}
	for _, reg := range o.Register {
		if err := reg(ctx, gw, target, dialOpts); err != nil {
			return nil, err
		}
	}
	var api http.Handler = validUTF8(limitBody(gw, maxBytes))
	metricsH := promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{})
	events := o.Events
	if o.Guard != nil {
		api = o.Guard.GatewayHandler(api)
		metricsH = o.Guard.RequireHTTP(auth.Viewer, metricsH)
		if events != nil {
			events = o.Guard.RequireHTTP(auth.Viewer, events)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	if events != nil {
		mux.Handle("/v1/events", events)
	}
	mux.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(o.OpenAPI)
	})
	mux.Handle("/metrics", metricsH)
	handleProbes(mux, o.Ready)
	if o.Extra != nil {
		mux.Handle("/", o.Extra)
	}
	return mux, nil
}

// AdminHandler serves /metrics, /healthz and /readyz with no
// authentication, for a separate admin listener the operator keeps off
// the network that clients reach (--admin-listen).
func AdminHandler(ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	handleProbes(mux, ready)
	return mux
}

// Degraded is what a readiness check returns (possibly wrapped) when the
// daemon can do its work but something needs a person: records in
// quarantine, say. /readyz answers it with 200, so that load balancers and
// readiness probes keep the daemon in service (taking it out would take
// the whole cluster down over one record), and a body that says so:
//
//	ok (degraded: 2 records in quarantine)
//	quarantine/tasks/<job>/3@57
//	quarantine/jobs/<job>/runtime@12
//
// or, to a client that accepts application/json,
// {"status":"degraded","reason":"...","count":2,"items":[...]}.
type Degraded struct {
	// Reason is one line: what is wrong.
	Reason string
	// Items are what it concerns (at most maxReadyItems are shown).
	Items []string
}

func (d *Degraded) Error() string { return "degraded: " + d.Reason }

// maxReadyItems bounds the items /readyz lists.
const maxReadyItems = 100

// readyAnswer is /readyz in JSON.
type readyAnswer struct {
	// Status is "ok", "degraded" or "not ready".
	Status string   `json:"status"`
	Reason string   `json:"reason,omitempty"`
	Count  int      `json:"count,omitempty"`
	Items  []string `json:"items,omitempty"`
}

// handleProbes serves /healthz and /readyz.
func handleProbes(mux *http.ServeMux, ready func(context.Context) error) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	// /healthz says the process lives (restarting it would not help while
	// etcd is away); /readyz says whether it can do its work now.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		a, code := readyAnswer{Status: "ok"}, http.StatusOK
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			err := ready(ctx)
			cancel()
			var d *Degraded
			switch {
			case errors.As(err, &d):
				a = readyAnswer{Status: "degraded", Reason: d.Reason, Count: len(d.Items), Items: d.Items[:min(len(d.Items), maxReadyItems)]}
			case err != nil:
				a, code = readyAnswer{Status: "not ready", Reason: err.Error()}, http.StatusServiceUnavailable
			}
		}
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(a)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		switch a.Status {
		case "ok":
			_, _ = io.WriteString(w, "ok\n")
		case "not ready":
			_, _ = fmt.Fprintf(w, "not ready: %s\n", a.Reason)
		default:
			_, _ = fmt.Fprintf(w, "ok (degraded: %s)\n", a.Reason)
			for _, it := range a.Items {
				_, _ = fmt.Fprintln(w, it)
			}
			if more := a.Count - len(a.Items); more > 0 {
				_, _ = fmt.Fprintf(w, "(%d more)\n", more)
			}
		}
	})
}

// readyTimeout bounds the readiness check of one /readyz request.
const readyTimeout = 2 * time.Second

// limitBody reads the whole body before the gateway sees it, so a body over
// MaxRequestBytes is answered 413 here: the gateway would turn the read error
// into a 400 like any other decode failure.
func limitBody(next http.Handler, maxBytes int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > int64(maxBytes) {
			tooLarge(w, maxBytes)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(maxBytes)))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge(w, maxBytes)
				return
			}
			writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, "reading the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// validUTF8 answers 400 to a request whose path or query, decoded, is not
// UTF-8. The gateway would put those bytes in a string field of the gRPC
// request, which protobuf refuses to marshal: the call would fail inside
// the gateway as a 500 Internal, blaming the server for a client's mistake.
func validUTF8(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) {
			writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, "the path must be UTF-8 once percent-decoded")
			return
		}
		// A malformed query is the gateway's to refuse, as before (only
		// for calls that read the query); what parses must be UTF-8.
		q, _ := url.ParseQuery(r.URL.RawQuery)
		for k, vs := range q {
			if !utf8.ValidString(k) {
				writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, "the query string must be UTF-8 once percent-decoded")
				return
			}
			for _, v := range vs {
				if !utf8.ValidString(v) {
					writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, fmt.Sprintf("query parameter %q must be UTF-8 once percent-decoded", k))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter, maxBytes int) {
	writeRESTError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
		fmt.Sprintf("request body is larger than the limit of %d bytes", maxBytes))
}

// writeRESTError writes the same {"code","message","details"} shape the
// gateway's error handler does.
func writeRESTError(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	b, _ := json.Marshal(map[string]any{"code": int(code), "message": msg, "details": []any{}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}

type probeKey struct{}

// probeMiddleware answers a probe request (see methodNotAllowed) without
// running the handler: reaching it means the probed method has a route.
func probeMiddleware(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if hit, ok := r.Context().Value(probeKey{}).(*bool); ok {
			*hit = true
			return
		}
		next(w, r, params)
	}
}

// methodNotAllowed answers 405 with an Allow header listing the methods that
// have a route for the path. The gateway keeps its routes private, so each
// candidate method is probed through the gateway itself; the probe stops in
// probeMiddleware and never reaches a handler.
func methodNotAllowed(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodPatch, http.MethodPost, http.MethodPut} {
		hit := false
		pr := r.Clone(context.WithValue(r.Context(), probeKey{}, &hit))
		pr.Method = m
		pr.Body = http.NoBody
		pr.ContentLength = 0
		pr.Header.Del("X-HTTP-Method-Override")
		pr.Header.Set("Content-Type", "application/json")
		gw.ServeHTTP(discardWriter{}, pr)
		if hit {
			allow = append(allow, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeRESTError(w, http.StatusMethodNotAllowed, codes.Unimplemented,
		fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}

// errorHandler reports errors as {"code": <grpc code>, "message": ...}
// with the matching HTTP status; a body over the size limit is 413, and a
// path or query parameter that does not parse says so in the API's words.
func errorHandler(maxBytes int) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = status.Errorf(codes.ResourceExhausted, "request body is larger than the limit of %d bytes", maxBytes)
		}
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			if msg, ok := paramError(st.Message()); ok {
				err = status.Error(codes.InvalidArgument, msg)
			}
		}
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
	}
}

// The gateway's words for a path parameter and a query parameter that do
// not parse: Go's strconv error after the parameter's name.
var (
	pathParamErr  = regexp.MustCompile(`^type mismatch, parameter: ([A-Za-z0-9_.]+), error: (.*)$`)
	queryParamErr = regexp.MustCompile(`^parsing field "([A-Za-z0-9_.]+)": (.*)$`)
	strconvErr    = regexp.MustCompile(`^strconv\.Parse(Uint|Int|Float|Bool): parsing "(.*)": (invalid syntax|value out of range)$`)
)

// paramError rewrites the gateway's message for a parameter that does not
// parse as a number or a boolean into one that names the parameter and
// what it takes; ok is false for any other message.
func paramError(msg string) (string, bool) {
	var name, cause string
	if m := pathParamErr.FindStringSubmatch(msg); m != nil {
		name, cause = m[1], m[2]
	} else if m := queryParamErr.FindStringSubmatch(msg); m != nil {
		name, cause = m[1], m[2]
	} else {
		return "", false
	}
	m := strconvErr.FindStringSubmatch(cause)
	if m == nil {
		return "", false
	}
	kind, value, why := m[1], m[2], m[3]
	if why == "value out of range" {
		return fmt.Sprintf("%s: %q is out of range", name, value), true
	}
	want := map[string]string{"Uint": "a whole number from 0 up", "Int": "a whole number", "Float": "a number", "Bool": "true or false"}[kind]
	return fmt.Sprintf("%s: %q is not %s", name, value, want), true
}
