// Package kubernetes is the hostmgr backend that runs tasks as pods on a
// Kubernetes cluster. Peloton is the scheduler: every run is a pod with
// schedulerName "peloton", put on the node Peloton chose either through the
// Binding subresource or by creating it with spec.nodeName set (Config.
// BindMode), so kube-scheduler never races it.
//
// What it owns: the client to the apiserver, shared informers on Nodes and
// Pods (watches, never polling; they resume by themselves after an
// apiserver restart), and the in-memory record of the runs it launched.
// Hosts are the nodes (optionally those matching a label selector), with
// capacity = allocatable minus what pods Peloton does not manage request;
// cordoned or NotReady nodes are reported Unschedulable. Pod phases and
// container states become task events; a run's health is its pod's Ready
// condition, driven by a readiness probe made from its health check. Each
// SERVICE and STATEFUL job has a PodDisruptionBudget made from its SLA, so
// that evictions by others (kubectl drain) respect it (budget.go).
//
// Every call to the apiserver has a deadline, and transient failures
// (timeouts, 429, 5xx, a refused connection while the apiserver restarts)
// are retried with backoff; client QPS and burst are configurable. An
// apiserver that is away, at start or later, never stops the backend: it
// reports it as a hostmgr.SubstrateReporter (substrate.go), refuses
// launches meanwhile as blocked, and goes on when the apiserver answers.
//
// It must not import jobmgr, resmgr or placement: only hostmgr,
// internal/resources, the API types and client-go.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/resources"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// BackendName is the value of the backend flag that selects this backend.
const BackendName = "kubernetes"

// Defaults of Config.
const (
	DefaultNamespace       = "peloton"
	DefaultImage           = "busybox:stable"
	DefaultQPS             = 200
	DefaultBurst           = 400
	DefaultRequestTimeout  = 10 * time.Second
	DefaultStartTimeout    = time.Minute
	DefaultGPUResource     = "nvidia.com/gpu"
	DefaultVolumeRoot      = "/var/lib/peloton/volumes"
	DefaultFinishedPodTTL  = 10 * time.Minute
	DefaultProbeEvery      = 5 * time.Second
	DefaultMaxProbeBackoff = 10 * time.Second
)

// BindMode says how Launch puts a run's pod on the node Peloton chose.
type BindMode string

// The bind modes.
const (
	// BindModeBinding creates the pod unbound, then binds it through the
	// pods/binding subresource, as kube-scheduler does: two writes per pod.
	BindModeBinding BindMode = "binding"
	// BindModeNodeName creates the pod with spec.nodeName already set: one
	// write per pod.
	BindModeNodeName BindMode = "node-name"
)

// BindModes lists the valid bind modes, the default first.
var BindModes = []BindMode{BindModeBinding, BindModeNodeName}

// ParseBindMode checks a bind mode's name.
func ParseBindMode(s string) (BindMode, error) {
	for _, m := range BindModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("bind mode %q: want %q or %q", s, BindModeBinding, BindModeNodeName)
}

// Config configures a Kubernetes Backend.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; empty means the
	// in-cluster configuration (Peloton running as a pod).
	Kubeconfig string
	// REST, if set, is used instead of Kubeconfig.
	REST *rest.Config
	// Namespace is where pods of pools without an entry in PoolNamespaces
	// go (default "peloton"). It must exist.
	Namespace string
	// PoolNamespaces maps a pool path to a namespace; a pool uses the entry
	// of its nearest ancestor that has one (/org maps /org/team too).
	PoolNamespaces map[string]string
	// NodeSelector, a label selector, limits the nodes Peloton uses
	// (default: every node).
	NodeSelector string
	// DefaultImage runs tasks that name no image (default busybox:stable).
	DefaultImage string
	// QPS and Burst bound the client's request rate (default 200 and 400).
	// Ordinary requests (pod creates among them) leave half the burst for
	// the urgent ones (binds of pods already created), so a wave of
	// launches goes at most Burst/2 at once, then at QPS.
	QPS   float32
	Burst int
	// BindMode is how a run's pod gets to its node (default
	// BindModeBinding). BindModeBinding creates the pod and then binds it
	// through the Binding subresource, the way every scheduler does: the
	// apiserver checks the pod is not bound yet and sets its PodScheduled
	// condition. BindModeNodeName creates the pod with spec.nodeName set,
	// which halves the apiserver writes per pod, so at a given client QPS
	// it launches up to twice as many pods per second; but it skips the
	// Binding subresource (no PodScheduled condition until the kubelet
	// reports one, and webhooks or audit rules that watch pods/binding do
	// not see it), and some admission policies refuse pods that name their
	// node unless a scheduler creates them. Both need the same RBAC rights
	// on pods; only binding uses pods/binding.
	BindMode BindMode
	// RequestTimeout bounds every call to the apiserver (default 10s).
	RequestTimeout time.Duration
	// StartTimeout bounds Start's wait for the first sync of the
	// informers (default 1m). Past it, or at once when the apiserver does
	// not answer, Start returns without an error: the backend keeps
	// trying, and Substrate says why it cannot.
	StartTimeout time.Duration
	// ProbeEvery is how often the backend asks the apiserver whether it
	// answers while it does (default 5s); MaxProbeBackoff caps the wait
	// between attempts while it does not, which doubles from 200ms
	// (default 10s).
	ProbeEvery      time.Duration
	MaxProbeBackoff time.Duration
	// GPUResource is the extended resource that counts GPUs (default
	// nvidia.com/gpu).
	GPUResource string
	// VolumeRoot is the folder on nodes that holds persistent volumes
	// (default /var/lib/peloton/volumes).
	VolumeRoot string
	// FinishedPodTTL is how long pods of finished runs are kept, for their
	// logs, before Peloton deletes them (default 10m).
	FinishedPodTTL time.Duration
	// Secondary turns on the secondary-scheduler mode (secondary.go):
	// pods that other clients create with schedulerName peloton are
	// reported as foreign tasks, for Peloton to admit, place and bind.
	Secondary bool
	// SecondaryNamespaces limits that mode to pods of these namespaces
	// (default: every namespace).
	SecondaryNamespaces []string
	// BudgetReconcileEvery is how often the PodDisruptionBudgets of
	// Peloton's jobs are reconciled (budget.go; default 30s).
	BudgetReconcileEvery time.Duration
	// budgetGrace overrides budgetGrace (tests).
	budgetGrace time.Duration
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
}

