package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	pkube "github.com/peloton-sched/peloton/hostmgr/kubernetes"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Phases of the kubernetes scenario, as figure-name prefixes. The phases
// at a client QPS and the Peloton phases are named by kubeSchedulerPhase
// and pelotonPhase.
const (
	phaseRaw       = "raw"
	phaseKSDefault = "kubeSchedulerDefault"
)

// Per-phase figure suffixes: created→bound throughput, time until the last
// pod is Running, and pod startup latency (pod first seen → Running, both as
// a watch observes them; the Kubernetes SLO's definition).
//
// The Cpu* figures are the CPU time each process used from the start of
// the phase until its last pod ran, per pod: kube-apiserver, kwok,
// kube-scheduler (its phases only) and this process, which holds the
// apiserver's etcd and the bench's own clients and watch (Peloton runs in
// a process of its own, see pelotonSuffixes). MachineBusyPct is how busy
// all the machine's cores were over the same span, other tenants' work
// included.
var kubePhaseSuffixes = []string{"BoundPerSec", "AllRunningS", "StartupMsP50", "StartupMsP99",
	"CpuApiserverMsPerPod", "CpuKwokMsPerPod", "CpuKubeSchedulerMsPerPod", "CpuBenchMsPerPod", "MachineBusyPct"}

// Figure suffixes of each Peloton phase besides kubePhaseSuffixes: the time
// to its first pod, its BoundPerSec over the other phases' of the run, the
// CPU of the Peloton process (`peloton up`, its embedded etcd included) per
// pod over the same span as the other Cpu* figures, and that over
// kube-scheduler's per pod in the equal-QPS phase of the same run.
var pelotonSuffixes = []string{"FirstPodMs", "VsRaw", "VsKubeSchedulerDefault", "VsKubeSchedulerEqualQps",
	"CpuPelotonMsPerPod", "CpuVsKubeScheduler"}

// qpsName spells a client QPS in a figure name or namespace: 200, 1000,
// 12p5 for 12.5.
func qpsName(q float32) string {
	return strings.ReplaceAll(strconv.FormatFloat(float64(q), 'f', -1, 32), ".", "p")
}

// kubeSchedulerPhase is the phase of kube-scheduler at client QPS q.
func kubeSchedulerPhase(q float32) string { return "kubeSchedulerQps" + qpsName(q) }

