// Package kubetest runs a real, throw-away Kubernetes control plane for
// tests: an embedded etcd, the kube-apiserver binary, and kwok, which plays
// the kubelet of fake nodes. There is no controller-manager and no
// scheduler: whatever binds pods (Peloton) is under test.
//
// The binaries come from `make kube-tools` (hack/kube-tools.sh), which
// builds them once per machine into ~/.cache/peloton/kube/<version>/bin
// (outside any clone, so every clone reuses them). When they are missing,
// Start skips the test with a message that says so; `make test` always
// builds them first, so CI never skips.
//
// Pods on kwok nodes run the tiny command language described in stages.go
// (sleep S, true, false, exit N), or what the annotations
// AnnotationSimDuration and AnnotationSimExitCode say.
//
// Everything listens on loopback. The apiserver advertises an address from
// TEST-NET-1 (RFC 5737) that it must not be loopback but that nothing
// dials. Every wait is bounded. It is a normal package so that tests of
// several packages can use it, and `peloton bench kubernetes` starts its
// cluster with New through bench/kubeharness, linked only into a peloton
// built with -tags kubebench. No component of Peloton may import it, and
// the release binary does not link it (cmd/peloton/deps_test.go).
package kubetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/peloton-sched/peloton/internal/store"
)

// EnvBin names the folder holding kube-apiserver, kube-scheduler and kwok;
// the Makefile sets it. Without it, Tools looks in the per-machine cache
// (PELOTON_CACHE, else the user's cache dir /peloton) and, for trees set up
// before the cache moved there, under .cache/kube of the module the test
// runs in.
const EnvBin = "PELOTON_KUBE_BIN"

// advertiseAddress is what the apiserver advertises for the kubernetes
// service. It must not be loopback; no one connects to it.
var advertiseAddress = net.IPv4(192, 0, 2, 1)

// Timeouts of the harness's waits.
const (
	apiserverReadyTimeout = 90 * time.Second
	nodesReadyTimeout     = 60 * time.Second
	// stopGrace is how long a process gets to exit after SIGTERM before
	// SIGKILL. kube-apiserver 1.36 stops serving at once on SIGTERM but
	// its process lingers for many seconds; nothing it holds needs a clean
	// exit (etcd has the data), so the tests do not wait for it.
	stopGrace = time.Second
)