// task is one run Peloton launched (or found after a restart). Guarded by
// Backend.mu.
type task struct {
	id, ns, name string
	host         string
	ports        map[string]uint32
	withHealth   bool
	// created is set once the pod exists; until then informer events of a
	// pod of the same name (an old one being deleted) are not this run's.
	created bool
	killing bool
	// foreign is set for a pod another client created (secondary.go):
	// Peloton binds it and may delete it, but leaves it once finished.
	foreign bool
	// healthy is set once the run's readiness probe first passed: before,
	// a pod that is not Ready is HEALTH_UNKNOWN, after, UNHEALTHY.
	healthy bool
	// failAfter is how long after it starts running a run whose probe
	// never passed counts as UNHEALTHY: the initial delay plus
	// failureThreshold periods and a timeout. The kubelet does not report
	// failed probes of a pod that was never Ready, so the backend infers
	// them from time, as the other backends' "threshold failures in a row,
	// whether or not it ever passed" rule asks.
	failAfter time.Duration
	timer     *time.Timer
	// last is the last event decided; its State is 0 before the first.
	last hostmgr.TaskEvent
}

func (t *task) terminal() bool { return rank(t.last.State) == 3 }

// Backend runs tasks as pods. It is safe for concurrent use.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	client kubernetes.Interface
	// limiter is the client's rate limiter (QPS, Burst), binds first.
	limiter *clientLimiter

	nodeFactory informers.SharedInformerFactory
	podFactory  informers.SharedInformerFactory
	nodeInf     cache.SharedIndexInformer
	podInf      cache.SharedIndexInformer
	nodes       listersv1.NodeLister
	pods        cache.Indexer
	// namespaces are those Config sends pods to.
	namespaces map[string]bool

	mu       sync.Mutex
	started  bool
	closed   bool
	tasks    map[string]*task
	finished []string // ring of finished task IDs, for bounded memory
	finHead  int
	// budgets are the PodDisruptionBudgets jobs should have (budget.go).
	budgets map[string]*wantBudget

	hostsChanged atomic.Pointer[func()]
	// The secondary-scheduler mode (secondary.go): who is told of foreign
	// pods, the changes not yet told (guarded by mu), and the namespaces
	// it covers (nil: all).
	foreignChanged atomic.Pointer[func(hostmgr.ForeignTask)]
	foreignQueue   *fifo[hostmgr.ForeignTask]
	rejected       map[string]string // pod UID -> message told; guarded by mu
	waitingTold    map[string]string // pod UID -> PodScheduled message set; guarded by mu
	secondaryNS    map[string]bool
	events         *fifo[hostmgr.TaskEvent] // to the sink, in order
	cordons        *cordons                 // nodes cordoned or tainted NoExecute (cordon.go)
	dirty          chan struct{}            // hosts changed; capacity 1
	stop           chan struct{}
	// stopCtx ends when stop is closed, for calls made by goroutines
	// that Close waits for.
	stopCtx    context.Context
	cancelStop context.CancelFunc
	// host is the apiserver's URL; sub is whether it is reachable
	// (substrate.go), and probeNow asks the apiserver watcher to find out
	// at once.
	host      string
	sub       atomic.Pointer[hostmgr.SubstrateStatus]
	probeNow  chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var (
	_ hostmgr.Backend           = (*Backend)(nil)
	_ hostmgr.HostWatcher       = (*Backend)(nil)
	_ hostmgr.Prefetcher        = (*Backend)(nil)
	_ hostmgr.VolumeReleaser    = (*Backend)(nil)
	_ hostmgr.Replacer          = (*Backend)(nil)
	_ hostmgr.SubstrateReporter = (*Backend)(nil)
)

// maxFinished bounds how many finished runs Status still knows.
const maxFinished = 100_000

// Index names of the pod informer.
const (
	byNode = "node"
	byTask = "task"
	byJob  = "job" // "namespace/jobID" of Peloton's labelled pods
)

// New validates cfg and builds the client. Call Start before use.
func New(cfg Config) (*Backend, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = DefaultImage
	}
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.GPUResource == "" {
		cfg.GPUResource = DefaultGPUResource
	}
	if cfg.VolumeRoot == "" {
		cfg.VolumeRoot = DefaultVolumeRoot
	}
	if cfg.FinishedPodTTL == 0 {
		cfg.FinishedPodTTL = DefaultFinishedPodTTL
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	if cfg.MaxProbeBackoff <= 0 {
		cfg.MaxProbeBackoff = DefaultMaxProbeBackoff
	}
	if cfg.BudgetReconcileEvery <= 0 {
		cfg.BudgetReconcileEvery = DefaultBudgetReconcileEvery
	}
	if cfg.budgetGrace <= 0 {
		cfg.budgetGrace = budgetGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BindMode == "" {
		cfg.BindMode = BindModeBinding
	}
	if _, err := ParseBindMode(string(cfg.BindMode)); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	if cfg.QPS < 0 || cfg.Burst < 0 {
		return nil, fmt.Errorf("kubernetes: qps and burst must be >= 0, got %v and %d", cfg.QPS, cfg.Burst)
	}
	if _, err := labels.Parse(cfg.NodeSelector); err != nil {
		return nil, fmt.Errorf("kubernetes: node selector %q: %w", cfg.NodeSelector, err)
	}
	rc := cfg.REST
	if rc == nil {
		var err error
		if cfg.Kubeconfig == "" {
			rc, err = rest.InClusterConfig()
		} else {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes: client configuration (--kubeconfig): %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	limiter := newClientLimiter(cfg.QPS, cfg.Burst)
	rc.RateLimiter = limiter
	rc.UserAgent = "peloton"
	// Timeout bounds each request, watches excepted (client-go gives those
	// their own server-side timeout).
	rc.Timeout = cfg.RequestTimeout
	httpClient, _, err := apiHTTPClient(rc)
	if err == nil && httpClient == nil {
		httpClient, err = rest.HTTPClientFor(rc)
	}
	var client *kubernetes.Clientset
	if err == nil {
		client, err = kubernetes.NewForConfigAndClient(rc, httpClient)
	}
	if err != nil {
		limiter.Stop()
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	b := &Backend{
		cfg: cfg, log: cfg.Logger.With("component", "hostmgr/kubernetes"), client: client, limiter: limiter,
		tasks: map[string]*task{}, dirty: make(chan struct{}, 1), stop: make(chan struct{}),
		events: newFifo[hostmgr.TaskEvent](), cordons: newCordons(), foreignQueue: newFifo[hostmgr.ForeignTask](), rejected: map[string]string{}, waitingTold: map[string]string{},
		host: rc.Host, probeNow: make(chan struct{}, 1),
	}
	b.stopCtx, b.cancelStop = context.WithCancel(context.Background())
	st := hostmgr.NewSubstrateStatus("kubernetes apiserver "+rc.Host, time.Now())
	b.sub.Store(&st)
	for _, ns := range cfg.SecondaryNamespaces {
		if b.secondaryNS == nil {
			b.secondaryNS = map[string]bool{}
		}
		b.secondaryNS[ns] = true
	}
	b.namespaces = map[string]bool{cfg.Namespace: true}
	for _, ns := range cfg.PoolNamespaces {
		b.namespaces[ns] = true
	}
	b.nodeFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cfg.NodeSelector }),
		informers.WithTransform(leanObject))
	b.podFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(leanObject))
	return b, nil
}

