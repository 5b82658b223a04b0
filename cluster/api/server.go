// Package api serves Peloton's public API: the gRPC services, the same
// services over REST through grpc-gateway, the OpenAPI document, and the
// operational endpoints (/metrics, /healthz). It is glue: it checks request
// shape and hands the work to jobmgr, resmgr and hostmgr. It lives under
// cluster/, not internal/, because it knows the domain packages: internal/
// holds only plumbing that knows none of them.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxRequestBytes bounds every request, gRPC or REST. A 100,000-instance job
// with overrides on every tenth instance fits comfortably.
const MaxRequestBytes = 16 << 20

// Server implements the public gRPC services.
type Server struct {
	pelotonv1.UnimplementedJobServiceServer
	pelotonv1.UnimplementedTaskServiceServer
	pelotonv1.UnimplementedPoolServiceServer
	pelotonv1.UnimplementedHostServiceServer
	pelotonv1.UnimplementedUpdateServiceServer

	jm  *jobmgr.Manager
	rm  *resmgr.Manager
	hm  *hostmgr.Manager
	log *slog.Logger
	// ready, if set, says whether the stack can do its work now (the store
	// answers); /readyz reports it.
	ready func(context.Context) error
}

// SetReadiness sets the check behind /readyz: nil when the stack can serve,
// else why not. It must answer within a second or two.
func (s *Server) SetReadiness(f func(context.Context) error) { s.ready = f }

// NewServer builds the API over the cluster stack's managers.
func NewServer(jm *jobmgr.Manager, rm *resmgr.Manager, hm *hostmgr.Manager, log *slog.Logger) *Server {
	return &Server{jm: jm, rm: rm, hm: hm, log: log.With("component", "api")}
}

// GRPCServer returns a grpc.Server with every service registered, request
// size limits, and latency metrics.
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts,
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	g := grpc.NewServer(opts...)
	pelotonv1.RegisterJobServiceServer(g, s)
	pelotonv1.RegisterTaskServiceServer(g, s)
	pelotonv1.RegisterPoolServiceServer(g, s)
	pelotonv1.RegisterHostServiceServer(g, s)
	pelotonv1.RegisterUpdateServiceServer(g, s)
	return g
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	err = s.userError(info.FullMethod, err)
	metrics.APILatency.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := s.userError(info.FullMethod, h(srv, ss))
	metrics.APILatency.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return err
}

// userError makes sure no internal error text or stack escapes as is: errors
// that are not already statuses are logged and reported as Internal.
func (s *Server) userError(method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	s.log.Error("internal error", "method", method, "err", err)
	return status.Error(codes.Internal, "internal error; see the server log")
}

func methodName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}

// HTTPHandler serves REST (through a loopback gRPC connection to grpcAddr, so
// REST and gRPC share every interceptor and limit), /openapi.json, /metrics
// and /healthz. extra, if set, serves every other path (the web UI).
func (s *Server) HTTPHandler(ctx context.Context, grpcAddr string, extra http.Handler) (http.Handler, error) {
	// Unknown fields in a REST body are errors, as they are in spec files.
	// Answers carry every field, zero values included (instanceId: 0), as
	// the CLI's -o json does.
	marshaler := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
	var gw *runtime.ServeMux
	gw = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithErrorHandler(restErrorHandler),
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
	)
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxRequestBytes), grpc.MaxCallRecvMsgSize(64<<20)),
	}
	for _, reg := range []func(context.Context, *runtime.ServeMux, string, []grpc.DialOption) error{
		pelotonv1.RegisterJobServiceHandlerFromEndpoint,
		pelotonv1.RegisterTaskServiceHandlerFromEndpoint,
		pelotonv1.RegisterPoolServiceHandlerFromEndpoint,
		pelotonv1.RegisterHostServiceHandlerFromEndpoint,
		pelotonv1.RegisterUpdateServiceHandlerFromEndpoint,
	} {
		if err := reg(ctx, gw, grpcAddr, dialOpts); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", limitBody(gw))
	mux.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(pelotonv1.OpenAPI)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	// /healthz says the process lives (restarting it would not help while
	// etcd is away); /readyz says whether it can do its work now.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if s.ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := s.ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if extra != nil {
		mux.Handle("/", extra)
	}
	return mux, nil
}

// readyTimeout bounds the readiness check of one /readyz request.
const readyTimeout = 2 * time.Second

// limitBody reads the whole body before the gateway sees it, so a body over
// MaxRequestBytes is answered 413 here: the gateway would turn the read error
// into a 400 like any other decode failure.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBytes {
			tooLarge(w)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge(w)
				return
			}
			writeRESTError(w, http.StatusBadRequest, codes.InvalidArgument, "reading the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter) {
	writeRESTError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
		fmt.Sprintf("request body is larger than the limit of %d bytes", MaxRequestBytes))
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

// restErrorHandler reports errors as {"code": <grpc code>, "message": ...}
// with the matching HTTP status; a body over the size limit is 413.
func restErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = status.Errorf(codes.ResourceExhausted, "request body is larger than the limit of %d bytes", MaxRequestBytes)
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