// Tools returns the folder with the three binaries, or an error that says
// how to build them.
func Tools() (string, error) {
	names := []string{"kube-apiserver", "kube-scheduler", "kwok"}
	has := func(dir string) bool {
		for _, n := range names {
			if st, err := os.Stat(filepath.Join(dir, n)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(EnvBin); dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("kubetest: %s=%s does not hold %s; run `make kube-tools`", EnvBin, dir, strings.Join(names, ", "))
	}
	// newest returns the newest complete build under a kube cache folder.
	newest := func(kube string) string {
		stamps, _ := filepath.Glob(filepath.Join(kube, "*", "bin", ".stamp"))
		sort.Slice(stamps, func(i, j int) bool { return modTime(stamps[i]).After(modTime(stamps[j])) })
		for _, s := range stamps {
			if bin := filepath.Dir(s); has(bin) {
				return bin
			}
		}
		return ""
	}
	if cache := CacheDir(); cache != "" {
		if bin := newest(filepath.Join(cache, "kube")); bin != "" {
			return bin, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if bin := newest(filepath.Join(dir, ".cache", "kube")); bin != "" {
				return bin, nil
			}
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", errors.New("kubetest: kube-apiserver and kwok are not built; run `make kube-tools` (or `make test`, which builds them)")
}

func modTime(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// Options configures a test cluster.
type Options struct {
	// Logger receives the harness's progress (default: discarded).
	Logger *slog.Logger
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// KwokPodWorkers is how many pods kwok moves through their stages at
	// once (its podPlayStageParallelism; 0: kwok's default, 4). Each is a
	// status write to the apiserver. kwok's client has no rate limit of its
	// own, so with many nodes these workers, standing in for one kubelet
	// per node, are what bounds how fast bound pods turn Running.
	KwokPodWorkers int
}

// Cluster is a running test control plane.
type Cluster struct {
	// Kubeconfig is a kubeconfig file for the cluster's administrator.
	Kubeconfig string
	// Config is the same, for client-go.
	Config *rest.Config
	// Client is a clientset for the administrator.
	Client kubernetes.Interface

	dir  string
	bin  string
	log  *slog.Logger
	pki  *pki
	etcd *store.Embedded
	port int
	args []string
	// kwokPodWorkers is Options.KwokPodWorkers.
	kwokPodWorkers int

	mu        sync.Mutex
	apiserver *Proc
	kwok      *Proc
	kcm       *Proc
	scheduler *Proc
	closeOnce sync.Once
}

// Start starts a cluster for t and stops it when t ends. It skips t when the
// binaries are not built, and fails t when the cluster does not start.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, err := Tools()
	if err != nil {
		t.Skip(err.Error())
	}
	c, err := New(t.TempDir(), bin, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(40))
		}
		c.Close()
	})
	return c
}

// New starts a cluster whose files live in dir, with the binaries in bin.
// Close stops it. Tests use Start; New is for a TestMain that shares one
// cluster between the tests of a package.
func New(dir, bin string, opts Options) (_ *Cluster, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{dir: dir, bin: bin, log: log, kwokPodWorkers: opts.KwokPodWorkers}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.LogTails(30))
			c.Close()
		}
	}()
	if c.pki, err = newPKI(dir, advertiseAddress); err != nil {
		return nil, fmt.Errorf("kubetest: certificates: %w", err)
	}
	c.etcd, err = store.StartEmbedded(store.EmbeddedConfig{
		DataDir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0", Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("kubetest: etcd: %w", err)
	}
	if c.port, err = FreePort(); err != nil {
		return nil, err
	}
	c.args = append([]string{
		// The apiserver is another program: it gets the TCP listener.
		"--etcd-servers=" + c.etcd.TCPEndpoint(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.port),
		"--advertise-address=" + advertiseAddress.String(),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + c.pki.servingCert,
		"--tls-private-key-file=" + c.pki.servingKey,
		"--client-ca-file=" + c.pki.caCert,
		"--service-account-key-file=" + c.pki.saPub,
		"--service-account-signing-key-file=" + c.pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		// No controller-manager makes the default ServiceAccount of each
		// namespace, so its admission plugin would refuse every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}, opts.APIServerArgs...)
	if err := c.StartAPIServer(); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := c.startKwok(); err != nil {
		return nil, err
	}
	return c, nil
}

// URL is the apiserver's address.
func (c *Cluster) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", c.port) }

func (c *Cluster) restConfig() *rest.Config {
	return &rest.Config{
		Host: c.URL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: c.pki.caPEM, CertData: c.pki.adminCertPEM, KeyData: c.pki.adminKeyPEM,
		},
		QPS: 500, Burst: 1000, Timeout: 30 * time.Second,
	}
}

func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKeyPEM}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	cfg.CurrentContext = "kubetest"
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	c.Config = c.restConfig()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	c.Client = cs
	return nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer), on the
// same port, and waits until it is ready.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver != nil && !c.apiserver.Exited() {
		return errors.New("kubetest: apiserver already running")
	}
	var err error
	// The port was free when picked; after a restart the old socket may
	// linger for a moment, so a bind failure is retried once the port can
	// be bound again.
	for attempt := 0; attempt < 5; attempt++ {
		c.apiserver, err = StartProc(c.dir, "kube-apiserver", filepath.Join(c.bin, "kube-apiserver"), c.args)
		if err != nil {
			return err
		}
		if err = c.waitReady(c.apiserver); err == nil {
			c.log.Info("kube-apiserver ready", "url", c.URL())
			return nil
		}
		if !c.apiserver.Exited() || !strings.Contains(c.apiserver.Tail(20), "address already in use") {
			return err
		}
		if perr := Poll(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.port))
			if err != nil {
				return false, nil
			}
			return true, l.Close()
		}); perr != nil {
			return fmt.Errorf("%w (port %d still taken: %v)", err, c.port, perr)
		}
	}
	return err
}