// leanObject is the informers' transform: the caches keep only what the
// backend reads of a pod or a node. The apiserver sends every field, and
// what the cache holds is what the garbage collector scans again in every
// cycle, for as long as the pod exists: at 10,000 pods the dropped parts
// (managedFields, each container's environment and mounts, volumes,
// tolerations, the last-applied annotation, a node's image list) are most
// of a pod as kube-apiserver returns it. Nothing here ever writes a cached
// object back (changes are patches), so a lean copy cannot erase a field
// on the server.
func leanObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		leanPod(o)
	case *corev1.Node:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Status.Images, o.Status.VolumesInUse, o.Status.VolumesAttached = nil, nil, nil
	default:
		if a, err := meta.Accessor(obj); err == nil {
			a.SetManagedFields(nil)
		}
	}
	return obj, nil
}

// leanPod drops the parts of p that the backend never reads. What stays:
// metadata but managedFields and the last-applied annotation; of each
// container its name, image, command and args (foreign tasks report
// them), ports, resources and readiness probe (a run's health); the pod's
// node, scheduler, node selector, overhead, grace period and the
// rest of its scalar fields; its hostPath volumes (a Peloton volume is one:
// whether a pod still uses it, volumes.go); the required node affinity and
// tolerations of pods that wait for Peloton to place them (leanPlacement);
// its whole status but the init and ephemeral containers' statuses.
func leanPod(p *corev1.Pod) {
	p.ManagedFields = nil
	delete(p.Annotations, corev1.LastAppliedConfigAnnotation)
	leanContainers(p.Spec.Containers)
	leanContainers(p.Spec.InitContainers)
	p.Spec.EphemeralContainers = nil
	p.Spec.Volumes = hostPathVolumes(p.Spec.Volumes)
	leanPlacement(p)
	p.Spec.TopologySpreadConstraints = nil
	p.Spec.SecurityContext = nil
	p.Spec.ImagePullSecrets = nil
	p.Spec.HostAliases = nil
	p.Spec.DNSConfig = nil
	p.Spec.ReadinessGates = nil
	p.Spec.ResourceClaims = nil
	p.Status.InitContainerStatuses = nil
	p.Status.EphemeralContainerStatuses = nil
	p.Status.ResourceClaimStatuses = nil
}

func leanContainers(cs []corev1.Container) {
	for i := range cs {
		c := &cs[i]
		c.Env, c.EnvFrom = nil, nil
		c.VolumeMounts, c.VolumeDevices = nil, nil
		c.LivenessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil
		c.SecurityContext = nil
		c.ResizePolicy = nil
		c.TerminationMessagePath, c.WorkingDir = "", ""
	}
}

// Name returns "kubernetes".
func (b *Backend) Name() string { return BackendName }

// WatchHosts registers the function told when hosts change.
func (b *Backend) WatchHosts(changed func()) { b.hostsChanged.Store(&changed) }

// Start starts the informers and waits (at most StartTimeout) until they
// have synced, so that Hosts answers the cluster's nodes. Pods of runs
// launched before a restart of Peloton are adopted without events; Status
// answers for them. Events go to sink from one goroutine, in order.
//
// An apiserver that does not answer (or not as an apiserver) does not stop
// it: Start returns at once, without hosts, and the backend asks again with
// backoff for as long as it runs (Substrate says why it cannot); the nodes
// and pods come when it answers. A namespace that is missing and that
// Peloton may not create still fails Start when the apiserver answers.
func (b *Backend) Start(ctx context.Context, sink func(hostmgr.TaskEvent)) error {
	if sink == nil {
		return errors.New("kubernetes: start: nil sink")
	}
	b.mu.Lock()
	if b.closed || b.started {
		b.mu.Unlock()
		return errors.New("kubernetes: start: backend closed or already started")
	}
	b.started = true
	b.mu.Unlock()

	nodeInf := b.nodeFactory.Core().V1().Nodes().Informer()
	podInf := b.podFactory.Core().V1().Pods().Informer()
	b.nodeInf, b.podInf = nodeInf, podInf
	if err := nodeInf.SetWatchErrorHandler(b.onWatchError("node")); err != nil {
		return fmt.Errorf("kubernetes: node informer: %w", err)
	}
	if err := podInf.SetWatchErrorHandler(b.onWatchError("pod")); err != nil {
		return fmt.Errorf("kubernetes: pod informer: %w", err)
	}
	if err := podInf.AddIndexers(cache.Indexers{
		byNode: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				return []string{p.Spec.NodeName}, nil
			}
			return nil, nil
		},
		byTask: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok && b.managed(p) {
				return []string{p.Annotations[AnnotationTaskID]}, nil
			}
			return nil, nil
		},
		byJob: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok && p.Labels[LabelJobID] != "" && b.managed(p) {
				return []string{p.Namespace + "/" + p.Labels[LabelJobID]}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("kubernetes: pod indexers: %w", err)
	}
	b.nodes = b.nodeFactory.Core().V1().Nodes().Lister()
	b.pods = podInf.GetIndexer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.markDirty(); b.cordons.note(obj) },
		UpdateFunc: b.onNodeUpdate,
		DeleteFunc: b.onNodeDelete,
	}); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    b.onPodAdd,
		UpdateFunc: func(old, cur any) { b.onPod(old, cur, false) },
		DeleteFunc: b.onPodDelete,
	}); err != nil {
		return err
	}
	answers := b.probe(ctx)
	nsChecked := false
	if answers == nil || fromAPIServer(answers) {
		switch err := b.ensureNamespaces(ctx); {
		case err == nil:
			nsChecked = true
		case errors.Is(err, errNamespaceRefused):
			return err
		case answers == nil:
			answers = err // gone meanwhile: checked once it answers
		}
	}
	b.nodeFactory.Start(b.stop)
	b.podFactory.Start(b.stop)
	if answers == nil {
		syncCtx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
		if cache.WaitForCacheSync(syncCtx.Done(), nodeInf.HasSynced, podInf.HasSynced) {
			b.observe(nil)
		} else {
			b.observe(fmt.Errorf("%w within %s", errNotListed, b.cfg.StartTimeout))
		}
		cancel()
	} else {
		b.observe(apiReason(answers))
	}
	b.wg.Add(7)
	go func() { defer b.wg.Done(); b.cordons.q.run(b.stop, b.cordons.tell) }()
	go b.watchAPIServer(nsChecked)
	go b.reconcileBudgets()
	go func() { defer b.wg.Done(); b.events.run(b.stop, sink) }()
	go func() {
		defer b.wg.Done()
		b.foreignQueue.run(b.stop, func(ft hostmgr.ForeignTask) {
			if f := b.foreignChanged.Load(); f != nil {
				(*f)(ft)
			}
		})
	}()
	go b.notifyHosts()
	go b.collectFinished()
	b.log.Info("kubernetes backend started", "nodes", len(b.Hosts()), "namespace", b.cfg.Namespace, "apiserverReachable", b.Substrate().Reachable)
	return nil
}

