package cluster

import (
	"log/slog"
	"net/http"
	"time"
)

// Config configures one Peloton process that runs the cluster stack (and,
// for `peloton up`, the embedded etcd and the API).
type Config struct {
	// DataDir holds embedded etcd's data and the local backend's task output.
	DataDir string
	// Listen is the gRPC address; HTTPListen serves REST, /metrics, /healthz.
	Listen     string
	HTTPListen string
	// EtcdListen is the client URL address of the embedded etcd (host:port).
	EtcdListen string
	// EtcdEndpoints, when set, points at an external etcd and no etcd is embedded.
	EtcdEndpoints []string
	// Backend is the hostmgr backend: "local".
	Backend string
	// Hosts, HostCPU and HostMemoryMB size the local backend's virtual hosts;
	// zero values mean one host sized to this machine.
	Hosts        int
	HostCPU      float64
	HostMemoryMB int64
	HostDiskMB   int64
	// ShutdownGrace bounds graceful shutdown.
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// UI, if set, serves the web UI on the HTTP listener's other paths.
	UI http.Handler
	// OnReady, if set, is called once every listener serves.
	OnReady func(ReadyInfo)
}

// ReadyInfo says where a started process listens.
type ReadyInfo struct {
	GRPCAddr string
	HTTPAddr string
	// EtcdEndpoints are the embedded etcd's client URLs, or the external ones.
	EtcdEndpoints []string
}
