// Package api serves Peloton's public API: the gRPC services, the same
// services over REST through grpc-gateway, the OpenAPI document, and the
// operational endpoints (/metrics, /healthz). It is glue: it checks request
// shape and hands the work to jobmgr, resmgr and hostmgr. It lives under
// cluster/, not internal/, because it knows the domain packages: internal/
// holds only plumbing that knows none of them.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/live"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/restgw"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/resmgr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	pelotonv1.UnimplementedHostAgentServiceServer
	pelotonv1.UnimplementedPartitionServiceServer

	jm    *jobmgr.Manager
	rm    *resmgr.Manager
	hm    HostCache
	maint HostMaintenance
	usage HostUsage
	log   *slog.Logger
	// ready, if set, says whether the stack can do its work now (the store
	// answers); /readyz reports it.
	ready func(context.Context) error
	// ending is closed by EndStreams: long-lived streams (host agents'
	// reports) end at once.
	ending  chan struct{}
	endOnce sync.Once
	// watch, if set, reports changes of the stack's etcd keys; HTTPHandler
	// serves them at /v1/events through events.
	watch  func(context.Context) <-chan int64
	events *live.Server
	// maxInstances, if > 0, is this cluster's own bound on a job's
	// instances, below jobmgr.MaxInstances (--max-instances).
	maxInstances uint32
	// createGuard, if set, says why creates are refused now (the store is
	// nearly full), or nil.
	createGuard func() error
	// fromFederation, if set, decides whether a call carrying the
	// federation's metadata is believed (SetFederationCheck).
	fromFederation func(context.Context) bool
	// history, if set, is the archive of finished jobs the calls about one
	// job read through (archive.go), holding this cluster's jobs under
	// historyCluster.
	history        history.Store
	historyCluster string
}

// SetCreateGuard sets the check every create (jobs, updates, pools) passes
// first: an error refuses it with ResourceExhausted and that message.
// Everything else (cancels, kills, deletes, reads) is never refused by it:
// that is the headroom left for getting out of the situation.
func (s *Server) SetCreateGuard(f func() error) { s.createGuard = f }

// guardedCreates are the methods SetCreateGuard's check refuses.
var guardedCreates = map[string]bool{
	"/peloton.api.v1.JobService/CreateJob":       true,
	"/peloton.api.v1.JobService/CreateJobs":      true,
	"/peloton.api.v1.UpdateService/CreateUpdate": true,
	"/peloton.api.v1.PoolService/CreatePool":     true,
}

// SetMaxInstances bounds the instances of every job this API creates,
// scales or updates to n (0: jobmgr.MaxInstances alone).
func (s *Server) SetMaxInstances(n uint32) { s.maxInstances = n }

// checkInstances refuses an instance count over the cluster's bound.
func (s *Server) checkInstances(field string, n uint32) error {
	if s.maxInstances > 0 && n > s.maxInstances {
		return apierr.Invalid(field, "at most %d instances on this cluster (--max-instances), got %d", s.maxInstances, n)
	}
	return nil
}

// EndStreams ends the host agents' report streams (their agents report
// again to whoever serves next): a graceful stop of the gRPC server would
// otherwise wait for them until its deadline.
// The UI's event streams (/v1/events) end too.
func (s *Server) EndStreams() {
	s.endOnce.Do(func() {
		close(s.ending)
		if s.events != nil {
			s.events.End()
		}
	})
}

// SetWatch sets what /v1/events watches: the revisions of changes to the
// stack's keys (store.Etcd.Watch). Call it before HTTPHandler; without it
// there is no /v1/events and the UI polls.
func (s *Server) SetWatch(w func(context.Context) <-chan int64) { s.watch = w }

// SetReadiness sets the check behind /readyz: nil when the stack can serve,
// a *restgw.Degraded when it serves but a person must look, else why not.
// It must answer within a second or two.
func (s *Server) SetReadiness(f func(context.Context) error) { s.ready = f }

// Ready is the check behind /readyz: nil when the stack can serve.
func (s *Server) Ready(ctx context.Context) error {
	if s.ready == nil {
		return nil
	}
	return s.ready(ctx)
}

// NewServer builds the API over the cluster stack's managers.
func NewServer(jm *jobmgr.Manager, rm *resmgr.Manager, hosts Hosts, log *slog.Logger) *Server {
	return &Server{jm: jm, rm: rm, hm: hosts.Cache, maint: hosts.Maintenance, usage: hosts.Usage,
		log: log.With("component", "api"), ending: make(chan struct{})}
}

// GRPCServer returns a grpc.Server with every service registered, request
// size limits, and latency metrics; opts come after those (a later size
// limit wins; interceptors run inside the metrics').
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	}, opts...)
	g := grpc.NewServer(opts...)
	pelotonv1.RegisterJobServiceServer(g, s)
	pelotonv1.RegisterTaskServiceServer(g, s)
	pelotonv1.RegisterPoolServiceServer(g, s)
	pelotonv1.RegisterHostServiceServer(g, s)
	pelotonv1.RegisterUpdateServiceServer(g, s)
	pelotonv1.RegisterHostAgentServiceServer(g, s)
	pelotonv1.RegisterPartitionServiceServer(g, s)
	return g
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	var resp any
	var err error
	if guard := s.createGuard; guard != nil && guardedCreates[info.FullMethod] {
		if gerr := guard(); gerr != nil {
			err = status.Error(codes.ResourceExhausted, gerr.Error())
		}
	}
	if err == nil {
		resp, err = h(ctx, req)
	}
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
// REST and gRPC share every interceptor and limit), /openapi.json, /metrics,
// /healthz and /readyz. extra, if set, serves every other path (the web UI).
func (s *Server) HTTPHandler(ctx context.Context, grpcAddr string, extra http.Handler, opts ...restgw.Option) (http.Handler, error) {
	var events http.Handler
	if s.watch != nil {
		s.events = live.New(live.Options{Watch: s.watch, Usage: s.usage.UsageReports})
		events = s.events
	}
	o := restgw.Options{
		GRPCAddr: grpcAddr,
		Register: []restgw.RegisterFunc{
			pelotonv1.RegisterJobServiceHandlerFromEndpoint,
			pelotonv1.RegisterTaskServiceHandlerFromEndpoint,
			pelotonv1.RegisterPoolServiceHandlerFromEndpoint,
			pelotonv1.RegisterHostServiceHandlerFromEndpoint,
			pelotonv1.RegisterUpdateServiceHandlerFromEndpoint,
			pelotonv1.RegisterPartitionServiceHandlerFromEndpoint,
		},
		OpenAPI:         pelotonv1.OpenAPI,
		MaxRequestBytes: MaxRequestBytes,
		Ready:           s.ready,
		Extra:           extra,
		Events:          events,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return restgw.Handler(ctx, o)
}
