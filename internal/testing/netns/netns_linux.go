// Package netns builds small networks of Linux network namespaces for fault
// tests: each node is a namespace with one veth on a bridge that lives in a
// namespace of its own (the switch), and the test's own namespace joins the
// bridge too, so that it can reach every node. Faults are real packet drops
// made with nftables inside the nodes' namespaces: a cut between two nodes
// drops every packet between their addresses, in both directions, while
// each still talks to everyone else. Delay (nfqueue.go) is added to a
// node's packets by holding them in the kernel's netfilter queue.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and nft. New
// skips the test when the machine refuses namespaces, saying why, unless
// PELOTON_REQUIRE_NETNS=1, when it fails instead.
//
// This package is for tests only: no component may import it.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Net is one test's network: a switch namespace with a bridge, the nodes
// on it, and a veth of the test's own namespace on it, at HostIP.
type Net struct {
	t      testing.TB
	id     string // 4 hex digits, in every name this Net makes
	prefix string // the /24's first three octets, "10.213.7"
	HostIP string // the test's own address on the bridge

	mu     sync.Mutex
	nodes  []*Node
	cuts   map[[2]string]bool
	delays []*Delay
}

// Node is one namespace on the Net.
type Node struct {
	net  *Net
	Name string // as the test named it
	NS   string // the namespace's name, for ip netns exec
	IP   string // its address on the bridge
}

// Require reports why network namespaces cannot be used here ("" when
// they can).
func Require() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces need CAP_NET_ADMIN"
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (make test installs iproute2 and nftables)"
		}
	}
	probe := "ptprobe" + randomID()
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("the kernel refuses network namespaces: ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	return ""
}

// New makes the switch and the test's own link to it. Cleanup deletes
// every namespace and link the Net made; processes started in its nodes
// must be ended by then (their own cleanups, registered later, run first).
func New(t testing.TB) *Net {
	t.Helper()
	if why := Require(); why != "" {
		if os.Getenv("PELOTON_REQUIRE_NETNS") == "1" {
			t.Fatalf("netns: %s (PELOTON_REQUIRE_NETNS=1)", why)
		}
		t.Skipf("netns: %s", why)
	}
	id := randomID()
	b, _ := hex.DecodeString(id)
	n := &Net{t: t, id: id, prefix: fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1]), cuts: map[[2]string]bool{}}
	n.HostIP = n.prefix + ".1"
	t.Cleanup(n.destroy)
	sw := n.nsName("sw")
	n.run("ip", "netns", "add", sw)
	n.run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	n.run("ip", "-n", sw, "link", "set", "br0", "up")
	n.run("ip", "-n", sw, "link", "set", "lo", "up")
	host := "pt" + id + "h"
	n.run("ip", "link", "add", host, "type", "veth", "peer", "name", "host0", "netns", sw)
	n.run("ip", "-n", sw, "link", "set", "dev", "host0", "master", "br0", "up")
	n.run("ip", "addr", "add", n.HostIP+"/24", "dev", host)
	n.run("ip", "link", "set", host, "up")
	return n
}

// Node adds a namespace named for name, with its address on the bridge and
// its loopback up.
func (n *Net) Node(name string) *Node {
	n.t.Helper()
	n.mu.Lock()
	idx := len(n.nodes) + 10
	node := &Node{net: n, Name: name, NS: n.nsName(name), IP: fmt.Sprintf("%s.%d", n.prefix, idx)}
	n.nodes = append(n.nodes, node)
	n.mu.Unlock()
	sw := n.nsName("sw")
	port := fmt.Sprintf("p%d", idx)
	n.run("ip", "netns", "add", node.NS)
	n.run("ip", "-n", node.NS, "link", "set", "lo", "up")
	n.run("ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", node.NS)
	n.run("ip", "-n", sw, "link", "set", "dev", port, "master", "br0", "up")
	n.run("ip", "-n", node.NS, "addr", "add", node.IP+"/24", "dev", "eth0")
	n.run("ip", "-n", node.NS, "link", "set", "eth0", "up")
	// Every node's nftables table, empty until a fault fills it.
	n.nft(node, "add table inet ptfault")
	n.nft(node, "add chain inet ptfault in { type filter hook input priority 0 ; policy accept ; }")
	n.nft(node, "add chain inet ptfault out { type filter hook output priority 0 ; policy accept ; }")
	return node
}

// Command is cmd run inside the node's namespace.
func (node *Node) Command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", node.NS, bin}, args...)...)
}

// Addr is the node's address with port.
func (node *Node) Addr(port int) string { return fmt.Sprintf("%s:%d", node.IP, port) }

// Cut drops every packet between a and b, both ways, as a partition
// between two machines would: their open connections hang, new ones time
// out; each still reaches every other node and the test.
func (n *Net) Cut(a, b *Node) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	key := cutKey(a, b)
	if n.cuts[key] {
		return
	}
	n.cuts[key] = true
	for _, p := range [][2]*Node{{a, b}, {b, a}} {
		n.nft(p[0], fmt.Sprintf("add rule inet ptfault in ip saddr %s drop comment \"cut-%s\"", p[1].IP, p[1].Name))
		n.nft(p[0], fmt.Sprintf("add rule inet ptfault out ip daddr %s drop comment \"cut-%s\"", p[1].IP, p[1].Name))
	}
}

// Heal ends a Cut between a and b.
func (n *Net) Heal(a, b *Node) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	key := cutKey(a, b)
	if !n.cuts[key] {
		return
	}
	delete(n.cuts, key)
	for _, p := range [][2]*Node{{a, b}, {b, a}} {
		n.dropRules(p[0], "cut-"+p[1].Name)
	}
}

// dropRules deletes the node's fault rules whose comment is tag.
func (n *Net) dropRules(node *Node, tag string) {
	out, err := exec.Command("ip", "netns", "exec", node.NS, "nft", "-a", "list", "table", "inet", "ptfault").CombinedOutput()
	if err != nil {
		n.t.Fatalf("netns: nft list in %s: %v: %s", node.Name, err, out)
	}
	chain := ""
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "chain ") {
			chain = strings.Fields(line)[1]
			continue
		}
		if !strings.Contains(line, `comment "`+tag+`"`) {
			continue
		}
		_, handle, ok := strings.Cut(line, "# handle ")
		if !ok {
			continue
		}
		n.nft(node, fmt.Sprintf("delete rule inet ptfault %s handle %s", chain, strings.TrimSpace(handle)))
	}
}

func cutKey(a, b *Node) [2]string {
	if a.Name > b.Name {
		a, b = b, a
	}
	return [2]string{a.Name, b.Name}
}

func (n *Net) nft(node *Node, rule string) {
	n.t.Helper()
	n.run("ip", "netns", "exec", node.NS, "nft", rule)
}

func (n *Net) nsName(name string) string { return "pt" + n.id + "-" + name }

func (n *Net) run(args ...string) {
	n.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		n.t.Fatalf("netns: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// destroy deletes the nodes' and the switch's namespaces (with them every
// veth in them) and the test's own link.
func (n *Net) destroy() {
	n.mu.Lock()
	nodes := n.nodes
	n.mu.Unlock()
	for _, node := range nodes {
		_ = exec.Command("ip", "netns", "del", node.NS).Run()
	}
	_ = exec.Command("ip", "netns", "del", n.nsName("sw")).Run()
	_ = exec.Command("ip", "link", "del", "pt"+n.id+"h").Run()
}

func randomID() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