// pelotonPhase is the phase of Peloton in bind mode m at client QPS q:
// pelotonBindingQps200, pelotonNodeNameQps1000.
func pelotonPhase(m string, q float32) string {
	var b strings.Builder
	b.WriteString("peloton")
	for _, w := range strings.Split(m, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String() + "Qps" + qpsName(q)
}

// kubernetesPhases lists the phases of a run of cfg, in the order they run.
func kubernetesPhases(cfg KubernetesConfig) []string {
	ps := []string{phaseRaw, phaseKSDefault}
	for _, q := range cfg.QPS {
		ps = append(ps, kubeSchedulerPhase(q))
		for _, m := range cfg.BindModes {
			ps = append(ps, pelotonPhase(m, q))
		}
	}
	return ps
}

// kubernetesFiguresOf lists the figures a run of cfg reports.
func kubernetesFiguresOf(cfg KubernetesConfig) []string {
	var fs []string
	for _, p := range kubernetesPhases(cfg) {
		for _, s := range kubePhaseSuffixes {
			fs = append(fs, p+s)
		}
	}
	for _, q := range cfg.QPS {
		for _, m := range cfg.BindModes {
			for _, s := range pelotonSuffixes {
				fs = append(fs, pelotonPhase(m, q)+s)
			}
		}
	}
	return fs
}

// kubernetesFigures are the figures of a run at the default sizes; other
// --qps and --bind-modes name other phases.
var kubernetesFigures = kubernetesFiguresOf(DefaultKubernetesConfig())

// kubeSchedulerDefaultQPS and Burst are kube-scheduler's own defaults for
// clientConnection (KubeSchedulerConfiguration v1), quoted in the output;
// the default run leaves them unset so the binary applies its own.
const (
	kubeSchedulerDefaultQPS   = 50
	kubeSchedulerDefaultBurst = 100
)

// KubernetesConfig sizes the kubernetes scenario.
type KubernetesConfig struct {
	// Nodes is the number of kwok nodes; NodeCPU and NodeMemoryGiB their
	// allocatable resources (110 pods each, the kubelet's default).
	Nodes         int
	NodeCPU       int
	NodeMemoryGiB int
	// Pods is the pods of each phase (Peloton: instances of its one job),
	// each requesting PodCPU and PodMemoryMB (requests = limits).
	Pods        int
	PodCPU      float64
	PodMemoryMB int
	// QPS are the client rates Peloton runs at, each against kube-scheduler
	// at the same rate (its equal-QPS phase). Burst is the burst of all of
	// them (0: twice each QPS).
	QPS   []float32
	Burst int
	// BindModes are the backend's bind modes Peloton runs in, one phase
	// each at every QPS.
	BindModes []string
	// CreateQPS and CreateWorkers drive the bench's own client that creates
	// the pods of the raw and kube-scheduler phases.
	CreateQPS     float32
	CreateWorkers int
	// KwokPodWorkers is how many pods kwok turns Running at once (see
	// the harness's KubeHarness.Start; 0: kwok's default, 4).
	KwokPodWorkers int
	// PhaseTimeout bounds each phase, from the first create to the last pod
	// Running.
	PhaseTimeout time.Duration
	// Bin is the folder with kube-apiserver, kube-scheduler and kwok
	// (empty: what `make kube-tools` built, see KubeHarness.Tools).
	Bin string
	// PelotonBin is the peloton binary whose `up` runs Peloton's phases,
	// each in a process of its own (empty: this executable, when it is a
	// peloton binary).
	PelotonBin string
	// PelotonCPUProfile, if set, is where each Peloton phase's process
	// writes its CPU profile: the phase's name is added before the
	// extension (peloton.prof: peloton-pelotonNodeNameQps1000.prof).
	PelotonCPUProfile string
}

// DefaultKubernetesConfig is the size: 10,000 pods of 0.1 CPU on
// 1,000 kwok nodes of 32 CPUs, Peloton at the backend's default QPS in
// both bind modes.
func DefaultKubernetesConfig() KubernetesConfig {
	return KubernetesConfig{
		Nodes: 1000, NodeCPU: 32, NodeMemoryGiB: 128,
		Pods: 10000, PodCPU: 0.1, PodMemoryMB: 64,
		QPS:       []float32{pkube.DefaultQPS},
		BindModes: []string{string(pkube.BindModeBinding), string(pkube.BindModeNodeName)},
		CreateQPS: 5000, CreateWorkers: 64, KwokPodWorkers: DefaultKwokPodWorkers,
		PhaseTimeout: 10 * time.Minute,
	}
}

// DefaultKwokPodWorkers stands in for the kubelets of many nodes, each of
// which starts its own pods (see docs/benchmarks.md for what it changes).
const DefaultKwokPodWorkers = 64

// Validate checks the config; every error names the flag at fault.
func (c *KubernetesConfig) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 5000:
		return fmt.Errorf("--nodes %d: must be 1..5000", c.Nodes)
	case c.Pods < 1 || c.Pods > maxInstances:
		return fmt.Errorf("--pods %d: must be 1..%d", c.Pods, maxInstances)
	case c.NodeCPU < 1 || c.NodeMemoryGiB < 1:
		return fmt.Errorf("--node-cpu and --node-memory-gib: must be >= 1")
	case c.PodCPU < 0.001 || c.PodMemoryMB < 1:
		return fmt.Errorf("--pod-cpu and --pod-memory-mb: must be >= 0.001 and >= 1")
	// Half the cluster at most, so that any spread a scheduler picks fits.
	case float64(c.Pods) > float64(c.Nodes)*55,
		float64(c.Pods)*c.PodCPU > float64(c.Nodes*c.NodeCPU)/2,
		c.Pods*c.PodMemoryMB > c.Nodes*c.NodeMemoryGiB*1024/2:
		return fmt.Errorf("--pods %d: must fill at most half of the %d nodes (55 pods, half the CPU and memory of each)", c.Pods, c.Nodes)
	case len(c.QPS) == 0 || len(c.QPS) > 4 || c.Burst < 0:
		return fmt.Errorf("--qps %v and --burst %d: want 1 to 4 rates and a burst >= 0", c.QPS, c.Burst)
	case len(c.BindModes) == 0:
		return fmt.Errorf("--bind-modes: want at least one of %s, %s", pkube.BindModeBinding, pkube.BindModeNodeName)
	case c.CreateQPS <= 0 || c.CreateWorkers < 1 || c.CreateWorkers > 1000:
		return fmt.Errorf("--create-qps %g and --create-workers %d: must be > 0 and 1..1000", c.CreateQPS, c.CreateWorkers)
	case c.KwokPodWorkers < 0 || c.KwokPodWorkers > 1000:
		return fmt.Errorf("--kwok-pod-workers %d: must be 0..1000", c.KwokPodWorkers)
	case c.PhaseTimeout <= 0:
		return fmt.Errorf("--phase-timeout %s: must be > 0", c.PhaseTimeout)
	}
	seen := map[string]bool{}
	for _, q := range c.QPS {
		if q <= 0 || q > 100_000 || seen[qpsName(q)] {
			return fmt.Errorf("--qps %v: each rate must be > 0 and <= 100000, and listed once", c.QPS)
		}
		seen[qpsName(q)] = true
	}
	for _, m := range c.BindModes {
		if _, err := pkube.ParseBindMode(m); err != nil || seen[m] {
			return fmt.Errorf("--bind-modes %v: each must be %s or %s, and listed once", c.BindModes, pkube.BindModeBinding, pkube.BindModeNodeName)
		}
		seen[m] = true
	}
	return nil
}

