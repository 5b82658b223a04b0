package federation

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/internal/apierr"
	"github.com/peloton-sched/peloton/internal/live"
	"github.com/peloton-sched/peloton/internal/metrics"
	"github.com/peloton-sched/peloton/internal/restgw"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// MaxRequestBytes bounds every request to the federation, as the cluster
// API bounds its own.
const MaxRequestBytes = 16 << 20

// Server is the federation's gRPC API over a Federation.
type Server struct {
	pelotonv1.UnimplementedClusterServiceServer
	pelotonv1.UnimplementedFederatedPoolServiceServer
	pelotonv1.UnimplementedFederatedJobServiceServer
	pelotonv1.UnimplementedFederatedServiceServiceServer
	pelotonv1.UnimplementedGlobalSlaServiceServer

	f   *Federation
	log *slog.Logger
	// ready, if set, is the check behind /readyz.
	ready func(context.Context) error
	// watch, if set, reports changes of the federation's etcd keys, which
	// HTTPHandler serves at /v1/events through events.
	watch  func(context.Context) <-chan int64
	events *live.Server
}

// SetWatch sets what /v1/events watches (store.Etcd.Watch on the
// federation's keys). Call it before HTTPHandler; without it there is no
// /v1/events and the UI polls.
func (s *Server) SetWatch(w func(context.Context) <-chan int64) { s.watch = w }

// EndStreams ends the UI's event streams (/v1/events), so that a graceful
// stop of the HTTP server does not wait for them.
func (s *Server) EndStreams() {
	if s.events != nil {
		s.events.End()
	}
}

// NewServer serves f.
func NewServer(f *Federation, log *slog.Logger) *Server {
	return &Server{f: f, log: log.With("component", "federation-api")}
}

// Ready is the check behind /readyz: nil when the federation can serve.
func (s *Server) Ready(ctx context.Context) error {
	if s.ready == nil {
		return nil
	}
	return s.ready(ctx)
}

// SetReadiness sets the check behind /readyz: nil when the federation can
// serve, a *restgw.Degraded when it serves but a person must look, else why
// not.
func (s *Server) SetReadiness(ready func(context.Context) error) { s.ready = ready }

// GRPCServer returns a grpc.Server with the federation's services.
// opts come after the federation's own (a later size limit wins;
// interceptors run inside the metrics').
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRequestBytes), grpc.ChainUnaryInterceptor(s.unary)}, opts...)
	g := grpc.NewServer(opts...)
	pelotonv1.RegisterClusterServiceServer(g, s)
	pelotonv1.RegisterFederatedPoolServiceServer(g, s)
	pelotonv1.RegisterFederatedJobServiceServer(g, s)
	pelotonv1.RegisterFederatedServiceServiceServer(g, s)
	pelotonv1.RegisterGlobalSlaServiceServer(g, s)
	return g
}

