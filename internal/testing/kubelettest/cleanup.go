package kubelettest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ctr runs containerd's client on the node's socket, in the kubelet's
// namespace.
func (n *Node) ctr(args ...string) (string, error) {
	out, err := exec.Command(n.tools.Ctr, append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// removeContainers kills and deletes every task and container of the
// node: containerd's shims outlive containerd itself, and with them the
// pods' processes.
func (n *Node) removeContainers() {
	out, err := n.ctr("tasks", "ls", "-q")
	if err != nil {
		return
	}
	ids := strings.Fields(out)
	for _, id := range ids {
		_, _ = n.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	for _, id := range ids {
		_, _ = n.ctr("tasks", "delete", "--force", id)
	}
	if out, err := n.ctr("containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = n.ctr("containers", "delete", id)
		}
	}
}

// unmountUnder detaches every mount point under dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// cgroupRoot is the cgroup under which the node's kubelet puts its pods,
// its own so that nodes of tests running at once do not meet.
func (n *Node) cgroupRoot() string { return filepath.Base(n.Dir) }

// removeCgroups removes the cgroup root and everything below it in every
// cgroup v1 hierarchy and in the v2 one, deepest first (a cgroup with
// children cannot be removed).
func removeCgroups(root string) {
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*/" + root)
	if v2 := filepath.Join("/sys/fs/cgroup", root); fileExists(v2) {
		mounts = append(mounts, v2)
	}
	for _, top := range mounts {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// makeCgroups makes the cgroup root in every cgroup v1 hierarchy (the
// kubelet wants it there before it starts) or in the v2 one; a v1 cpuset
// gets its parent's cpus and memory nodes, without which it takes no task.
func makeCgroups(root string) error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if len(hierarchies) == 0 {
		return os.MkdirAll(filepath.Join("/sys/fs/cgroup", root), 0o755)
	}
	for _, procs := range hierarchies {
		top := filepath.Dir(procs)
		dir := filepath.Join(top, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("kubelettest: cgroup %s: %w", dir, err)
		}
		if filepath.Base(top) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(top, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("kubelettest: cgroup %s: %w", dir, err)
			}
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freeAddresses picks the node's address in TEST-NET-1 and its pods'
// subnet, starting from seed (the process id) and skipping what an
// interface of this machine has already: nodes of tests running at once
// (in other packages' processes) must not share either.
func freeAddresses(seed int) (ip, subnet string) {
	used := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				used[n.IP.String()] = true
				used[n.IP.Mask(net.CIDRMask(24, 32)).String()] = true
			}
		}
	}
	for k := range 240 {
		i := (seed + k) % 240
		ip = fmt.Sprintf("192.0.2.%d", 10+i)
		// The pods' gateway (.1 of the subnet) sits on the node's bridge
		// once a pod runs: a subnet in use shows as its /24.
		net24 := fmt.Sprintf("10.%d.%d.0", 200+i%8, (seed/240+i)%250)
		if !used[ip] && !used[net24] {
			return ip, net24 + "/24"
		}
	}
	return ip, fmt.Sprintf("10.200.%d.0/24", seed%250)
}
