// Package kubelettest runs a real Kubernetes node for tests: containerd
// and runc from the distribution, a kubelet built from the Kubernetes
// module (hack/kube-tools.sh), CNI's bridge plugin for pod networks in
// namespaces the node makes, and a local image made from the machine's
// static busybox, since no registry can be reached. The node joins a
// kubetest control plane. Everything it writes lives in one folder of its
// own, removed when the test ends; it needs root.
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/internal/testing/kubetest"
)

// Image is the reference of the node's one image: busybox, linked as the
// usual applets under /bin. Pods on the node use it (imagePullPolicy
// Never or IfNotPresent: nothing can be pulled).
const Image = "peloton.test/busybox:1"

// Image2 has the same files as Image but another command, so another
// image ID: an in-place update from Image to Image2 changes a container's
// image, as an update would.
const Image2 = "peloton.test/busybox:2"

// pauseImage is the pod sandbox's image: the same busybox, sleeping.
const pauseImage = "peloton.test/pause:1"

// APIServerArgs are the kube-apiserver flags a cluster with a kubelet node
// needs (kubetest.Options.APIServerArgs): the apiserver reaches the
// kubelet (logs, exec) at the node's InternalIP, never by looking its
// name up.
var APIServerArgs = []string{"--kubelet-preferred-address-types=InternalIP"}

// Node is a running kubelet node.
type Node struct {
	// Name is the node's name in the cluster.
	Name string
	// Dir holds the node's state, logs and sockets.
	Dir string

	c          *kubetest.Cluster
	containerd *kubetest.Proc
	kubelet    *kubetest.Proc
	bridge     string
	dummy      string
	sock       string
	tools      Tools
	// subnet is the pods' addresses (a /24 of 10.200.0.0/13).
	subnet string
	// IP is the node's address: the kubelet refuses a loopback one, so
	// the node has an interface of its own (a bridge with no port: this
	// kernel has no dummy links) with an address from
	// TEST-NET-1, which routes nowhere but to this machine.
	IP string
}

// Tools are the programs a node runs.
type Tools struct {
	Kubelet, Containerd, Ctr, Runc, Busybox, CNIDir string
}

// FindTools finds the node's programs: the kubelet next to the kubetest
// binaries, the rest where Debian installs them (make test installs the
// packages: hack/kubelet-tools.sh). The error names what is missing.
func FindTools() (Tools, error) {
	bin, err := kubetest.Tools()
	if err != nil {
		return Tools{}, err
	}
	t := Tools{Kubelet: filepath.Join(bin, "kubelet"), CNIDir: "/usr/lib/cni"}
	var missing []string
	for _, p := range []struct {
		dst  *string
		name string
	}{{&t.Containerd, "containerd"}, {&t.Ctr, "ctr"}, {&t.Runc, "runc"}, {&t.Busybox, "busybox"}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			missing = append(missing, p.name)
			continue
		}
		*p.dst = path
	}
	if _, err := os.Stat(t.Kubelet); err != nil {
		missing = append(missing, t.Kubelet+" (make kube-tools)")
	}
	if _, err := os.Stat(filepath.Join(t.CNIDir, "bridge")); err != nil {
		missing = append(missing, "CNI plugins in "+t.CNIDir+" (Debian's containernetworking-plugins)")
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("kubelettest: missing %s", strings.Join(missing, ", "))
	}
	return t, nil
}

// Require finds the node's programs for t: it skips t when they are
// missing or the test does not run as root, unless PELOTON_REQUIRE_KUBELET
// is 1 (make test sets it where the machine can run a kubelet), which
// fails t instead. Tests call it before they start a control plane for
// the node.
func Require(t testing.TB) Tools {
	t.Helper()
	tools, err := FindTools()
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("kubelettest: a kubelet node needs root")
	}
	if err != nil {
		if os.Getenv("PELOTON_REQUIRE_KUBELET") == "1" {
			t.Fatal(err)
		}
		t.Skip(err.Error())
	}
	return tools
}

// Start starts a node named name in cluster c for t and stops it when t
// ends, skipping or failing t as Require does.
func Start(t testing.TB, c *kubetest.Cluster, name string) *Node {
	t.Helper()
	tools := Require(t)
	// Unix socket paths are short: the node's folder is not under the
	// test's (long) temporary folder.
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Name: name, Dir: dir, c: c, sock: filepath.Join(dir, "containerd.sock")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(60))
		}
		n.Close()
	})
	if err := n.start(tools); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *Node) start(tools Tools) error {
	n.tools = tools
	n.IP, n.subnet = freeAddresses(os.Getpid())
	if err := n.startContainerd(tools); err != nil {
		return err
	}
	for ref, cmd := range map[string][]string{Image: {"/bin/sh"}, Image2: {"sh"}, pauseImage: {"/bin/sleep", "2147483647"}} {
		if err := n.ImportImage(ref, cmd, nil); err != nil {
			return err
		}
	}
	return n.startKubelet(tools)
}