// managed reports whether a pod is a run of this Peloton: one of its
// labelled pods in one of its namespaces. A run of another Peloton sharing
// the Kubernetes cluster (in other namespaces) is a pod like any other.
func (b *Backend) managed(p *corev1.Pod) bool {
	return p.Labels[LabelManagedBy] == ManagedByValue && p.Annotations[AnnotationTaskID] != "" && b.namespaces[p.Namespace] ||
		b.boundForeign(p)
}

// Hosts returns the nodes as hosts.
func (b *Backend) Hosts() []hostmgr.HostInfo {
	if b.nodes == nil {
		return nil
	}
	nodes, err := b.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]hostmgr.HostInfo, 0, len(nodes))
	for _, n := range nodes {
		capa := b.fromList(n.Status.Allocatable)
		// Pods Peloton does not manage hold part of the node. Its own runs
		// are accounted by hostmgr, against the whole allocatable.
		pods, _ := b.pods.ByIndex(byNode, n.Name)
		for _, obj := range pods {
			p := obj.(*corev1.Pod)
			if b.managed(p) || podTerminal(p) {
				continue
			}
			capa = capa.Sub(b.podRequests(p))
		}
		lbls := hostLabels(n)
		part := n.Labels[LabelPartition]
		if part == "" {
			part = DefaultPartition
		}
		down, why := nodeDown(n)
		if !down && !nodeReady(n) {
			down, why = true, "not ready"
		}
		out = append(out, hostmgr.HostInfo{Name: n.Name, Capacity: capa, Labels: lbls, Partition: part,
			Unschedulable: down, Why: why})
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// markDirty asks notifyHosts to tell hostmgr that hosts changed.
func (b *Backend) markDirty() {
	select {
	case b.dirty <- struct{}{}:
	default:
	}
}

// notifyHosts tells hostmgr of host changes, at most every 100ms, so that a
// burst of node or pod updates costs one refresh.
func (b *Backend) notifyHosts() {
	defer b.wg.Done()
	for {
		select {
		case <-b.stop:
			return
		case <-b.dirty:
		}
		select {
		case <-b.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		if f := b.hostsChanged.Load(); f != nil {
			(*f)()
		}
	}
}

func (b *Backend) onNodeUpdate(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		b.markDirty()
		return
	}
	b.cordons.note(n)
	// Heartbeats change nothing Peloton cares about.
	od, _ := nodeDown(o)
	nd, _ := nodeDown(n)
	if od != nd || nodeReady(o) != nodeReady(n) ||
		!equalLists(o.Status.Allocatable, n.Status.Allocatable) || !equalMaps(o.Labels, n.Labels) || nodeTaints(o) != nodeTaints(n) {
		b.markDirty()
	}
}

func (b *Backend) onNodeDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	b.markDirty()
	b.cordons.forget(n.Name)
	// Runs on a node that is gone are lost; their pods can never finish.
	var orphans []*task
	b.mu.Lock()
	now := time.Now()
	for _, t := range b.tasks {
		if t.host == n.Name && t.created && !t.terminal() {
			b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_LOST, Reason: ReasonNodeGone,
				Message: "node " + n.Name + " was deleted", Time: now})
			orphans = append(orphans, t)
		}
	}
	b.mu.Unlock()
	if len(orphans) > 0 {
		go b.deleteOrphans(orphans)
	}
}

// deleteOrphans force-deletes pods of a node that is gone (there is no
// kubelet to end them); best effort, their runs are already LOST.
func (b *Backend) deleteOrphans(ts []*task) {
	for _, t := range ts {
		select {
		case <-b.stop:
			return
		default:
		}
		_ = b.call(context.Background(), func(ctx context.Context) error {
			err := b.client.CoreV1().Pods(t.ns).Delete(ctx, t.name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}
}

func (b *Backend) onPodAdd(obj any, initial bool) { b.onPod(nil, obj, initial) }

// onPod follows a pod: a run's pod moves its task along, any other pod may
// change what its node has free. adopt is set for the pods listed at Start:
// runs of an earlier Peloton process, which this one takes over. A run's
// pod that shows up later unknown (a launch that failed and deleted it) is
// not taken over.
func (b *Backend) onPod(old, cur any, adopt bool) {
	p, ok := cur.(*corev1.Pod)
	if !ok {
		return
	}
	if b.foreign(p) {
		o, _ := old.(*corev1.Pod)
		b.onForeign(o, p, false)
	}
	if !b.managed(p) {
		if p.Labels[LabelHelper] == helperPrefetch && podTerminal(p) {
			b.deleteHelper(p)
		}
		if o, ok := old.(*corev1.Pod); !ok || o.Spec.NodeName != p.Spec.NodeName || podTerminal(o) != podTerminal(p) {
			if p.Spec.NodeName != "" {
				b.markDirty()
			}
		}
		return
	}
	id := p.Annotations[AnnotationTaskID]
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[id]
	if !ok {
		// A run launched before Peloton restarted: adopt it as it is, so
		// that Status answers; its next changes are events as usual.
		if b.closed || !adopt {
			return
		}
		o := observe(p, hasProbe(p))
		if o.health == pelotonv1.HealthState_UNHEALTHY {
			o.health = pelotonv1.HealthState_HEALTH_UNKNOWN
		}
		t = &task{id: id, ns: p.Namespace, name: p.Name, host: p.Spec.NodeName, created: true, withHealth: hasProbe(p), failAfter: failAfter(p), foreign: b.foreign(p),
			ports: podPorts(p), last: hostmgr.TaskEvent{TaskID: id, Host: p.Spec.NodeName, State: o.state, ExitCode: o.exitCode,
				Reason: o.reason, Message: o.message, Health: o.health, Time: o.at}}
		t.last.Ports = t.ports
		b.tasks[id] = t
		if t.terminal() {
			b.forgetOldLocked(id)
		}
		return
	}
	if !t.created || p.Namespace != t.ns || p.Name != t.name {
		return
	}
	b.advanceLocked(t, observe(p, t.withHealth))
}

// advanceLocked moves t to what its pod says, never backwards, filling in
// the states it skipped (a pod seen first when it has already succeeded is
// LAUNCHED, RUNNING, SUCCEEDED), so every run's events read the same.
func (b *Backend) advanceLocked(t *task, o observed) {
	if t.terminal() || o.state == 0 {
		return
	}
	if t.killing && rank(o.state) == 3 {
		o = observed{state: pelotonv1.TaskState_KILLED, reason: ReasonKilled, at: o.at}
	}
	if o.health == pelotonv1.HealthState_HEALTHY {
		t.healthy = true
	} else if o.health == pelotonv1.HealthState_UNHEALTHY && !t.healthy {
		o.health = pelotonv1.HealthState_HEALTH_UNKNOWN
	}
	cur := rank(t.last.State)
	next := rank(o.state)
	if next < cur {
		return
	}
	if next == cur {
		// A change of health is another RUNNING event.
		if o.state == pelotonv1.TaskState_RUNNING && o.health != t.last.Health {
			b.setLocked(t, hostmgr.TaskEvent{State: o.state, Health: o.health, Time: o.at})
		}
		return
	}
	if cur < 1 {
		b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_LAUNCHED, Time: o.at})
	}
	if next == 2 && t.withHealth && !t.healthy && t.failAfter > 0 && t.timer == nil {
		t.timer = time.AfterFunc(t.failAfter, func() { b.neverHealthy(t) })
	}
	if cur < 2 && next == 3 && o.state != pelotonv1.TaskState_LOST && o.state != pelotonv1.TaskState_KILLED &&
		o.state != pelotonv1.TaskState_PREEMPTED {
		b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_RUNNING, Time: o.at})
	}
	if next > 1 {
		b.setLocked(t, hostmgr.TaskEvent{State: o.state, ExitCode: o.exitCode, Reason: o.reason, Message: o.message, Health: o.health, Time: o.at})
	}
}

