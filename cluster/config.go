package cluster

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/advisor"
	"github.com/peloton-sched/peloton/history"
	"github.com/peloton-sched/peloton/hostagent"
	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/hostmgr/kubernetes"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	"github.com/peloton-sched/peloton/sla"
)

// DefaultClusterName is the name of a cluster that is given none. Data
// written before clusters had names belongs to it (see migrate.go).
const DefaultClusterName = "local"

// DefaultMemoryOversubscription is Config.MemoryOversubscription's
// default, hostmgr's.
const DefaultMemoryOversubscription = hostmgr.DefaultMemoryOversubscription

// ClustersPrefix is the etcd prefix under which every cluster has its own:
// ClustersPrefix + <name> + "/".
const ClustersPrefix = store.DefaultPrefix + "clusters/"

// clusterNameRE is a DNS label: it can name a cluster in a URL, a
// Kubernetes object or a metric label as it is.
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateClusterName says what is wrong with a cluster name, or nil.
func ValidateClusterName(name string) error {
	if !clusterNameRE.MatchString(name) {
		return fmt.Errorf("clusterName %q: must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// ClusterPrefix is the etcd prefix of every key of the named cluster's
// stack, e.g. "/peloton/clusters/local/".
func ClusterPrefix(name string) string {
	return ClustersPrefix + name + "/"
}

// Prefix is the etcd prefix of every key of this cluster's stack; it
// assumes a valid (or empty, meaning DefaultClusterName) ClusterName.
func (c Config) Prefix() string {
	if c.ClusterName == "" {
		return ClusterPrefix(DefaultClusterName)
	}
	return ClusterPrefix(c.ClusterName)
}

// Config configures one Peloton process that runs the cluster stack (and,
// for `peloton up`, the embedded etcd and the API).
type Config struct {
	// ClusterName names this cluster (default DefaultClusterName). Every
	// key of its stack lives under Prefix(), its own prefix in etcd, so
	// stacks with different names can share one etcd without seeing each
	// other; replicas of one cluster (LeaderElect) share the name.
	ClusterName string
	// DataDir holds embedded etcd's data and the local backend's task output.
	DataDir string
	// Listen is the gRPC address; HTTPListen serves REST, /metrics, /healthz.
	Listen     string
	HTTPListen string
	// Security secures both listeners: TLS, authentication, authorization,
	// the audit log, request limits (internal/serving). The zero value is
	// the development mode: plaintext, everyone may do everything.
	Security serving.Security
	// MaxInstances, if > 0, bounds every job's instances below
	// jobmgr.MaxInstances (--max-instances).
	MaxInstances uint32
	// EtcdListen, if set, is a loopback host:port where the embedded etcd
	// also answers clients over TCP, besides its unix socket
	// (<DataDir>/etcd/client.sock, which only this process's user can
	// open). Every process of the machine can reach a TCP port, tasks
	// included, and etcd asks no credentials: it is an opt-in for etcdctl.
	EtcdListen string
	// EtcdEndpoints, when set, points at an external etcd and no etcd is embedded.
	EtcdEndpoints []string
	// EtcdQuotaBytes is the embedded etcd's --quota-backend-bytes (default
	// 8 GiB), or, with EtcdEndpoints, what the external etcd's is (default
	// etcd's 2 GiB): the store's size is watched against it, new creates
	// are refused above 95 % of it, and an embedded etcd is compacted and
	// defragmented as needed (store.QuotaGuard). --etcd-quota-bytes.
	EtcdQuotaBytes int64
	// FinishedJobTTL is how long a finished job stays in the live store
	// before it is archived and removed, unless its spec says
	// (spec.ttlSecondsAfterFinished); nil: jobmgr.DefaultFinishedJobTTL
	// (24h). --finished-job-ttl.
	FinishedJobTTL *time.Duration
	// Archive is where finished jobs go (--archive): "" a file in
	// DataDir (history.db), a PostgreSQL URL, or ArchiveOff (no archive:
	// finished jobs stay until deleted). With LeaderElect, "" means off:
	// each replica would keep an archive of its own.
	Archive string
	// History, if set, is the archive to use instead of opening Archive
	// (peloton up shares one among its clusters and its federation); the
	// caller closes it.
	History history.Store
	// StoreQuotaInterval is how often the store's size is read (default
	// 10s; tests make it short).
	StoreQuotaInterval time.Duration
	// EtcdTLS names the files of the TLS of every etcd client of this
	// process (its store, its leader election) with an external etcd; empty:
	// as the endpoints' schemes say. Files replaced while it runs are read
	// again (internal/etcdtls).
	EtcdTLS tlsfiles.Client
	// LogRetention is how long the local backend keeps a run's output
	// after the run ended, whatever happens to its job; 0: as long as the
	// job is in the live store (until it is deleted, or archived and
	// removed). --log-retention.
	LogRetention time.Duration
	// TaskUser, if set, is the user (a name or a numeric uid) the local
	// backend runs every task as; it needs this process to run as root.
	// Empty: tasks run as this process's user (see hostmgr/local).
	TaskUser string
	// Backend is the hostmgr backend: "local", "sim", "kubernetes" or "mesos".
	Backend string
	// Kube configures the kubernetes backend.
	Kube KubeConfig
	// Mesos configures the mesos backend.
	Mesos MesosConfig
	// Hosts, HostCPU and HostMemoryMB size the local backend's virtual hosts;
	// zero values mean one host sized to this machine. For the sim backend
	// they size every simulated host, and zero CPU or memory means 32 CPUs
	// or 131072 MiB.
	Hosts        int
	HostCPU      float64
	HostMemoryMB int64
	HostDiskMB   int64
	// HostPartitions is the partition of each local virtual host, in host
	// order (local backend only); empty puts every host in the local
	// backend's partition, "default". Its length must be Hosts.
	HostPartitions []string
	// HostGPU is the GPU count of every simulated host (sim backend only).
	HostGPU int64
	// HostLabels are "key=value" entries spread round-robin per key over the
	// simulated hosts (sim backend only): zone=a,zone=b puts even hosts in
	// zone a and odd ones in zone b. A peloton.io/partition entry sets the
	// host's partition.
	HostLabels []string
	// ShutdownGrace bounds graceful shutdown.
	ShutdownGrace time.Duration
	// PlacementEngines is how many placement engines run at once (default 1).
	PlacementEngines int
	// SLA is the evaluator every voluntary disruption of a long-running
	// job asks first (updates, kills, drains, preemptions). Nil means a new
	// in-process one (sla.Local); the federation passes its own, in another
	// process. Each call is bounded by SLATimeout (0: jobmgr's default, 5s).
	SLA        sla.Evaluator
	SLATimeout time.Duration
	// ReclaimDelay is the hysteresis of reclaim preemption (0: resmgr's default, 1s).
	ReclaimDelay time.Duration
	// ReservationAfter is how long a gang that cannot fit waits before
	// hosts are set aside for it (0: resmgr's default, 1m; < 0: never).
	ReservationAfter time.Duration
	// SlackMargin is the fraction of each host's CPU and memory kept out of
	// the slack revocable work runs on (0: hostmgr's default, 0.1; < 0:
	// none); UsageStaleAfter how old a host agent's report may be and
	// still give slack (0: hostmgr's default, 15s).
	SlackMargin     float64
	UsageStaleAfter time.Duration
	// MemoryOversubscription caps what a host commits of its memory
	// (allocations plus revocable work) at this many times it (0:
	// DefaultMemoryOversubscription; 1: no memory oversubscription).
	MemoryOversubscription float64
	// NoHostAgents leaves the local backend's virtual hosts without the
	// host agent each otherwise gets in-process (agents.go); then only
	// `peloton serve hostagent` processes report their usage.
	NoHostAgents bool
	// SimHostAgents gives the sim backend's hosts a simulated agent each,
	// in-process, reporting its runs' use by the sim backend's usage curves
	// (off by default: the sim backend's benchmarks measure the scheduler).
	SimHostAgents bool
	// HostAgentInterval is those agents' report interval (0: the agent's
	// default, 5s).
	HostAgentInterval time.Duration
	// HostAgentQoS is their QoS controller's policy (nil: off): when a
	// virtual host's runs use more than its declared capacity allows,
	// revocable runs are killed (hostagent/qos.go).
	HostAgentQoS *hostagent.QoSPolicy
	// PartitionProfiles are the labels and agent settings hosts take when
	// a move settles them in a partition (hostmgr/profile.go), by
	// partition; they must be valid (hostmgr.ValidateProfiles).
	PartitionProfiles PartitionProfiles
	// AdvisorMode runs the host advisor in this process, against this
	// stack's API: "act" moves hosts between the batch and stateless
	// partitions, "observe" only says what it would do; "" or "off": no
	// advisor (one may run as `peloton serve advisor`).
	AdvisorMode string
	// Advisor is its policy and AdvisorInterval its pace (0: 10s).
	Advisor         advisor.Config
	AdvisorInterval time.Duration
	// DefaultReservesHosts makes /default, when this start creates it (a
	// fresh cluster), reserve what the hosts have, so non-preemptible work
	// runs out of the box (`peloton up`). Written once; see
	// resmgr.ReserveHostsForDefault.
	DefaultReservesHosts bool
	Logger               *slog.Logger
	// UI, if set, serves the web UI on the HTTP listener's other paths.
	UI http.Handler
	// OnReady, if set, is called once every listener serves. With
	// LeaderElect, that is each time this process starts to lead.
	OnReady func(ReadyInfo)

	// LeaderElect lets several processes share one cluster: each campaigns
	// in etcd (key Prefix()+LeaderKey) and only the leader runs the
	// stack; the others forward their listeners to it. Needs EtcdEndpoints.
	LeaderElect bool
	// LeaderLease is the TTL of the leader's etcd lease, rounded up to
	// whole seconds (default 15s): how long a leader that died without
	// resigning holds the cluster up, and the longest a partitioned leader
	// can take to notice.
	LeaderLease time.Duration
	// AdvertiseHost is the address (IP or DNS name) other replicas reach
	// this process at, on the ports of Listen and HTTPListen. Empty means
	// the host of Listen, which then must not be a wildcard (0.0.0.0, ::).
	AdvertiseHost string
	// OnLeading, if set, is called with true when this process has won the
	// election, before its stack starts, and with false once that stack has
	// stopped (LeaderElect only).
	OnLeading func(leading bool)
}

// ReadyInfo says where a started process listens.
type ReadyInfo struct {
	// ClusterName is the name of the cluster it serves.
	ClusterName string
	GRPCAddr    string
	HTTPAddr    string
	// AdminAddr is the admin listener's address (--admin-listen), if any.
	AdminAddr string
	// TLS says whether the gRPC and HTTP listeners serve TLS.
	TLS bool
	// EtcdEndpoints are the URLs this process's etcd clients use: the
	// embedded etcd's socket (unix:///<data dir>/etcd/client.sock), or the
	// external etcd's endpoints.
	EtcdEndpoints []string
	// InProcessEtcd, with the embedded etcd, returns a new client that
	// calls it directly, as the stack's store does (nil with an external
	// etcd). The caller closes the client.
	InProcessEtcd func() *clientv3.Client
}

// KubeConfig configures the kubernetes backend (see hostmgr/kubernetes).
type KubeConfig struct {
	// Kubeconfig is the kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// Namespace is where pods go by default (default "peloton").
	Namespace string
	// PoolNamespaces maps pool paths to namespaces (a pool uses its nearest
	// ancestor's entry).
	PoolNamespaces map[string]string
	// NodeSelector limits Peloton to the nodes matching a label selector.
	NodeSelector string
	// Image runs tasks that name none.
	Image string
	// QPS and Burst bound the client's request rate (0: the backend's
	// defaults).
	QPS   float32
	Burst int
	// BindMode is KubeBindBinding (create, then the Binding subresource;
	// the default when empty) or KubeBindNodeName (create with
	// spec.nodeName set); see kubernetes.Config.BindMode.
	BindMode string
	// Secondary turns on the secondary-scheduler mode: pods that other
	// clients create with schedulerName peloton and the annotation
	// peloton.io/pool are admitted, placed and bound by Peloton, as jobs of
	// their owners. SecondaryNamespaces limits it (empty: all namespaces).
	Secondary           bool
	SecondaryNamespaces []string
}

// Values of KubeConfig.BindMode, as the --kube-bind-mode flag spells them.
const (
	KubeBindBinding  = string(kubernetes.BindModeBinding)
	KubeBindNodeName = string(kubernetes.BindModeNodeName)
)

// PartitionProfiles are partition profiles by partition (hostmgr/profile.go).
type PartitionProfiles = map[string]hostmgr.Profile

// ParsePartitionProfiles reads and checks a partition profiles file
// (hostmgr.ParseProfiles); errors name the field.
func ParsePartitionProfiles(b []byte) (PartitionProfiles, error) { return hostmgr.ParseProfiles(b) }
