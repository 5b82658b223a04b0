package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/peloton-sched/peloton/cluster"
	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
	"github.com/peloton-sched/peloton/internal/election"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"github.com/peloton-sched/peloton/sla"
	"github.com/peloton-sched/peloton/sla/fed"
	"github.com/peloton-sched/peloton/ui"
)

// serverFlags are the flags of the commands that run the cluster stack.
type serverFlags struct {
	clusterName   string
	dataDir       string
	listen        string
	httpListen    string
	etcdListen    string
	etcdEndpoints []string
	etcdQuota     int64
	backend       string
	hosts         int
	partitions    string
	// fs is the flag set registered on, to tell a flag given from its default.
	fs            *pflag.FlagSet
	hostCPU       float64
	hostMemoryMB  int64
	hostDiskMB    int64
	hostGPU       int64
	hostLabels    []string
	logLevel      string
	shutdownGrace time.Duration
	cpuProfile    string
	reclaimDelay  time.Duration
	reserveAfter  time.Duration
	// Host agents and slack (hostagent/, hostmgr/slack.go).
	hostAgents      bool
	simAgents       bool
	agentInterval   time.Duration
	slackMargin     float64
	memOversub      float64
	profilesFile    string
	usageStaleAfter time.Duration
	qos             qosFlags
	advisor         advisorFlags
	engines         int
	kube            kubeFlags
	mesos           mesosFlags
	iso             isolationFlags
	etcdTLS         etcdTLSFlags
	// Federation: serve cluster registers with --federation; up runs one
	// (fed) over --clusters.
	federation    string
	federationUI  string
	clusterLabels []string
	clusters      string
	fed           fedFlags
	// sec secures the listeners and the connections to other daemons.
	sec          securityFlags
	maxInstances int
	// Lifetime of finished jobs: how long they stay live, where they go.
	finishedJobTTL time.Duration
	archive        string
	// logRetention is how long the local backend keeps a run's output.
	logRetention time.Duration
	// Leader election (serve cluster only).
	leaderElect   bool
	leaderLease   time.Duration
	advertiseHost string
}

// kubeFlags configure the kubernetes backend.
type kubeFlags struct {
	kubeconfig     string
	namespace      string
	poolNamespaces []string
	nodeSelector   string
	image          string
	qps            float32
	burst          int
	secondary      bool
	secondaryNS    []string
	bindMode       string
}