// HTTPHandler serves the federation's REST API, /openapi.json, /metrics,
// /healthz and /readyz. extra, if set, serves every other path (the web UI).
func (s *Server) HTTPHandler(ctx context.Context, grpcAddr string, extra http.Handler, opts ...restgw.Option) (http.Handler, error) {
	var events http.Handler
	if s.watch != nil {
		s.events = live.New(live.Options{Watch: s.watch})
		events = s.events
	}
	o := restgw.Options{
		GRPCAddr: grpcAddr,
		Register: []restgw.RegisterFunc{
			pelotonv1.RegisterClusterServiceHandlerFromEndpoint,
			pelotonv1.RegisterFederatedPoolServiceHandlerFromEndpoint,
			pelotonv1.RegisterFederatedJobServiceHandlerFromEndpoint,
			pelotonv1.RegisterFederatedServiceServiceHandlerFromEndpoint,
		},
		OpenAPI:         pelotonv1.FederationOpenAPI,
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

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				err = status.FromContextError(err).Err()
			} else {
				s.log.Error("internal error", "method", info.FullMethod, "err", err)
				err = status.Error(codes.Internal, "internal error; see the federation's log")
			}
		}
	}
	name := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	metrics.APILatency.WithLabelValues(name, status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

// RegisterCluster implements ClusterService.
func (s *Server) RegisterCluster(ctx context.Context, req *pelotonv1.RegisterClusterRequest) (*pelotonv1.RegisterClusterResponse, error) {
	c, err := s.f.Register(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.RegisterClusterResponse{Cluster: c}, nil
}

// DeregisterCluster implements ClusterService.
func (s *Server) DeregisterCluster(ctx context.Context, req *pelotonv1.DeregisterClusterRequest) (*pelotonv1.DeregisterClusterResponse, error) {
	if err := s.f.Deregister(ctx, req.Name); err != nil {
		return nil, err
	}
	return &pelotonv1.DeregisterClusterResponse{}, nil
}

// GetCluster implements ClusterService.
func (s *Server) GetCluster(ctx context.Context, req *pelotonv1.GetClusterRequest) (*pelotonv1.GetClusterResponse, error) {
	c, err := s.f.Get(req.Name)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetClusterResponse{Cluster: c}, nil
}

// ListClusters implements ClusterService.
func (s *Server) ListClusters(ctx context.Context, req *pelotonv1.ListClustersRequest) (*pelotonv1.ListClustersResponse, error) {
	return &pelotonv1.ListClustersResponse{Clusters: s.f.List()}, nil
}

// CordonCluster implements ClusterService.
func (s *Server) CordonCluster(ctx context.Context, req *pelotonv1.CordonClusterRequest) (*pelotonv1.CordonClusterResponse, error) {
	c, err := s.f.Cordon(ctx, req.Name, true)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CordonClusterResponse{Cluster: c}, nil
}

// UncordonCluster implements ClusterService.
func (s *Server) UncordonCluster(ctx context.Context, req *pelotonv1.UncordonClusterRequest) (*pelotonv1.UncordonClusterResponse, error) {
	c, err := s.f.Cordon(ctx, req.Name, false)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.UncordonClusterResponse{Cluster: c}, nil
}

// CreateFederatedPool implements FederatedPoolService.
func (s *Server) CreateFederatedPool(ctx context.Context, req *pelotonv1.CreateFederatedPoolRequest) (*pelotonv1.CreateFederatedPoolResponse, error) {
	p, err := s.f.Pools().CreatePool(ctx, req.Path, req.Spec, req.RequestId)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CreateFederatedPoolResponse{Pool: p}, nil
}

// GetFederatedPool implements FederatedPoolService.
func (s *Server) GetFederatedPool(ctx context.Context, req *pelotonv1.GetFederatedPoolRequest) (*pelotonv1.GetFederatedPoolResponse, error) {
	p, err := s.f.Pools().GetPool(req.Path)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetFederatedPoolResponse{Pool: p}, nil
}

// UpdateFederatedPool implements FederatedPoolService.
func (s *Server) UpdateFederatedPool(ctx context.Context, req *pelotonv1.UpdateFederatedPoolRequest) (*pelotonv1.UpdateFederatedPoolResponse, error) {
	p, err := s.f.Pools().UpdatePool(ctx, req.Path, req.Spec, req.Version)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.UpdateFederatedPoolResponse{Pool: p}, nil
}

// DeleteFederatedPool implements FederatedPoolService.
func (s *Server) DeleteFederatedPool(ctx context.Context, req *pelotonv1.DeleteFederatedPoolRequest) (*pelotonv1.DeleteFederatedPoolResponse, error) {
	if err := s.f.Pools().DeletePool(ctx, req.Path); err != nil {
		return nil, err
	}
	return &pelotonv1.DeleteFederatedPoolResponse{}, nil
}

// ListFederatedPools implements FederatedPoolService.
func (s *Server) ListFederatedPools(ctx context.Context, req *pelotonv1.ListFederatedPoolsRequest) (*pelotonv1.ListFederatedPoolsResponse, error) {
	return &pelotonv1.ListFederatedPoolsResponse{Pools: s.f.Pools().ListPools()}, nil
}

// CreateFederatedJob implements FederatedJobService.
func (s *Server) CreateFederatedJob(ctx context.Context, req *pelotonv1.CreateFederatedJobRequest) (*pelotonv1.CreateFederatedJobResponse, error) {
	id, err := s.f.Jobs().CreateJob(ctx, req.Spec, req.RequestId)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.CreateFederatedJobResponse{JobId: id}, nil
}

// GetFederatedJob implements FederatedJobService.
func (s *Server) GetFederatedJob(ctx context.Context, req *pelotonv1.GetFederatedJobRequest) (*pelotonv1.GetFederatedJobResponse, error) {
	j, err := s.f.GetJobOrArchived(ctx, req.JobId)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetFederatedJobResponse{Job: j}, nil
}

// ListFederatedJobs implements FederatedJobService.
func (s *Server) ListFederatedJobs(ctx context.Context, req *pelotonv1.ListFederatedJobsRequest) (*pelotonv1.ListFederatedJobsResponse, error) {
	list := func(ctx context.Context, cluster string, size uint32, token string) ([]*pelotonv1.FederatedJob, string, error) {
		return s.f.Jobs().ListJobs(cluster, size, token)
	}
	if req.Archived {
		list = s.f.ListArchivedJobs
	}
	jobs, next, err := list(ctx, req.Cluster, req.PageSize, req.PageToken)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.ListFederatedJobsResponse{Jobs: jobs, NextPageToken: next}, nil
}

// KillFederatedJob implements FederatedJobService.
func (s *Server) KillFederatedJob(ctx context.Context, req *pelotonv1.KillFederatedJobRequest) (*pelotonv1.KillFederatedJobResponse, error) {
	if err := s.f.Jobs().KillJob(ctx, req.JobId); err != nil {
		return nil, err
	}
	return &pelotonv1.KillFederatedJobResponse{}, nil
}

// CreateFederatedService implements FederatedServiceService.
func (s *Server) CreateFederatedService(ctx context.Context, req *pelotonv1.CreateFederatedServiceRequest) (*pelotonv1.CreateFederatedServiceResponse, error) {
	svc, err := s.f.Services().CreateService(ctx, req.Spec, req.RequestId)
	if err != nil {
		return nil, err
	}
	split := map[string]uint32{}
	for _, p := range svc.Clusters {
		split[p.Cluster] = p.Desired
	}
	return &pelotonv1.CreateFederatedServiceResponse{ServiceId: svc.Id, Split: split}, nil
}

// GetFederatedService implements FederatedServiceService.
func (s *Server) GetFederatedService(ctx context.Context, req *pelotonv1.GetFederatedServiceRequest) (*pelotonv1.GetFederatedServiceResponse, error) {
	svc, err := s.f.GetServiceOrArchived(ctx, req.ServiceId)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.GetFederatedServiceResponse{Service: svc}, nil
}

// ListFederatedServices implements FederatedServiceService.
func (s *Server) ListFederatedServices(ctx context.Context, req *pelotonv1.ListFederatedServicesRequest) (*pelotonv1.ListFederatedServicesResponse, error) {
	list := func(ctx context.Context, cluster string, size uint32, token string) ([]*pelotonv1.FederatedService, string, error) {
		return s.f.Services().ListServices(cluster, size, token)
	}
	if req.Archived {
		list = s.f.ListArchivedServices
	}
	svcs, next, err := list(ctx, req.Cluster, req.PageSize, req.PageToken)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.ListFederatedServicesResponse{Services: svcs, NextPageToken: next}, nil
}

// DeleteFederatedService implements FederatedServiceService.
func (s *Server) DeleteFederatedService(ctx context.Context, req *pelotonv1.DeleteFederatedServiceRequest) (*pelotonv1.DeleteFederatedServiceResponse, error) {
	if err := s.f.Services().DeleteService(ctx, req.ServiceId); err != nil {
		return nil, err
	}
	return &pelotonv1.DeleteFederatedServiceResponse{}, nil
}

// UpdateFederatedService implements FederatedServiceService.
func (s *Server) UpdateFederatedService(ctx context.Context, req *pelotonv1.UpdateFederatedServiceRequest) (*pelotonv1.UpdateFederatedServiceResponse, error) {
	svc, err := s.f.Services().UpdateService(ctx, req.ServiceId, req.Job, req.Placement, req.Rollout, req.SpecVersion)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.UpdateFederatedServiceResponse{Service: svc}, nil
}

func (s *Server) control(ctx context.Context, id string, c RolloutControl) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	svc, err := s.f.Services().ControlRollout(ctx, id, c)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.FederatedServiceRolloutResponse{Service: svc}, nil
}

// PauseFederatedService implements FederatedServiceService.
func (s *Server) PauseFederatedService(ctx context.Context, req *pelotonv1.PauseFederatedServiceRequest) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	return s.control(ctx, req.ServiceId, RolloutPause)
}