// ImportImage builds image ref (BuildImage: busybox, cmd and files) and
// imports it into the node's containerd, where the kubelet finds it.
func (n *Node) ImportImage(ref string, cmd []string, files map[string]string) error {
	img := filepath.Join(n.Dir, "image.tar")
	if err := BuildImage(img, ref, n.tools.Busybox, cmd, files); err != nil {
		return err
	}
	defer os.Remove(img)
	if out, err := n.ctr("images", "import", img); err != nil {
		return fmt.Errorf("kubelettest: ctr images import %s: %v: %s", ref, err, out)
	}
	return nil
}

func (n *Node) startContainerd(tools Tools) error {
	cniConf := filepath.Join(n.Dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	// A bridge of the node's own, its name unique on the machine, and a
	// subnet only the node's pods use. The pods' one route out is to the
	// node's address, through the bridge (a host agent pod reports to a
	// stack listening there); nothing is masqueraded.
	n.bridge = "plt" + strconv.Itoa(os.Getpid()%100000)
	subnet := n.subnet
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "peloton-test", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": %q}], "dataDir": %q}},
  {"type": "loopback"}]}`, n.bridge, subnet, n.IP+"/32", filepath.Join(n.Dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-peloton-test.conflist"), []byte(conf), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # The test's sandbox may refuse an oom_score_adj below the test's own
  # (the pause container asks for -998): keep the kubelet's within it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(n.Dir, "containerd"), filepath.Join(n.Dir, "run"), n.sock, n.sock+".ttrpc",
		pauseImage, tools.Runc, tools.CNIDir, cniConf)
	path := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	if n.containerd, err = kubetest.StartProc(n.Dir, "containerd", tools.Containerd, []string{"--config", path}); err != nil {
		return err
	}
	return kubetest.Poll(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		if n.containerd.Exited() {
			return false, fmt.Errorf("kubelettest: containerd exited: %v\n%s", n.containerd.Err(), n.containerd.Tail(20))
		}
		conn, err := net.Dial("unix", n.sock)
		if err != nil {
			return false, nil
		}
		return true, conn.Close()
	})
}

// addInterface gives the node its address on an interface of its own.
func (n *Node) addInterface() error {
	n.dummy = "pltk" + strconv.Itoa(os.Getpid()%100000)
	for _, args := range [][]string{
		{"link", "add", n.dummy, "type", "bridge"},
		{"addr", "add", n.IP + "/32", "dev", n.dummy},
		{"link", "set", n.dummy, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("kubelettest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (n *Node) startKubelet(tools Tools) error {
	if err := n.addInterface(); err != nil {
		return err
	}
	if err := makeCgroups(n.cgroupRoot()); err != nil {
		return err
	}
	port, err := kubetest.FreePort()
	if err != nil {
		return err
	}
	health, err := kubetest.FreePort()
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
makeIPTablesUtilChains: false
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
localStorageCapacityIsolation: false
syncFrequency: 2s
nodeStatusUpdateFrequency: 2s
fileCheckFrequency: 1h
enableServer: true
`, n.IP, port, health, n.cgroupRoot(), n.sock, filepath.Join(n.Dir, "pods"))
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	args := []string{
		"--config=" + path,
		"--kubeconfig=" + n.c.Kubeconfig,
		"--root-dir=" + filepath.Join(n.Dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.Dir, "kubelet-pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--v=1",
	}
	if n.kubelet, err = kubetest.StartProc(n.Dir, "kubelet", tools.Kubelet, args); err != nil {
		return err
	}
	return kubetest.Poll(context.Background(), 90*time.Second, func(ctx context.Context) (bool, error) {
		if n.kubelet.Exited() {
			return false, fmt.Errorf("kubelettest: kubelet exited: %v\n%s", n.kubelet.Err(), n.kubelet.Tail(30))
		}
		node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return kubetest.NodeReady(node), nil
	})
}

// Node reads the node's object.
func (n *Node) Node(ctx context.Context) (*corev1.Node, error) {
	return n.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
}

// LogTails is the end of containerd's and the kubelet's output.
func (n *Node) LogTails(lines int) string {
	var b strings.Builder
	for _, p := range []*kubetest.Proc{n.containerd, n.kubelet} {
		if p != nil {
			b.WriteString(p.Tail(lines))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// Close stops the kubelet, removes the pods' containers, stops containerd,
// removes the bridge and the node's folder.
func (n *Node) Close() {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.containerd != nil {
		n.removeContainers()
		n.containerd.Stop()
	}
	for _, link := range []string{n.bridge, n.dummy} {
		if link != "" {
			_ = exec.Command("ip", "link", "delete", link).Run()
		}
	}
	// Mounts left by the kubelet (pod volumes) or containerd (rootfs,
	// sandbox shm) would keep the folder; unmount what is under it.
	unmountUnder(n.Dir)
	removeCgroups(n.cgroupRoot())
	_ = os.RemoveAll(n.Dir)
}