// register adds the flags; embedded (peloton up) adds --etcd-listen for the
// etcd it runs itself.
func (f *serverFlags) register(fs *pflag.FlagSet, embedded bool) {
	fs.StringVar(&f.clusterName, "cluster-name", cluster.DefaultClusterName, "name of this cluster (a DNS label); every key it keeps in etcd, and its leader election, lives under its own prefix, so clusters of different names can share one etcd")
	fs.StringVar(&f.dataDir, "data-dir", "./peloton-data", "directory for etcd data and task output")
	fs.DurationVar(&f.logRetention, "log-retention", 0, "how long a run's output (its sandbox under <data-dir>/tasks) is kept after the run ended, whatever happens to its job, e.g. 168h (local backend); 0: as long as its job is in the live store (until deleted, or archived after its time to live)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:5391", "gRPC listen address")
	fs.StringVar(&f.httpListen, "http-listen", "127.0.0.1:5291", "HTTP listen address (REST, /metrics, /healthz)")
	fs.StringSliceVar(&f.clusterLabels, "cluster-labels", nil, "labels of this cluster in the federation, comma-separated key=value (e.g. region=west,zone=b); backend=<--backend> is added unless given")
	if embedded {
		fs.StringVar(&f.etcdListen, "etcd-listen", "", "also let clients reach the embedded etcd over TCP at this loopback host:port, e.g. 127.0.0.1:5379 for etcdctl: every process of this machine, tasks included, can then read and change Peloton's state (default: only its unix socket, <data-dir>/etcd/client.sock, which only peloton's user can open)")
		fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "use this external etcd (comma-separated URLs) instead of embedding one")
		fs.StringVar(&f.clusters, "clusters", "", "run several clusters in this process, each with its own name, etcd prefix, ports (--listen and --http-listen moved by 10 per cluster) and hosts: a count (3: c1,c2,c3) or names (a,b,c); default one cluster named by --cluster-name")
		f.fed.register(fs, "federation-")
	} else {
		fs.StringVar(&f.federation, "federation", "", "gRPC address of the federation to register this cluster with (and keep registered); empty: none")
		fs.StringVar(&f.federationUI, "federation-ui", "", "the federation's web UI (http:// or https:// URL), which this cluster's Clusters page links to; empty: no link")
		fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "external etcd to use (comma-separated URLs; required)")
		fs.BoolVar(&f.leaderElect, "leader-elect", false, "campaign for leadership in etcd and run the stack only while leading, so several replicas can run; followers forward their listeners to the leader")
		fs.DurationVar(&f.leaderLease, "leader-lease", cluster.DefaultLeaderLease, "TTL of the leader's etcd lease (whole seconds, at least 1s): how long a leader that died holds the cluster up (with --leader-elect)")
		fs.StringVar(&f.advertiseHost, "advertise-host", "", "address the other replicas reach this one at, on the --listen and --http-listen ports (with --leader-elect; default: the host of --listen, which must then not be a wildcard)")
	}
	if embedded {
		fs.Int64Var(&f.etcdQuota, "etcd-quota-bytes", 0, "size quota of the embedded etcd's database (etcd's --quota-backend-bytes; 0: 8 GiB), or, with --etcd-endpoints, the external etcd's: above 95 % of it new creates are refused (cancels, kills and deletes still work), and the embedded etcd is compacted and defragmented as needed")
	} else {
		fs.Int64Var(&f.etcdQuota, "etcd-quota-bytes", 0, "the external etcd's --quota-backend-bytes (0: etcd's default, 2 GiB): the store's size is watched against it and new creates are refused above 95 % of it (cancels, kills and deletes still work)")
	}
	fs.StringVar(&f.backend, "backend", "local", `host backend: "local" runs tasks as processes on this machine, "sim" simulates hosts whose tasks only take time, "kubernetes" runs them as pods on the nodes of a Kubernetes cluster, "mesos" runs them as the tasks of a Mesos framework (--mesos-master)`)
	fs.StringVar(&f.kube.kubeconfig, "kubeconfig", "", "kubeconfig file of the Kubernetes cluster (kubernetes backend; empty: in-cluster)")
	fs.StringVar(&f.kube.namespace, "kube-namespace", "peloton", "namespace of the pods of pools without an entry in --kube-pool-namespaces (kubernetes backend)")
	fs.StringSliceVar(&f.kube.poolNamespaces, "kube-pool-namespaces", nil, "pool=namespace entries, comma-separated; a pool uses its nearest ancestor's entry (kubernetes backend)")
	fs.StringVar(&f.kube.nodeSelector, "kube-node-selector", "", "label selector of the nodes Peloton may use (kubernetes backend; empty: all)")
	fs.StringVar(&f.kube.image, "kube-image", "busybox:stable", "container image of tasks that name none (kubernetes backend)")
	fs.Float32Var(&f.kube.qps, "kube-qps", 200, "requests per second to the Kubernetes apiserver (kubernetes backend)")
	fs.IntVar(&f.kube.burst, "kube-burst", 400, "burst of requests to the Kubernetes apiserver (kubernetes backend)")
	fs.StringVar(&f.kube.bindMode, "kube-bind-mode", cluster.KubeBindBinding, `how a pod gets to its node (kubernetes backend): "binding" creates it, then binds it through the Binding subresource (two writes per pod); "node-name" creates it with spec.nodeName set (one write per pod, no Binding; some admission policies refuse it)`)
	fs.BoolVar(&f.kube.secondary, "kube-secondary", true, "also schedule pods that other clients create with schedulerName peloton and the annotation peloton.io/pool (kubernetes backend)")
	fs.StringSliceVar(&f.kube.secondaryNS, "kube-secondary-namespaces", nil, "namespaces whose pods --kube-secondary covers, comma-separated (kubernetes backend; empty: all)")
	f.mesos.register(fs)
	f.iso.register(fs)
	f.etcdTLS.register(fs)
	fs.IntVar(&f.hosts, "hosts", 1, "number of virtual (local) or simulated (sim) hosts")
	fs.StringVar(&f.partitions, "partitions", "", "partitions of the local virtual hosts, NAME=COUNT comma-separated, in host order, e.g. batch=2,stateless=2; the counts add up to --hosts, or give the host count without it (default: from 2 hosts, the first half, rounded up, in the advisor's batch partition and the rest in its stateless one; 1 host: partition default)")
	f.fs = fs
	fs.Float64Var(&f.hostCPU, "host-cpu", 0, "CPUs of each host (0: local sizes to this machine, sim uses 32)")
	fs.Int64Var(&f.hostMemoryMB, "host-memory-mb", 0, "memory of each host in MiB (0: local sizes to this machine, sim uses 131072)")
	fs.Int64Var(&f.hostDiskMB, "host-disk-mb", 0, "disk of each host in MiB (0: local sizes to this machine, sim has none)")
	fs.Int64Var(&f.hostGPU, "host-gpu", 0, "GPUs of each simulated host (sim backend only)")
	fs.StringSliceVar(&f.hostLabels, "host-labels", nil, "labels of the simulated hosts, comma-separated key=value, spread round-robin per key, e.g. zone=a,zone=b,zone=c (sim backend only)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 10*time.Second, "how long a graceful shutdown may take")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process to this file from start to a graceful stop, for go tool pprof (profiling a cluster under load)")
	fs.IntVar(&f.engines, "placement-engines", 1, "placement engines running at once (active-active; leases keep them apart)")
	fs.DurationVar(&f.reclaimDelay, "reclaim-delay", time.Second, "how long a pool must wait for its entitled share before pools over their entitlement are preempted for it")
	fs.DurationVar(&f.reserveAfter, "reservation-after", time.Minute, "how long a gang (or any job's instances) that cannot fit waits before hosts are set aside for it as they free up, so smaller work cannot pass it for ever; 0: never")
	fs.BoolVar(&f.hostAgents, "host-agents", true, "run a host agent in this process for each local virtual host, reporting its runs' usage (local backend; other hosts run \"peloton serve hostagent\")")
	fs.BoolVar(&f.simAgents, "sim-host-agents", false, "give each simulated host an agent reporting its runs' simulated use (sim backend)")
	fs.DurationVar(&f.agentInterval, "host-agent-interval", 5*time.Second, "how often the in-process host agents report")
	fs.Float64Var(&f.slackMargin, "slack-margin", 0.1, "fraction of each host's CPU and memory kept out of the slack that revocable work runs on (0 to 0.9)")
	fs.Float64Var(&f.memOversub, "memory-oversubscription", cluster.DefaultMemoryOversubscription, "most a host commits of its memory to regular and revocable work together, as a multiple of it (1: revocable work only gets memory nobody holds; at most 4)")
	fs.DurationVar(&f.usageStaleAfter, "usage-stale-after", 15*time.Second, "how old a host's last usage report may be and still give slack; past it the host has none")
	fs.StringVar(&f.profilesFile, "partition-profiles", "", "YAML file of partition profiles: the labels and agent settings (QoS thresholds, oversubscription cap) hosts take when a move settles them in a partition (docs/operations.md)")
	f.qos.Register(fs)
	f.advisor.register(fs, true)
	f.sec.register(fs)
	fs.DurationVar(&f.finishedJobTTL, "finished-job-ttl", jobmgr.DefaultFinishedJobTTL, "how long a finished job (and its tasks) stays in the live store before it is archived and removed from it, unless its spec sets ttlSecondsAfterFinished; 0: as soon as it has finished. Archived jobs are still read by job get, task list/get and job list --archived")
	if embedded {
		fs.StringVar(&f.archive, "archive", "", `where finished jobs are archived: empty for a file in --data-dir (history.db), a PostgreSQL URL (postgres://user:password@host:port/database) to share one archive among clusters, or "off" to keep finished jobs in the live store until job delete`)
	} else {
		fs.StringVar(&f.archive, "archive", "", `where finished jobs are archived: empty for a file in --data-dir (history.db; with --leader-elect, "off"), a PostgreSQL URL (postgres://user:password@host:port/database), or "off" to keep finished jobs in the live store until job delete`)
	}
	fs.IntVar(&f.maxInstances, "max-instances", jobmgr.MaxInstances, fmt.Sprintf("most instances one job may have on this cluster (at most %d)", jobmgr.MaxInstances))
}