// StopAPIServer stops kube-apiserver; etcd, kwok and the data stay.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver != nil {
		c.apiserver.Stop()
	}
}

// RestartAPIServer stops kube-apiserver, waits down for the given time, and
// starts it again on the same address.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	c.StopAPIServer()
	time.Sleep(down) // the outage the caller asked for: its length is the point
	return c.StartAPIServer()
}

// waitReady polls /readyz until it answers ok, the process exits, or the
// deadline passes.
func (c *Cluster) waitReady(p *Proc) error {
	rc := c.restConfig()
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiserverReadyTimeout)
	defer cancel()
	var last error
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("kubetest: kube-apiserver exited: %v\n%s", p.err, p.Tail(30))
		case <-ctx.Done():
			return fmt.Errorf("kubetest: kube-apiserver not ready after %s: %v", apiserverReadyTimeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) startKwok() error {
	cfg := filepath.Join(c.dir, "kwok.yaml")
	conf := stagesYAML
	if c.kwokPodWorkers > 0 {
		conf = fmt.Sprintf(kwokConfigYAML, c.kwokPodWorkers) + conf
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return err
	}
	p, err := StartProc(c.dir, "kwok", filepath.Join(c.bin, "kwok"), []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--config=" + cfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + AnnotationKwokNode + "=fake",
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.kwok = p
	c.mu.Unlock()
	// kwok has no readiness endpoint without its server; AddNodes waits
	// for the nodes it makes Ready, which proves kwok works.
	select {
	case <-p.done:
		return fmt.Errorf("kubetest: kwok exited at once: %v\n%s", p.err, p.Tail(30))
	case <-time.After(300 * time.Millisecond):
	}
	return nil
}

// kwokConfigYAML is a KwokConfiguration with podPlayStageParallelism to
// fill in. kwok (v0.8) applies its defaults only when it is given no
// KwokConfiguration at all, so this one spells out the other defaults;
// without them it would refuse to start (0 node workers) or sync nothing.
const kwokConfigYAML = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.0.0.0/24
  manageAllNodes: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
  podPlayStageParallelism: %d
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
---
`

// StartControllerManager starts kube-controller-manager with only the
// given controllers (e.g. "disruption", which computes the status of
// PodDisruptionBudgets and so lets the Eviction API decide). The cluster
// runs none by default: tests that need one ask for it. It fails when the
// binary is not built (`make kube-tools` builds it with the others). Close
// stops it.
func (c *Cluster) StartControllerManager(controllers ...string) error {
	path := filepath.Join(c.bin, "kube-controller-manager")
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return fmt.Errorf("kubetest: %s is not built; run `make kube-tools`", path)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kcm != nil && !c.kcm.Exited() {
		return errors.New("kubetest: kube-controller-manager already running")
	}
	p, err := StartProc(c.dir, "kube-controller-manager", path, []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--cert-dir=" + filepath.Join(c.dir, "kcm-certs"),
	})
	if err != nil {
		return err
	}
	c.kcm = p
	select {
	case <-p.done:
		return fmt.Errorf("kubetest: kube-controller-manager exited at once: %v\n%s", p.err, p.Tail(30))
	case <-time.After(300 * time.Millisecond):
	}
	return nil
}

// StartScheduler starts kube-scheduler against the cluster, with leader
// election off and no serving port, for pods that name no scheduler (a
// DaemonSet's, which the daemonset controller of StartControllerManager
// creates with an affinity to their node but leaves to the scheduler).
// Close stops it.
func (c *Cluster) StartScheduler() error {
	cfg := filepath.Join(c.dir, "kube-scheduler.yaml")
	yaml := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		fmt.Sprintf("clientConnection:\n  kubeconfig: %q\nleaderElection:\n  leaderElect: false\n", c.Kubeconfig)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scheduler != nil && !c.scheduler.Exited() {
		return errors.New("kubetest: kube-scheduler already running")
	}
	p, err := StartProc(c.dir, "kube-scheduler", filepath.Join(c.bin, "kube-scheduler"), []string{"--config=" + cfg, "--secure-port=0"})
	if err != nil {
		return err
	}
	c.scheduler = p
	select {
	case <-p.done:
		return fmt.Errorf("kubetest: kube-scheduler exited at once: %v\n%s", p.err, p.Tail(30))
	case <-time.After(300 * time.Millisecond):
	}
	return nil
}

// NodeSpec describes kwok nodes to create.
type NodeSpec struct {
	// Prefix names the nodes Prefix-0, Prefix-1, ...
	Prefix string
	Count  int
	// CPU and Memory are the allocatable resources ("4", "8Gi").
	CPU, Memory string
	// GPU, if not empty, is the nvidia.com/gpu allocatable count.
	GPU string
	// Pods is the most pods a node takes (default 110).
	Pods   string
	Labels map[string]string
}

// AddNodes creates kwok nodes and waits until all are Ready. It returns
// their names.
func (c *Cluster) AddNodes(ctx context.Context, spec NodeSpec) ([]string, error) {
	if spec.Pods == "" {
		spec.Pods = "110"
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(spec.CPU),
		corev1.ResourceMemory: resource.MustParse(spec.Memory),
		corev1.ResourcePods:   resource.MustParse(spec.Pods),
	}
	if spec.GPU != "" {
		alloc["nvidia.com/gpu"] = resource.MustParse(spec.GPU)
	}
	names := make([]string, spec.Count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", spec.Prefix, i)
		labels := map[string]string{"kubernetes.io/hostname": names[i], "type": "kwok"}
		for k, v := range spec.Labels {
			labels[k] = v
		}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: labels, Annotations: map[string]string{AnnotationKwokNode: "fake"}},
			Status:     corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
		}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("kubetest: create node %s: %w", names[i], err)
		}
	}
	err := Poll(ctx, nodesReadyTimeout, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !NodeReady(n) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubetest: nodes %s-* not Ready (is kwok running?): %w\n%s", spec.Prefix, err, c.LogTails(20))
	}
	return names, nil
}

// CreateNamespace creates a namespace, if it does not exist yet.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// NodeReady reports whether a node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Poll calls cond every 100ms until it returns true or an error, or timeout
// passes (or ctx ends): every wait of a test is bounded.
func Poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %s", timeout)
		case <-tick.C:
		}
	}
}

// LogTails returns the last n lines of the output of the apiserver, kwok
// and the controller-manager and scheduler when they run.
func (c *Cluster) LogTails(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range []*Proc{c.apiserver, c.kwok, c.kcm, c.scheduler} {
		if p != nil {
			fmt.Fprintf(&b, "--- last lines of %s ---\n%s\n", p.name, p.Tail(n))
		}
	}
	return b.String()
}

// Close stops kwok, the apiserver and etcd. It is idempotent.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		procs := []*Proc{c.scheduler, c.kcm, c.kwok, c.apiserver}
		c.mu.Unlock()
		for _, p := range procs {
			if p != nil {
				p.Stop()
			}
		}
		if c.etcd != nil {
			_ = c.etcd.Close()
		}
	})
}

// FreePort is a TCP port on 127.0.0.1 free a moment ago, for a program the
// harness starts on a port of its own choosing.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is a child process (kube-apiserver, kwok, or a benchmark's
// kube-scheduler) with its output in a file of the cluster's folder. It
// dies with this process (Pdeathsig), so an interrupted run leaves nothing
// behind.
type Proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProc starts path with args, its output in dir/<name>.log and HOME
// set to dir.
func StartProc(dir, name, path string, args []string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// HOME points into the test's folder so that no tool reads the user's
	// own configuration (kwok looks in ~/.kwok).
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &Proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (nil before it has).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM to the process group, then SIGKILL after stopGrace,
// and waits for it.
func (p *Proc) Stop() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n lines of the process's output.
func (p *Proc) Tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// CacheDir is the per-machine cache of tools the tests build once
// (PELOTON_CACHE, else the user's cache dir /peloton, as the Makefile has
// it), or "" when there is none.
func CacheDir() string {
	if cache := os.Getenv("PELOTON_CACHE"); cache != "" {
		return cache
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "peloton")
	}
	return ""
}