// ResumeFederatedService implements FederatedServiceService.
func (s *Server) ResumeFederatedService(ctx context.Context, req *pelotonv1.ResumeFederatedServiceRequest) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	return s.control(ctx, req.ServiceId, RolloutResume)
}

// AbortFederatedService implements FederatedServiceService.
func (s *Server) AbortFederatedService(ctx context.Context, req *pelotonv1.AbortFederatedServiceRequest) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	return s.control(ctx, req.ServiceId, RolloutAbort)
}

// RollbackFederatedService implements FederatedServiceService.
func (s *Server) RollbackFederatedService(ctx context.Context, req *pelotonv1.RollbackFederatedServiceRequest) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	return s.control(ctx, req.ServiceId, RolloutRollback)
}

// ApproveFederatedService implements FederatedServiceService.
func (s *Server) ApproveFederatedService(ctx context.Context, req *pelotonv1.ApproveFederatedServiceRequest) (*pelotonv1.FederatedServiceRolloutResponse, error) {
	return s.control(ctx, req.ServiceId, RolloutApprove)
}

// RebalanceFederatedService implements FederatedServiceService.
func (s *Server) RebalanceFederatedService(ctx context.Context, req *pelotonv1.RebalanceFederatedServiceRequest) (*pelotonv1.RebalanceFederatedServiceResponse, error) {
	svc, err := s.f.Services().Rebalance(ctx, req.ServiceId)
	if err != nil {
		return nil, err
	}
	return &pelotonv1.RebalanceFederatedServiceResponse{Service: svc}, nil
}