// config validates the flags and builds the cluster configuration; every
// error is a usage error that names its flag, and comes before anything
// starts.
func (f *serverFlags) config(embedded bool) (cluster.Config, error) {
	endpoints := trimmedList(f.etcdEndpoints)
	if err := f.checkStackFlags(embedded, endpoints); err != nil {
		return cluster.Config{}, err
	}
	if u, err := url.Parse(f.federationUI); f.federationUI != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return cluster.Config{}, usageErrorf("invalid --federation-ui %q: want an http:// or https:// URL", f.federationUI)
	}
	kube, err := f.kube.config()
	if err != nil {
		return cluster.Config{}, err
	}
	mesosCfg, err := f.mesos.config(f.backend)
	if err != nil {
		return cluster.Config{}, err
	}
	if err := f.checkHostFlags(); err != nil {
		return cluster.Config{}, err
	}
	if err := f.checkLeaderFlags(); err != nil {
		return cluster.Config{}, err
	}
	qos, err := f.qos.Policy()
	if err != nil {
		return cluster.Config{}, err
	}
	profiles, err := readProfiles(f.profilesFile)
	if err != nil {
		return cluster.Config{}, err
	}
	advMode, advCfg, err := f.advisor.config(true)
	if err != nil {
		return cluster.Config{}, err
	}
	labels, err := hostLabelList(f.hostLabels)
	if err != nil {
		return cluster.Config{}, err
	}
	parts, hosts, err := hostPartitions(f.partitions, f.hosts, f.fs != nil && f.fs.Changed("hosts"), f.backend,
		cmp.Or(strings.TrimSpace(f.advisor.batch), "batch"), cmp.Or(strings.TrimSpace(f.advisor.stateless), "stateless"))
	if err != nil {
		return cluster.Config{}, err
	}
	cfg := cluster.Config{
		ClusterName:            f.clusterName,
		DataDir:                f.dataDir,
		FinishedJobTTL:         &f.finishedJobTTL,
		Archive:                f.archive,
		Listen:                 f.listen,
		HTTPListen:             f.httpListen,
		EtcdEndpoints:          endpoints,
		Backend:                f.backend,
		Hosts:                  hosts,
		HostPartitions:         parts,
		HostCPU:                f.hostCPU,
		HostMemoryMB:           f.hostMemoryMB,
		HostDiskMB:             f.hostDiskMB,
		HostGPU:                f.hostGPU,
		HostLabels:             labels,
		ShutdownGrace:          f.shutdownGrace,
		ReclaimDelay:           f.reclaimDelay,
		ReservationAfter:       reservationAfter(f.reserveAfter),
		NoHostAgents:           !f.hostAgents,
		SimHostAgents:          f.simAgents,
		HostAgentInterval:      f.agentInterval,
		SlackMargin:            slackMarginOf(f.slackMargin),
		MemoryOversubscription: f.memOversub,
		UsageStaleAfter:        f.usageStaleAfter,
		HostAgentQoS:           qos,
		PartitionProfiles:      profiles,
		AdvisorMode:            advMode,
		Advisor:                advCfg,
		AdvisorInterval:        f.advisor.interval,
		PlacementEngines:       f.engines,
		Kube:                   kube,
		Mesos:                  mesosCfg,
		MaxInstances:           uint32(f.maxInstances),
		EtcdQuotaBytes:         f.etcdQuota,
		LogRetention:           f.logRetention,
		LeaderElect:            f.leaderElect,
		LeaderLease:            f.leaderLease,
		AdvertiseHost:          strings.TrimSpace(f.advertiseHost),
		UI:                     ui.HandlerWith(ui.Cluster, f.federationUI),
	}
	if embedded && len(endpoints) == 0 {
		cfg.EtcdListen = f.etcdListen
	}
	if err := f.secureConfig(&cfg, embedded, endpoints); err != nil {
		return cluster.Config{}, err
	}
	// A fresh `peloton up` is someone trying Peloton: their first
	// non-preemptible service must run in /default.
	cfg.DefaultReservesHosts = embedded
	return cfg, nil
}

