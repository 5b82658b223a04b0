package kubernetes

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/peloton-sched/peloton/hostmgr"
)

// TestMoveHostLabelsTheNode: hostmgr moving an empty node's host to another
// partition patches the node's peloton.io/partition label, keeps its other
// labels, and the host is reported in the new partition.
func TestMoveHostLabelsTheNode(t *testing.T) {
	c := cluster(t)
	e := newEnv(t, c, 2, map[string]string{"zone": "a"})
	n1 := e.nodes[1]
	// hostmgr starts its backend itself: hand it a fresh one in place of
	// the env's.
	_ = e.b.Close()
	b, err := New(Config{REST: e.c.Config, Namespace: e.ns, NodeSelector: "peloton.io/test=" + e.ns,
		RequestTimeout: 5 * time.Second, StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	m := hostmgr.NewManager(b, hostmgr.Options{})
	if err := m.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Recovered()
	h, err := m.Maintenance().MoveHost(e.ctx, n1, "stateless", "")
	if err != nil {
		t.Fatal(err)
	}
	if h.Partition != "stateless" {
		t.Fatalf("host after the move: %+v", h)
	}
	node, err := c.Client.CoreV1().Nodes().Get(e.ctx, n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[LabelPartition] != "stateless" || node.Labels["zone"] != "a" {
		t.Fatalf("node labels %v", node.Labels)
	}
	e.waitHosts("the patched label", func(h map[string]hostmgr.HostInfo) bool { return h[n1].Partition == "stateless" })
	if err := e.b.ApplyPartition(context.Background(), "no-such-node", "x"); err == nil {
		t.Fatal("ApplyPartition of an unknown node succeeded")
	}
}