// RequestDisruption implements GlobalSlaService.
func (s *Server) RequestDisruption(ctx context.Context, req *pelotonv1.RequestDisruptionRequest) (*pelotonv1.RequestDisruptionResponse, error) {
	return s.f.SLA().RequestDisruption(ctx, req)
}

// ReleaseDisruption implements GlobalSlaService.
func (s *Server) ReleaseDisruption(ctx context.Context, req *pelotonv1.ReleaseDisruptionRequest) (*pelotonv1.ReleaseDisruptionResponse, error) {
	if err := s.f.SLA().ReleaseDisruption(ctx, req.GrantId); err != nil {
		return nil, err
	}
	return &pelotonv1.ReleaseDisruptionResponse{}, nil
}

// RenewDisruption implements GlobalSlaService.
func (s *Server) RenewDisruption(ctx context.Context, req *pelotonv1.RenewDisruptionRequest) (*pelotonv1.RenewDisruptionResponse, error) {
	if err := s.f.SLA().RenewDisruption(ctx, req.GrantId, time.Duration(req.TtlSeconds)*time.Second); err != nil {
		return nil, err
	}
	return &pelotonv1.RenewDisruptionResponse{}, nil
}

// ReportUnavailable implements GlobalSlaService.
func (s *Server) ReportUnavailable(ctx context.Context, req *pelotonv1.ReportUnavailableRequest) (*pelotonv1.ReportUnavailableResponse, error) {
	if req.Cluster == "" || req.JobId == "" {
		return nil, apierr.Invalid("cluster", "cluster and jobId are required")
	}
	s.f.SLA().ReportUnavailable(req.Cluster, req.JobId, req.Instances, req.Held)
	return &pelotonv1.ReportUnavailableResponse{}, nil
}