// neverHealthy reports a run whose health check has not passed within its
// failure threshold UNHEALTHY.
func (b *Backend) neverHealthy(t *task) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || t.healthy || t.last.State != pelotonv1.TaskState_RUNNING || t.last.Health == pelotonv1.HealthState_UNHEALTHY {
		return
	}
	b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_RUNNING, Health: pelotonv1.HealthState_UNHEALTHY,
		Message: fmt.Sprintf("health check has not passed within %s", t.failAfter)})
}

// failAfter is how long a pod's readiness probe may go without passing.
func failAfter(p *corev1.Pod) time.Duration {
	if !hasProbe(p) {
		return 0
	}
	pr := p.Spec.Containers[0].ReadinessProbe
	return time.Duration(pr.InitialDelaySeconds)*time.Second +
		time.Duration(pr.FailureThreshold)*time.Duration(pr.PeriodSeconds)*time.Second +
		time.Duration(pr.TimeoutSeconds)*time.Second
}

func (b *Backend) onPodDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if b.foreign(p) {
		b.onForeign(nil, p, true)
	}
	if !b.managed(p) {
		if p.Spec.NodeName != "" && !podTerminal(p) {
			b.markDirty()
		}
		return
	}
	id := p.Annotations[AnnotationTaskID]
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[id]
	if !ok || !t.created || t.name != p.Name || t.ns != p.Namespace {
		return
	}
	// The last state the pod showed may not have reached us yet.
	b.advanceLocked(t, observe(p, t.withHealth))
	if t.terminal() {
		return
	}
	if t.killing {
		b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_KILLED, Reason: ReasonKilled, Time: time.Now()})
		return
	}
	if c := evictedBy(p); c != nil {
		// Deleted through the Eviction API (kubectl drain, an
		// autoscaler; within the job's PodDisruptionBudget), by the
		// taint manager (a NoExecute taint), the scheduler's preemption
		// or the kubelet: whoever deleted it marked the pod first.
		b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_PREEMPTED, Reason: ReasonEvicted,
			Message: strings.TrimSpace("evicted: " + c.Message), Time: time.Now()})
		return
	}
	b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_LOST, Reason: ReasonPodDeleted,
		Message: "pod " + p.Namespace + "/" + p.Name + " was deleted by someone other than Peloton", Time: time.Now()})
}

// disruptionReasons are the reasons of the DisruptionTarget condition
// Kubernetes puts on a pod it is about to delete for the cluster's sake:
// the Eviction API, the scheduler's preemption, the taint manager (a
// NoExecute taint the pod does not tolerate) and the kubelet (node
// pressure, a node shutdown).
var disruptionReasons = map[string]bool{
	"EvictionByEvictionAPI":  true,
	"PreemptionByScheduler":  true,
	"DeletionByTaintManager": true,
	"TerminationByKubelet":   true,
}

// evictedBy returns the DisruptionTarget condition that says why
// Kubernetes deleted p, or nil.
func evictedBy(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && disruptionReasons[c.Reason] {
			return c
		}
	}
	return nil
}

// setLocked records a state change of t and queues it for the sink.
func (b *Backend) setLocked(t *task, ev hostmgr.TaskEvent) {
	ev.TaskID, ev.Host, ev.Ports = t.id, t.host, t.ports
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	t.last = ev
	b.events.push(ev)
	if t.terminal() {
		if t.timer != nil {
			t.timer.Stop()
		}
		b.forgetOldLocked(t.id)
	}
}

// forgetOldLocked remembers that id ended and forgets the oldest finished
// run once more than maxFinished are remembered.
func (b *Backend) forgetOldLocked(id string) {
	if len(b.finished) < maxFinished {
		b.finished = append(b.finished, id)
		return
	}
	if old, ok := b.tasks[b.finished[b.finHead]]; ok && old.terminal() {
		delete(b.tasks, old.id)
	}
	b.finished[b.finHead] = id
	b.finHead = (b.finHead + 1) % len(b.finished)
}

// namespaceOf is the namespace of a pool: the entry of the pool or of its
// nearest ancestor in PoolNamespaces, else the default.
func (b *Backend) namespaceOf(pool string) string {
	for p := pool; p != ""; {
		if ns, ok := b.cfg.PoolNamespaces[p]; ok {
			return ns
		}
		i := strings.LastIndexByte(p, '/')
		if i <= 0 {
			break
		}
		p = p[:i]
	}
	return b.cfg.Namespace
}