// burst is the client burst at QPS q.
func (c *KubernetesConfig) burst(q float32) int {
	if c.Burst > 0 {
		return c.Burst
	}
	return int(math.Ceil(float64(q) * 2))
}

// Kubernetes measures, in one run against one kube-apiserver with kwok
// nodes, how fast the same number of pods get bound and Running when
// (1) created already bound (the ceiling of this apiserver and kwok),
// (2) placed by kube-scheduler of the same version at its default client
// QPS, and then, for each of cfg.QPS, (3) by kube-scheduler at that QPS and
// (4) by Peloton at that QPS as one BATCH job, once per bind mode. Each
// phase has its own namespace, and its pods are deleted before the next one
// starts. Times are what an informer in this process observes.
func Kubernetes(ctx context.Context, env Env, cfg KubernetesConfig) (_ *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	harness, err := registeredKubeHarness()
	if err != nil {
		return nil, err
	}
	pelotonBin, err := pelotonBinary(cfg.PelotonBin)
	if err != nil {
		return nil, err
	}
	bin := cfg.Bin
	if bin == "" {
		if bin, err = harness.Tools(); err != nil {
			return nil, err
		}
	}
	r := newResult(ScenarioKubernetes)
	r.param("nodes", cfg.Nodes)
	r.param("nodeCpu", cfg.NodeCPU)
	r.param("pods", cfg.Pods)
	r.param("podCpu", cfg.PodCPU)
	r.param("podMemoryMb", cfg.PodMemoryMB)
	r.param("qps", cfg.QPS)
	r.param("burst", cfg.Burst)
	r.param("bindModes", strings.Join(cfg.BindModes, ","))
	r.param("createQps", cfg.CreateQPS)
	r.param("createWorkers", cfg.CreateWorkers)
	r.param("kwokPodWorkers", cfg.KwokPodWorkers)

	dir, err := os.MkdirTemp("", "peloton-bench-kube-*")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env.progress("kubernetes: starting etcd, kube-apiserver and kwok")
	kc, err := harness.Start(dir, bin, env.logger(), cfg.KwokPodWorkers)
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	if v, err := kc.Client().Discovery().ServerVersion(); err == nil {
		r.param("kubernetes", v.GitVersion)
	}
	env.progress("kubernetes: creating %d kwok nodes", cfg.Nodes)
	nodes, err := kc.AddNodes(ctx, "bench", cfg.Nodes, fmt.Sprint(cfg.NodeCPU), fmt.Sprintf("%dGi", cfg.NodeMemoryGiB), "110")
	if err != nil {
		return nil, err
	}
	creator, err := creatorClient(kc.RESTConfig(), cfg)
	if err != nil {
		return nil, err
	}
	b := &kubeBench{env: env, cfg: cfg, harness: harness, kc: kc, bin: bin, pelotonBin: pelotonBin, dir: dir, creator: creator, nodes: nodes}
	if err := b.untaintNotReady(ctx); err != nil {
		return nil, err
	}

	phases := kubernetesPhases(cfg)
	b.last = phases[len(phases)-1]
	res := map[string]phaseResult{}
	var pr phaseResult
	if pr, err = b.raw(ctx); err != nil {
		return nil, err
	}
	res[phaseRaw] = pr
	if pr, err = b.kubeScheduler(ctx, phaseKSDefault, "bench-ks-default", 0, 0); err != nil {
		return nil, err
	}
	res[phaseKSDefault] = pr
	for _, q := range cfg.QPS {
		name := kubeSchedulerPhase(q)
		if pr, err = b.kubeScheduler(ctx, name, "bench-ks-qps-"+qpsName(q), q, cfg.burst(q)); err != nil {
			return nil, err
		}
		res[name] = pr
		for _, m := range cfg.BindModes {
			name := pelotonPhase(m, q)
			if pr, err = b.peloton(ctx, name, m, q); err != nil {
				return nil, err
			}
			res[name] = pr
		}
	}

	startupGoal := map[string]string{}
	for _, q := range cfg.QPS {
		for _, m := range cfg.BindModes {
			startupGoal[pelotonPhase(m, q)] = "goal <= 5000 (the Kubernetes pod startup SLO)"
			if q == 200 {
				startupGoal[pelotonPhase(m, q)] = "goal < 1000"
			}
		}
	}
	for _, p := range phases {
		x := res[p]
		r.add(p+"BoundPerSec", x.boundPerSec, "pods/s", "")
		r.add(p+"AllRunningS", x.allRunning.Seconds(), "s", "first create (or CreateJob) to last pod Running")
		r.add(p+"StartupMsP50", x.startupP50, "ms", "")
		r.add(p+"StartupMsP99", x.startupP99, "ms", startupGoal[p])
		perPod := func(d time.Duration) float64 { return ms(d) / float64(cfg.Pods) }
		r.add(p+"CpuApiserverMsPerPod", perPod(x.cpu.apiserver), "ms", "kube-apiserver CPU, start -> last pod Running")
		r.add(p+"CpuKwokMsPerPod", perPod(x.cpu.kwok), "ms", "")
		r.add(p+"CpuKubeSchedulerMsPerPod", perPod(x.cpu.scheduler), "ms", "")
		r.add(p+"CpuBenchMsPerPod", perPod(x.cpu.bench), "ms", "this process: the apiserver's etcd, the bench's clients and watch (not Peloton)")
		r.add(p+"MachineBusyPct", x.cpu.machineBusyPct, "%", "all cores, every tenant")
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return math.NaN()
		}
		return a / b
	}
	for _, q := range cfg.QPS {
		for _, m := range cfg.BindModes {
			p := pelotonPhase(m, q)
			pb := res[p].boundPerSec
			r.add(p+"FirstPodMs", ms(res[p].firstPod), "ms", "CreateJob to the first pod seen")
			r.add(p+"VsRaw", ratio(pb, res[phaseRaw].boundPerSec), "x", "bound/s; goal >= 0.95")
			r.add(p+"VsKubeSchedulerDefault", ratio(pb, res[phaseKSDefault].boundPerSec), "x", "bound/s; goal >= 10")
			r.add(p+"VsKubeSchedulerEqualQps", ratio(pb, res[kubeSchedulerPhase(q)].boundPerSec), "x",
				fmt.Sprintf("bound/s, over %s; goal >= 1.5", kubeSchedulerPhase(q)))
			r.add(p+"CpuPelotonMsPerPod", ms(res[p].cpu.peloton)/float64(cfg.Pods), "ms",
				"the peloton up process (its etcd included), start -> last pod Running")
			r.add(p+"CpuVsKubeScheduler", ratio(float64(res[p].cpu.peloton), float64(res[kubeSchedulerPhase(q)].cpu.scheduler)), "x",
				fmt.Sprintf("CPU per pod, over kube-scheduler's in %s; goal <= 0.5", kubeSchedulerPhase(q)))
		}
	}
	r.note("kube-scheduler default client QPS/burst is its own (%d/%d); each kubeSchedulerQps<q> phase sets clientConnection.qps/burst to q and Peloton's burst at q (--burst, or 2q)",
		kubeSchedulerDefaultQPS, kubeSchedulerDefaultBurst)
	r.note("Peloton's phases are named by --kube-bind-mode: pelotonBinding* creates each pod, then binds it through the Binding subresource (2 writes per pod); pelotonNodeName* creates it with spec.nodeName set (1 write per pod)")
	r.note("startup is pod first seen by a watch -> Running; Peloton creates a pod only after placing it, so its queueing before that is in AllRunningS and FirstPodMs, not in its startup")
	return r.finish(), nil
}