// trimmedList is list without blanks around its entries, and without the
// empty ones.
func trimmedList(list []string) []string {
	var out []string
	for _, e := range list {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// checkStackFlags checks the flags of the stack itself: where its etcd is,
// its name, backend, data, archive and addresses.
func (f *serverFlags) checkStackFlags(embedded bool, endpoints []string) error {
	if !embedded && len(endpoints) == 0 {
		return usageErrorf(`missing --etcd-endpoints: "serve cluster" runs against an external etcd (use "peloton up" to embed one)`)
	}
	if err := cluster.ValidateClusterName(f.clusterName); err != nil {
		return usageErrorf("invalid --cluster-name %q: must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", f.clusterName)
	}
	if f.backend != "local" && f.backend != "sim" && f.backend != "kubernetes" && f.backend != "mesos" {
		return usageErrorf(`invalid --backend %q: want "local", "sim", "kubernetes" or "mesos"`, f.backend)
	}
	if f.dataDir == "" {
		return usageErrorf("invalid --data-dir: must not be empty")
	}
	if f.finishedJobTTL < 0 {
		return usageErrorf("invalid --finished-job-ttl %s: must be >= 0", f.finishedJobTTL)
	}
	if err := cluster.ValidateArchive(f.archive); err != nil {
		return usageErrorf("invalid --archive: %v", err)
	}
	if f.logRetention < 0 {
		return usageErrorf("invalid --log-retention %s: must be >= 0 (0: a run's output is kept as long as its job)", f.logRetention)
	}
	if f.etcdQuota < 0 {
		return usageErrorf("invalid --etcd-quota-bytes %d: must be 0 (the default) or a size in bytes", f.etcdQuota)
	}
	addrs := []struct{ flag, addr string }{{"listen", f.listen}, {"http-listen", f.httpListen}}
	if embedded && len(endpoints) == 0 && f.etcdListen != "" {
		if err := checkEtcdListen(f.etcdListen); err != nil {
			return err
		}
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return usageErrorf("invalid --%s %q: want host:port", a.flag, a.addr)
		}
	}
	return nil
}

// checkHostFlags checks the flags of the hosts, their agents and the
// placement engines.
func (f *serverFlags) checkHostFlags() error {
	switch {
	case f.hosts < 1:
		return usageErrorf("invalid --hosts %d: must be >= 1", f.hosts)
	case f.hostCPU < 0:
		return usageErrorf("invalid --host-cpu %g: must be >= 0", f.hostCPU)
	case f.hostMemoryMB < 0:
		return usageErrorf("invalid --host-memory-mb %d: must be >= 0", f.hostMemoryMB)
	case f.hostDiskMB < 0:
		return usageErrorf("invalid --host-disk-mb %d: must be >= 0", f.hostDiskMB)
	case f.hostGPU < 0:
		return usageErrorf("invalid --host-gpu %d: must be >= 0", f.hostGPU)
	case f.backend != "sim" && f.hostGPU != 0:
		return usageErrorf("invalid --host-gpu: only the sim backend has GPUs (use --backend sim)")
	case f.backend != "sim" && len(f.hostLabels) != 0:
		return usageErrorf("invalid --host-labels: only the sim backend takes host labels (use --backend sim)")
	case f.shutdownGrace < 0:
		return usageErrorf("invalid --shutdown-grace %s: must be >= 0", f.shutdownGrace)
	case f.engines < 1 || f.engines > 64:
		return usageErrorf("invalid --placement-engines %d: must be 1 to 64", f.engines)
	case f.reclaimDelay < 0:
		return usageErrorf("invalid --reclaim-delay %s: must be >= 0", f.reclaimDelay)
	case f.reserveAfter < 0:
		return usageErrorf("invalid --reservation-after %s: must be >= 0 (0: never)", f.reserveAfter)
	case f.backend != "sim" && f.simAgents:
		return usageErrorf("invalid --sim-host-agents: only the sim backend has simulated hosts (use --backend sim)")
	case f.agentInterval < 100*time.Millisecond:
		return usageErrorf("invalid --host-agent-interval %s: must be at least 100ms", f.agentInterval)
	case !(f.slackMargin >= 0 && f.slackMargin <= 0.9):
		return usageErrorf("invalid --slack-margin %g: must be between 0 and 0.9", f.slackMargin)
	case !(f.memOversub >= 1 && f.memOversub <= 4):
		return usageErrorf("invalid --memory-oversubscription %g: must be between 1 and 4", f.memOversub)
	case f.maxInstances < 1 || f.maxInstances > jobmgr.MaxInstances:
		return usageErrorf("invalid --max-instances %d: must be 1 to %d", f.maxInstances, jobmgr.MaxInstances)
	case f.usageStaleAfter <= 0:
		return usageErrorf("invalid --usage-stale-after %s: must be > 0", f.usageStaleAfter)
	}
	return nil
}

// hostLabelList checks --host-labels entries (key=value).
func hostLabelList(list []string) ([]string, error) {
	var labels []string
	for _, l := range list {
		l = strings.TrimSpace(l)
		if k, _, ok := strings.Cut(l, "="); !ok || strings.TrimSpace(k) == "" {
			return nil, usageErrorf("invalid --host-labels entry %q: want key=value", l)
		}
		labels = append(labels, l)
	}
	return labels, nil
}

// secureConfig sets what cfg needs to run tasks as their users and to talk
// to etcd and its callers over TLS.
func (f *serverFlags) secureConfig(cfg *cluster.Config, embedded bool, endpoints []string) error {
	var err error
	if cfg.TaskUser, err = f.iso.config(f.backend); err != nil {
		return err
	}
	if cfg.EtcdTLS, err = f.etcdTLS.config(endpoints); err != nil {
		return err
	}
	exposed := map[string]string{"--listen": f.listen, "--http-listen": f.httpListen}
	if embedded {
		exposed["--federation-listen"], exposed["--federation-http-listen"] = f.fed.listen, f.fed.httpListen
	}
	if cfg.Security, err = f.sec.config(exposed); err != nil {
		return err
	}
	if embedded {
		if err := f.sec.checkPeerForUp(); err != nil {
			return err
		}
	}
	return nil
}

// checkLeaderFlags checks --leader-lease and --advertise-host, and that a
// leader elected among replicas can tell the others where it listens.
func (f *serverFlags) checkLeaderFlags() error {
	if !f.leaderElect {
		return nil
	}
	if _, err := election.LeaseSeconds(f.leaderLease); err != nil || f.leaderLease == 0 {
		return usageErrorf("invalid --leader-lease %s: must be 1s to 1h", f.leaderLease)
	}
	if strings.TrimSpace(f.advertiseHost) != "" {
		return nil
	}
	host, _, _ := net.SplitHostPort(f.listen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return usageErrorf("missing --advertise-host: --listen %s binds every address, so the other replicas cannot tell where to reach this one (in a pod, pass its IP)", f.listen)
	}
	return nil
}

// config checks the kubernetes backend's flags.
func (k *kubeFlags) config() (cluster.KubeConfig, error) {
	switch {
	case k.qps <= 0:
		return cluster.KubeConfig{}, usageErrorf("invalid --kube-qps %g: must be > 0", k.qps)
	case k.burst <= 0:
		return cluster.KubeConfig{}, usageErrorf("invalid --kube-burst %d: must be > 0", k.burst)
	case strings.TrimSpace(k.namespace) == "":
		return cluster.KubeConfig{}, usageErrorf("invalid --kube-namespace: must not be empty")
	}
	if k.bindMode != cluster.KubeBindBinding && k.bindMode != cluster.KubeBindNodeName {
		return cluster.KubeConfig{}, usageErrorf("invalid --kube-bind-mode %q: want %q or %q", k.bindMode, cluster.KubeBindBinding, cluster.KubeBindNodeName)
	}
	var secondaryNS []string
	for _, ns := range k.secondaryNS {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return cluster.KubeConfig{}, usageErrorf("invalid --kube-secondary-namespaces entry %q: %s", ns, strings.Join(errs, "; "))
		}
		secondaryNS = append(secondaryNS, ns)
	}
	var pools map[string]string
	for _, e := range k.poolNamespaces {
		pool, ns, ok := strings.Cut(strings.TrimSpace(e), "=")
		pool, ns = strings.TrimSpace(pool), strings.TrimSpace(ns)
		if !ok || !strings.HasPrefix(pool, "/") || ns == "" {
			return cluster.KubeConfig{}, usageErrorf("invalid --kube-pool-namespaces entry %q: want /pool/path=namespace", e)
		}
		if pools == nil {
			pools = map[string]string{}
		}
		pools[pool] = ns
	}
	return cluster.KubeConfig{Kubeconfig: k.kubeconfig, Namespace: strings.TrimSpace(k.namespace), PoolNamespaces: pools,
		NodeSelector: k.nodeSelector, Image: k.image, QPS: k.qps, Burst: k.burst, BindMode: k.bindMode,
		Secondary: k.secondary, SecondaryNamespaces: secondaryNS}, nil
}