// Launch creates the run's pod and binds it to spec.Host (see
// Config.BindMode). It returns once the pod is bound; LAUNCHED, RUNNING and the end follow as events. On an
// error nothing is left behind and no event follows: the caller reports
// the run failed to launch.
func (b *Backend) Launch(ctx context.Context, spec hostmgr.LaunchSpec) error {
	switch {
	case spec.TaskID == "":
		return errors.New("kubernetes: launch: spec.taskId: must not be empty")
	case spec.Host == "":
		return fmt.Errorf("kubernetes: launch %s: spec.host: must not be empty", spec.TaskID)
	case spec.Foreign != nil:
		return b.launchForeign(ctx, spec)
	}
	b.mu.Lock()
	running := b.started && !b.closed
	b.mu.Unlock()
	if !running {
		return fmt.Errorf("kubernetes: launch %s: backend not running", spec.TaskID)
	}
	if s := b.Substrate(); !s.Reachable {
		return fmt.Errorf("kubernetes: launch %s on %s: %w: %s", spec.TaskID, spec.Host, hostmgr.ErrLaunchBlocked, s.Describe(time.Now()))
	}
	if _, err := b.nodes.Get(spec.Host); err != nil {
		return fmt.Errorf("kubernetes: launch %s: spec.host: node %q: %w", spec.TaskID, spec.Host, err)
	}
	if v := spec.Volume; v != nil {
		if user, ok := b.volumeUser(spec.Host, b.volumePath(v.ID)); ok {
			return fmt.Errorf("kubernetes: launch %s: spec.volume.id: volume %s on %s is in use by run %s", spec.TaskID, v.ID, spec.Host, user)
		}
	}
	ns := b.namespaceOf(spec.Pool)
	ports := assignPorts(spec.Ports)
	pod := b.buildPod(spec, ns, ports)
	t := &task{id: spec.TaskID, ns: ns, name: pod.Name, host: spec.Host, ports: ports,
		withHealth: hasProbe(pod), failAfter: failAfter(pod)}
	if err := b.register(t); err != nil {
		return err
	}

	b.ensureBudget(ctx, spec, ns)
	created, err := b.createAndBind(ctx, pod, spec.Host)
	if err != nil {
		if created != nil {
			// Leave nothing behind: the run is reported failed by the
			// caller, and a pod bound later would run it anyway.
			_ = b.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
				err := b.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{
					GracePeriodSeconds: ptr(int64(0)), Preconditions: &metav1.Preconditions{UID: &created.UID}})
				if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return nil
				}
				return err
			})
		}
		b.mu.Lock()
		delete(b.tasks, spec.TaskID)
		b.mu.Unlock()
		if why := b.blockedBy(ns, err); why != "" {
			return fmt.Errorf("kubernetes: launch %s on %s: %w: %s (%v)", spec.TaskID, spec.Host, hostmgr.ErrLaunchBlocked, why, err)
		}
		if s := b.Substrate(); transient(err) && !s.Reachable {
			// The apiserver went away during the launch: not the run's
			// failure either.
			return fmt.Errorf("kubernetes: launch %s on %s: %w: %s", spec.TaskID, spec.Host, hostmgr.ErrLaunchBlocked, s.Describe(time.Now()))
		}
		return fmt.Errorf("kubernetes: launch %s on %s: %w", spec.TaskID, spec.Host, err)
	}
	b.launched(t, created.UID)
	return nil
}

// blockedBy says, for a pod create or bind refused for a reason a person
// must fix (the namespace missing, Peloton not allowed to create pods
// there, a pod the apiserver finds invalid), what to fix; "" for any other
// error. Such a launch is not the run's failure (hostmgr.ErrLaunchBlocked).
func (b *Backend) blockedBy(ns string, err error) string {
	switch {
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Sprintf("namespace %q does not exist; create it, or change %s", ns, b.namespaceFlag(ns))
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("peloton may not create pods in namespace %q; grant it the peloton-tasks Role there (deploy/kubernetes/rbac.yaml), or change %s", ns, b.namespaceFlag(ns))
	case apierrors.IsInvalid(err):
		return "the apiserver refuses the pod as invalid; fix the job's spec"
	}
	return ""
}

// namespaceFlag names the flag that sends pods to ns, for messages.
func (b *Backend) namespaceFlag(ns string) string {
	for pool, n := range b.cfg.PoolNamespaces {
		if n == ns && ns != b.cfg.Namespace {
			return "the entry " + pool + "=" + ns + " of --kube-pool-namespaces"
		}
	}
	return "--kube-namespace"
}

// errNamespaceRefused is wrapped by ensureNamespaces' error when a
// namespace is missing and Peloton may not create it.
var errNamespaceRefused = errors.New("a namespace is missing")

// ensureNamespaces checks, at start, that every namespace pods go to
// exists, creating those that do not when Peloton may. It refuses to start,
// naming the namespace and its flag, when one is missing and may not be
// created: otherwise every launch would fail. When Peloton may not even
// read namespaces (the RBAC of deploy/kubernetes grants pods only) it
// cannot tell, and says so in the log; a launch into a missing namespace
// then waits with the reason (blockedBy).
func (b *Backend) ensureNamespaces(ctx context.Context) error {
	names := make([]string, 0, len(b.namespaces))
	for ns := range b.namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		err := b.call(ctx, func(ctx context.Context) error {
			_, err := b.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err
		})
		switch {
		case err == nil:
			continue
		case apierrors.IsForbidden(err):
			b.log.Warn("cannot check that the namespace exists (may not get namespaces); launches wait if it does not",
				"namespace", ns, "flag", b.namespaceFlag(ns))
			continue
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("kubernetes: check namespace %q (%s): %w", ns, b.namespaceFlag(ns), err)
		}
		err = b.call(ctx, func(ctx context.Context) error {
			_, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
				Labels: map[string]string{LabelManagedBy: ManagedByValue}}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		if err != nil && transient(err) {
			return fmt.Errorf("kubernetes: create namespace %q (%s): %w", ns, b.namespaceFlag(ns), err)
		}
		if err != nil {
			return fmt.Errorf("kubernetes: namespace %q does not exist and peloton may not create it (%v): create it (kubectl create namespace %s) or change %s: %w",
				ns, err, ns, b.namespaceFlag(ns), errNamespaceRefused)
		}
		b.log.Info("created namespace", "namespace", ns)
	}
	return nil
}

// createAndBind creates the pod and binds it to host: with BindModeBinding
// through the Binding subresource after the create, with BindModeNodeName
// by creating it with spec.nodeName set. A pod of the same name that
// carries this task ID (a create retried after a timeout that had in fact
// succeeded) is taken as created if it is on host or unbound (then it is
// bound); on another node it is an error. It returns the created pod, if any, with the error: the caller
// deletes it, so that nothing is left behind.
func (b *Backend) createAndBind(ctx context.Context, pod *corev1.Pod, host string) (*corev1.Pod, error) {
	if b.cfg.BindMode == BindModeNodeName {
		// The pod is the caller's own, built for this launch: set in
		// place, not on a copy of the whole pod per launch.
		pod.Spec.NodeName = host
	}
	var created *corev1.Pod
	err := b.call(ctx, func(ctx context.Context) error {
		var p *corev1.Pod
		var err error
		if b.cfg.BindMode == BindModeNodeName {
			// The pod as created is the pod as sent, on its node: the
			// apiserver's answer is not decoded (a whole pod a launch,
			// 3 % of Peloton's CPU per pod at 1,000 launches a second).
			p = pod
			err = b.client.CoreV1().RESTClient().Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx).Error()
		} else {
			p, err = b.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		}
		if apierrors.IsAlreadyExists(err) {
			p, err = b.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil && p.Annotations[AnnotationTaskID] != pod.Annotations[AnnotationTaskID] {
				return fmt.Errorf("pod %s/%s exists and is not this run's", pod.Namespace, pod.Name)
			}
		}
		if err != nil {
			return err
		}
		created = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	if created.Spec.NodeName == host {
		return created, nil
	}
	if created.Spec.NodeName != "" {
		// A pod of this run, left from an earlier launch, on another node.
		return created, fmt.Errorf("pod %s/%s of this run is on node %s, not %s", created.Namespace, created.Name, created.Spec.NodeName, host)
	}
	// Unbound: created now in binding mode, or left unbound by an earlier
	// launch in binding mode (whichever the mode now, binding it is right).
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: created.Name, Namespace: created.Namespace, UID: created.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: host},
	}
	// Urgent: the pod exists, unbound, and its startup clock runs.
	err = b.call(urgent(ctx), func(ctx context.Context) error {
		err := b.client.CoreV1().Pods(created.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
		if apierrors.IsConflict(err) {
			// A retried bind whose first try went through.
			if p, gerr := b.client.CoreV1().Pods(created.Namespace).Get(ctx, created.Name, metav1.GetOptions{}); gerr == nil && p.Spec.NodeName == host {
				return nil
			}
		}
		return err
	})
	if err != nil {
		return created, fmt.Errorf("bind pod to node: %w", err)
	}
	return created, nil
}

