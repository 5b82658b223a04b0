//go:build linux

package netns

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the program a node runs:
// PELOTON_NETNS_LISTEN=ADDR makes it accept connections on ADDR and close
// them, until killed.
func TestMain(m *testing.M) {
	if addr := os.Getenv("PELOTON_NETNS_LISTEN"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(0)
			}
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// listen starts the test binary in node, accepting on port.
func listen(t *testing.T, node *Node, port int) {
	t.Helper()
	cmd := node.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PELOTON_NETNS_LISTEN="+node.Addr(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// reach says whether the test (from its own namespace) or a node
// (running the test binary's dial mode) gets "ok" from addr.
func reach(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil {
		return err
	}
	return nil
}

func waitReach(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := reach(addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not reachable within 10s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nodeReaches runs a TCP connect from inside from to addr (bash's
// /dev/tcp, so no tool but bash is needed).
func nodeReaches(from *Node, addr string) bool {
	host, port, _ := net.SplitHostPort(addr)
	cmd := from.Command("timeout", "1", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && head -c 2 <&3", host, port))
	out, err := cmd.Output()
	return err == nil && string(out) == "ok"
}

func TestCutAndHeal(t *testing.T) {
	n := New(t)
	a, b, c := n.Node("a"), n.Node("b"), n.Node("c")
	for _, node := range []*Node{a, b, c} {
		listen(t, node, 7000)
	}
	for _, node := range []*Node{a, b, c} {
		waitReach(t, node.Addr(7000))
	}
	if !nodeReaches(a, b.Addr(7000)) || !nodeReaches(b, a.Addr(7000)) {
		t.Fatal("a and b do not reach each other before any cut")
	}
	n.Cut(a, b)
	if nodeReaches(a, b.Addr(7000)) || nodeReaches(b, a.Addr(7000)) {
		t.Fatal("a and b still reach each other across the cut")
	}
	if !nodeReaches(a, c.Addr(7000)) || !nodeReaches(c, b.Addr(7000)) {
		t.Fatal("the cut between a and b cut c off too")
	}
	if err := reach(a.Addr(7000)); err != nil {
		t.Fatalf("the test lost a during a cut that does not involve it: %v", err)
	}
	n.Heal(a, b)
	if !nodeReaches(a, b.Addr(7000)) || !nodeReaches(b, a.Addr(7000)) {
		t.Fatal("a and b do not reach each other after the heal")
	}
}

// TestDelayAndLoss: a node's replies wait at least the delay; with every
// packet lost, nothing reaches it; stopped, it answers at once again.
func TestDelayAndLoss(t *testing.T) {
	n := New(t)
	a := n.Node("a")
	listen(t, a, 7000)
	waitReach(t, a.Addr(7000))
	d := a.Delay(30*time.Millisecond, 0)
	for range 5 {
		start := time.Now()
		if err := reach(a.Addr(7000)); err != nil {
			t.Fatalf("delayed node: %v", err)
		}
		// The SYN-ACK and the reply each wait 30 ms: a lower bound, which
		// no load can break.
		if took := time.Since(start); took < 60*time.Millisecond {
			t.Fatalf("round trip to a delayed node took %v, want >= 60ms", took)
		}
	}
	d.Stop()
	lossy := a.Delay(0, 1)
	if err := reach(a.Addr(7000)); err == nil {
		t.Fatal("a node that loses every packet answered")
	}
	lossy.Stop()
	waitReach(t, a.Addr(7000))
}