var parseLogLevel = cmdutil.ParseLogLevel

func (a *app) upCommand() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole Peloton cluster on this machine (embedded etcd, local backend)",
		Long: `Run a whole Peloton cluster in this process: an embedded etcd (unless
--etcd-endpoints names an external one), the job, resource and host managers,
placement, and the gRPC and HTTP APIs, with tasks run as local processes
(or, with --backend sim, on simulated hosts where a task only takes the time
its command declares, e.g. "sleep 5").
Prints one "peloton is ready: ..." line once it serves; stops on SIGINT or SIGTERM.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rejectClientFlags(cmd); err != nil {
				return err
			}
			return a.runServer(cmd.Context(), cmd, &f, true)
		},
	}
	f.register(cmd.Flags(), true)
	cmd.SetUsageTemplate(serverUsage)
	return cmd
}

const serverUsage = cmdutil.ServerUsage

// clientFlags are the root's flags that only API clients use.
var clientFlags = []string{"server", "output", "timeout", "cluster", "federation", "ca-file", "cert-file", "key-file", "token", "tls-server-name", "context", "config"}

// rejectClientFlags refuses a client flag given to a server command, which
// would otherwise be accepted and ignored.
func rejectClientFlags(cmd *cobra.Command) error {
	for _, name := range clientFlags {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
			continue // a flag of the command's own (serve cluster --federation)
		}
		if fl := cmd.Flag(name); fl != nil && fl.Changed {
			return usageErrorf("--%s is a flag of the client commands; %q takes only the flags in --help", name, cmd.CommandPath())
		}
	}
	return nil
}

func (a *app) serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run Peloton daemons",
	}
	a.group(cmd)
	var f serverFlags
	clusterCmd := &cobra.Command{
		Use:   "cluster --etcd-endpoints URLS",
		Short: "Run the cluster stack as a daemon against an external etcd",
		Long: `Run the job, resource and host managers, placement and the gRPC and HTTP