// call runs fn with a per-call deadline, retrying transient failures with
// exponential backoff for about RequestTimeout*3 in all, or until ctx ends.
func (b *Backend) call(ctx context.Context, fn func(context.Context) error) error {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 2 * time.Second}
	deadline := time.Now().Add(3 * b.cfg.RequestTimeout)
	var err error
	for {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
		err = fn(cctx)
		cancel()
		if err == nil || !transient(err) || ctx.Err() != nil || backoff.Steps <= 1 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-b.stop:
			return err
		case <-time.After(backoff.Step()):
		}
	}
}

// transient reports whether an apiserver error may go away by itself.
func transient(err error) bool {
	if apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") || strings.Contains(s, "http2: client connection lost")
}

// Kill deletes the run's pod with the grace period; KILLED follows when the
// pod is gone (or ends while being deleted). Killing a finished run is a
// no-op; an unknown one is ErrUnknownTask.
func (b *Backend) Kill(ctx context.Context, taskID string, grace time.Duration) error {
	b.mu.Lock()
	t, ok := b.tasks[taskID]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("kubernetes: kill %s: %w", taskID, hostmgr.ErrUnknownTask)
	}
	if t.terminal() || b.closed {
		b.mu.Unlock()
		return nil
	}
	t.killing = true
	ns, name := t.ns, t.name
	b.mu.Unlock()
	// Zero would be a forced deletion: the pod object goes at once while
	// its containers may still run. One second lets the kubelet stop them.
	secs := max(int64(math.Ceil(grace.Seconds())), 1)
	err := b.call(ctx, func(ctx context.Context) error {
		return b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &secs})
	})
	if apierrors.IsNotFound(err) {
		b.mu.Lock()
		if !t.terminal() {
			b.setLocked(t, hostmgr.TaskEvent{State: pelotonv1.TaskState_KILLED, Reason: ReasonKilled})
		}
		b.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: kill %s: delete pod %s/%s: %w", taskID, ns, name, err)
	}
	return nil
}

// Status returns the last event of a run, from memory or, for a run
// launched before a restart and not seen since, from the informer's cache.
func (b *Backend) Status(taskID string) (hostmgr.TaskEvent, error) {
	b.mu.Lock()
	t, ok := b.tasks[taskID]
	var ev hostmgr.TaskEvent
	if ok {
		ev = t.last
	}
	b.mu.Unlock()
	if ok && ev.State != 0 {
		return ev, nil
	}
	if b.pods != nil {
		objs, _ := b.pods.ByIndex(byTask, taskID)
		for _, obj := range objs {
			p := obj.(*corev1.Pod)
			o := observe(p, hasProbe(p))
			if o.state != 0 {
				return hostmgr.TaskEvent{TaskID: taskID, Host: p.Spec.NodeName, State: o.state, ExitCode: o.exitCode,
					Reason: o.reason, Message: o.message, Health: o.health, Time: o.at, Ports: podPorts(p)}, nil
			}
		}
	}
	return hostmgr.TaskEvent{}, fmt.Errorf("kubernetes: status %s: %w", taskID, hostmgr.ErrUnknownTask)
}

func hasProbe(p *corev1.Pod) bool {
	return len(p.Spec.Containers) > 0 && p.Spec.Containers[0].ReadinessProbe != nil
}

// podPorts reads the ports back from a pod's environment.
func podPorts(p *corev1.Pod) map[string]uint32 {
	if len(p.Spec.Containers) == 0 || len(p.Spec.Containers[0].Ports) == 0 {
		return nil
	}
	out := map[string]uint32{}
	for _, cp := range p.Spec.Containers[0].Ports {
		if cp.Name != "" {
			out[cp.Name] = uint32(cp.ContainerPort)
		}
	}
	return out
}

// Logs streams the run's container log through the pods/log subresource.
// Kubernetes keeps stdout and stderr in one log, so both streams read it.
// The apiserver fetches it from the node's kubelet; when it cannot (a node
// without one, such as kwok's), the error says so at once. Since and
// Timestamps are the kubelet's (PodLogOptions.SinceTime and Timestamps),
// which prefixes lines with RFC 3339 times with nanoseconds.
func (b *Backend) Logs(ctx context.Context, taskID string, opts hostmgr.LogOptions) (io.ReadCloser, error) {
	b.mu.Lock()
	t, ok := b.tasks[taskID]
	var ns, name string
	if ok {
		ns, name = t.ns, t.name
	}
	b.mu.Unlock()
	if !ok {
		var objs []any
		if b.pods != nil {
			objs, _ = b.pods.ByIndex(byTask, taskID)
		}
		if len(objs) == 0 {
			return nil, fmt.Errorf("kubernetes: logs %s: %w", taskID, hostmgr.ErrUnknownTask)
		}
		p := objs[0].(*corev1.Pod)
		ns, name = p.Namespace, p.Name
	}
	// The deadline covers opening the stream, not reading it: a follower
	// reads for as long as ctx lasts.
	sctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(b.cfg.RequestTimeout, cancel)
	rc, err := b.client.CoreV1().Pods(ns).GetLogs(name, podLogOptions(opts)).Stream(sctx)
	if !timer.Stop() && err == nil {
		rc.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kubernetes: logs %s: pod %s/%s: %w", taskID, ns, name, err)
	}
	return &cancelCloser{ReadCloser: rc, cancel: cancel}, nil
}

// podLogOptions is what the kubelet is asked for.
func podLogOptions(opts hostmgr.LogOptions) *corev1.PodLogOptions {
	o := &corev1.PodLogOptions{Container: ContainerName, Follow: opts.Follow, Timestamps: opts.Timestamps}
	if !opts.Since.IsZero() {
		since := metav1.NewTime(opts.Since)
		o.SinceTime = &since
	}
	return o
}

type cancelCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelCloser) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// collectFinished deletes pods of finished runs once they are older than
// FinishedPodTTL, so finished work does not pile up in etcd.
func (b *Backend) collectFinished() {
	defer b.wg.Done()
	every := min(b.cfg.FinishedPodTTL/2, time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
		if !b.Substrate().Reachable {
			continue // each delete would wait out its retries
		}
		cutoff := time.Now().Add(-b.cfg.FinishedPodTTL)
		for _, obj := range b.pods.List() {
			p := obj.(*corev1.Pod)
			// A foreign pod's owner keeps or deletes it, not Peloton.
			if !b.managed(p) || b.foreign(p) || !podTerminal(p) || p.DeletionTimestamp != nil || finishedAt(p).After(cutoff) {
				continue
			}
			uid := p.UID
			_ = b.call(context.Background(), func(ctx context.Context) error {
				err := b.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
				if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return nil
				}
				return err
			})
		}
	}
}

func finishedAt(p *corev1.Pod) time.Time {
	t := p.CreationTimestamp.Time
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil && cs.State.Terminated.FinishedAt.After(t) {
			t = cs.State.Terminated.FinishedAt.Time
		}
	}
	return t
}

// Prefetch starts, on each host, a short-lived pod that pulls image and
// exits; the pod is deleted once it ends. It returns once the pods are
// created. The pods request nothing, so they take no room from runs.
func (b *Backend) Prefetch(ctx context.Context, hosts []string, image string) error {
	var errs []error
	for _, h := range hosts {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "peloton-prefetch-", Namespace: b.cfg.Namespace,
				Labels: map[string]string{LabelHelper: helperPrefetch}},
			Spec: corev1.PodSpec{
				NodeName: h, SchedulerName: SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
				AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
				TerminationGracePeriodSeconds: ptr(int64(0)),
				// The command may not exist in the image; the pull, which
				// is all that matters, happens before it is run.
				Containers: []corev1.Container{{Name: "prefetch", Image: image, Command: []string{"/bin/true"},
					ImagePullPolicy: corev1.PullIfNotPresent}},
			},
		}
		err := b.call(ctx, func(ctx context.Context) error {
			_, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kubernetes: prefetch %s: %w", image, errors.Join(errs...))
	}
	return nil
}

// deleteHelper deletes a helper pod in the background.
func (b *Backend) deleteHelper(p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		return
	}
	ns, name := p.Namespace, p.Name
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		_ = b.call(context.Background(), func(ctx context.Context) error {
			err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}()
}

// ReleaseVolume deletes a volume's folder on its node with a short-lived pod
// pinned there, and waits (bounded by ctx and 3×RequestTimeout) for it.
func (b *Backend) ReleaseVolume(ctx context.Context, host, volumeID string) error {
	path := b.volumePath(volumeID)
	if user, ok := b.volumeUser(host, path); ok {
		return fmt.Errorf("kubernetes: release volume %s on %s: in use by run %s", volumeID, host, user)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "peloton-release-volume-", Namespace: b.cfg.Namespace,
			Labels: map[string]string{LabelHelper: helperReleaseVolume}},
		Spec: corev1.PodSpec{
			NodeName: host, SchedulerName: SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
			Volumes: []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: b.cfg.VolumeRoot, Type: ptr(corev1.HostPathDirectoryOrCreate)}}}},
			Containers: []corev1.Container{{Name: "release", Image: b.cfg.DefaultImage,
				Command:      []string{"rm", "-rf", "/root-of-volumes/" + path[len(strings.TrimRight(b.cfg.VolumeRoot, "/"))+1:]},
				VolumeMounts: []corev1.VolumeMount{{Name: "root", MountPath: "/root-of-volumes"}}}},
		},
	}
	var created *corev1.Pod
	err := b.call(ctx, func(ctx context.Context) error {
		p, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		created = p
		return err
	})
	if err != nil {
		return fmt.Errorf("kubernetes: release volume %s on %s: %w", volumeID, host, err)
	}
	defer b.deleteHelper(created)
	wctx, cancel := context.WithTimeout(ctx, 3*b.cfg.RequestTimeout)
	defer cancel()
	for {
		if obj, ok, _ := b.pods.GetByKey(created.Namespace + "/" + created.Name); ok {
			p := obj.(*corev1.Pod)
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				return nil
			case corev1.PodFailed:
				return fmt.Errorf("kubernetes: release volume %s on %s: pod %s failed: %s", volumeID, host, p.Name, p.Status.Message)
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("kubernetes: release volume %s on %s: pod %s did not finish: %w", volumeID, host, created.Name, wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Close stops the informers and goroutines. Runs go on: pods outlive
// Peloton, and a restarted Peloton adopts them. Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.events.drop()
		b.mu.Unlock()
		close(b.stop)
		b.cancelStop()
		b.nodeFactory.Shutdown()
		b.podFactory.Shutdown()
		done := make(chan struct{})
		go func() { b.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait):
			b.closeErr = fmt.Errorf("kubernetes: close: event delivery still blocked in the sink after %s", closeWait)
		}
		b.limiter.Stop()
	})
	return b.closeErr
}

// closeWait bounds how long Close waits for its goroutines; the delivery
// goroutine may be stuck in a sink no one drains any more.
const closeWait = 5 * time.Second

func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var _ hostmgr.RunLister = (*Backend)(nil)

// Runs lists the runs of the pods Peloton manages that are bound and have
// not ended, from the informer's cache, pods created before a restart of the
// control plane included. Resources are the pod's container requests.
func (b *Backend) Runs() []hostmgr.RunInfo {
	if b.pods == nil {
		return nil
	}
	var out []hostmgr.RunInfo
	for _, obj := range b.pods.List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || !b.managed(p) || p.Spec.NodeName == "" {
			continue
		}
		id := p.Annotations[AnnotationTaskID]
		if id == "" {
			continue // a foreign pod not adopted yet
		}
		o := observe(p, hasProbe(p))
		if o.state == 0 || isEnded(o.state) {
			continue
		}
		var r resources.Resources
		for _, c := range p.Spec.Containers {
			r = r.Add(b.fromList(c.Resources.Requests))
		}
		out = append(out, hostmgr.RunInfo{TaskID: id, Host: p.Spec.NodeName, Resources: r,
			Last: hostmgr.TaskEvent{TaskID: id, Host: p.Spec.NodeName, State: o.state, Reason: o.reason, Message: o.message,
				Health: o.health, Time: o.at, Ports: podPorts(p)}})
	}
	return out
}

func isEnded(s pelotonv1.TaskState) bool {
	switch s {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED, pelotonv1.TaskState_LOST,
		pelotonv1.TaskState_PREEMPTED:
		return true
	}
	return false
}