// kubeBench is one run's shared state.
type kubeBench struct {
	env     Env
	cfg     KubernetesConfig
	harness KubeHarness
	kc      KubeCluster
	bin     string
	// pelotonBin is the peloton binary whose `up` runs Peloton's phases.
	pelotonBin string
	dir        string
	creator    kubernetes.Interface
	nodes      []string
	// last is the last phase: its pods are not deleted, the cluster goes.
	last string
}

// creatorClient is the client that creates pods for the raw and
// kube-scheduler phases, at CreateQPS.
func creatorClient(base *rest.Config, cfg KubernetesConfig) (kubernetes.Interface, error) {
	rc := rest.CopyConfig(base)
	rc.QPS, rc.Burst = cfg.CreateQPS, int(cfg.CreateQPS)
	rc.UserAgent = "peloton-bench"
	return kubernetes.NewForConfig(rc)
}

// untaintNotReady removes the node.kubernetes.io/not-ready taint the
// apiserver puts on every new node. In a real cluster the node lifecycle
// controller (kube-controller-manager) removes it once the kubelet reports
// Ready; this cluster has no controller-manager, and kube-scheduler would
// never place a pod on a node that keeps it.
func (b *kubeBench) untaintNotReady(ctx context.Context) error {
	patch := []byte(`{"spec":{"taints":null}}`)
	return b.parallel(ctx, len(b.nodes), func(ctx context.Context, i int) error {
		n, err := b.creator.CoreV1().Nodes().Get(ctx, b.nodes[i], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				return fmt.Errorf("node %s has taint %s, which the bench did not expect", n.Name, t.Key)
			}
		}
		if len(n.Spec.Taints) == 0 {
			return nil
		}
		_, err = b.creator.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// raw creates the pods with spec.nodeName set, round robin over the nodes:
// no scheduler at all, only the apiserver and kwok.
func (b *kubeBench) raw(ctx context.Context) (phaseResult, error) {
	ns := "bench-raw"
	return b.phase(ctx, phaseRaw, ns, phaseProcs{}, nil, func(ctx context.Context) error {
		return b.createPods(ctx, ns, func(i int, p *corev1.Pod) { p.Spec.NodeName = b.nodes[i%len(b.nodes)] })
	})
}

// kubeScheduler runs kube-scheduler at the given client QPS and burst (0:
// its defaults), waits until it has bound a warm-up pod, and measures it
// placing unbound pods.
func (b *kubeBench) kubeScheduler(ctx context.Context, name, ns string, qps float32, burst int) (phaseResult, error) {
	b.env.progress("kubernetes: %s: starting kube-scheduler", name)
	ks, err := b.startKubeScheduler(name, qps, burst)
	if err != nil {
		return phaseResult{}, err
	}
	defer ks.Stop()
	if err := b.warmUp(ctx, ks, ns+"-warmup"); err != nil {
		return phaseResult{}, err
	}
	return b.phase(ctx, name, ns, phaseProcs{sched: ks}, ks.Stop, func(ctx context.Context) error {
		return b.createPods(ctx, ns, func(_ int, p *corev1.Pod) { p.Spec.SchedulerName = corev1.DefaultSchedulerName })
	})
}

// warmUp waits (bounded) until kube-scheduler binds one pod, so that its
// start-up is not measured, and deletes that pod.
func (b *kubeBench) warmUp(ctx context.Context, ks KubeProc, ns string) error {
	if err := b.kc.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	p := benchPod(ns, "warmup", b.cfg)
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	pods := b.kc.Client().CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bench: warm-up pod: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err := waitFor(wctx, 100*time.Millisecond, "kube-scheduler binding a warm-up pod", func() (bool, string, error) {
		if ks.Exited() {
			return false, "", fmt.Errorf("bench: kube-scheduler exited: %v\n%s", ks.Err(), ks.Tail(20))
		}
		got, err := pods.Get(wctx, "warmup", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return got.Spec.NodeName != "", "not bound yet", nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, ks.Tail(20))
	}
	return b.clean(ctx, ns)
}

// peloton runs `peloton up` on the kubernetes backend, in a process of its
// own, in bind mode mode at client QPS qps, with its pods in a namespace
// of its own, and submits one BATCH job of Pods instances.
func (b *kubeBench) peloton(ctx context.Context, name, mode string, qps float32) (phaseResult, error) {
	b.env.progress("kubernetes: %s: starting %s up on the kubernetes backend", name, b.pelotonBin)
	ns := "bench-peloton-" + mode + "-qps-" + qpsName(qps)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	args := []string{"--backend", pkube.BackendName, "--kubeconfig", b.kc.Kubeconfig(), "--kube-namespace", ns,
		"--kube-qps", strconv.FormatFloat(float64(qps), 'f', -1, 32), "--kube-burst", strconv.Itoa(b.cfg.burst(qps)),
		"--kube-bind-mode", mode}
	if p := b.cfg.PelotonCPUProfile; p != "" {
		ext := filepath.Ext(p)
		args = append(args, "--cpuprofile", strings.TrimSuffix(p, ext)+"-"+name+ext)
	}
	s, err := startPelotonProc(sctx, b.pelotonBin, filepath.Join(b.dir, "peloton-"+name), filepath.Join(b.dir, "peloton-"+name+".log"), args)
	if err != nil {
		return phaseResult{}, fmt.Errorf("bench: %s: %w", name, err)
	}
	defer s.stop()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = waitFor(hctx, 200*time.Millisecond, "Peloton seeing every kwok node", func() (bool, string, error) {
		if s.exited() {
			return false, "", fmt.Errorf("bench: peloton up exited: %v\n%s", s.err, s.tail(20))
		}
		hl, err := s.api.Hosts.ListHosts(hctx, &pelotonv1.ListHostsRequest{})
		if err != nil {
			return false, "", fmt.Errorf("ListHosts: %w", err)
		}
		return len(hl.Hosts) >= len(b.nodes), fmt.Sprintf("%d of %d hosts", len(hl.Hosts), len(b.nodes)), nil
	})
	if err != nil {
		return phaseResult{}, err
	}
	spec := &pelotonv1.JobSpec{Name: "bench-kubernetes", Type: pelotonv1.JobType_BATCH, Pool: "/default",
		InstanceCount: uint32(b.cfg.Pods),
		DefaultSpec: &pelotonv1.TaskSpec{Command: []string{"serve"},
			Resources: &pelotonv1.Resources{Cpu: b.cfg.PodCPU, MemoryMb: float64(b.cfg.PodMemoryMB)}}}
	return b.phase(ctx, name, ns, phaseProcs{peloton: s}, s.stop, func(ctx context.Context) error {
		if _, err := s.api.Jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec}); err != nil {
			return fmt.Errorf("CreateJob: %w", err)
		}
		return nil
	})
}

// phaseResult is what one phase measured.
type phaseResult struct {
	boundPerSec            float64
	allRunning, firstPod   time.Duration
	startupP50, startupP99 float64
	cpu                    cpuUse
}

// cpuUse is the CPU the processes of a run used over one phase.
type cpuUse struct {
	apiserver, kwok, scheduler, peloton, bench time.Duration
	machineBusy, machineTotal                  time.Duration
	machineBusyPct                             float64
}

// phaseProcs are the scheduler processes of a phase whose CPU is counted:
// kube-scheduler in its phases, Peloton in its own.
type phaseProcs struct {
	sched   KubeProc
	peloton *pelotonProc
}

// cpuNow samples the CPU used so far. A scheduler that has exited is an
// error: its CPU can no longer be read.
func (b *kubeBench) cpuNow(ps phaseProcs) (cpuUse, error) {
	var u cpuUse
	var err error
	u.apiserver, u.kwok = b.kc.CPU()
	if ps.sched != nil {
		if u.scheduler, err = ps.sched.CPU(); err != nil {
			return u, fmt.Errorf("bench: kube-scheduler's CPU: %w\n%s", err, ps.sched.Tail(20))
		}
	}
	if ps.peloton != nil {
		if u.peloton, err = ps.peloton.cpu(); err != nil {
			return u, err
		}
	}
	u.bench = b.harness.SelfCPU()
	u.machineBusy, u.machineTotal, _ = b.harness.MachineCPU()
	return u, nil
}

// since is the CPU used from then until u.
func (u cpuUse) since(then cpuUse) cpuUse {
	d := cpuUse{apiserver: u.apiserver - then.apiserver, kwok: u.kwok - then.kwok,
		scheduler: u.scheduler - then.scheduler, peloton: u.peloton - then.peloton, bench: u.bench - then.bench,
		machineBusy: u.machineBusy - then.machineBusy, machineTotal: u.machineTotal - then.machineTotal}
	if d.machineTotal > 0 {
		d.machineBusyPct = 100 * float64(d.machineBusy) / float64(d.machineTotal)
	}
	return d
}

// phase watches namespace ns, calls start (which creates the pods or the
// job), waits until Pods pods run, calls stop (if not nil) and deletes them
// all; ps are the schedulers whose CPU is counted. The time origin is the
// call of start. stop ends what placed the pods before they go: Peloton
// would take its deleted pods for lost runs and launch them again.
func (b *kubeBench) phase(ctx context.Context, name, ns string, ps phaseProcs, stop func(), start func(context.Context) error) (phaseResult, error) {
	if err := b.kc.CreateNamespace(ctx, ns); err != nil {
		return phaseResult{}, fmt.Errorf("bench: namespace %s: %w", ns, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PhaseTimeout)
	defer cancel()
	w, err := watchPods(ctx, b.kc.RESTConfig(), ns, b.cfg.Pods)
	if err != nil {
		return phaseResult{}, err
	}
	defer w.stop()
	b.env.progress("kubernetes: %s: %d pods", name, b.cfg.Pods)
	cpu0, err := b.cpuNow(ps)
	if err != nil {
		return phaseResult{}, err
	}
	t0 := time.Now()
	startErr := make(chan error, 1)
	go func() { startErr <- start(ctx) }()
	if err := w.wait(ctx, startErr, func(bound, running int) {
		b.env.progress("kubernetes: %s: %d bound, %d running", name, bound, running)
	}); err != nil {
		return phaseResult{}, fmt.Errorf("bench: %s: %w", name, err)
	}
	pr := w.result(t0)
	cpu1, err := b.cpuNow(ps)
	if err != nil {
		return phaseResult{}, err
	}
	pr.cpu = cpu1.since(cpu0)
	b.env.progress("kubernetes: %s: all running after %s", name, pr.allRunning.Round(time.Millisecond))
	if stop != nil {
		stop()
	}
	if name != b.last { // after the last phase the cluster goes away
		b.env.progress("kubernetes: %s: deleting the pods", name)
		if err := b.clean(ctx, ns); err != nil {
			return phaseResult{}, err
		}
	}
	return pr, nil
}

// createPods creates Pods pods in ns from CreateWorkers goroutines; edit
// adjusts pod i.
func (b *kubeBench) createPods(ctx context.Context, ns string, edit func(i int, p *corev1.Pod)) error {
	return b.parallel(ctx, b.cfg.Pods, func(ctx context.Context, i int) error {
		p := benchPod(ns, fmt.Sprintf("pod-%d", i), b.cfg)
		edit(i, p)
		if _, err := b.creator.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s/%s: %w", ns, p.Name, err)
		}
		return nil
	})
}

// parallel calls do for 0..n-1 from CreateWorkers goroutines. The first
// error stops them all.
func (b *kubeBench) parallel(ctx context.Context, n int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(b.cfg.CreateWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// clean deletes every pod of ns (grace 0: no kubelet needs to agree),
// one call per pod from CreateWorkers goroutines - a DeleteCollection of
// 10,000 pods outlasts any sane client timeout, as the apiserver deletes
// them with one worker by default - and waits, bounded, until none is left.
func (b *kubeBench) clean(ctx context.Context, ns string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pods := b.creator.CoreV1().Pods(ns)
	var names []string
	opts := metav1.ListOptions{Limit: 1000}
	for pages := 0; ; pages++ {
		if pages > maxInstances/1000+10 {
			return fmt.Errorf("bench: listing the pods of %s: too many pages", ns)
		}
		l, err := pods.List(cctx, opts)
		if err != nil {
			return fmt.Errorf("bench: list the pods of %s: %w", ns, err)
		}
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	zero := int64(0)
	err := b.parallel(cctx, len(names), func(ctx context.Context, i int) error {
		err := pods.Delete(ctx, names[i], metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("bench: delete pod %s/%s: %w", ns, names[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitFor(cctx, 250*time.Millisecond, "deleting the pods of "+ns, func() (bool, string, error) {
		l, err := pods.List(cctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, err.Error(), nil
		}
		left := len(l.Items)
		if l.RemainingItemCount != nil {
			left += int(*l.RemainingItemCount)
		}
		return left == 0, fmt.Sprintf("%d left", left), nil
	})
}

// benchPod is the pod every phase runs: requests = limits, a command kwok
// runs until the pod is deleted, no grace period.
func benchPod(ns, name string, cfg KubernetesConfig) *corev1.Pod {
	q := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(math.Round(cfg.PodCPU*1000)), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(cfg.PodMemoryMB)<<20, resource.BinarySI),
	}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "peloton-bench"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10", Command: []string{"serve"},
				Resources: corev1.ResourceRequirements{Requests: q, Limits: q},
			}},
		},
	}
}

// startKubeScheduler runs kube-scheduler against the cluster with leader
// election off and no serving port; qps 0 leaves its client rate at the
// binary's defaults.
func (b *kubeBench) startKubeScheduler(name string, qps float32, burst int) (KubeProc, error) {
	conn := fmt.Sprintf("  kubeconfig: %q\n", b.kc.Kubeconfig())
	if qps > 0 {
		conn += fmt.Sprintf("  qps: %g\n  burst: %d\n", qps, burst)
	}
	cfgPath := filepath.Join(b.dir, "kube-scheduler-"+name+".yaml")
	yaml := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"clientConnection:\n" + conn + "leaderElection:\n  leaderElect: false\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	return b.harness.StartProc(b.dir, "kube-scheduler-"+name, filepath.Join(b.bin, "kube-scheduler"),
		[]string{"--config=" + cfgPath, "--secure-port=0"})
}