APIs against an external etcd cluster. Clusters of different --cluster-name
may share one etcd; each keeps its keys under /peloton/clusters/<name>/.

With --leader-elect several replicas of one cluster (same --cluster-name)
may run: they campaign in etcd and only the leader runs the stack. The others
answer /healthz themselves and forward everything else on their listeners to
the leader; the leader's ready line is printed when a replica first leads. A leader that loses its etcd lease stops
its stack at once and campaigns again.`,
		Args: argsNamed(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rejectClientFlags(cmd); err != nil {
				return err
			}
			return a.runServer(cmd.Context(), cmd, &f, false)
		},
	}
	f.register(clusterCmd.Flags(), false)
	clusterCmd.SetUsageTemplate(serverUsage)
	cmd.AddCommand(clusterCmd, a.serveFederationCommand(), a.serveHostagentCommand(), a.serveAdvisorCommand())
	return cmd
}

// runServer validates the flags, then runs the stack until SIGINT or
// SIGTERM. A shutdown asked for by a signal is a success.
func (a *app) runServer(ctx context.Context, cmd *cobra.Command, f *serverFlags, embedded bool) error {
	cfg, err := f.config(embedded)
	if err != nil {
		return err
	}
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return err
	}
	labels, err := parseLabels("cluster-labels", f.clusterLabels)
	if err != nil {
		return err
	}
	if _, ok := labels["backend"]; !ok {
		labels["backend"] = f.backend
	}
	cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	peer, err := f.sec.peer()
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer survivesSIGHUP()()
	if embedded {
		return a.runEmbedded(ctx, cmd, f, cfg, labels, peer)
	}

	if f.federation != "" {
		if _, _, err := net.SplitHostPort(f.federation); err != nil {
			return usageErrorf("invalid --federation %q: want host:port", f.federation)
		}
		if _, err := advertised(cfg.Listen, cfg.AdvertiseHost); err != nil {
			return usageErrorf("--federation: %v", err)
		}
	}
	// The registration is kept by the replica that leads, and only while
	// it does: a standby that kept registering its own address would
	// swap the registered endpoint back and forth with the leader.
	var regMu sync.Mutex
	var regWG sync.WaitGroup
	stopReg := func() {}
	cfg.OnLeading = func(leading bool) {
		if !leading {
			regMu.Lock()
			stopReg()
			regMu.Unlock()
		}
	}
	var once sync.Once
	cfg.OnReady = func(info cluster.ReadyInfo) {
		once.Do(func() { fmt.Fprintln(a.stdout, readyLine(info, cfg.DataDir)) })
		if f.federation == "" {
			return
		}
		endpoint, _ := advertised(info.GRPCAddr, cfg.AdvertiseHost)
		httpEndpoint, _ := advertised(info.HTTPAddr, cfg.AdvertiseHost)
		addr := make(chan string, 1)
		addr <- f.federation
		reg := registrar{log: cfg.Logger, fedAddr: addr, keepAlive: 10 * time.Second, creds: peer}
		regMu.Lock()
		stopReg()
		regCtx, cancel := context.WithCancel(ctx)
		stopReg = cancel
		regMu.Unlock()
		regWG.Add(1)
		go func() {
			defer regWG.Done()
			reg.keep(regCtx, &pelotonv1.RegisterClusterRequest{Name: info.ClusterName, Endpoint: endpoint,
				HttpEndpoint: httpEndpoint, Labels: labels, Replace: true})
		}()
	}
	if f.federation != "" {
		// Federated services' disruptions ask the federation's global
		// SLA evaluator (fail-safe: this cluster's share when it is away).
		fo := peer
		fo.Timeout = 5 * time.Second
		fc, err := pclient.NewFederation(f.federation, fo)
		if err != nil {
			return usageErrorf("--federation: %v", err)
		}
		defer fc.Close()
		router := fed.New(sla.NewLocal(nil), fc.SLA, cfg.ClusterName, cfg.Logger)
		cfg.SLA = router
		rctx, stopRouter := context.WithCancel(ctx)
		defer stopRouter()
		go router.Run(rctx)
	}
	err = a.runCluster(ctx, cfg)
	// The registration ends with the stack, before anything is reported.
	regMu.Lock()
	stopReg()
	regMu.Unlock()
	regWG.Wait()
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// runEmbedded is runServer for `peloton up`: the stack of each cluster
// --clusters names, their federation and their etcd, in this process.
func (a *app) runEmbedded(ctx context.Context, cmd *cobra.Command, f *serverFlags, cfg cluster.Config, labels map[string]string, peer pclient.Options) error {
	var err error
	names := []string{cfg.ClusterName}
	if f.clusters != "" {
		if cmd.Flags().Changed("cluster-name") {
			return usageErrorf("--clusters names the clusters; leave out --cluster-name")
		}
		if names, err = parseClusters(f.clusters); err != nil {
			return err
		}
		cfg.ClusterName = names[0]
	}
	f.fed.listen = freeIfZero(f.fed.listen, f.listen, cmd.Flags().Changed("federation-listen"))
	f.fed.httpListen = freeIfZero(f.fed.httpListen, f.httpListen, cmd.Flags().Changed("federation-http-listen"))
	// The clusters' UI links to the federation's.
	scheme := "http://"
	if cfg.Security.TLS.Enabled() {
		scheme = "https://"
	}
	cfg.UI = ui.HandlerWith(ui.Cluster, scheme+f.fed.httpListen+"/")
	fcfg, err := f.fed.config("federation-")
	if err != nil {
		return err
	}
	fcfg.Security = cfg.Security
	fcfg.Options.ClusterCredentials = peer
	err = a.runUp(ctx, cfg, names, fcfg, labels, peer)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// survivesSIGHUP keeps SIGHUP from ending a daemon, from now until the
// returned function is called: a serving daemon reopens its audit log on
// it (internal/serving), and a standby replica, or one still starting,
// must not die of the same signal sent to every replica after a rotation.
func survivesSIGHUP() func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return func() { signal.Stop(hup) }
}

// slackMarginOf is the margin as hostmgr takes it: 0 there means its
// default, so a margin of none is negative.
func slackMarginOf(m float64) float64 {
	if m == 0 {
		return -1
	}
	return m
}

// readyLine is the one line `peloton up` prints when it serves, e.g.
// "peloton is ready: grpc 127.0.0.1:5391, http http://127.0.0.1:5291,
// etcd unix:///srv/peloton-data/etcd/client.sock, data ./peloton-data,
// cluster local". The
// cluster comes last so that scripts reading the fields before it keep
// working.
func readyLine(info cluster.ReadyInfo, dataDir string) string {
	etcd := make([]string, len(info.EtcdEndpoints))
	for i, e := range info.EtcdEndpoints {
		etcd[i] = withScheme(e)
	}
	http := withScheme(info.HTTPAddr)
	if info.TLS {
		http = "https://" + info.HTTPAddr
	}
	return fmt.Sprintf("peloton is ready: grpc %s, http %s, etcd %s, data %s, cluster %s",
		info.GRPCAddr, http, strings.Join(etcd, ","), dataDir, info.ClusterName)
}

func withScheme(addr string) string {
	if addr == "" || strings.Contains(addr, "://") {
		return addr
	}
	return "http://" + addr
}

// readProfiles reads and checks the --partition-profiles file ("": none).
func readProfiles(file string) (cluster.PartitionProfiles, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErrorf("invalid --partition-profiles %s: %v", file, err)
	}
	profiles, err := cluster.ParsePartitionProfiles(b)
	if err != nil {
		return nil, usageErrorf("invalid --partition-profiles %s: %v", file, err)
	}
	return profiles, nil
}

// reservationAfter maps --reservation-after to cluster.Config's: the flag's
// 0 means never, the config's 0 resmgr's default.
func reservationAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
